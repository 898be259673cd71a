"""Speed of the memory analyses and the fragmentation map on large SYNTHETIC recordings.

The recording is a synthetic random-size churn replayed through the PyTorch allocator model
(so its segments and splits are realistic); the target is "100,000 allocation events -> every
metric and the map in at most 2 s". Two sizes are measured: 100,000 allocator events (rows of
the table, all actions) and 100,000 *alloc* events (about 2.3x as many rows).

    python -m benchmarks run memory

Writes ``bench_memory.md`` (median of 3 runs after one warm-up; numba's one-off compile, cached
on disk afterwards, is reported apart).
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd

from hookmagic.memory.replay import replay
from hookmagic.memory.torch_model import TorchCachingModel
from hookmagic.trace import Trace


def synthetic_requests(n_alloc: int, seed: int = 0) -> pd.DataFrame:
    """SYNTHETIC churn: a live set of about 2,000 tensors, sizes log-uniform 512 B .. 64 MiB."""
    rng = np.random.default_rng(seed)
    rows, live, h, t = [], [], 0, 0
    while h < n_alloc:
        if len(live) > 2000 or (live and rng.random() < 0.45):
            rows.append((t, "free", live.pop(int(rng.integers(len(live)))), 0, 0, -1))
        else:
            size = int(np.exp(rng.uniform(np.log(512), np.log(64 << 20))))
            rows.append((t, "alloc", h, size, 0, int(rng.integers(50))))
            live.append(h)
            h += 1
        t += 1000
    return pd.DataFrame(rows, columns=["time_ns", "op", "handle", "size", "stream", "stack_id"])


def synthetic_stacks(n: int = 50) -> pd.DataFrame:
    return pd.DataFrame({"stack_id": np.arange(n), "depth": 0, "filename": "/synthetic/model.py",
                         "function": [f"layer{i}" for i in range(n)], "line": np.arange(n)})


def run_all(trace: Trace) -> dict[str, float]:
    """Seconds each analysis takes on ``trace`` (its allocator_events and stacks tables)."""
    from hookmagic.analysis.fragmentation import (
        fragmentation_over_time, segment_fragmentation, would_fail,
    )
    from hookmagic.analysis.memory import (
        leak_report, memory_by, memory_over_time, peak_attribution,
    )
    from hookmagic.views.memory_map import memory_map_figure

    steps = {
        "fragmentation_over_time": lambda: fragmentation_over_time(trace),
        "memory_over_time": lambda: memory_over_time(trace),
        "memory_by(stack)": lambda: memory_by(trace),
        "peak_attribution": lambda: peak_attribution(trace),
        "leak_report": lambda: leak_report(trace),
        "segment_fragmentation": lambda: segment_fragmentation(trace),
        "would_fail": lambda: would_fail(trace, 100 << 20, device_free=1 << 30),
        "memory_map_figure (30 steps)": lambda: memory_map_figure(trace, steps=30),
    }
    out = {}
    for name, fn in steps.items():
        t = time.perf_counter()
        fn()
        out[name] = time.perf_counter() - t
    out["total"] = sum(out.values())
    return out


DESCRIPTION = ("memory metrics and the fragmentation map on SYNTHETIC allocator recordings of "
               "100,000 events; median of 3 after a warm-up, seconds")
PARAMS: dict = {}
NEEDS: tuple[str, ...] = ()


def measure() -> dict[str, float]:
    stacks = synthetic_stacks()
    out = {}
    for label, n_alloc, cut in (("allocator_events_100k", 45_000, 100_000),
                                ("alloc_events_100k", 100_000, None)):
        ev = replay(synthetic_requests(n_alloc), TorchCachingModel(capacity=80 << 30)).events
        if cut is not None:
            ev = ev.iloc[:cut].reset_index(drop=True)
        trace = Trace({"allocator_events": ev, "stacks": stacks}, {"synthetic": True})
        run_all(trace)                                       # warm-up
        runs = [run_all(trace) for _ in range(3)]
        for k in runs[0]:
            out[f"{label}_{k}_s"] = statistics.median(r[k] for r in runs)
    return out
