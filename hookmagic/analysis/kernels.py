"""Per-kernel statistics: how often each kernel ran and how long it took.

Pure functions over the ``kernels`` table; vectorised (one sort for all percentiles).
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from hookmagic.analysis.tables import event_mask, table

SUMMARY_COLUMNS = ["name", "count", "total_ns", "mean_ns", "p50_ns", "p99_ns", "min_ns",
                   "max_ns", "share"]


def grouped_percentile(sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray,
                       q: float) -> np.ndarray:
    """The ``q`` quantile (0..1) of each group of an array sorted within groups.

    Linear interpolation between closest ranks, as ``numpy.percentile``'s default: the
    position is ``q * (n - 1)`` within each group.
    """
    pos = q * (counts - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, counts - 1)
    frac = pos - lo
    v_lo = sorted_values[starts + lo].astype(np.float64)
    v_hi = sorted_values[starts + hi].astype(np.float64)
    return v_lo + (v_hi - v_lo) * frac


def kernel_summary(trace: Any, device: int | Iterable[int] | None = None,
                   stream: int | Iterable[int] | None = None) -> pd.DataFrame:
    """One row per kernel name, most GPU time first.

    Columns: ``name, count, total_ns, mean_ns, p50_ns, p99_ns, min_ns, max_ns`` and ``share``:
    the kernel's part of all kernel time (summed durations; kernels overlapping on several
    streams each count in full, so shares add up to 1 even with concurrency).
    """
    kernels = table(trace, "kernels")
    mask = event_mask(kernels, device, stream)
    if not mask.all():
        kernels = kernels[mask]
    if len(kernels) == 0:
        return pd.DataFrame({c: pd.Series(dtype="str" if c == "name" else "float64")
                             for c in SUMMARY_COLUMNS}).astype({"count": "int64",
                                                                 "total_ns": "int64"})
    code, names = pd.factorize(kernels["name"], sort=False)
    dur = kernels["duration_ns"].to_numpy(dtype=np.int64)
    order = np.lexsort((dur, code))
    dur_sorted = dur[order]
    counts = np.bincount(code, minlength=len(names)).astype(np.int64)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    totals = np.add.reduceat(dur_sorted, starts)
    grand = totals.sum()
    out = pd.DataFrame({
        "name": np.asarray(names, dtype=object),
        "count": counts,
        "total_ns": totals.astype(np.int64),
        "mean_ns": totals / counts,
        "p50_ns": grouped_percentile(dur_sorted, starts, counts, 0.50),
        "p99_ns": grouped_percentile(dur_sorted, starts, counts, 0.99),
        "min_ns": dur_sorted[starts].astype(np.float64),
        "max_ns": dur_sorted[starts + counts - 1].astype(np.float64),
        "share": totals / grand if grand > 0 else np.zeros(len(totals)),
    })
    return out.sort_values(["total_ns", "name"], ascending=[False, True],
                           kind="stable").reset_index(drop=True)
