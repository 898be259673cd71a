"""Which configuration of the mma.sync GEMM (kernels/gemm_mma_tuned.cu), and which schedule of the
wgmma GEMM (tiles / persistent, row- or column-major b), is fastest on this GPU?

    python3 benchmarks/gpu/gemm_candidates.py [--shapes 4096,8192] [--dtypes f16,bf16]   # GPU machine

Launches each candidate kernel directly (1-D grouped grid), checks it against a float32
reference (and an odd shape, 1000 x 1000 x 1000, for the edge tiles), then times it with CUDA
events (median of several launches) next to cuBLAS (torch.matmul) and the current
gemm(variant="mma") in the same process. One line per kernel: TFLOP/s, fraction of cuBLAS,
registers and shared memory. Only a selection tool: the published table comes from
benchmarks/bench_kernels.py over fresh processes.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_kernels import _time  # noqa: E402

import hookmagic.kernels as hk  # noqa: E402
from hookmagic.kernels import build, gemm_wgmma, runtime  # noqa: E402

_NAME = re.compile(r"gemm_mmat_(\d+)x(\d+)x(\d+)_w(\d+)x(\d+)_s(\d+)_(f16|bf16)$")


def candidates(arch: str) -> list[tuple[str, dict, dict]]:
    c = build.compile_family("gemm_mma_tuned", arch)
    out = []
    for name, info in sorted(c.kernels.items()):
        m = _NAME.match(name)
        if m:
            bm, bn, bk, wm, wn, st = map(int, m.groups()[:6])
            cfg = {"bm": bm, "bn": bn, "bk": bk, "threads": wm * wn * 32, "stages": st, "dtype": m.group(7),
                   "smem": st * (bm * (bk + 8) + bk * (bn + 8)) * 2}
            out.append((name, cfg, info))
    return out


def launch(name: str, cfg: dict, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    ai, bi, ci = (runtime.inspect_array(x, nm) for x, nm in ((a, "a"), (b, "b"), (c, "c")))
    kern = runtime.get_kernel("gemm_mma_tuned", name, a.device.index or 0)
    runtime.set_dynamic_smem(kern, cfg["smem"], a.device.index or 0)
    grid = (-(-m // cfg["bm"]) * -(-n // cfg["bn"]), 1, 1)
    vec = int(k % 8 == 0 and n % 8 == 0 and ai.ptr % 16 == 0 and bi.ptr % 16 == 0 and ci.ptr % 16 == 0)
    runtime.launch(kern, ai, grid, (cfg["threads"], 1, 1),
                   (ai.ptr, bi.ptr, ci.ptr, 0, 0, np.int32(m), np.int32(n), np.int32(k), np.int32(0), np.int32(vec)),
                   smem=cfg["smem"])
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096,8192")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--schedules", default="tiles,persistent,cluster2",
                    help="wgmma schedules to time (comma-separated; empty: none)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    cc = torch.cuda.get_device_capability()
    arch = f"sm_{cc[0]}{cc[1]}"
    cands = candidates(arch)
    print(f"{torch.cuda.get_device_name()} {arch}: {len(cands)} candidate kernels", flush=True)
    bad = 0
    for dt in args.dtypes.split(","):
        dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
        mine = [x for x in cands if x[1]["dtype"] == dt]
        # correctness first: an odd shape and a square one
        for (m, n, k) in [(1000, 1000, 1000), (1024, 1024, 1024)]:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            ref = a.float() @ b.float()
            tol = 2 * (a @ b).float().sub(ref).abs().max().item() + 2 ** -7 * ref.abs().max().item()
            for name, cfg, _ in mine:
                err = (launch(name, cfg, a, b).float() - ref).abs().max().item()
                if err > tol:
                    bad += 1
                    cfg["wrong"] = True
                    print(f"  WRONG {name} at {m}x{n}x{k}: max err {err:.4g} > {tol:.4g}", flush=True)
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
            for name, cfg, info in mine:
                if cfg.get("wrong"):
                    continue
                t = _time(lambda name=name, cfg=cfg: launch(name, cfg, a, b))
                print(f"  {name:40s} {flop / t / 1e12:6.0f} TFLOP/s {ref_s / t:6.1%} of cuBLAS  "
                      f"({info['registers']} regs, {cfg['smem'] // 1024} KiB smem, {cfg['threads']} threads)", flush=True)
            schedules = [x for x in args.schedules.split(",") if x]
            if cc == (9, 0) and schedules:
                exact = a.float() @ b.float()
                tol = 2 * (a @ b).float().sub(exact).abs().max().item() + 2 ** -7 * exact.abs().max().item()
                b_col = b.t().contiguous().t()
                for sched in schedules:
                    gemm_wgmma.SCHEDULE = sched
                    for lay, bb in (("row-major b", b), ("column-major b", b_col)):
                        label = f"wgmma {sched}, {lay}"
                        try:
                            err = (hk.gemm(a, bb, variant="wgmma").float() - exact).abs().max().item()
                        except Exception as exc:
                            print(f"  {label:40s} FAILED: {type(exc).__name__}: {exc}", flush=True)
                            continue
                        if err > tol:
                            print(f"  {label:40s} WRONG: max err {err:.4g} > {tol:.4g}", flush=True)
                            continue
                        t = _time(lambda bb=bb: hk.gemm(a, bb, variant="wgmma"))
                        print(f"  {label:40s} {flop / t / 1e12:6.0f} TFLOP/s {ref_s / t:6.1%} of cuBLAS", flush=True)
                gemm_wgmma.SCHEDULE = "tiles"
                del exact, b_col
            del a, b
            torch.cuda.empty_cache()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
