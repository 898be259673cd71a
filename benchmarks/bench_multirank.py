"""Out-of-core analysis of many ranks (issue 14): time and peak memory of ``hookmagic.load_many``
and the cross-rank analyses over SYNTHETIC traces (made-up kernels, named as such).

    python benchmarks/bench_multirank.py --ranks 64 --kernels 1000000 --out /tmp/synthetic_ranks

Each synthetic rank is a trace folder with ``--kernels`` kernels: steps of compute kernels then
an NCCL all-reduce, rank ``ranks // 2`` late by 2 ms in every step. Generation is not timed.
Timed, in a fresh process per repeat: open the set, then ``summary()`` (which runs overlap,
collectives and stragglers), each query through DuckDB over the Parquet files. Peak memory is
the process's maximum resident set (DuckDB runs in-process, so it is included). Writes a
markdown table to ``--table`` (default benchmarks/results/multirank_out_of_core.md).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def make_rank(folder: Path, rank: int, ranks: int, kernels: int, per_step: int = 200) -> None:
    """One synthetic rank: steps of ``per_step - 1`` compute kernels then one all-reduce."""
    import pandas as pd

    from hookmagic.trace.folder import save_trace_folder
    from hookmagic.trace.model import Trace

    rng = np.random.default_rng(rank)
    n = kernels
    step = np.arange(n) // per_step
    pos = np.arange(n) % per_step
    late = 2_000_000 if rank == ranks // 2 else 0
    dur = rng.integers(5_000, 20_000, n)
    step_len = per_step * 25_000 + 3_000_000
    start = 10**12 + step * step_len + pos * 25_000 + late * (pos > 0)
    comm = pos == per_step - 1
    end = start + np.where(comm, 0, dur)
    # every rank's all-reduce ends together, 1 ms after the late rank arrives
    arrive = 10**12 + step * step_len + (per_step - 1) * 25_000
    end = np.where(comm, arrive + 2_000_000 + 1_000_000, end)
    start = np.where(comm, arrive + late, start)
    names = np.array([f"synthetic_kernel_{i}" for i in range(50)], dtype=object)
    name = np.where(comm, NCCL, names[rng.integers(0, 50, n)])
    frame = pd.DataFrame({"start_ns": start, "end_ns": end, "duration_ns": end - start,
                          "device": 0, "stream": np.where(comm, 13, 7), "name": name,
                          "correlation": np.arange(n)})
    meta = {"label": f"synthetic rank {rank}", "host": "synthetic-host",
            "rank": {"rank": rank, "world_size": ranks, "job_id": "synthetic-bench",
                     "host": "synthetic-host"}, "source": "synthetic"}
    save_trace_folder(Trace({"kernels": frame}, meta), folder / f"rank={rank}")


def measure(folder: str, threads: int | None) -> dict:
    """In this (fresh) process: open the set and run the analyses; seconds and peak RSS."""
    import hookmagic

    t0 = time.perf_counter()
    ts = hookmagic.load_many(folder, threads=threads)
    n = int(ts.sql("SELECT count(*) AS n FROM kernels")["n"].iloc[0])
    t1 = time.perf_counter()
    summary = ts.summary()
    t2 = time.perf_counter()
    st = ts.stragglers()
    t3 = time.perf_counter()
    ts.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    load = os.getloadavg()[0]
    top = int(st["straggler_rank"].mode().iloc[0]) if len(st) else -1
    return {"kernels": n, "open_s": t1 - t0, "summary_s": t2 - t1, "stragglers_s": t3 - t2,
            "total_s": t3 - t0, "peak_rss_bytes": rss, "steps": len(st), "most_often_last": top, "load_1min": load,
            "ranks": len(summary)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--out", default="/tmp/hookmagic-synthetic-ranks")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--table", default=str(Path(__file__).parent / "results" /
                                           "multirank_out_of_core.md"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.threads)))
        return
    out = Path(args.out) / f"r{args.ranks}_k{args.kernels}"
    if not (out / f"rank={args.ranks - 1}" / "meta.json").exists():
        t = time.perf_counter()
        for r in range(args.ranks):
            make_rank(out, r, args.ranks, args.kernels)
        print(f"generated {args.ranks} synthetic ranks in {time.perf_counter() - t:.0f} s")
    runs = []
    for i in range(args.repeats):
        cmd = [sys.executable, __file__, "--measure", str(out)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                        env=dict(os.environ, PYTHONWARNINGS="ignore")
                                        ).stdout.strip().splitlines()[-1])
        print(f"run {i + 1}: {res}")
        runs.append(res)
    assert all(r["most_often_last"] == args.ranks // 2 for r in runs), runs

    def span(key: str, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
        vals = [r[key] * scale for r in runs]
        return f"{fmt.format(min(vals))}–{fmt.format(max(vals))}"

    size = sum(f.stat().st_size for f in out.rglob("*.parquet"))
    lines = [
        "# Out-of-core analysis of many ranks (SYNTHETIC traces)", "",
        f"`python benchmarks/bench_multirank.py --ranks {args.ranks} --kernels {args.kernels}`"
        f" on {platform.node()} ({os.cpu_count()} CPUs), {time.strftime('%Y-%m-%d')}; "
        f"{len(runs)} fresh processes, min–max. DuckDB memory limit 3 GB.", "",
        f"{args.ranks} synthetic ranks x {args.kernels:,} kernels = {runs[0]['kernels']:,} "
        f"kernels, {size / 2**20:.0f} MiB of Parquet.", "",
        "| step | seconds |", "|---|---|",
        f"| open the set, count kernels | {span('open_s')} |",
        f"| summary() (overlap, collectives, stragglers per rank) | {span('summary_s')} |",
        f"| stragglers() afterwards (cached by summary) | {span('stragglers_s', 1, '{:.3f}')} |",
        f"| total | {span('total_s')} |", "",
        f"Load average (1 min) at the end of each run: {span('load_1min')} on "
        f"{os.cpu_count()} CPUs (other work shared the machine).", "",
        f"Peak resident memory of the process: {span('peak_rss_bytes', 1 / 2**30, '{:.2f}')} GiB. "
        f"The late rank ({args.ranks // 2}) was named most often last in every run.", ""]
    Path(args.table).parent.mkdir(parents=True, exist_ok=True)
    Path(args.table).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
