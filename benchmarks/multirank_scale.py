"""How the many-rank analyses scale: seconds and peak memory of ``hookmagic.load_many`` and
each analysis over SYNTHETIC ranks (made-up kernels, named as such), and the cost per rank.

    python -m benchmarks run multirank_scale --set ranks=10000 --set kernels=3
    python -m benchmarks run multirank_scale --set ranks=64 --set kernels=1000000

Each synthetic rank is a trace folder in the real format (``meta.json`` and one Parquet file per
table, empty tables included) holding ``kernels`` kernels: steps of compute kernels then one
NCCL all-reduce, rank ``ranks // 2`` late by 2 ms in every step. Writing them is not timed
(they are kept under ``folder`` for the next process). Timed in this fresh process: opening the
set, then ``summary()``, ``stragglers()``, ``overlap()``, ``vs_median()``, ``timeline()`` one
after the other (each reuses what the earlier ones computed, as in a notebook).
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import time
import warnings
from pathlib import Path

import numpy as np

DESCRIPTION = ("many-rank analyses on SYNTHETIC ranks: seconds per analysis, per rank, and peak "
               "memory, against the number of ranks")
PARAMS = {"ranks": 1000, "kernels": 3, "threads": 0, "folder": "/tmp/hookmagic-synthetic-ranks"}
NEEDS = ("duckdb",)

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
PER_STEP = 200


def _kernels(rank: int, ranks: int, kernels: int):
    import pandas as pd

    rng = np.random.default_rng(rank)
    per_step = min(PER_STEP, max(2, kernels))
    n = kernels
    step = np.arange(n) // per_step
    pos = np.arange(n) % per_step
    late = 2_000_000 if rank == ranks // 2 else 0
    step_len = per_step * 25_000 + 3_000_000
    start = 10**12 + step * step_len + pos * 25_000 + late * (pos > 0)
    comm = pos == per_step - 1
    end = start + rng.integers(5_000, 20_000, n)
    arrive = 10**12 + step * step_len + (per_step - 1) * 25_000
    start = np.where(comm, arrive + late, start)
    end = np.where(comm, arrive + 3_000_000, end)
    names = np.array([f"synthetic_kernel_{i}" for i in range(50)], dtype=object)
    name = np.where(comm, NCCL, names[rng.integers(0, 50, n)])
    return pd.DataFrame({"start_ns": start, "end_ns": end, "duration_ns": end - start,
                         "device": np.zeros(n, np.int32), "stream": np.where(comm, 13, 7),
                         "name": name, "correlation": np.arange(n)})


def make_ranks(out: Path, ranks: int, kernels: int) -> None:
    """The synthetic rank folders: the first written by the trace-folder writer, the empty
    tables of the others hard-linked to its files (same bytes), their kernels written here."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hookmagic.trace.folder import save_trace_folder
    from hookmagic.trace.model import Trace

    def meta(rank: int) -> dict:
        return {"label": f"synthetic rank {rank}", "host": "synthetic-host",
                "source": "synthetic",
                "rank": {"rank": rank, "world_size": ranks, "job_id": "synthetic-scale",
                         "host": "synthetic-host"}}

    first = Path(save_trace_folder(Trace({"kernels": _kernels(0, ranks, kernels)}, meta(0)),
                                   out / "rank=0"))
    manifest = json.loads((first / "meta.json").read_text())
    for rank in range(1, ranks):
        folder = out / f"rank={rank}"
        tmp = out / f".rank={rank}.synthetic.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name, info in manifest["tables"].items():
            if name != "kernels":
                os.link(first / info["file"], tmp / info["file"])
        frame = _kernels(rank, ranks, kernels)
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False),
                       tmp / "kernels.parquet", compression="zstd")
        (tmp / "meta.json").write_text(json.dumps(dict(manifest, meta=meta(rank))))
        os.replace(tmp, folder)


def measure(ranks: int, kernels: int, threads: int, folder: str) -> dict[str, float]:
    import hookmagic

    out = Path(folder) / f"r{ranks}_k{kernels}"
    if not (out / f"rank={ranks - 1}" / "meta.json").exists():
        make_ranks(out, ranks, kernels)
    times = {}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = hookmagic.load_many(out, threads=threads or None)
        times["open_s"] = time.perf_counter() - t0
        for name, call in (("summary", lambda: ts.summary()),
                           ("stragglers", lambda: ts.stragglers()),
                           ("overlap", lambda: ts.overlap()),
                           ("vs_median", lambda: ts.vs_median()),
                           ("timeline", lambda: ts.timeline())):
            t = time.perf_counter()
            call()
            times[f"{name}_s"] = time.perf_counter() - t
    steps = len(ts.stragglers())
    ts.close()
    total = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {**times, "total_s": total, "total_per_rank_ms": 1e3 * total / ranks,
            "peak_rss_bytes": rss, "steps": steps, "ranks": ranks,
            "kernels_per_rank": kernels}
