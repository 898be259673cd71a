"""Layer sum versus end-to-end latency: why the two differ, in numbers."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from hookmagic.common.errors import InvalidArgument

from .model import LayerProfile

#: meta key -> row label, in row order (rows appear only for the keys a profile carries)
_LABELS = {
    "latency_clean_ms": "end-to-end latency without hooks",
    "latency_hooked_ms": "end-to-end latency, hooked run",
    "latency_ms": "end-to-end latency",
    "compute_ms": "GPU compute",
    "gpu_busy_ms": "GPU busy, hooked run (union of activity)",
    "launch_gap_ms": "launch gaps, hooked run (latency - GPU busy)",
}
#: rows that are parts of a run rather than end-to-end measures: no diff or ratio
_PARTS = {"launch_gap_ms"}


def reconcile(profile: LayerProfile, stat: str | None = None) -> pd.DataFrame:
    """Layer sum beside end-to-end latency (and GPU compute time, when known), with the gap.

    Rows: ``layer sum`` (the profiler's per-layer times, summed), then each end-to-end measure
    the profile carries, with ``diff_ms`` (measure minus layer sum) and ``ratio`` (measure /
    layer sum), both computed on ``stat``: ``"mean"`` or ``"median"``; by default the profile's
    ``meta["reconcile_stat"]``, else ``"mean"`` (trtexec reports means). The table's
    ``attrs["stat"]`` says which.

    The layer sum's mean is ``profile.total_ms``; its median is the median over iterations of
    the per-iteration layer sum when the profile has it (``meta["layer_sum_ms"]``, live
    captures), else the sum of the layers' medians.

    Per-layer profiling synchronises after every layer, so in trtexec exports the layer sum
    usually exceeds an unprofiled run (trtexec profiles in a separate pass, often with CUDA
    graphs). For PyTorch modules (:mod:`hookmagic.layers.torch_modules`) the reference is the
    latency of runs without hooks (``end-to-end latency without hooks``); the hooked run's own
    latency, GPU busy time and launch gaps follow, and ``launch gaps`` (no diff or ratio) is the
    hooked run's idle GPU time, which the layers' ``gap_ms`` column shares out.
    """
    stat = stat or str(profile.meta.get("reconcile_stat", "mean"))
    if stat not in ("mean", "median"):
        raise InvalidArgument(f"stat must be 'mean' or 'median', not {stat!r}")
    total = profile.total_ms
    sums = profile.meta.get("layer_sum_ms")
    if isinstance(sums, dict) and sums.get("median") is not None:
        median = float(sums["median"])
    else:
        median = float(profile.layers["median_ms"].sum(min_count=1))
    base = total if stat == "mean" else median
    rows: list[dict[str, Any]] = [{"measure": "layer sum", "mean_ms": total, "median_ms": median,
                                   "diff_ms": 0.0, "ratio": 1.0}]
    keys = list(_LABELS)
    if "latency_hooked_ms" in profile.meta:   # latency_ms repeats the reference row
        keys.remove("latency_ms")
    for key in keys:
        stats = profile.meta.get(key)
        if isinstance(stats, dict) and stats.get("mean") is not None:
            mean = float(stats["mean"])
            med = float(stats.get("median", math.nan))
            value = mean if stat == "mean" else med
            part = key in _PARTS
            rows.append({"measure": _LABELS[key], "mean_ms": mean, "median_ms": med,
                         "diff_ms": math.nan if part else value - base,
                         "ratio": math.nan if part or not base else value / base})
    out = pd.DataFrame(rows, columns=["measure", "mean_ms", "median_ms", "diff_ms", "ratio"])
    out.attrs["stat"] = stat
    return out
