"""Where does gemm(variant="wgmma") lose time at 4096^3: in the kernel or on the host?

    python3 lab/kernels/wgmma_overhead.py [--size 4096]       # GPU machine

For cuBLAS (torch.matmul), gemm(variant="mma") and each wgmma schedule, FP16, one process:
- ``single``: one call between two CUDA events after a synchronize (what bench_kernels.py times):
  kernel time plus whatever the host spends before the launch while the GPU idles;
- ``burst``: 20 calls back to back between two events (the host runs ahead of the GPU, so this
  is the kernel's own time when the host is faster than the kernel);
- ``host``: wall time per call while the GPU is kept busy (torch.cuda._sleep first): the Python
  and driver time of one call.
Then the same three timings at 1024^3 and for a skinny 64 x 4096 x 4096 product (cuBLAS, mma,
wgmma tiles), and a cProfile of 300 wgmma calls (host side only), the top functions by own time.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

import hookmagic.kernels as hk


def single(fn, reps: int = 30) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        s.record(); fn(); e.record(); e.synchronize()
        out.append(s.elapsed_time(e))
    out.sort()
    return out[len(out) // 2]


def burst(fn, n: int = 20, reps: int = 5) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        s.record()
        for _ in range(n):
            fn()
        e.record(); e.synchronize()
        out.append(s.elapsed_time(e) / n)
    out.sort()
    return out[len(out) // 2]


def host(fn, n: int = 50) -> float:
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e8))          # keep the GPU busy so launches only queue
    t = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    args = ap.parse_args()
    n = args.size
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    flop = 2 * n ** 3

    def wg(sched: str):
        def fn():
            return hk.gemm(a, b, variant="wgmma", schedule=sched)
        return fn

    cases = [("cuBLAS", lambda: a @ b), ("mma", lambda: hk.gemm(a, b, variant="mma")),
             ("wgmma tiles", wg("tiles")), ("wgmma persistent", wg("persistent")),
             ("wgmma persistent4", wg("persistent4"))]
    print(f"{torch.cuda.get_device_name()}, FP16 {n}^3; times in ms (TFLOP/s), host in us per call", flush=True)
    for label, fn in cases:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t1, tb, th = single(fn), burst(fn), host(fn)
        print(f"  {label:18s} single {t1:.4f} ({flop / t1 / 1e9:5.0f})  burst {tb:.4f} ({flop / tb / 1e9:5.0f})  "
              f"host {th:6.1f} us", flush=True)
    for (m, nn, k) in [(1024, 1024, 1024), (64, 4096, 4096)]:
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        y = torch.randn(k, nn, device="cuda", dtype=torch.float16)
        f = 2 * m * nn * k
        print(f"FP16 {m} x {nn} x {k}:", flush=True)
        for label, fn in [("cuBLAS", lambda: x @ y), ("mma", lambda: hk.gemm(x, y, variant="mma")),
                          ("wgmma tiles", lambda: hk.gemm(x, y, variant="wgmma"))]:
            for _ in range(3):
                fn()
            t1, tb, th = single(fn), burst(fn), host(fn)
            print(f"  {label:18s} single {t1:.4f} ({f / t1 / 1e9:5.0f})  burst {tb:.4f} ({f / tb / 1e9:5.0f})  "
                  f"host {th:6.1f} us", flush=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(5e8))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        hk.gemm(a, b, variant="wgmma")
    prof.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(14)
    print("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[:4000], flush=True)


if __name__ == "__main__":
    main()
