"""Host cost of one hookmagic.kernels call on small shapes (where the launch path, not the GPU,
sets the time), against the same torch call, in one fresh process."""
from __future__ import annotations

import statistics
import time

DESCRIPTION = ("host cost per call (us, median over batches) of kernels.gemm (mma, wgmma)/sgemm/softmax/"
               "layer_norm/rms_norm/preprocess on small shapes vs the same torch call, CPU time to enqueue "
               "without synchronising; the floors (torch.empty_like, a prepared launch alone) and the "
               "cuda-core launcher beside them")
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
    from hookmagic.kernels import rowwise, runtime

    s = int(size)
    h = torch.randn(s, s, device="cuda", dtype=torch.float16)
    f = torch.randn(s, s, device="cuda")
    x = torch.randn(8, 1024, device="cuda", dtype=torch.float16)
    w = torch.randn(1024, device="cuda", dtype=torch.float16)
    frames = torch.randint(0, 256, (8, 1080, 1920, 3), dtype=torch.uint8, device="cuda")
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    m_t = torch.tensor(mean, device="cuda")[:, None, None]
    s_t = torch.tensor(std, device="cuda")[:, None, None]
    small = frames[:1, :64, :64]   # preprocess's host cost on a small frame (the call, not the kernel)
    small_c = small.contiguous()

    def torch_pre():   # the torch chain's host cost (5 kernels), on the same small frame
        y = small_c.permute(0, 3, 1, 2).float()
        y = F.interpolate(y, size=(32, 32), mode="bilinear", align_corners=False, antialias=False)
        return ((y / 255 - m_t) / s_t).half()

    cases = {
        "gemm_mma_f16": (lambda: hk.gemm(h, h, variant="mma"), lambda: h @ h),
        "gemm_f16": (lambda: hk.gemm(h, h), lambda: h @ h),   # the default (wgmma on sm_90)
        "sgemm_f32": (lambda: hk.sgemm(f, f), lambda: f @ f),
        "softmax_f16": (lambda: hk.softmax(x), lambda: torch.softmax(x, -1)),
        "layer_norm_f16": (lambda: hk.layer_norm(x, w, w), lambda: F.layer_norm(x, (1024,), w, w)),
        "rms_norm_f16": (lambda: hk.rms_norm(x, w), lambda: F.rms_norm(x, (1024,), w)),
        "preprocess_f16": (lambda: hk.preprocess(small_c, (32, 32), mean, std), torch_pre),
    }
    out: dict[str, float] = {}
    for name, (ours, theirs) in cases.items():
        a = _per_call_us(ours, calls, warmup)
        b = _per_call_us(theirs, calls, warmup)
        out[f"{name}_us"] = a
        out[f"{name}_torch_us"] = b
        out[f"{name}_vs_torch_x"] = a / b
    # the floors: torch's output allocation alone, and the softmax call plan's launch alone (its
    # prepared launch with fixed pointers: no allocation, no signature, no record)
    out["floor_empty_like_us"] = _per_call_us(lambda: torch.empty_like(x), calls, warmup)
    hk.softmax(x)
    key = next(k for k in rowwise._calls if k[0] == "softmax" and k[1] == x.shape and k[3] == x.dtype)
    prep, _work, tail = rowwise._calls[key]
    y = torch.empty_like(x)
    args = (x.data_ptr(), y.data_ptr(), *tail)
    out["floor_prepared_launch_us"] = _per_call_us(lambda: runtime.launch_prepared(prep, "torch", 0, args),
                                                   calls, warmup)
    # where a launch's time goes: one trivial driver call through ctypes (cuGetErrorName), the same
    # launch through cuda-bindings' cuLaunchKernel (its own argument conversion), and torch's own
    # in-place op on the same tensor (dispatcher and launch, no allocation)
    try:
        import ctypes
        name = ctypes.c_char_p()
        ref = ctypes.byref(name)
        drv = runtime._drv
        out["floor_ctypes_driver_call_us"] = _per_call_us(lambda: drv.cuGetErrorName(0, ref), calls, warmup)
        from cuda.bindings import driver
        fn = driver.CUfunction(prep.handle.value)
        params = (ctypes.c_void_p * len(args))()
        vals = [ctypes.c_uint64(args[0]), ctypes.c_uint64(args[1])] + [ctypes.c_int32(int(v)) for v in tail]
        for i, v in enumerate(vals):
            params[i] = ctypes.addressof(v)
        g, b = prep.head[:3], prep.head[3:6]
        stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
        addr = ctypes.addressof(params)
        out["floor_bindings_launch_us"] = _per_call_us(
            lambda: driver.cuLaunchKernel(fn, *g, *b, prep.smem, stream, addr, 0), calls, warmup)
        out["torch_inplace_op_us"] = _per_call_us(lambda: y.mul_(1.0), calls, warmup)
    except Exception as exc:   # the breakdown is optional: keep the figures above
        print("host-cost breakdown failed:", repr(exc))
    # the same calls through cuda.core's launch (the launcher before the driver path)
    before = runtime.set_launcher("cuda-core")
    try:
        out["softmax_f16_cuda_core_launcher_us"] = _per_call_us(lambda: hk.softmax(x), calls, warmup)
        out["gemm_mma_f16_cuda_core_launcher_us"] = _per_call_us(lambda: hk.gemm(h, h, variant="mma"), calls,
                                                                 warmup)
    finally:
        runtime.set_launcher(before)
    return out
