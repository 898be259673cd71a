"""Out-of-core analysis of many ranks: time and peak memory of ``hookmagic.load_many``
and the cross-rank analyses over SYNTHETIC traces (made-up kernels, named as such).

    python -m benchmarks run multirank --set ranks=64 --set kernels=1000000

Each synthetic rank is a trace folder with ``--kernels`` kernels: steps of compute kernels then
an NCCL all-reduce, rank ``ranks // 2`` late by 2 ms in every step. Generation is not timed.
Timed, in a fresh process per repeat: open the set, then ``per_rank()`` (which runs overlap,
collectives and stragglers), each query through DuckDB over the Parquet files. Peak memory is
the process's maximum resident set (DuckDB runs in-process, so it is included). Writes a
markdown table to ``--table`` (default benchmarks/results/multirank_out_of_core.md).
"""
from __future__ import annotations

import os
import resource
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


def measure_folder(folder: str, threads: int | None) -> dict:
    """In this (fresh) process: open the set and run the analyses; seconds and peak RSS."""
    import hookmagic

    t0 = time.perf_counter()
    ts = hookmagic.load_many(folder, threads=threads)
    n = int(ts.sql("SELECT count(*) AS n FROM kernels")["n"].iloc[0])
    t1 = time.perf_counter()
    summary = ts.per_rank()
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


DESCRIPTION = ("out-of-core analysis of many SYNTHETIC ranks in DuckDB: load_many, summary, "
               "stragglers, overlap; seconds and peak memory")
PARAMS = {"ranks": 64, "kernels": 1_000_000, "threads": 0,
          "folder": "/tmp/hookmagic-synthetic-ranks"}
NEEDS = ("duckdb",)


def measure(ranks: int, kernels: int, threads: int, folder: str) -> dict[str, float]:
    out = Path(folder) / f"r{ranks}_k{kernels}"
    if not (out / f"rank={ranks - 1}" / "meta.json").exists():
        for r in range(ranks):
            make_rank(out, r, ranks, kernels)
    got = measure_folder(str(out), threads or None)
    return {k: v for k, v in got.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
