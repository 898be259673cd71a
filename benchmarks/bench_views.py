"""CPU benchmark of the analyses and views on a 1,000,000-kernel trace.

The trace is SYNTHETIC (random kernels, stacks and ranges shaped like a training loop); it
measures only how fast hookmagic turns a big trace into tables and figures, not any GPU.

Targets (issue 3): flame tree + kernel summary + diagnosis <= 2 s in total; flame figure
payload <= 5 MB; timeline first draw (figure built and serialised to JSON) <= 3 s.

Run:  PYTHONPATH=. python benchmarks/bench_views.py [--kernels N] [--repeat R]
Writes benchmarks/results/views.md (a Markdown table) and prints it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly

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


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    t = time.perf_counter()
    trace = synthetic_trace(args.kernels)
    build_s = time.perf_counter() - t
    flame_s, nodes = best_of(lambda: flame_tree(trace), args.repeat)
    summary_s, _ = best_of(lambda: kernel_summary(trace), args.repeat)
    diag_s, findings = best_of(lambda: diagnose(trace), args.repeat)
    fig_s, fig_json = best_of(lambda: flame_figure(trace).to_json(), args.repeat)
    tl_s, tl_json = best_of(lambda: timeline_figure(trace).to_json(), args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        chrome_s, chrome_path = best_of(lambda: trace.to_chrome_trace(Path(tmp) / "t.json.gz"),
                                        args.repeat)
        chrome_mb = os.path.getsize(chrome_path) / 1e6
    total = flame_s + summary_s + diag_s
    payload_mb = len(fig_json.encode()) / 1e6
    tl_mb = len(tl_json.encode()) / 1e6

    def ok(cond: bool) -> str:
        return "yes" if cond else "**no**"

    rows = [
        ("flame tree (time)", f"{flame_s:.3f} s", f"{len(nodes):,} nodes", ""),
        ("kernel summary", f"{summary_s:.3f} s", "", ""),
        ("diagnosis", f"{diag_s:.3f} s", f"{len(findings)} findings: "
         + ", ".join(findings["pattern"]), ""),
        ("**flame + summary + diagnosis**", f"**{total:.3f} s**", "target <= 2 s", ok(total <= 2)),
        ("flame figure (build + JSON)", f"{fig_s:.3f} s", f"payload {payload_mb:.2f} MB",
         ok(payload_mb <= 5)),
        ("timeline first draw (build + JSON)", f"{tl_s:.3f} s",
         f"payload {tl_mb:.2f} MB; target <= 3 s", ok(tl_s <= 3)),
        ("Chrome/Perfetto export (.json.gz)", f"{chrome_s:.3f} s", f"{chrome_mb:.1f} MB", ""),
    ]
    cpu = os.cpu_count()
    lines = [
        "# Views benchmark (CPU)",
        "",
        f"Trace: **synthetic**, {args.kernels:,} kernels on 4 streams, {len(trace.api):,} API "
        f"calls, {len(trace.memcpy):,} copies, 400 Python stacks, 64 ranges (built in "
        f"{build_s:.1f} s, not timed). Best of {args.repeat} runs. A worst case for the flame "
        "tree: each kernel's stack, range and name are drawn independently, so the tree has "
        "far more nodes than a real loop would give.",
        "",
        "Figure times are Python-side: building the Plotly figure and serialising it to the JSON "
        "the notebook sends to the browser; the browser's own WebGL rendering is not timed here.",
        "",
        f"Machine: {platform.machine()}, {cpu} CPU cores, {platform.processor() or 'cpu'}; "
        f"Python {platform.python_version()}, numpy {np.__version__}, pandas {pd.__version__}, "
        f"plotly {plotly.__version__}; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d} (UTC).",
        "",
        "| step | time | notes | meets target |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        "Re-run: `PYTHONPATH=. python benchmarks/bench_views.py`",
        "",
    ]
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main(sys.argv[1:])
