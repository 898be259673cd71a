"""The synthetic traces of the unit tests, in one place: made-up numbers for tests only.

- :func:`synthetic`: a real :class:`~hookmagic.trace.Trace` of the tables a test gives
  (DataFrames or dicts of columns; the rest empty), for tests that build their own small case.
- :func:`synthetic_tables` / :func:`synthetic_meta`: a small hand-checkable capture with every
  table filled (the ``synthetic_trace`` fixture of tests/conftest.py).
- :func:`synthetic_requests` / :func:`batch_timeline`: hand-placed scheduler requests and the
  batches a simulation made of them, in ms, for timelines worked on paper.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hookmagic.trace.model import Trace

#: capture start on the synthetic clock; every synthetic time below is relative to it
SYNTHETIC_T0 = 1_000_000_000
#: an address above 2**63, so a uint64 that went through int64 would come back negative
SYNTHETIC_HIGH_ADDRESS = 0xFFFF_8000_0000_1000


def _ms(x: float) -> int:
    return SYNTHETIC_T0 + int(round(x * 1_000_000))


def synthetic_tables() -> dict[str, pd.DataFrame]:
    """Small hand-checkable tables (times in ms after SYNTHETIC_T0 in the comments).

    Device 0 is busy over [0, 3.5] (two overlapping gemms and an overlapping copy),
    [5, 5.5] (relu), [6, 7] (htod copy) and [8, 8.1] (memset): 5.1 ms of a 10 ms capture.
    Device memory in use: 1000, 1500, 500, 2500 (peak), 2000, 2000.
    """
    kernels = pd.DataFrame({
        "start_ns": [_ms(0), _ms(1), _ms(5)], "end_ns": [_ms(2), _ms(3), _ms(5.5)],
        "device": 0, "context": 1, "stream": [7, 8, 7], "correlation": [1, 2, 3],
        "name": ["synthetic_gemm", "synthetic_gemm", 'synthetic_relu<"quoted">'],
        "grid_x": [128, 128, 64], "grid_y": 1, "grid_z": 1,
        "block_x": [256, 256, 128], "block_y": 1, "block_z": 1,
        "registers": [64, 64, 16], "static_smem": [1024, 1024, 0], "dynamic_smem": [2048, 2048, 0],
        "local_mem": 0, "graph_id": 0, "graph_node": 0, "thread": 101, "stack_id": [0, 0, 1],
        "range_id": [0, 0, 0],
    })
    kernels["duration_ns"] = kernels["end_ns"] - kernels["start_ns"]
    memcpy = pd.DataFrame({
        "start_ns": [_ms(6), _ms(2.5)], "end_ns": [_ms(7), _ms(3.5)],
        "device": 0, "context": 1, "stream": [7, 9], "correlation": [4, 5],
        "bytes": [4_000_000, 1_000_000], "kind": ["htod", "dtoh"],
        "src_kind": ["pinned", "device"], "dst_kind": ["device", "pageable"],
        "graph_id": 0, "thread": 101, "stack_id": -1, "range_id": 0,
    })
    memcpy["duration_ns"] = memcpy["end_ns"] - memcpy["start_ns"]
    memset = pd.DataFrame({
        "start_ns": [_ms(8)], "end_ns": [_ms(8.1)], "device": 0, "context": 1, "stream": 7,
        "correlation": [6], "bytes": [1024], "value": [0], "memory_kind": ["device"],
        "graph_id": 0, "thread": 101, "stack_id": -1, "range_id": -1,
    })
    memset["duration_ns"] = memset["end_ns"] - memset["start_ns"]
    a, b, d = SYNTHETIC_HIGH_ADDRESS, 0x7F00_0000_0000, 0x7F00_0010_0000
    memory = pd.DataFrame({
        "time_ns": [_ms(0.1), _ms(0.15), _ms(0.2), _ms(0.3), _ms(0.4), _ms(0.5), _ms(0.6)],
        "op": ["alloc", "alloc", "alloc", "free", "alloc", "free", "free"],
        "address": np.array([a, 0x1000, b, a, a, b, d], dtype=np.uint64),
        "bytes": [1000, 4096, 500, 1000, 2000, 500, 9999],
        "memory_kind": ["device", "pinned", "device", "device", "device", "device", "device"],
        "device": 0, "context": 1, "stream": [-1, -1, 7, -1, -1, 7, -1], "correlation": 0,
        "is_async": [False, False, True, False, False, True, False], "source": "cupti",
        "thread": 101, "stack_id": [0, -1, 1, -1, 0, -1, -1],
    })
    sync = pd.DataFrame({
        "start_ns": [_ms(8.2)], "end_ns": [_ms(9)], "type": ["stream"], "context": 1,
        "stream": 7, "event": 0, "correlation": [8], "thread": 101,
    })
    sync["duration_ns"] = sync["end_ns"] - sync["start_ns"]
    api = pd.DataFrame({
        "start_ns": [_ms(x) for x in (-0.05, 0.9, 4.9, 5.9, 2.4, 7.9, 8.15)],
        "domain": ["runtime"] * 6 + ["driver"],
        "name": ["cudaLaunchKernel"] * 3 + ["cudaMemcpyAsync"] * 2
                + ["cudaMemsetAsync", "cuCtxSynchronize"],
        "cbid": [211, 211, 211, 41, 41, 51, 17], "process": 4242, "thread": 101,
        "correlation": [1, 2, 3, 4, 5, 6, 7], "return_code": 0,
    })
    api["end_ns"] = api["start_ns"] + 5_000
    api["duration_ns"] = 5_000
    ranges = pd.DataFrame({
        "range_id": [0], "name": ["synthetic forward"], "start_ns": [_ms(-0.1)],
        "end_ns": [_ms(9.5)], "thread": 101, "depth": 0, "parent_id": -1, "source": "hookmagic",
    })
    ranges["duration_ns"] = ranges["end_ns"] - ranges["start_ns"]
    stacks = pd.DataFrame({
        "stack_id": [0, 0, 1], "depth": [1, 0, 0],
        "filename": ["synthetic_model.py", "synthetic_train.py", "synthetic_train.py"],
        "function": ["forward", "<module>", "<module>"], "line": [42, 10, 12],
    })
    samples = pd.DataFrame({
        "time_ns": [_ms(0), _ms(5)], "device": 0, "gpu_util": [40.0, 90.0],
        "mem_util": [10.0, 20.0], "memory_used": [1 << 30, 2 << 30],
        "memory_total": 80 << 30, "sm_clock_mhz": [1980.0, 1980.0],
        "mem_clock_mhz": [2619.0, 2619.0], "power_w": [120.5, np.nan],
        "temperature_c": [40.0, 45.0],
    })
    allocator_events = pd.DataFrame({
        "time_ns": [_ms(0.5), _ms(0.6), _ms(8.0), _ms(8.1)],
        "action": ["segment_alloc", "alloc", "free_requested", "free_completed"],
        "address": np.array([0x7F0000000000] * 4, dtype=np.uint64),
        "size": [2 << 20, 1024, 1024, 1024], "requested_size": [2 << 20, 1000, 1000, 1000],
        "segment": np.array([0x7F0000000000] * 4, dtype=np.uint64), "stream": 0, "device": 0,
        "pool": "small", "stack_id": [-1, 0, 0, -1], "source": "torch",
    })
    return {"kernels": kernels, "memcpy": memcpy, "memset": memset, "memory": memory,
            "sync": sync, "api": api, "ranges": ranges, "stacks": stacks, "samples": samples,
            "allocator_events": allocator_events}


def synthetic_meta() -> dict:
    """Meta of the synthetic trace: 10 ms capture on one synthetic device."""
    return {
        "source": "synthetic", "status": "complete", "label": "synthetic", "host": "synthetic-host",
        "pid": 4242, "python": "3.12.0", "started_at": "2026-01-01T00:00:00Z",
        "start_ns": SYNTHETIC_T0, "end_ns": SYNTHETIC_T0 + 10_000_000, "wall_s": 0.01,
        "devices": [{"index": 0, "name": "Synthetic GPU", "uuid": "GPU-synthetic",
                     "total_memory": 80 << 30, "multiprocessors": 132,
                     "compute_capability": [9, 0], "max_threads_per_sm": 2048,
                     "warp_size": 32}],
        "driver_version": "0.0.synthetic", "cuda_driver_version": 13000, "cupti_version": 27,
        "options": {"kernels": True, "memory": True, "stacks": True, "api": True, "nvml": True},
        "overhead": {"start_s": 0.001, "stop_s": 0.002}, "dropped": {"activity_records": 0},
    }


def synthetic(meta: dict | None = None, **tables) -> Trace:
    """A Trace of the ``tables`` given by name (DataFrames or dicts of columns; missing
    columns neutral, tables not given empty), with ``meta`` (default: ``{"source":
    "synthetic"}``)."""
    frames = {name: pd.DataFrame(t) if not isinstance(t, pd.DataFrame) else t
              for name, t in tables.items()}
    return Trace(frames, {"source": "synthetic"} if meta is None else meta)



def synthetic_requests(rows):
    """A scheduler workload of hand-placed requests: ``(arrival_s, model)`` pairs over 1 s."""
    from hookmagic import sched
    return sched.Workload(pd.DataFrame(rows, columns=["arrival_s", "model"]), duration_s=1.0)


def batch_timeline(res) -> list[tuple[str, float, float]]:
    """A scheduler result's batches as ``(model, start_ms, end_ms)``, by start, to 1e-9 ms."""
    b = res.batches.sort_values("start_s").reset_index(drop=True)
    return [(m, round(s * 1e3, 9), round(e * 1e3, 9)) for m, s, e in zip(b.model, b.start_s, b.end_s)]
