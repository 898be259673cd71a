"""``kernels.explain``: what a call would run, and why, without a GPU."""
from __future__ import annotations

from typing import Any

from hookmagic.kernels import dispatch, rowwise
from hookmagic.kernels.attention import explain_attention
from hookmagic.kernels.build import normalize_arch
from hookmagic.kernels.errors import KernelArgumentError

_ROWWISE = ("softmax", "layer_norm", "rms_norm", "bias_gelu")


def explain(op: str, *shapes: tuple[int, ...], dtype: str = "float16", arch: Any = "sm_90", stride: int = 1,
            padding: int = 0, layout: str = "NHWC") -> str:
    """What ``op`` would run for operands of ``shapes`` and ``dtype`` on ``arch``, and why.

    ``explain("gemm", (4096, 4096), (4096, 4096), dtype="float16", arch="sm_90")`` names the
    variant the dispatch table (:mod:`hookmagic.kernels.dispatch`) picks, the rule and the
    measurement behind the pick; ``explain("gemm_fp8", (M, K), (K, N), dtype="float8_e4m3fn")``
    does the same for :func:`hookmagic.kernels.gemm.gemm_fp8` (sm_90 only) and names its tile schedule.
    ``explain("attention", q.shape, k.shape, dtype="bfloat16")`` names the attention kernel (wgmma
    or mma) and why. The row-wise operations (softmax, layer_norm, rms_norm, bias_gelu; one shape,
    x's) name the kernel their launch plan picks for the row length.
    ``explain("conv2d", x.shape, w.shape, stride=2, padding=1)`` (x and w in ``layout``'s
    convention: NHWC + KRSC, or NCHW + KCRS) names conv2d's variant, the wgmma tile width and why;
    ``stride``, ``padding`` and ``layout`` are conv2d's and matter to it alone.
    """
    try:
        shapes = tuple(tuple(int(v) for v in s) for s in shapes)
    except (TypeError, ValueError):
        raise KernelArgumentError(f"explain: shapes must be tuples of ints, got {shapes!r}") from None
    arch = normalize_arch(arch)
    if op in ("gemm", "sgemm", "gemm_fp8"):
        return dispatch.explain_gemm(op, shapes, dtype, arch)
    if op == "conv2d":
        return dispatch.explain_conv(shapes, dtype, arch, int(stride), int(padding), layout)
    if op == "attention":
        return explain_attention(shapes, dtype, arch)
    if op in _ROWWISE:
        if len(shapes) != 1:
            raise KernelArgumentError(f"{op}: give the shape of x, e.g. (8, 4096); got {shapes}")
        return rowwise.explain_plan(op, shapes[0], dtype, arch)
    raise KernelArgumentError(f"explain: no dispatch for op {op!r}; one of gemm, sgemm, gemm_fp8, attention, conv2d, "
                              f"{', '.join(_ROWWISE)}")


__all__ = ["explain"]
