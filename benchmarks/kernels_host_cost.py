"""Host cost of one hookmagic.kernels call on small shapes (where the launch path, not the GPU,
sets the time), against the same torch call, in one fresh process."""
from __future__ import annotations

import statistics
import time

DESCRIPTION = ("host cost per call (us, median over calls) of kernels.gemm/sgemm/softmax/layer_norm on "
               "small shapes vs the torch call, CPU time to enqueue without synchronising")
PARAMS = {"calls": 2000, "warmup": 200, "size": 64}
NEEDS: tuple[str, ...] = ("gpu", "torch")


def _per_call_us(fn, calls: int, warmup: int) -> float:
    """Median over batches of 50 calls of the CPU time one call takes to return (the GPU runs
    behind: the launches queue; a synchronisation after each batch keeps the queue short)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    per_batch = []
    for _ in range(max(1, calls // 50)):
        t0 = time.perf_counter()
        for _ in range(50):
            fn()
        per_batch.append((time.perf_counter() - t0) / 50 * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_batch)


def measure(calls: int, warmup: int, size: int) -> dict[str, float]:
    import torch
    import torch.nn.functional as F
    from hookmagic import kernels as hk

    s = int(size)
    h = torch.randn(s, s, device="cuda", dtype=torch.float16)
    f = torch.randn(s, s, device="cuda")
    x = torch.randn(8, 1024, device="cuda", dtype=torch.float16)
    w = torch.randn(1024, device="cuda", dtype=torch.float16)
    cases = {
        "gemm_f16": (lambda: hk.gemm(h, h), lambda: h @ h),
        "sgemm_f32": (lambda: hk.sgemm(f, f), lambda: f @ f),
        "softmax_f16": (lambda: hk.softmax(x), lambda: torch.softmax(x, -1)),
        "layer_norm_f16": (lambda: hk.layer_norm(x, w, w), lambda: F.layer_norm(x, (1024,), w, w)),
    }
    out: dict[str, float] = {}
    for name, (ours, theirs) in cases.items():
        a = _per_call_us(ours, calls, warmup)
        b = _per_call_us(theirs, calls, warmup)
        out[f"{name}_us"] = a
        out[f"{name}_torch_us"] = b
        out[f"{name}_vs_torch_x"] = a / b
    return out
