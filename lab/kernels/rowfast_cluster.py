"""The row-kernel designs for 65,536-element rows side by side, in their own process (a design
that faults cannot take the main benchmark with it): default ('auto': registers + shared memory,
two 512-thread blocks an SM), one 1024-thread block an SM ('reg'), a cluster of 8 blocks a row ('cluster', sm_90+), the
multi-pass kernels, torch eager and a copy of the same bytes. Kernel time by
the kernels benchmark's device timer (benchmarks/bench_kernels.py); correctness against torch first.

    python3 lab/kernels/rowfast_cluster.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_kernels import _time_device  # noqa: E402

import hookmagic.kernels as hk  # noqa: E402

F = torch.nn.functional


def main() -> None:
    print(f"{torch.cuda.get_device_name()}; 256 x 65536 rows; GB/s = (read + write [+ params]) / kernel time")
    print("| dtype | op | implementation | µs | GB/s | of copy | vs torch | max err |\n|---|---|---|---|---|---|---|---|")
    impls = ["auto", "reg", "multipass"] + (["cluster"] if torch.cuda.get_device_capability() >= (9, 0) else [])
    for dtype in (torch.float16, torch.float32):
        r, c = 256, 65536
        x = torch.randn(r, c, device="cuda", dtype=dtype) * 3
        w = torch.randn(c, device="cuda", dtype=dtype)
        b = torch.randn(c, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        nb = 2 * x.numel() * x.element_size()
        copy_s = _time_device(lambda: y.copy_(x))
        d = str(dtype).removeprefix("torch.")
        print(f"| {d} | copy | torch copy_ | {copy_s * 1e6:.1f} | {nb / copy_s / 1e9:.0f} | 100% | — | — |", flush=True)
        cases = {"softmax": (lambda impl: hk.softmax(x, impl=impl), lambda: torch.softmax(x, -1), 0),
                 "layer_norm": (lambda impl: hk.layer_norm(x, w, b, impl=impl), lambda: F.layer_norm(x, (c,), w, b), 2),
                 "rms_norm": (lambda impl: hk.rms_norm(x, w, impl=impl), lambda: F.rms_norm(x, (c,), w, 1e-6), 1)}
        for op, (ours, theirs, npar) in cases.items():
            opb = nb + npar * c * x.element_size()
            ref = theirs().float()
            ts = _time_device(theirs)
            print(f"| {d} | {op} | torch eager | {ts * 1e6:.1f} | {opb / ts / 1e9:.0f} | {copy_s / ts * nb / opb:.0%} "
                  f"| — | — |", flush=True)
            for impl in impls:
                try:
                    err = (ours(impl).float() - ref).abs().max().item()
                    tol = (1e-2 if dtype == torch.float16 else 1e-4) * max(ref.abs().max().item(), 1.0)
                    if err > tol:
                        print(f"| {d} | {op} | hookmagic {impl} | WRONG | | | | {err:.3g} |", flush=True)
                        continue
                    s = _time_device(lambda: ours(impl))
                    print(f"| {d} | {op} | hookmagic {impl} | {s * 1e6:.1f} | {opb / s / 1e9:.0f} | "
                          f"{copy_s / s * nb / opb:.0%} | {ts / s:.2f}x | {err:.2g} |", flush=True)
                except Exception as exc:
                    print(f"| {d} | {op} | hookmagic {impl} | FAILED {exc!r} | | | | |", flush=True)
        del x, w, b, y
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
