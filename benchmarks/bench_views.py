"""CPU benchmark of the analyses and views on a 1,000,000-kernel trace.

The trace is SYNTHETIC (random kernels, stacks and ranges shaped like a training loop); it
measures only how fast hookmagic turns a big trace into tables and figures, not any GPU.

Targets: flame tree + kernel summary + diagnosis <= 2 s in total; flame figure
payload <= 5 MB; timeline first draw (figure built and serialised to JSON) <= 3 s.

Run:  python -m benchmarks run views
Writes benchmarks/results/views.md (a Markdown table) and prints it.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hookmagic.analysis.diagnose import diagnose
from hookmagic.analysis.flame import flame_tree
from hookmagic.analysis.kernels import kernel_summary
from hookmagic.views.flame import flame_figure
from hookmagic.views.timeline import timeline_figure

RESULTS = Path(__file__).parent / "results" / "views.md"


def synthetic_trace(n: int = 1_000_000, seed: int = 0):
    """A synthetic trace of ``n`` kernels (labelled synthetic in its meta)."""
    rng = np.random.default_rng(seed)
    names = [f"synthetic_kernel_{i}<float, {32 * (i % 4 + 1)}>(float const*, float*, int)"
             for i in range(60)]
    weights = 1.0 / np.arange(1, 61)
    name_idx = rng.choice(60, n, p=weights / weights.sum())
    dur = np.maximum(rng.lognormal(np.log(8_000), 1.0, n), 1_000).astype(np.int64)
    gap = rng.exponential(3_000, n).astype(np.int64)
    start = np.cumsum(dur + gap) - dur - gap + 1_000_000
    streams = rng.choice([7, 13, 14, 15], n, p=[0.7, 0.1, 0.1, 0.1])
    n_stacks = 400
    stack_rows = []
    for sid in range(n_stacks):
        depth = int(rng.integers(6, 20))
        for d in range(depth):
            f = int(rng.integers(0, 120))
            stack_rows.append((sid, d, f"/src/project/module_{f % 15}.py", f"function_{f}",
                               int(rng.integers(1, 400))))
    stacks = pd.DataFrame(stack_rows, columns=["stack_id", "depth", "filename", "function", "line"])
    n_ranges = 64
    parent = np.where(np.arange(n_ranges) < 8, -1, rng.integers(0, 8, n_ranges))
    ranges = pd.DataFrame({"range_id": np.arange(n_ranges), "name": [f"range_{i}" for i in range(n_ranges)],
                           "start_ns": 0, "end_ns": int(start[-1] + dur[-1]), "duration_ns": 0,
                           "thread": 1, "depth": (parent >= 0).astype(np.int32),
                           "parent_id": parent, "source": "nvtx"})
    corr = np.arange(n, dtype=np.int64) + 1
    kernels = pd.DataFrame({
        "start_ns": start, "end_ns": start + dur, "duration_ns": dur, "device": 0, "context": 1,
        "stream": streams, "correlation": corr, "name": np.asarray(names, dtype=object)[name_idx],
        "grid_x": rng.choice([1, 80, 132, 1024, 4096], n), "grid_y": 1, "grid_z": 1,
        "block_x": rng.choice([128, 256, 512], n), "block_y": 1, "block_z": 1,
        "registers": rng.choice([32, 64, 96, 128], n), "static_smem": rng.choice([0, 16384], n),
        "dynamic_smem": 0, "thread": 1, "stack_id": rng.integers(-1, n_stacks, n),
        "range_id": rng.integers(-1, n_ranges, n)})
    launch = start - rng.integers(2_000, 20_000, n)
    api = pd.DataFrame({"start_ns": launch, "end_ns": launch + 1_500, "duration_ns": 1_500,
                        "domain": "runtime", "name": "cudaLaunchKernel", "cbid": 211,
                        "process": 1, "thread": 1, "correlation": corr})
    m = 10_000
    mstart = np.sort(rng.choice(start, m, replace=False)) + 500
    memcpy = pd.DataFrame({"start_ns": mstart, "end_ns": mstart + 4_000, "duration_ns": 4_000,
                           "device": 0, "stream": 20, "correlation": -1,
                           "bytes": rng.choice([4096, 1 << 20], m), "kind": "htod",
                           "src_kind": "pinned", "dst_kind": "device"})
    tables = {"kernels": kernels, "api": api, "stacks": stacks, "ranges": ranges, "memcpy": memcpy}
    meta = {"label": "synthetic 1M-kernel benchmark trace", "source": "synthetic",
            "start_ns": 0, "end_ns": int(start[-1] + dur[-1] + 1_000_000),
            "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0],
                         "multiprocessors": 132}]}
    try:
        from hookmagic.trace.model import Trace
        return Trace(tables, meta)
    except ImportError:  # pragma: no cover - before the Trace class existed
        from types import SimpleNamespace
        from hookmagic.trace.schema import TABLE_NAMES, conform, empty_table
        full = {k: conform(k, tables[k]) if k in tables else empty_table(k) for k in TABLE_NAMES}
        return SimpleNamespace(**full, meta=meta)


def best_of(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


DESCRIPTION = ("views on a SYNTHETIC 1M-kernel trace: flame tree, kernel summary, diagnosis, "
               "flame and timeline figures (build + JSON), Chrome export; best of `repeat`")
PARAMS = {"kernels": 1_000_000, "repeat": 3}
NEEDS: tuple[str, ...] = ()


def measure(kernels: int, repeat: int) -> dict[str, float]:
    trace = synthetic_trace(kernels)
    flame_s, _ = best_of(lambda: flame_tree(trace), repeat)
    summary_s, _ = best_of(lambda: kernel_summary(trace), repeat)
    diag_s, _ = best_of(lambda: diagnose(trace), repeat)
    fig_s, fig_json = best_of(lambda: flame_figure(trace).to_json(), repeat)
    tl_s, tl_json = best_of(lambda: timeline_figure(trace).to_json(), repeat)
    with tempfile.TemporaryDirectory() as tmp:
        chrome_s, _ = best_of(lambda: trace.to_chrome_trace(Path(tmp) / "t.json.gz"), repeat)
    return {"flame_tree_s": flame_s, "kernel_summary_s": summary_s, "diagnosis_s": diag_s,
            "flame_summary_diagnosis_s": flame_s + summary_s + diag_s,
            "flame_figure_s": fig_s, "flame_payload_MB": len(fig_json.encode()) / 1e6,
            "timeline_first_draw_s": tl_s, "timeline_payload_MB": len(tl_json.encode()) / 1e6,
            "chrome_export_s": chrome_s}
