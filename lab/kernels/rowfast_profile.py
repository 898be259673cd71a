"""Where the host time of one hookmagic.kernels call goes (GPU machine): microseconds per call of
the whole wrapper and of its steps, then cProfile's top functions over many calls. The stream is
held by a sleep kernel while timing, so the numbers are host work only (no waiting on the GPU).

    python3 lab/kernels/rowfast_profile.py
"""
from __future__ import annotations

import cProfile
import io
import pstats
import time

import torch

import hookmagic.kernels as hk
from hookmagic.kernels import registry, runtime


def per_call_us(fn, n: int = 2000) -> float:
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        torch.cuda._sleep(int(2e9 * 0.2))   # hold the stream: the loop below never waits on the GPU
        t0 = time.perf_counter()
        for _ in range(n // 10):
            fn()
        best = min(best, (time.perf_counter() - t0) / (n // 10) * 1e6)
        torch.cuda.synchronize()
    return best


def main() -> None:
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    w = torch.randn(4096, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    frames = torch.randint(0, 256, (8, 1080, 1920, 3), dtype=torch.uint8, device="cuda")
    xi = runtime.inspect_array(x, "x")
    spec = registry.SPECS[("softmax", "rowwise")]
    kern = runtime.get_kernel(spec.family, "softmax_reg4_f16", 0)
    steps = {
        "torch.softmax (reference)": lambda: torch.softmax(x, -1),
        "y.copy_(x) (reference)": lambda: y.copy_(x),
        "hk.softmax": lambda: hk.softmax(x),
        "hk.rms_norm": lambda: hk.rms_norm(x, w),
        "hk.row_sum": lambda: hk.row_sum(x),
        "hk.transpose NCHW->NHWC": lambda: hk.transpose(x.view(1, 16, 256, 4096), "NCHW->NHWC"),
        "hk.preprocess 8x1080p": lambda: hk.preprocess(frames, (640, 640), (0.485, 0.456, 0.406),
                                                        (0.229, 0.224, 0.225)),
        "runtime.inspect_array": lambda: runtime.inspect_array(x, "x"),
        "runtime.empty_like_kind": lambda: runtime.empty_like_kind(xi, xi.shape, xi.dtype),
        "runtime.device(0)": lambda: runtime.device(0),
        "runtime.device_arch(0)": lambda: runtime.device_arch(0),
        "runtime.get_kernel (cached)": lambda: runtime.get_kernel(spec.family, "softmax_reg4_f16", 0),
        "runtime.current_stream_handle": lambda: runtime.current_stream_handle(xi),
        "registry.record": lambda: registry.record("k", 1, 2, rows=1, cols=2, dtype="float16"),
    }
    import numpy as np
    steps["runtime.launch (numpy scalar args)"] = lambda: runtime.launch(
        kern, xi, (4096, 1, 1), (128, 1, 1), (xi.ptr, y.data_ptr(), np.int32(4096), np.int32(4096), np.int32(0)))
    print("| step | host µs per call |\n|---|---|")
    for name, fn in steps.items():
        try:
            print(f"| {name} | {per_call_us(fn):.2f} |", flush=True)
        except Exception as exc:
            print(f"| {name} | FAILED {exc!r} |", flush=True)
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    torch.cuda._sleep(int(2e9 * 0.5))
    pr.enable()
    for _ in range(1000):
        hk.softmax(x)
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue())


if __name__ == "__main__":
    main()
