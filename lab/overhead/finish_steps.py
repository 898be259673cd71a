"""Where finishing a capture spends its time in Python, step by step, on a synthetic hand-over.

    python lab/overhead/finish_steps.py            # CPU only: no GPU, no native build
    python lab/overhead/finish_steps.py --capture  # also one real ResNet-50-like capture, profiled

The synthetic hand-over has the shape of ``hookmagic._native.take()`` for ResNet-50 fp16 batch 16
x 20 (6,940 kernels, 60 kernel names, 350 stacks of 18 frames) or for 20,000 tiny kernels.
Prints, per step, the fastest of 30 runs (the host's noise only adds time) and the library
versions, so figures from two machines can be compared.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hookmagic.cupti import columns as C  # noqa: E402
from hookmagic.trace import Trace, schema  # noqa: E402

#: stand-ins for hookmagic._native.enum_names() (only the lists the builders index)
ENUMS = {"memcpy_kind": ["unknown", "htod", "dtoh"], "memory_kind": ["unknown", "pageable",
         "pinned", "device"], "memory_op": ["unknown", "alloc", "free"],
         "sync_type": ["unknown", "event", "stream_wait_event", "stream", "context"],
         "vmm_op": ["unknown", "map", "unmap"], "marker_flags": {"start": 2, "end": 4}}


def synthetic_raw(n: int, names: int = 60, nstacks: int = 350, depth: int = 18) -> dict:
    """A synthetic hand-over: ``n`` kernels, each launch on one of ``nstacks`` stacks."""
    rng = np.random.default_rng(0)
    start = np.cumsum(rng.integers(1000, 5000, n)).astype(np.int64)
    corr = np.arange(1, n + 1, dtype=np.uint32) * 2

    def cols(spec, rows=0):
        return {c: np.zeros(rows, t) for c, t in spec}
    i32 = [(c, np.int32) for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y",
                                   "block_z", "registers", "static_smem", "dynamic_smem",
                                   "local_mem")]
    k = {**cols(i32, n), "start_ns": start, "end_ns": start + 900,
         "device": np.zeros(n, np.int32), "context": np.ones(n, np.uint32),
         "stream": np.full(n, 7, np.uint32), "correlation": corr,
         "name": (np.arange(n) % names).astype(np.int32), "graph_id": np.zeros(n, np.uint32),
         "graph_node": np.zeros(n, np.uint64)}
    timed = [("start_ns", np.int64), ("end_ns", np.int64), ("device", np.int32),
             ("context", np.uint32), ("stream", np.uint32), ("correlation", np.uint32)]
    m = 20
    sid = np.repeat(np.arange(nstacks), depth).astype(np.int64)
    dep = np.tile(np.arange(depth), nstacks).astype(np.int32)
    files = [("<module>" if d > 8 else f"/work/file{d}.py") for d in dep.tolist()]
    funcs = [(f"layer{s % 4}.{d} (Conv2d)" if d > 8 else f"func{d}")
             for s, d in zip(sid.tolist(), dep.tolist())]
    text = list(dict.fromkeys(files + funcs))
    code = {t: i for i, t in enumerate(text)}
    return {
        "kernels": k,
        "memcpy": cols(timed + [("bytes", np.int64), ("kind", np.uint8), ("src_kind", np.uint8),
                                ("dst_kind", np.uint8), ("graph_id", np.uint32),
                                ("graph_node", np.uint64)]),
        "memset": cols(timed + [("bytes", np.int64), ("value", np.int64),
                                ("memory_kind", np.uint16), ("graph_id", np.uint32),
                                ("graph_node", np.uint64)]),
        "memory": {"time_ns": np.arange(m, dtype=np.int64), "op": np.ones(m, np.uint8),
                   "address": np.arange(m, dtype=np.uint64) << 20,
                   "bytes": np.full(m, 1 << 20, np.int64), "memory_kind": np.full(m, 3, np.uint8),
                   "device": np.zeros(m, np.int32), "context": np.ones(m, np.uint32),
                   "stream": np.zeros(m, np.uint32), "correlation": np.arange(m, dtype=np.uint32),
                   "is_async": np.zeros(m, np.uint8)},
        "sync": {"start_ns": np.array([1], np.int64), "end_ns": np.array([2], np.int64),
                 "type": np.array([3], np.uint8), "context": np.array([1], np.uint32),
                 "stream": np.array([0], np.uint32), "event": np.array([0], np.uint32),
                 "correlation": np.array([99999], np.uint32)},
        "api": cols([("start_ns", np.int64), ("end_ns", np.int64), ("domain", np.uint8),
                     ("cbid", np.uint32), ("process", np.uint32), ("thread", np.uint32),
                     ("correlation", np.uint32), ("return_code", np.uint32)]),
        "markers": cols([("time_ns", np.int64), ("flags", np.uint32), ("id", np.uint32),
                         ("thread", np.uint32), ("name", np.int32), ("domain", np.int32)]),
        "launches": {"correlation": corr.copy(), "thread": np.full(n, 1234, np.int64),
                     "stack_id": (np.arange(n) % nstacks).astype(np.int32),
                     "range_id": np.full(n, -1, np.int64)},
        "vmm": cols([("time_ns", np.int64), ("op", np.uint8), ("address", np.uint64),
                     ("bytes", np.int64), ("context", np.uint32), ("correlation", np.uint32),
                     ("thread", np.int64), ("stack_id", np.int32)]),
        "graph_nodes": cols([("node", np.uint64), ("original", np.uint64), ("time_ns", np.int64),
                             ("thread", np.int64), ("stack_id", np.int32)]),
        "strings": [f"void at::native::kernel_{i}<float>(int, float*)" for i in range(names)],
        "stacks": {"stack_id": sid, "depth": dep, "line": (dep * 3).astype(np.int32),
                   "filename": np.array([code[f] for f in files], np.int32),
                   "function": np.array([code[f] for f in funcs], np.int32), "text": text},
    }


def fastest_ms(fn, repeats: int = 30) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def steps(n: int) -> dict[str, float]:
    raw = synthetic_raw(n)

    def builders():
        return C.table_builders(raw, ENUMS, pd.DataFrame(), {}, lambda d, c: None)

    def kernels_table():
        return C.build_tables_from({"kernels": builders()["kernels"]})

    def all_tables():
        t = Trace()
        t._fill(builders(), {})
        return t.tables
    out = {"builders": fastest_ms(builders), "kernels table": fastest_ms(kernels_table),
           "every table": fastest_ms(all_tables)}
    names = list(raw["strings"]) + [""]
    codes = raw["kernels"]["name"]
    out["kernel names (text take)"] = fastest_ms(lambda: C._take_text(names, codes))
    cols = builders()["kernels"]()
    out["kernels columns -> DataFrame"] = fastest_ms(lambda: schema.conform("kernels", cols))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capture", action="store_true")
    args = parser.parse_args()
    import pyarrow
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, pandas {pd.__version__}, "
          f"pyarrow {pyarrow.__version__}, string dtype {pd.Series(['x']).dtype!r}")
    for n in (6940, 20000):
        for step, ms in steps(n).items():
            print(f"{n:6d} kernels  {step:30s} {ms:7.3f} ms")
    if args.capture:
        import cProfile
        import pstats

        import torch

        import hookmagic
        x = torch.zeros(16, device="cuda")

        def run():
            for _ in range(7000):
                x.add_(1)
            torch.cuda.synchronize()
        for _ in range(3):
            with hookmagic.capture() as trace:
                run()
        prof = cProfile.Profile()
        with hookmagic.capture() as trace:
            run()
            prof.enable()
        len(trace.kernels)
        prof.disable()
        print({k: round(v * 1e3, 3) for k, v in trace.meta["overhead"].items()
               if k.endswith("_s")})
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
