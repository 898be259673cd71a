"""Synthetic multi-rank traces (made-up numbers for unit tests only), built so that the
expected stragglers, latenesses, causes, overlaps and clock offsets are known by construction.

Each rank runs ``steps`` steps of 20 ms. In step k, rank r's GPU idles ``host_ms[r][k]`` (its
host was late), runs a compute kernel of 4 ms + ``extra_ms[r][k]``, then arrives at an
all-reduce; every rank's all-reduce ends 2 ms after the last arrival. A 1 ms compute kernel on
a second stream starts 0.5 ms after the rank's arrival (it overlaps the collective).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hookmagic.trace.model import Trace

MS = 1_000_000
T0 = 5_000_000_000
NCCL_NAME = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def arrivals(host_ms, extra_ms, k: int) -> np.ndarray:
    """Arrival (ns, true clock) of every rank at step k's all-reduce."""
    n = len(host_ms)
    return np.array([T0 + k * 20 * MS + 1 * MS + int((host_ms[r][k] + 4 + extra_ms[r][k]) * MS)
                     for r in range(n)])


def synthetic_rank_traces(host_ms, extra_ms, *, hosts=None, offsets_ns=None, job="synthetic-job",
                          world_size=None) -> list[Trace]:
    n = len(host_ms)
    steps = len(host_ms[0])
    hosts = hosts or ["synthetic-host"] * n
    offsets_ns = offsets_ns or [0] * n
    traces = []
    for r in range(n):
        rows = []
        for k in range(steps):
            a = arrivals(host_ms, extra_ms, k)
            start = T0 + k * 20 * MS + 1 * MS + int(host_ms[r][k] * MS)
            rows.append((start, a[r], 7, f"synthetic_gemm_{k % 2}"))
            rows.append((a[r], a.max() + 2 * MS, 13, NCCL_NAME))
            rows.append((a[r] + MS // 2, a[r] + MS // 2 + MS, 9, "synthetic_elementwise"))
        f = pd.DataFrame(rows, columns=["start_ns", "end_ns", "stream", "name"])
        f["start_ns"] += offsets_ns[r]
        f["end_ns"] += offsets_ns[r]
        f["duration_ns"] = f["end_ns"] - f["start_ns"]
        f["device"] = 0
        f["correlation"] = np.arange(len(f))
        meta = {"label": f"synthetic rank {r}", "host": hosts[r],
                "start_ns": T0 + offsets_ns[r], "end_ns": T0 + steps * 20 * MS + offsets_ns[r],
                "wall_s": steps * 0.02,
                "devices": [{"index": 0, "name": "synthetic GPU", "uuid": f"GPU-synthetic-{r}"}],
                "steps": [[k, T0 + k * 20 * MS + offsets_ns[r],
                           T0 + (k + 1) * 20 * MS + offsets_ns[r]] for k in range(steps)],
                "rank": {"rank": r, "world_size": world_size or n, "local_rank": r,
                         "host": hosts[r], "job_id": job, "launcher": "synthetic",
                         "device": 0, "gpu_uuid": f"GPU-synthetic-{r}", "capture": 0}}
        traces.append(Trace({"kernels": f}, meta))
    return traces
