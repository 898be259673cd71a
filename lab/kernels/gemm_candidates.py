"""Which schedule of the wgmma GEMM (tiles / persistent / persistent4 / cluster2, row- or
column-major b) is fastest on this GPU?

    python3 lab/kernels/gemm_candidates.py [--shapes 4096,8192] [--dtypes f16,bf16]   # GPU machine

Checks each schedule against a float32 reference, then times it with CUDA events (median of
several launches) next to cuBLAS (torch.matmul) and gemm(variant="mma") in the same process.
Only a selection tool: the published table comes from `python -m benchmarks run kernels` over fresh
processes. (Round 1 also timed six mma.sync configurations from a kernels/gemm_mma_tuned.cu,
all slower than the "mma" variant; lab/kernels/journey_h100.md has the figures.)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_kernels import _time  # noqa: E402

import hookmagic.kernels as hk  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096,8192")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--schedules", default="tiles,persistent,persistent4,cluster2",
                    help="wgmma schedules to time (comma-separated; empty: none)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    cc = torch.cuda.get_device_capability()
    print(f"{torch.cuda.get_device_name()} sm_{cc[0]}{cc[1]}", flush=True)
    bad = 0
    for dt in args.dtypes.split(","):
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
        for s in args.shapes.split(","):
            m = n = k = int(s)
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            flop = 2 * m * n * k
            ref_s = _time(lambda: a @ b)
            print(f"{dt} {s}^3: cuBLAS {flop / ref_s / 1e12:.0f} TFLOP/s", flush=True)
            cur_s = _time(lambda: hk.gemm(a, b, variant="mma"))
            print(f"  {'gemm(variant=mma) today':40s} {flop / cur_s / 1e12:6.0f} TFLOP/s {ref_s / cur_s:6.1%} of cuBLAS",
                  flush=True)
            schedules = [x for x in args.schedules.split(",") if x]
            if cc == (9, 0) and schedules:
                exact = a.float() @ b.float()
                tol = 2 * (a @ b).float().sub(exact).abs().max().item() + 2 ** -7 * exact.abs().max().item()
                b_col = b.t().contiguous().t()
                for sched in schedules:
                    for lay, bb in (("row-major b", b), ("column-major b", b_col)):
                        label = f"wgmma {sched}, {lay}"
                        try:
                            err = (hk.gemm(a, bb, variant="wgmma", schedule=sched).float() - exact).abs().max().item()
                        except Exception as exc:
                            print(f"  {label:40s} FAILED: {type(exc).__name__}: {exc}", flush=True)
                            continue
                        if err > tol:
                            bad += 1
                            print(f"  {label:40s} WRONG: max err {err:.4g} > {tol:.4g}", flush=True)
                            continue
                        t = _time(lambda bb=bb, sched=sched: hk.gemm(a, bb, variant="wgmma", schedule=sched))
                        print(f"  {label:40s} {flop / t / 1e12:6.0f} TFLOP/s {ref_s / t:6.1%} of cuBLAS", flush=True)
                del exact, b_col
            del a, b
            torch.cuda.empty_cache()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
