"""GEMM: the FP32 SIMT journey (:func:`sgemm`), the Tensor Core GEMMs (:func:`gemm`) and the
Hopper FP8 GEMM with per-tensor scales (:func:`gemm_fp8`)."""
from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

import numpy as np

from hookmagic.kernels import constants, registry, runtime
from hookmagic.kernels.errors import KernelArgumentError
from hookmagic.kernels.registry import KernelSpec, register

# --- the SGEMM journey -----------------------------------------------------------------------
SGEMM_VARIANTS = ("naive", "coalesced", "smem_tiled", "tile_1d", "tile_2d", "vectorized", "warptile")
_T1, _T2, _WT = constants.SGEMM_TILE_1D, constants.SGEMM_TILE_2D, constants.SGEMM_WARPTILE
_SGEMM_SHAPES = {
    "naive": ((32, 32, 1), (32, 32), "mn", "one thread per output; threads of a warp walk a column (uncoalesced)"),
    "coalesced": ((32, 32, 1), (32, 32), "nm", "one thread per output; a warp walks a row (coalesced)"),
    "smem_tiled": ((32, 32, 1), (32, 32), "nm", "32x32 tiles staged in shared memory"),
    "tile_1d": ((_T1["T1_BM"] * _T1["T1_BN"] // _T1["T1_TM"], 1, 1), (_T1["T1_BM"], _T1["T1_BN"]), "nm",
                f"{_T1['T1_TM']} outputs per thread (1-D register blocking), "
                f"{_T1['T1_BM']}x{_T1['T1_BN']}x{_T1['T1_BK']} tiles"),
    "tile_2d": ((_T2["T2_NT"], 1, 1), (_T2["T2_BM"], _T2["T2_BN"]), "nm",
                f"{_T2['T2_TM']}x{_T2['T2_TN']} outputs per thread (2-D register blocking), "
                f"{_T2['T2_BM']}x{_T2['T2_BN']}x{_T2['T2_BK']} tiles"),
    "vectorized": ((_T2["T2_NT"], 1, 1), (_T2["T2_BM"], _T2["T2_BN"]), "nm",
                   "tile_2d with float4 loads/stores, A transposed in shared memory"),
    "warptile": ((_WT["WT_NT"], 1, 1), (_WT["WT_BM"], _WT["WT_BN"]), "nm",
                 f"warp tiling {_WT['WT_WM']}x{_WT['WT_WN']} per warp, "
                 f"{_WT['WT_BM']}x{_WT['WT_BN']}x{_WT['WT_BK']} tiles, double-buffered"),
}
for _v, (_block, _tile, _order, _desc) in _SGEMM_SHAPES.items():
    register(KernelSpec("sgemm", _v, "sgemm", {"float32": f"sgemm_{_v}"}, _block, _tile,
                        grid_order=_order, description=_desc))

ACTIVATIONS = constants.ACTIVATIONS


def _grid(spec: KernelSpec, m: int, n: int) -> tuple[int, int, int]:
    gm, gn = -(-m // spec.tile[0]), -(-n // spec.tile[1])
    return (gm, gn, 1) if spec.grid_order == "mn" else (gn, gm, 1)


#: int32 kernel arguments that take few values (activation codes, the vector flag), made once
_I32 = tuple(np.int32(i) for i in range(8))


def _check_pair(ai: runtime.ArrayInfo, bi: runtime.ArrayInfo, dtypes: Any, op: str
                ) -> tuple[runtime.ArrayInfo, runtime.ArrayInfo]:
    if ai.kind == bi.kind and len(ai.shape) == 2 and len(bi.shape) == 2 and ai.shape[1] == bi.shape[0] \
            and ai.dtype == bi.dtype and ai.dtype in dtypes and ai.device == bi.device >= 0:
        return ai, bi   # the per-call path: no message is built
    both = f"a is {ai.where()}, b is {bi.where()}"
    if ai.kind != bi.kind:
        raise KernelArgumentError(f"{op}: a and b must both be torch tensors or both CuPy arrays ({both})")
    if len(ai.shape) != 2 or len(bi.shape) != 2:
        raise KernelArgumentError(f"{op}: a and b must be 2-D matrices ({both})")
    if ai.shape[1] != bi.shape[0]:
        raise KernelArgumentError(f"{op}: inner dimensions differ: a has {ai.shape[1]} columns, "
                                  f"b has {bi.shape[0]} rows ({both})")
    if ai.dtype != bi.dtype or ai.dtype not in dtypes:
        hint = "; FP8 operands: gemm_fp8(a, b, scale_a, scale_b)" if ai.dtype.startswith("float8") else ""
        raise KernelArgumentError(f"{op}: a and b must share one dtype of {', '.join(dtypes)} ({both}){hint}")
    if ai.device < 0 or bi.device < 0:
        raise KernelArgumentError(f"{op}: a and b must be on a CUDA device ({both})")
    raise KernelArgumentError(f"{op}: a and b are on different devices ({both})")


def sgemm(a: Any, b: Any, variant: str = "warptile") -> Any:
    """``a @ b`` in FP32 on CUDA cores by one step of the SGEMM journey.

    ``a`` (M x K) and ``b`` (K x N): float32 torch tensors or CuPy arrays on one GPU; any sizes.
    Non-contiguous operands are copied to row-major first. Runs on the caller's current stream
    and returns a new M x N array of the same kind. Variants, slowest to fastest:
    ``naive, coalesced, smem_tiled, tile_1d, tile_2d, vectorized, warptile``. A torch call whose
    operands' shapes, strides, dtypes and devices were seen before (16-byte aligned, read as they
    are) launches through that call's cached plan.
    """
    key = None
    if type(a) in _TENSORS and type(b) in _TENSORS and type(variant) is str:
        key = ("sgemm", a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.get_device(), b.get_device(),
               None, None, variant)
        call = _calls.get(key)
        if call is not None:
            c = _call(call, key, a, b, 0, 0)
            if c is not None:
                return c
    elif not _TENSORS and type(a).__module__.startswith("torch"):
        _first_torch_call()
    if variant not in SGEMM_VARIANTS:
        raise KernelArgumentError(f"sgemm: unknown variant {variant!r}; one of {', '.join(SGEMM_VARIANTS)}")
    ai, bi = _check_pair(runtime.inspect_array(a, "a"), runtime.inspect_array(b, "b"), ("float32",), "sgemm")
    ai, bi = runtime.contiguous(ai), runtime.contiguous(bi)
    m, k = ai.shape
    n = bi.shape[1]
    c, cptr = runtime.new_output(ai, (m, n), "float32")
    if m == 0 or n == 0:
        return c
    kern, grid, block, smem, name, flops, nbytes, tail = _plan("sgemm", variant, "float32", m, n, k, ai.device)
    vec = ai.ptr % 16 == 0 and bi.ptr % 16 == 0 and cptr % 16 == 0 and k % 4 == 0 and n % 4 == 0
    args = (ai.ptr, bi.ptr, cptr, *tail, _I32[vec])
    runtime.launch(kern, ai, grid, block, args)
    work = registry.record(name, flops, nbytes, m=m, n=n, k=k, dtype=ai.dtype)
    if key is not None and ai.obj is a and bi.obj is b and not (ai.ptr | bi.ptr) & 15:
        _remember(key, ("sgemm", runtime.prepare(kern, ai.device, grid, block, args), work, tail,
                        k % 4 == 0 and n % 4 == 0, (m, n), (m, n) == ai.shape))
    return c


_plans: dict[tuple, tuple] = {}


def _plan(op: str, variant: str, dtype: str, m: int, n: int, k: int, device: int) -> tuple:
    """The launch plan of one (op, variant, dtype, shape, device), worked out once: (kernel, grid,
    block, dynamic shared memory, kernel name, FLOPs, compulsory bytes, (M, N, K) as int32)."""
    key = (op, variant, dtype, m, n, k, device)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) > 4096:   # many shapes: start over rather than grow without bound
            _plans.clear()
        spec = registry.SPECS[(op, variant)]
        name = spec.entries[dtype]
        kern = runtime.get_kernel(spec.family_for(dtype), name, device)
        smem = spec.smem_for(dtype)
        runtime.set_dynamic_smem(kern, smem, device)
        w = registry.gemm_work(m, n, k, dtype, "int32" if dtype == "int8" else dtype)
        plan = _plans[key] = (kern, _grid(spec, m, n), spec.block, smem, name, w["flops"], w["dram_bytes"],
                              (np.int32(m), np.int32(n), np.int32(k)))
    return plan


# --- the per-call path of a torch call whose signature was seen before ----------------------------
# A call's signature (shape, strides, dtype and device of each operand; the options) keys a call
# plan made by the first call through the full path (its checks passed, its operands were read as
# they are, a and b were 16-byte aligned): the prepared launch, its declared work and its scalar
# arguments. A later call with that signature reads the pointers, allocates the output and
# launches: no ArrayInfo, no checks or planning beyond the key. Operands at addresses that are not
# 16-byte aligned take the full path (its vectorisation and TMA choices depend on them).
_TENSORS: tuple[type, ...] = ()      # torch.Tensor and torch.nn.Parameter once torch was imported
_MAX_CALLS = 1024                     # call plans kept (least recently used dropped)
_calls: OrderedDict[tuple, tuple] = OrderedDict()


_empty_like: Any = None              # torch.empty_like
_launch_wgmma: Any = None            # gemm_wgmma.launch_plan, once a wgmma call plan was made


def _first_torch_call() -> None:
    """Set the torch names the per-call path uses (torch is optional: imported by the caller)."""
    global _TENSORS, _empty_like
    torch = sys.modules["torch"]
    _TENSORS, _empty_like = (torch.Tensor, torch.nn.Parameter), torch.empty_like


def _remember(key: tuple, call: tuple) -> None:
    if len(_calls) >= _MAX_CALLS:
        _calls.popitem(last=False)
    _calls[key] = call


def _call(call: tuple, key: tuple, a: Any, b: Any, pbias: int, pres: int) -> Any:
    """The result of a call through its call plan, or None (the full path) for unaligned operands."""
    pa, pb = a.data_ptr(), b.data_ptr()
    if (pa | pb) & 15:
        return None
    try:
        _calls.move_to_end(key)
    except KeyError:   # dropped by another thread meanwhile: it stays valid for this call
        pass
    kind, prep, work, tail, vec, shape, like_a = call
    c = _empty_like(a) if like_a else a.new_empty(shape)
    pc = c.data_ptr()
    dev = key[7]
    if kind == "wgmma":
        _launch_wgmma(prep, "torch", dev, pa, pb, pc, pbias, pres)
    elif kind == "mma":
        runtime.launch_prepared(prep, "torch", dev, (pa, pb, pc, pbias, pres, *tail))
    else:   # sgemm: the float4 path needs c aligned too
        runtime.launch_prepared(prep, "torch", dev, (pa, pb, pc, *tail, _I32[vec and not pc & 15]))
    registry.record_work(work)
    return c


def _sig(x: Any) -> tuple | None:
    """An optional operand's part of a call plan's key; False where it rules a call plan out."""
    if x is None:
        return None
    if type(x) not in _TENSORS:
        return False
    return (x.shape, x.stride(), x.dtype, x.get_device())


# --- Tensor Core GEMMs -----------------------------------------------------------------------
_TC = constants.TC
_TC_TILE = (_TC["TC_BM"], _TC["TC_BN"])
register(KernelSpec("gemm", "wmma", "gemm_wmma", {"float16": "gemm_wmma_f16", "bfloat16": "gemm_wmma_bf16"},
                    (_TC["TC_NT"], 1, 1), _TC_TILE, min_arch=80,
                    description=f"WMMA 16x16x16 fragments, {_TC['TC_BM']}x{_TC['TC_BN']}x{_TC['TC_BK']} tiles, 8 warps of 64x32, 2-stage cp.async"))
register(KernelSpec("gemm", "mma", "gemm_mma",
                    {"float16": "gemm_mma_f16", "bfloat16": "gemm_mma_bf16", "int8": "gemm_mma_s8"},
                    (_TC["TC_NT"], 1, 1), _TC_TILE, smem=_TC["TC_STAGES"] * constants.TC_STAGE_BYTES,
                    min_arch=80, family_by_dtype={"int8": "gemm_int8"},
                    smem_by_dtype={"int8": _TC["TC_STAGES"] * constants.I8_STAGE_BYTES},
                    description=f"mma.sync m16n8k16 (INT8: m16n8k32) with ldmatrix, {_TC['TC_BM']}x{_TC['TC_BN']}x"
                                f"{_TC['TC_BK']} tiles, {_TC['TC_STAGES']}-stage cp.async pipeline"))
GEMM_VARIANTS = ("wmma", "mma", "wgmma")   # "wgmma" runs on sm_90 (H100/H200) only


_auto_cache: dict[tuple, str] = {}


def _auto(ai: runtime.ArrayInfo, bi: runtime.ArrayInfo) -> str:
    """The dispatch table's variant for the operands' device and dtype (cached per pair); "mma"
    where the table has none or the operands are not two matrices on a GPU (its checks name why)."""
    key = (ai.device, ai.dtype)
    v = _auto_cache.get(key)
    if v is None:
        if ai.device < 0 or len(ai.shape) != 2 or len(bi.shape) != 2:
            return "mma"
        from hookmagic.kernels import dispatch
        try:
            v = dispatch.choose("gemm", runtime.device_arch(ai.device), ai.dtype, (ai.shape, bi.shape)).variant
        except KernelArgumentError:
            v = "mma"   # an unsupported dtype: the operand checks name it
        _auto_cache[key] = v
    return v


def _check_vector(x: Any, name: str, ref: runtime.ArrayInfo, shape: tuple[int, ...]) -> runtime.ArrayInfo:
    xi = runtime.inspect_array(x, name)
    if xi.kind != ref.kind or xi.device != ref.device or xi.dtype != ref.dtype:
        raise KernelArgumentError(f"gemm: {name} must be a {ref.kind} {ref.dtype} array on the device of a "
                                  f"({name} is {xi.where()}, a is {ref.where()})")
    if xi.shape != shape:
        raise KernelArgumentError(f"gemm: {name} must have shape {list(shape)} ({name} is {xi.where()}, a is {ref.where()})")
    return runtime.contiguous(xi)


def gemm(a: Any, b: Any, bias: Any = None, activation: str | None = None, residual: Any = None,
         variant: str = "auto", schedule: str = "tiles") -> Any:
    """``activation(a @ b + bias) + residual`` on Tensor Cores.

    - FP16 / BF16 ``a`` (M x K) and ``b`` (K x N) accumulate in FP32 and return the input dtype;
      ``bias`` (N,) and ``residual`` (M x N) are optional and of the same dtype; ``activation``
      is None, ``'relu'``, ``'gelu'`` (erf, torch's default) or ``'gelu_tanh'``.
    - INT8 ``a`` and ``b`` accumulate in INT32 and return int32 (like ``torch._int_mm``); no
      epilogue. ``b`` is fastest column-major (``b = bt.t()`` of a contiguous N x K ``bt``);
      a row-major ``b`` is transposed by a copy first.
    ``variant='auto'`` (the default) runs what :mod:`hookmagic.kernels.dispatch` picks for the
    device's architecture and the dtype (``kernels.explain('gemm', a.shape, b.shape,
    dtype=..., arch=...)`` says what and why: wgmma for FP16/BF16 GEMMs on sm_90, mma
    elsewhere). Variants: ``'mma'`` (mma.sync + ldmatrix + 3-stage cp.async, all dtypes), ``'wmma'``
    (FP16/BF16) and ``'wgmma'`` (FP16/BF16 on sm_90 only: wgmma + TMA, see
    :mod:`hookmagic.kernels.gemm_wgmma`; a column-major ``b`` is read without a copy). Operands of
    any size; non-contiguous ones are copied first. Runs on the caller's current stream; returns
    a new array of the operands' kind. ``schedule`` is wgmma's tile schedule
    (:data:`hookmagic.kernels.gemm_wgmma.SCHEDULES`). A torch call whose operands' shapes, strides,
    dtypes and devices and whose options were seen before (a and b 16-byte aligned and read as they
    are) launches through that call's cached plan: no checks or planning beyond that key.
    """
    key = None
    if type(a) in _TENSORS and type(b) in _TENSORS and type(variant) is str and type(schedule) is str \
            and (activation is None or type(activation) is str):
        sb, sr = _sig(bias), _sig(residual)
        if sb is not False and sr is not False:
            key = ("gemm", a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.get_device(),
                   b.get_device(), sb, sr, variant, activation, schedule)
            call = _calls.get(key)
            if call is not None:
                c = _call(call, key, a, b, bias.data_ptr() if bias is not None else 0,
                          residual.data_ptr() if residual is not None else 0)
                if c is not None:
                    return c
    elif not _TENSORS and type(a).__module__.startswith("torch"):
        _first_torch_call()
    ai, bi = runtime.inspect_array(a, "a"), runtime.inspect_array(b, "b")
    if variant == "auto":
        variant = _auto(ai, bi)
    if variant not in GEMM_VARIANTS:
        raise KernelArgumentError(f"gemm: unknown variant {variant!r}; one of auto, {', '.join(GEMM_VARIANTS)}")
    if activation not in ACTIVATIONS:
        raise KernelArgumentError(f"gemm: activation {activation!r} is not one of None, 'relu', 'gelu', 'gelu_tanh'")
    spec = registry.SPECS[("gemm", variant)]
    ai, bi = _check_pair(ai, bi, spec.entries, f"gemm(variant={variant!r})")
    m, k = ai.shape
    n = bi.shape[1]
    int8 = ai.dtype == "int8"
    if int8 and (bias is not None or residual is not None or ACTIVATIONS[activation]):
        raise KernelArgumentError("gemm: INT8 GEMM has no epilogue (bias, activation, residual); apply them to the int32 result")
    ai = runtime.contiguous(ai)
    if variant == "wgmma" and k == 0:   # no TMA map of an empty operand: the epilogue of a zero product
        spec = registry.SPECS[("gemm", "mma")]
    elif variant == "wgmma":
        bias_i = _check_vector(bias, "bias", ai, (n,)) if bias is not None else None
        res_i = _check_vector(residual, "residual", ai, (m, n)) if residual is not None else None
        from hookmagic.kernels import gemm_wgmma
        c, plan = gemm_wgmma.run(ai, bi, bias_i, res_i, ACTIVATIONS[activation], schedule)
        if key is not None and plan is not None and ai.obj is a and _same(bias_i, bias) and _same(res_i, residual):
            global _launch_wgmma
            _launch_wgmma = gemm_wgmma.launch_plan
            _remember(key, ("wgmma", plan, plan.work, (), 0, (m, n), (m, n) == ai.shape))
        return c
    if int8:
        # the kernel reads B transposed (N x K, K-contiguous): a column-major b is used as it is
        bt = b.t() if ai.kind == "torch" else b.T
        bi = runtime.contiguous(runtime.inspect_array(bt, "b"))
    else:
        bi = runtime.contiguous(bi)
    bias_i = _check_vector(bias, "bias", ai, (n,)) if bias is not None else None
    res_i = _check_vector(residual, "residual", ai, (m, n)) if residual is not None else None
    c, cptr = runtime.new_output(ai, (m, n), "int32" if int8 else ai.dtype)
    if m == 0 or n == 0:
        return c
    kern, grid, block, smem, name, flops, nbytes, mnk = _plan("gemm", spec.variant, ai.dtype, m, n, k, ai.device)
    if int8:
        vec = ai.ptr % 16 == 0 and bi.ptr % 16 == 0 and k % 16 == 0
        args = (ai.ptr, bi.ptr, cptr, *mnk, _I32[vec])
    else:
        vec = ai.ptr % 16 == 0 and bi.ptr % 16 == 0 and k % 8 == 0 and n % 8 == 0
        args = (ai.ptr, bi.ptr, cptr, bias_i.ptr if bias_i else 0, res_i.ptr if res_i else 0,
                *mnk, _I32[ACTIVATIONS[activation]], _I32[vec])
    runtime.launch(kern, ai, grid, block, args, smem=smem)
    extra = (n if bias_i else 0) * registry.ITEMSIZE[ai.dtype] + (m * n if res_i else 0) * registry.ITEMSIZE[ai.dtype]
    work = registry.record(name, flops, nbytes + extra, m=m, n=n, k=k, dtype=ai.dtype)
    if key is not None and not int8 and not (ai.ptr | bi.ptr) & 15 and ai.obj is a and bi.obj is b \
            and _same(bias_i, bias) and _same(res_i, residual):
        _remember(key, ("mma", runtime.prepare(kern, ai.device, grid, block, args, smem), work, args[5:], 1,
                        (m, n), (m, n) == ai.shape))
    return c


def _same(info: runtime.ArrayInfo | None, x: Any) -> bool:
    """Whether an optional operand was read as it is (not copied)."""
    return info is None or info.obj is x


# --- FP8 (Hopper) ----------------------------------------------------------------------------
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
_fp8_schedule: list[str] = []


def _check_scale(x: Any, name: str, ref: runtime.ArrayInfo) -> int:
    """The device address of the FP32 scalar ``x`` (a one-element tensor on a's device)."""
    xi = runtime.inspect_array(x, name)
    if xi.kind == "torch" and xi.dtype == "float32" and xi.device == ref.device and xi.obj.numel() == 1:
        return xi.ptr
    raise KernelArgumentError(f"gemm_fp8: {name} must be a float32 tensor of one element on the device of a, "
                              f"as torch._scaled_mm takes it ({name} is {xi.where()}, a is {ref.where()})")


def gemm_fp8(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any = "bfloat16", bias: Any = None,
             schedule: str = "auto") -> Any:
    """``(scale_a * scale_b) * (a @ b) + bias`` from FP8 operands on Hopper Tensor Cores.

    What ``torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)`` computes with
    per-tensor scales, and with its argument conventions:

    - ``a`` (M x K) row-major and ``b`` (K x N) column-major (``b = bt.t()`` of a contiguous N x K
      ``bt``): torch tensors of ``torch.float8_e4m3fn`` or ``torch.float8_e5m2``, any combination.
      FP8 wgmma reads both operands K-major, so these layouts are read as they are; other layouts
      are refused (naming the fix) rather than copied behind the caller's back.
    - K a multiple of 16 (TMA reads rows whose byte stride is a multiple of 16) and 16-byte aligned
      operand addresses; M and N are free (edge tiles are zero-filled and stores guarded).
    - ``scale_a``, ``scale_b``: float32 tensors of one element on the operands' device (read by the
      kernel, so they may be produced on the GPU without a synchronisation).
    - ``out_dtype``: ``torch.bfloat16`` / ``'bfloat16'`` (the default) or ``torch.float16`` /
      ``'float16'``; ``bias`` (N,) of ``out_dtype`` or None. The products accumulate in the Tensor
      Cores' FP32 accumulators (what ``torch._scaled_mm(..., use_fast_accum=True)`` does), are
      scaled in FP32, the bias added, and rounded once to ``out_dtype``.

    Runs on sm_90 (H100, H200, GH200) only: FP8 wgmma and TMA are sm_90a instructions
    (:class:`KernelsUnavailable` elsewhere, naming torch._scaled_mm for Ada and Blackwell). A separate
    function rather than a dtype of :func:`gemm`: the scales are required, the two operands may
    differ in dtype and the output dtype is chosen, none of which :func:`gemm`'s one-dtype
    signature says. ``schedule``: ``'auto'`` (the dispatch table's pick for FP8,
    ``kernels.explain('gemm_fp8', a.shape, b.shape, dtype='float8_e4m3fn')`` says which and why),
    ``'tiles'`` or ``'persistent4'`` (:data:`hookmagic.kernels.gemm_wgmma.FP8_SCHEDULES`). Runs on the
    caller's current stream; returns a new M x N tensor.
    """
    ai, bi = runtime.inspect_array(a, "a"), runtime.inspect_array(b, "b")
    both = f"a is {ai.where()}, b is {bi.where()}"
    if ai.kind != "torch" or bi.kind != "torch":
        raise KernelArgumentError(f"gemm_fp8: a and b must be torch tensors (CuPy has no FP8 dtypes; {both})")
    if len(ai.shape) != 2 or len(bi.shape) != 2 or ai.shape[1] != bi.shape[0]:
        raise KernelArgumentError(f"gemm_fp8: a (M x K) and b (K x N) must be matrices with a's columns equal "
                                  f"to b's rows ({both})")
    if ai.dtype not in FP8_DTYPES or bi.dtype not in FP8_DTYPES:
        raise KernelArgumentError(f"gemm_fp8: a and b must be torch.float8_e4m3fn or torch.float8_e5m2 ({both}); "
                                  "FP16/BF16/INT8 operands: gemm(a, b)")
    if ai.device < 0 or ai.device != bi.device:
        raise KernelArgumentError(f"gemm_fp8: a and b must be on one CUDA device ({both})")
    out = str(out_dtype).removeprefix("torch.")
    if out not in ("bfloat16", "float16"):
        raise KernelArgumentError(f"gemm_fp8: out_dtype must be torch.bfloat16 or torch.float16, not {out_dtype!r}")
    m, k = ai.shape
    n = bi.shape[1]
    if not ai.contiguous:
        raise KernelArgumentError(f"gemm_fp8: a must be row-major (M x K contiguous, strides {list(ai.strides)}): "
                                  "pass a.contiguous()")
    bti = runtime.inspect_array(bi.obj.t(), "b")
    if not bti.contiguous:
        raise KernelArgumentError(f"gemm_fp8: b must be column-major (b = bt.t() of a contiguous N x K bt, as "
                                  f"torch._scaled_mm takes it; b has strides {list(bi.strides)}): pass "
                                  "b.t().contiguous().t()")
    if k % 16:
        raise KernelArgumentError(f"gemm_fp8: K (a's columns) must be a multiple of 16, not {k}: TMA reads rows "
                                  "whose byte stride is a multiple of 16 (torch._scaled_mm asks the same); "
                                  "pad K with zeros")
    if ai.ptr % 16 or bti.ptr % 16:
        raise KernelArgumentError(f"gemm_fp8: a and b must start at 16-byte aligned addresses (a at {ai.ptr:#x}, "
                                  f"b at {bti.ptr:#x}): pass a copy")
    sa, sb = _check_scale(scale_a, "scale_a", ai), _check_scale(scale_b, "scale_b", ai)
    bias_i = None
    if bias is not None:
        bias_i = runtime.inspect_array(bias, "bias")
        if bias_i.kind != "torch" or bias_i.dtype != out or bias_i.device != ai.device or bias_i.shape != (n,):
            raise KernelArgumentError(f"gemm_fp8: bias must be a {out} tensor of shape [{n}] on the device of a "
                                      f"(bias is {bias_i.where()}, a is {ai.where()})")
        bias_i = runtime.contiguous(bias_i)
    if schedule == "auto":
        if not _fp8_schedule:
            from hookmagic.kernels import dispatch
            _fp8_schedule.append(dispatch.choose("gemm_fp8", "sm_90", FP8_DTYPES[0], ((m, k), (k, n))).schedule)
        schedule = _fp8_schedule[0]
    from hookmagic.kernels.gemm_wgmma import check_device, gemm_fp8_wgmma
    if k == 0:   # no TMA map of an empty operand: the product is zero
        check_device(ai.device, "gemm_fp8")
        c = runtime.new_output(ai, (m, n), out)[0].zero_()
        return c + bias_i.obj if bias_i else c
    return gemm_fp8_wgmma(ai, bti, sa, sb, out, bias_i, schedule)
