"""First look at gemm(variant="wgmma") on an sm_90 GPU: one launch per case, each checked, with
structured inputs that show WHERE a wrong element came from.

    python3 benchmarks/gpu/wgmma_probe.py            # GPU machine; prints one block per case

Cases (FP16, one 128 x 256 tile and then a few tiles, both layouts of b, both schedules):
- ``random``: random A and B; max error against a float32 reference.
- ``b-index``: A = [I I ...] (A[i, k] = 1 where k == i % K), B[k, n] = k (then = n % 64):
  C[i, j] must be i % K (then j % 64); a wrong value names the k (n) the kernel actually read.
- ``a-index``: B = I-like (B[k, n] = 1 where n == k % N), A[m, k] = m % 64 (then k):
  C[i, j] must be i % 64 (then the k with j == k % N).
Each case prints ok/WRONG, the count of wrong elements and the first mismatches, and times the
launch (CUDA events) so a hang or a slow path shows. Exit status 1 if any case is wrong.
"""
from __future__ import annotations

import sys
import time

import torch

import hookmagic.kernels as hk
from hookmagic.kernels import gemm_wgmma


def show(label: str, got: torch.Tensor, want: torch.Tensor, tol: float) -> bool:
    err = (got.float() - want.float()).abs()
    bad = (err > tol).nonzero()
    ok = len(bad) == 0
    print(f"{label:48s} {'ok' if ok else 'WRONG'}  max err {err.max().item():.4g}  wrong {len(bad)}/{got.numel()}",
          flush=True)
    for r, c in bad[:10].tolist():
        print(f"    C[{r},{c}] = {got[r, c].item():g}, want {want[r, c].item():g}", flush=True)
    if not ok:
        rows = sorted({r for r, _ in bad[:20000].tolist()})
        cols = sorted({c for _, c in bad[:20000].tolist()})
        print(f"    wrong rows: {len(rows)} (first {rows[:16]}), wrong cols: {len(cols)} (first {cols[:16]})", flush=True)
    return ok


def run(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, float]:
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    c = hk.gemm(a, b, variant="wgmma")
    e.record()
    e.synchronize()
    return c, s.elapsed_time(e)


def main() -> int:
    dev = torch.cuda.get_device_properties(0)
    print(f"device {dev.name} sm_{dev.major}{dev.minor}, torch {torch.__version__}", flush=True)
    t0 = time.time()
    from hookmagic.kernels import build
    c = build.compile_family("gemm_wgmma", "sm_90a")
    print(f"compiled gemm_wgmma for sm_90a in {time.time() - t0:.2f}s (cached={c.from_cache}): "
          + ", ".join(f"{k} {v['registers']} regs, spills {v['spill_store_bytes']}/{v['spill_load_bytes']}"
                      for k, v in sorted(c.kernels.items())), flush=True)
    all_ok = True
    h = torch.float16
    for sched, layout in [(s, lay) for s in ("tiles", "persistent") for lay in ("row_major", "column_major")]:
        gemm_wgmma.SCHEDULE = sched
        def mk_b(x: torch.Tensor) -> torch.Tensor:   # x is K x N
            return x.contiguous() if layout == "row_major" else x.t().contiguous().t()
        for (m, n, k) in [(128, 256, 64), (256, 512, 192), (200, 300, 100)]:
            tag = f"{sched} {layout} {m}x{n}x{k}"
            torch.manual_seed(0)
            a = torch.randn(m, k, device="cuda", dtype=h)
            b = mk_b(torch.randn(k, n, device="cuda", dtype=h))
            t1 = time.time()
            try:
                cc, ms = run(a, b)
            except Exception as exc:
                print(f"{tag}: launch FAILED: {type(exc).__name__}: {exc}", flush=True)
                return 1
            ref = a.float() @ b.float()
            all_ok &= show(f"{tag} random ({ms:.3f} ms, {time.time() - t1:.2f}s wall)", cc, ref,
                           0.02 * max(ref.abs().max().item(), 1.0))
            # b-index: C[i, j] = B[i % k, j]
            ai = torch.zeros(m, k, device="cuda", dtype=h)
            ai[torch.arange(m), torch.arange(m) % k] = 1
            kk = torch.arange(k, device="cuda", dtype=torch.float32)[:, None].expand(k, n)
            nn = (torch.arange(n, device="cuda", dtype=torch.float32) % 64)[None, :].expand(k, n)
            for what, bv in (("k", kk), ("n%64", nn)):
                cb, _ = run(ai, mk_b(bv.to(h)))
                all_ok &= show(f"{tag} b-index C=B[i%K, j] shows {what}", cb, ai.float() @ bv, 0.01)
            # a-index: C[i, j] = A[i, j % k] when B[kk, j] = 1 for kk == j % k
            bi = torch.zeros(k, n, device="cuda", dtype=h)
            bi[torch.arange(n) % k, torch.arange(n)] = 1
            mm = (torch.arange(m, device="cuda", dtype=torch.float32) % 64)[:, None].expand(m, k)
            kv = (torch.arange(k, device="cuda", dtype=torch.float32) % 1024)[None, :].expand(m, k)
            for what, av in (("m%64", mm), ("k", kv)):
                ca, _ = run(av.to(h).contiguous(), mk_b(bi))
                all_ok &= show(f"{tag} a-index C=A[i, j%K] shows {what}", ca, av @ bi.float(), 0.01)
    print("ALL OK" if all_ok else "SOME CASES WRONG", flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
