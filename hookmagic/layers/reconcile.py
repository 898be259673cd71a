"""Layer sum versus end-to-end latency: why the two differ, in numbers."""
from __future__ import annotations

from typing import Any

import pandas as pd

from .model import LayerProfile


def reconcile(profile: LayerProfile) -> pd.DataFrame:
    """Layer sum beside end-to-end latency (and GPU compute time, when known), with the gap.

    Rows: ``layer sum`` (the profiler's per-layer means, summed), then each end-to-end measure
    the profile carries, with ``diff_ms`` (measure minus layer sum) and ``ratio`` (measure /
    layer sum). Per-layer profiling synchronises after every layer, so the layer sum usually
    exceeds an unprofiled run (trtexec profiles in a separate pass, often with CUDA graphs); in
    live captures the gap is launch latency and idle time between kernels.
    """
    total = profile.total_ms
    rows: list[dict[str, Any]] = [{"measure": "layer sum", "mean_ms": total, "median_ms":
                                   float(profile.layers["median_ms"].sum(min_count=1)),
                                   "diff_ms": 0.0, "ratio": 1.0}]
    labels = {"latency_ms": "end-to-end latency", "compute_ms": "GPU compute",
              "latency_clean_ms": "end-to-end latency without hooks",
              "gpu_busy_ms": "GPU busy (union of activity)"}
    for key, label in labels.items():
        stats = profile.meta.get(key)
        if isinstance(stats, dict) and stats.get("mean") is not None:
            mean = float(stats["mean"])
            rows.append({"measure": label, "mean_ms": mean,
                         "median_ms": float(stats.get("median", float("nan"))),
                         "diff_ms": mean - total, "ratio": mean / total if total else float("nan")})
    return pd.DataFrame(rows, columns=["measure", "mean_ms", "median_ms", "diff_ms", "ratio"])
