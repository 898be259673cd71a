"""First look at gemm(variant="wgmma") on an sm_90 GPU: one launch per case, each checked, with
structured inputs that show WHERE a wrong element came from.

    python3 lab/kernels/wgmma_probe.py [--good-file F]   # GPU machine; one block per case
    python3 lab/kernels/wgmma_probe.py --schedule tiles  # one schedule, in this process

Each schedule runs in its own process under a 20 s timeout, so a hang or a crash (which spoils
the CUDA context) of one schedule does not hide the others; --good-file gets the comma-separated
schedules that passed every case.

Cases (FP16, one 128 x 256 tile and then a few tiles, both layouts of b, every schedule):
- ``random``: random A and B; max error against a float32 reference.
- ``b-index``: A = [I I ...] (A[i, k] = 1 where k == i % K), B[k, n] = k (then = n % 64):
  C[i, j] must be i % K (then j % 64); a wrong value names the k (n) the kernel actually read.
- ``a-index``: B = I-like (B[k, n] = 1 where n == k % N), A[m, k] = m % 64 (then k):
  C[i, j] must be i % 64 (then the k with j == k % N).
Each case prints ok/WRONG, the count of wrong elements and the first mismatches, and times the
launch (CUDA events) so a hang or a slow path shows. Exit status 1 if any case is wrong.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch

import hookmagic.kernels as hk


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


#: the schedule the probe runs (set by probe(); hk.gemm takes it as its schedule= argument)
_SCHEDULE = ["tiles"]


def run(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, float]:
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    c = hk.gemm(a, b, variant="wgmma", schedule=_SCHEDULE[0])
    e.record()
    e.synchronize()
    return c, s.elapsed_time(e)


SCHEDULES = ("tiles", "persistent", "persistent4", "cluster2")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedule", choices=SCHEDULES)
    ap.add_argument("--good-file")
    args = ap.parse_args()
    if args.schedule:
        return probe(args.schedule)
    good = []
    for sched in SCHEDULES:
        t0 = time.time()
        try:
            r = subprocess.run([sys.executable, __file__, "--schedule", sched], capture_output=True, text=True, timeout=20)
            out, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            rc = "TIMEOUT (a hang?)"
        print(f"=== schedule {sched}: rc={rc} in {time.time() - t0:.1f}s", flush=True)
        print(out.rstrip()[-6000:], flush=True)
        if rc == 0:
            good.append(sched)
    print(f"schedules that passed: {','.join(good) or 'none'}", flush=True)
    if args.good_file:
        with open(args.good_file, "w") as f:
            f.write(",".join(good))
    return 0 if len(good) == len(SCHEDULES) else 1


def probe(sched: str) -> int:
    _SCHEDULE[0] = sched
    dev = torch.cuda.get_device_properties(0)
    print(f"device {dev.name} sm_{dev.major}{dev.minor}, torch {torch.__version__}", flush=True)
    t0 = time.time()
    from hookmagic.kernels import build
    c = build.compile_family("gemm_wgmma", "sm_90a")
    regs = sorted({v["registers"] for v in c.kernels.values()})
    spills = sum(v["spill_store_bytes"] + v["spill_load_bytes"] for v in c.kernels.values())
    print(f"compiled gemm_wgmma for sm_90a in {time.time() - t0:.2f}s (cached={c.from_cache}): {len(c.kernels)} "
          f"kernels, registers {regs}, spill bytes {spills}", flush=True)
    all_ok = True
    h = torch.float16
    for layout in ("row_major", "column_major"):
        def mk_b(x: torch.Tensor) -> torch.Tensor:   # x is K x N
            return x.contiguous() if layout == "row_major" else x.t().contiguous().t()
        # one tile; a few tiles with K < stages; odd sizes; 16 k-steps (the ring wraps); > 132 tiles
        for (m, n, k) in [(128, 256, 64), (256, 512, 192), (200, 300, 100), (384, 768, 1024), (2048, 4096, 512)]:
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
