"""hookmagic.kernels: a CUDA kernel library compiled at run time with NVRTC.

The CUDA C++ sources live in the top-level ``kernels/`` folder (package data) and are compiled
on first use for the GPU's exact architecture with cuda-core (no nvcc at install time); cubins
are cached on disk. Functions take torch tensors or CuPy arrays, run on the caller's current
stream and return the same kind::

    from hookmagic import kernels
    kernels.available()                          # every kernel and its variants
    c = kernels.sgemm(a, b, variant="warptile")  # FP32 SIMT, the optimisation journey
    y = kernels.gemm(x, w, bias=b, activation="gelu")   # FP16/BF16 Tensor Cores, FP32 accumulate
    c = kernels.gemm_fp8(a8, bt8.t(), scale_a, scale_b)   # FP8 e4m3/e5m2, per-tensor scales, sm_90 (torch._scaled_mm's conventions)
    kernels.explain("gemm", (4096, 4096), (4096, 4096), dtype="float16", arch="sm_90")  # what runs, why
    p = kernels.softmax(scores); h = kernels.layer_norm(x, w, b); r = kernels.rms_norm(x, w)
    x = kernels.preprocess(frames, (640, 640), mean, std, letterbox=True)   # uint8 frames -> FP16 NCHW, one kernel
    keep = kernels.nms(boxes, scores, 0.5); xyxy = kernels.decode_boxes(head[..., :4])
    t = kernels.transpose(x, "NCHW->NHWC"); s = kernels.row_sum(x); m = kernels.row_max(x)
    o = kernels.attention(q, k, v, causal=True)  # FP16/BF16, head dim 64/128; wgmma + TMA on sm_90, mma.sync elsewhere and for varlen offsets
    y = kernels.conv2d(x_nhwc, w_krsc, b, stride=2, padding=1)  # implicit GEMM, NHWC + KRSC (or layout="NCHW")
    kernels.check("sm_90")                       # compile everything, registers/smem/spills (no GPU)

Install the optional extra: ``pip install 'hookmagic[kernels]'``.
"""
from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from hookmagic.kernels import registry
from hookmagic.kernels.build import compile_family, families, normalize_arch
from hookmagic.kernels.errors import KernelArgumentError, KernelCompileError, KernelsUnavailable
from hookmagic.kernels.gemm import ACTIVATIONS, GEMM_VARIANTS, SGEMM_VARIANTS, gemm, gemm_fp8, sgemm
from hookmagic.kernels.registry import LaunchWork, launch_log, record
from hookmagic.kernels.rowwise import bias_gelu, layer_norm, rms_norm, softmax
from hookmagic.kernels.preprocess import LetterboxParams, letterbox_params, preprocess
from hookmagic.kernels.detect import batched_nms, decode_boxes, nms
from hookmagic.kernels.layout import row_max, row_sum, transpose
from hookmagic.kernels.attention import attention
from hookmagic.kernels.conv import conv2d, depthwise_conv2d, pack_conv_weight
from hookmagic.kernels import gemm_wgmma as _gemm_wgmma  # noqa: F401  registers gemm(variant='wgmma')
from hookmagic.kernels.explain import explain

#: The architectures ``hookmagic kernels check`` covers in CI (A100, Jetson Orin, H100 and H100 arch-specific).
CI_ARCHS = ("sm_80", "sm_87", "sm_90", "sm_90a")


def available() -> pd.DataFrame:
    """Every kernel: op, variant, dtype, entry point, source family, block, tile, minimum arch, description."""
    rows = []
    for (op, variant), s in registry.SPECS.items():
        for dtype, entry in s.entries.items():
            rows.append({"op": op, "variant": variant, "dtype": dtype, "kernel": entry,
                         "family": s.family_for(dtype), "block": s.block[0] * s.block[1] * s.block[2],
                         "tile": f"{s.tile[0]}x{s.tile[1]}", "dynamic_smem": s.smem_for(dtype),
                         "min_arch": f"sm_{s.min_arch}", "description": s.description})
    return pd.DataFrame(rows)


def _expected_spills() -> set[str]:
    return {e for s in registry.SPECS.values() if s.expected_spills for e in s.entries.values()}


def check(arch: Any = "sm_90", use_cache: bool = True,
          progress: Callable[[int, int, str, str], None] | None = None) -> pd.DataFrame:
    """Compile every family for ``arch`` with NVRTC (no GPU needed) and report each kernel's
    registers, static shared memory, stack and spill bytes. ``ok`` is False for a kernel that
    spills without declaring it; a family that does not compile raises :class:`KernelCompileError`.
    ``progress(done, total, family, arch)`` is called before each family compiles (``done``
    families finished of ``total``) and once more at the end with ``family=''``: a CLI shows it."""
    arch = normalize_arch(arch)
    expected = _expected_spills()
    rows = []
    fams = families()
    for i, fam in enumerate(fams):
        if progress is not None:
            progress(i, len(fams), fam, arch)
        c = compile_family(fam, arch, use_cache=use_cache)
        if not c.kernels:  # every family defines kernels: ptxas -v said nothing about them
            raise KernelCompileError(
                f"NVRTC compiled kernels/{fam}.cu for {arch} but its log has no ptxas resource lines "
                f"(registers, shared memory, spills), so they cannot be checked; log: "
                f"{c.log.strip()[:300] or '<empty>'}")
        for name, info in sorted(c.kernels.items()):
            spills = info["spill_store_bytes"] + info["spill_load_bytes"]
            rows.append({"arch": arch, "family": fam, "kernel": name, **info,
                         "spills_expected": name in expected, "ok": spills == 0 or name in expected,
                         "nvrtc": c.nvrtc, "cached": c.from_cache})
    if progress is not None:
        progress(len(fams), len(fams), "", arch)
    return pd.DataFrame(rows)


__all__ = ["available", "check", "sgemm", "gemm", "gemm_fp8", "softmax", "layer_norm", "rms_norm", "bias_gelu", "SGEMM_VARIANTS", "GEMM_VARIANTS", "ACTIVATIONS",
           "CI_ARCHS", "preprocess", "nms", "batched_nms", "decode_boxes", "transpose", "row_sum", "row_max", "attention", "conv2d", "depthwise_conv2d", "pack_conv_weight", "letterbox_params", "LetterboxParams", "KernelCompileError", "KernelArgumentError", "KernelsUnavailable", "launch_log",
           "record", "LaunchWork", "compile_family", "families", "explain"]
