"""Fused attention forward (flash-style): ``softmax(scale * q @ k^T [causal]) @ v`` without a score matrix.

    o = kernels.attention(q, k, v)                     # (batch, heads, seq, d), like F.scaled_dot_product_attention
    o = kernels.attention(q, k, v, causal=True)        # top-left causal mask, as torch's is_causal
    o = kernels.attention(q, k, v, offsets=cu_seqlens) # packed (tokens, heads, d), variable lengths

FP16 or BF16, head dimension 64 or 128, FP32 accumulation and softmax statistics, online softmax
in base 2. Two kernels: ``"wgmma"`` (sm_90a: wgmma + TMA, a producer warpgroup and two consumer
warpgroups, FlashAttention-3's scheme; ``kernels/attention_wgmma.cu``) and ``"mma"`` (sm_80+:
mma.sync + cp.async, FlashAttention-2's scheme; ``kernels/attention.cu``). ``variant="auto"`` takes
the wgmma kernel on sm_90 for fixed-length batches and the mma kernel for everything else
(:func:`explain` says which and why).
"""
from __future__ import annotations

import ctypes
import math
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from hookmagic.kernels import registry, runtime, tma
from hookmagic.kernels.build import arch_number, normalize_arch
from hookmagic.kernels.errors import KernelArgumentError, KernelsUnavailable
from hookmagic.kernels.registry import ITEMSIZE, KernelSpec, register

HEAD_DIMS = (64, 128)
_DTYPES = ("float16", "bfloat16")
_SUFFIX = {"float16": "f16", "bfloat16": "bf16"}

BLOCK_M = (64, 128)
for _d in HEAD_DIMS:
    for _bm in BLOCK_M:
        _tag = "" if _bm == 64 else f"_m{_bm}"
        register(KernelSpec("attention", f"flash_d{_d}{_tag}", "attention",
                            {dt: f"attention_{s}_d{_d}{_tag}" for dt, s in _SUFFIX.items()}, (2 * _bm, 1, 1),
                            (_bm, _d), smem=2 * 64 * (_d + 8) * 2, min_arch=80,
                            description=f"flash attention forward, head dim {_d}: {_bm} query rows per block "
                                        f"({_bm // 16} warps), K/V tiles of 64 via cp.async, mma.sync m16n8k16, "
                                        "online softmax"))


#: the Hopper kernel (kernels/attention_wgmma.cu): 128 query rows per block, K/V tiles of 128 keys in
#: two rings of 2 stages, 384 threads (producer + 2 consumer warpgroups)
WG_BM, WG_BN, WG_STAGES, WG_THREADS = 128, 128, 2, 384


def wgmma_smem(d: int) -> int:
    """Dynamic shared memory of the wgmma kernel for head dimension ``d``: 1 KiB alignment slack,
    the Q tile, two rings of K and V tiles, 1 + 4 * stages mbarriers."""
    return 1024 + WG_BM * d * 2 + 2 * WG_STAGES * WG_BN * d * 2 + 8 * (1 + 4 * WG_STAGES)


def _wgmma_name(dtype: str, d: int, schedule: str) -> str:
    """The wgmma kernel's entry point for ``dtype``, head dimension ``d`` and ``schedule``."""
    return f"attention_wgmma_{_SUFFIX[dtype]}_d{d}" + ("_pp" if schedule == "pingpong" else "")


#: the wgmma kernel's schedules (``attention(..., schedule=)``): "overlap" issues each consumer's next
#: Q K^T before its softmax; "pingpong" also makes the two consumer warpgroups take turns issuing
#: wgmmas (entry points ``..._pp``). The default, "pingpong", ran every shape of
#: HOPPER_ATTENTION_RESULTS 1.10-1.18x faster than "overlap" on an H200.
SCHEDULES = ("pingpong", "overlap")
DEFAULT_SCHEDULE = "pingpong"

for _d in HEAD_DIMS:
    register(KernelSpec("attention", f"wgmma_d{_d}", "attention_wgmma",
                        {dt: _wgmma_name(dt, _d, DEFAULT_SCHEDULE) for dt in _SUFFIX}, (WG_THREADS, 1, 1),
                        (WG_BM, _d), smem=wgmma_smem(_d), arch_specific=True, min_arch=90,
                        description=f"Hopper (sm_90a only) attention forward, head dim {_d}: {WG_BM} query rows "
                                    f"per block, K/V tiles of {WG_BN} by TMA into {WG_STAGES}-stage mbarrier rings, "
                                    "producer + 2 consumer warpgroups taking turns (schedule='pingpong'; "
                                    "'overlap': entry points without _pp), wgmma m64n128k16 for Q K^T and P V "
                                    "(P from registers), next tile's Q K^T issued before the softmax"))

#: the choices of ``attention(..., variant=)``
VARIANTS = ("auto", "wgmma", "mma")
#: the measurement behind the Hopper pick (kernel time, same-run torch SDPA flash backend)
HOPPER_ATTENTION_RESULTS = "benchmarks/results/kernels-attention-h200.md"
_WHY_WGMMA = ("wgmma and TMA exist on sm_90a only; on an H200 (kernel time, 3 processes) the wgmma kernel ran "
              "every measured shape (batch 4, 16 heads, seq 1024 and 4096, d 64 and 128, causal and not, FP16 and "
              "BF16) 1.57-2.56x faster than the mma kernel: 104-155 % of torch SDPA's flash backend, 149-151 % at "
              f"seq 4096, d 128 ({HOPPER_ATTENTION_RESULTS})")
_WHY_MMA = ("mma.sync + cp.async (FlashAttention-2's scheme) is the library's attention kernel before Hopper "
            "(wgmma exists on sm_90a only)")


def _choose(arch: str, varlen: bool, seq_k: int) -> tuple[str, str]:
    """(variant, why) of ``variant="auto"`` on ``arch`` for fixed-length or packed operands."""
    if arch_number(arch) != 90:
        return "mma", _WHY_MMA
    if varlen:
        return "mma", ("packed variable-length calls (offsets) run the mma kernel: the wgmma kernel's TMA "
                       "tensor maps describe fixed-length (batch, heads, seq, d) operands")
    if seq_k == 0:
        return "mma", "no keys: a TMA tensor map cannot describe an empty operand (the mma kernel writes zeros)"
    return "wgmma", _WHY_WGMMA


def explain_attention(shapes: tuple[tuple[int, ...], ...], dtype: str, arch: str) -> str:
    """In words: the kernel ``attention`` runs for q and k of ``shapes`` (4-D fixed-length, or 3-D packed
    with offsets) on ``arch``, and why."""
    if len(shapes) != 2 or len(shapes[0]) != len(shapes[1]) or len(shapes[0]) not in (3, 4):
        raise KernelArgumentError("attention: give the shapes of q and k, (batch, heads, seq, d) each, or "
                                  f"(tokens, heads, d) for packed variable-length operands; got {shapes}")
    if dtype not in _DTYPES:
        raise KernelArgumentError(f"attention: no kernel for {dtype} (float16 or bfloat16)")
    d = shapes[0][-1]
    if d not in HEAD_DIMS:
        raise KernelArgumentError(f"attention: no kernel for head dimension {d} (one of {HEAD_DIMS})")
    arch = normalize_arch(arch)
    if arch_number(arch) < 80:
        raise KernelArgumentError(f"attention: no kernel for {arch} (sm_80 and later)")
    varlen = len(shapes[0]) == 3
    variant, why = _choose(arch, varlen, 1 if varlen else shapes[1][2])
    if variant == "wgmma":
        kernel = (f"{_wgmma_name(dtype, d, DEFAULT_SCHEDULE)}, schedule={DEFAULT_SCHEDULE!r}: {WG_BM} query rows a "
                  "block, producer + 2 consumer warpgroups taking turns, wgmma + TMA")
        other = "variant='mma'"
    else:
        kernel = f"attention_{_SUFFIX[dtype]}_d{d}[_m128]: block_m 64 or 128 query rows, mma.sync + cp.async"
        hopper_ok = arch_number(arch) == 90 and not varlen and shapes[1][2] > 0
        other = "variant='wgmma' (sm_90, fixed length)" if hopper_ok else "block_m="
    return (f"attention q {shapes[0]} k {shapes[1]} {dtype} on {arch}: variant={variant!r} ({kernel}). "
            f"Why: {why}. Override with {other}.")


def _strides_ok(i: runtime.ArrayInfo) -> bool:
    return i.strides[-1] == 1 and i.ptr % 16 == 0 and all(s % 8 == 0 for s in i.strides[:-1])


def _offsets(x: Any, name: str, ref: runtime.ArrayInfo, total: int, op: str) -> tuple[runtime.ArrayInfo, list[int]]:
    oi = runtime.inspect_array(x, name)
    if oi.dtype not in ("int32", "int64") or len(oi.shape) != 1 or oi.shape[0] < 2:
        raise KernelArgumentError(f"{op}: {name} must be int32 cumulative sequence starts of shape (batch + 1,), "
                                  f"got {oi.where()}")
    if oi.kind != ref.kind or oi.device != ref.device:
        raise KernelArgumentError(f"{op}: {name} must be on the device of q; {name} is {oi.where()}, q is {ref.where()}")
    values = [int(v) for v in oi.obj.tolist()]   # one synchronising read: the grid needs the longest sequence
    if values[0] != 0 or any(b < a for a, b in zip(values, values[1:])) or values[-1] > total:
        raise KernelArgumentError(f"{op}: {name} must start at 0, not decrease and end at most at {total} tokens, "
                                  f"got {values[:8]}{'...' if len(values) > 8 else ''}")
    if oi.dtype != "int32":
        obj = oi.obj.to(dtype=__import__("torch").int32) if oi.kind == "torch" else oi.obj.astype("int32")
        oi = runtime.inspect_array(obj, name)
    return runtime.contiguous(oi), values


def attention(q: Any, k: Any, v: Any, causal: bool = False, scale: float | None = None, *,
              offsets: Any = None, kv_offsets: Any = None, block_m: int = 64, variant: str = "auto",
              schedule: str = DEFAULT_SCHEDULE) -> Any:
    """Attention forward, equal to ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale)`` within FlashAttention's error (FP32 statistics).

    Fixed length: ``q`` ``(batch, heads, seq_q, d)``, ``k``/``v`` ``(batch, heads, seq_k, d)``.
    Variable length (packed, FlashAttention's ``varlen``): ``q`` ``(tokens_q, heads, d)``,
    ``k``/``v`` ``(tokens_k, heads, d)`` and ``offsets`` int32 ``(batch + 1,)`` cumulative starts
    (sequence ``i`` is rows ``offsets[i]:offsets[i+1]``); ``kv_offsets`` for keys when they differ.
    float16 or bfloat16, ``d`` 64 or 128; ``scale`` defaults to ``1/sqrt(d)``. The causal mask is
    top-left aligned (query ``i`` sees keys ``j <= i``). A query with no keys gives zeros.
    ``variant``: ``"auto"`` (the wgmma kernel on sm_90 for fixed-length operands, else the mma
    kernel: :func:`hookmagic.kernels.explain` says which and why), ``"wgmma"`` (sm_90 only, fixed
    length) or ``"mma"``. ``schedule`` (wgmma kernel only): ``"pingpong"`` (default) or
    ``"overlap"`` (:data:`SCHEDULES`). ``block_m`` (mma kernel only): query rows per block, 64
    (4 warps) or 128 (8 warps: half the K/V traffic). Returns a new array shaped like ``q``.
    """
    op = "attention"
    qi, ki, vi = (runtime.inspect_array(a, n) for a, n in ((q, "q"), (k, "k"), (v, "v")))
    for i in (qi, ki, vi):
        if i.dtype not in _DTYPES:
            raise KernelArgumentError(f"{op}: q, k and v must be float16 or bfloat16, got {i.name} {i.where()}")
    if ki.dtype != qi.dtype or vi.dtype != qi.dtype:
        raise KernelArgumentError(f"{op}: q, k and v must share one dtype; q is {qi.where()}, k is {ki.where()}, "
                                  f"v is {vi.where()}")
    varlen = offsets is not None
    nd = 3 if varlen else 4
    want = "(tokens, heads, d) with offsets" if varlen else "(batch, heads, seq, d)"
    for i in (qi, ki, vi):
        if len(i.shape) != nd:
            raise KernelArgumentError(f"{op}: {i.name} must have shape {want}, got {i.where()}")
    d = qi.shape[-1]
    if d not in HEAD_DIMS:
        raise KernelArgumentError(f"{op}: head dimension must be one of {HEAD_DIMS}, got q {qi.where()}")
    if ki.shape != vi.shape or ki.shape[-1] != d or ki.shape[-2 if varlen else 1] != qi.shape[-2 if varlen else 1] \
            or (not varlen and ki.shape[0] != qi.shape[0]):
        raise KernelArgumentError(f"{op}: k and v must match q's batch, heads and head dimension and each other; "
                                  f"q is {qi.where()}, k is {ki.where()}, v is {vi.where()}")
    if variant not in VARIANTS:
        raise KernelArgumentError(f"{op}: variant must be one of {VARIANTS}, got {variant!r}")
    if schedule not in SCHEDULES:
        raise KernelArgumentError(f"{op}: schedule must be one of {SCHEDULES}, got {schedule!r}")
    if block_m not in BLOCK_M:
        raise KernelArgumentError(f"{op}: block_m must be one of {BLOCK_M}, got {block_m!r}")
    if kv_offsets is not None and not varlen:
        raise KernelArgumentError(f"{op}: kv_offsets needs offsets (packed variable-length q, k, v)")
    for i in (qi, ki, vi):
        if i.device < 0:
            raise KernelArgumentError(f"{op}: {i.name} must be on a CUDA device, got {i.where()}")
        if i.kind != qi.kind or i.device != qi.device:
            raise KernelArgumentError(f"{op}: q, k and v must be the same kind of array on one device; "
                                      f"q is {qi.where()}, {i.name} is {i.where()}")
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if not math.isfinite(sc):
        raise KernelArgumentError(f"{op}: scale must be finite, got {scale!r}")
    qi, ki, vi = (i if _strides_ok(i) else runtime.contiguous(runtime.inspect_array(
        i.obj.contiguous() if i.kind == "torch" else __import__("cupy").ascontiguousarray(i.obj), i.name))
        for i in (qi, ki, vi))
    out = runtime.empty_like_kind(qi, qi.shape, qi.dtype)
    oi = runtime.inspect_array(out, "out")
    if varlen:
        qo, qv = _offsets(offsets, "offsets", qi, qi.shape[0], op)
        ko, kv = (qo, qv) if kv_offsets is None else _offsets(kv_offsets, "kv_offsets", qi, ki.shape[0], op)
        if len(kv) != len(qv):
            raise KernelArgumentError(f"{op}: offsets and kv_offsets must describe the same number of sequences, "
                                      f"got {len(qv) - 1} and {len(kv) - 1}")
        batch, heads = len(qv) - 1, qi.shape[1]
        q_lens = [b - a for a, b in zip(qv, qv[1:])]
        k_lens = [b - a for a, b in zip(kv, kv[1:])]
        max_q = max(q_lens)
        strides = [(0, i.strides[1], i.strides[0]) for i in (qi, ki, vi, oi)]
        off_ptrs, lens = (qo.ptr, ko.ptr), (0, 0)
    else:
        batch, heads, max_q, sk = qi.shape[0], qi.shape[1], qi.shape[2], ki.shape[2]
        q_lens, k_lens = [max_q] * batch, [sk] * batch
        strides = [(i.strides[0], i.strides[1], i.strides[2]) for i in (qi, ki, vi, oi)]
        off_ptrs, lens = (0, 0), (max_q, sk)
    if int(np.prod(qi.shape)) == 0 or max_q == 0:
        return out
    if heads > 65535 or batch > 65535:
        raise KernelArgumentError(f"{op}: at most 65535 heads and 65535 sequences, got q {qi.where()}")
    if variant == "auto":
        variant = _auto(qi.device, varlen, lens[1])
    elif variant == "wgmma" and (varlen or lens[1] == 0):
        raise KernelArgumentError(f"{op}: variant='wgmma' takes fixed-length operands with at least one key; "
                                  "use variant='mma' for offsets or an empty key sequence")
    pairs = sum(_pairs(a, b, bool(causal)) for a, b in zip(q_lens, k_lens)) * heads
    nbytes = heads * d * ITEMSIZE[qi.dtype] * (2 * sum(q_lens) + 2 * sum(k_lens))
    if variant == "wgmma":
        name = _launch_wgmma(qi, ki, vi, oi, sc, bool(causal), schedule)
        registry.record(name, 4 * pairs * d, nbytes, batch=batch, heads=heads, max_seq_q=max_q, head_dim=d,
                        causal=bool(causal), dtype=qi.dtype)
        return out
    name = f"attention_{_SUFFIX[qi.dtype]}_d{d}" + ("" if block_m == 64 else f"_m{block_m}")
    kern = runtime.get_kernel("attention", name, qi.device)
    smem = 2 * 64 * (d + 8) * ITEMSIZE[qi.dtype]
    runtime.set_dynamic_smem(kern, smem, qi.device)
    grid = (-(-max_q // block_m), heads, batch)
    args = (qi.ptr, ki.ptr, vi.ptr, oi.ptr, *(np.int64(s) for st in strides for s in st), off_ptrs[0], off_ptrs[1],
            np.int32(lens[0]), np.int32(lens[1]), np.float32(sc * math.log2(math.e)), np.int32(bool(causal)))
    runtime.launch(kern, qi, grid, (2 * block_m, 1, 1), args, smem=smem)
    registry.record(name, 4 * pairs * d, nbytes, batch=batch, heads=heads, max_seq_q=max_q, head_dim=d,
                    causal=bool(causal), dtype=qi.dtype)
    return out


_arch_of: dict[int, str] = {}


def _auto(ordinal: int, varlen: bool, seq_k: int) -> str:
    arch = _arch_of.get(ordinal)
    if arch is None:
        arch = _arch_of[ordinal] = runtime.device_arch(ordinal)
    return _choose(arch, varlen, seq_k)[0]


_maps_lock = threading.Lock()
_maps: OrderedDict[tuple, Any] = OrderedDict()
_MAX_MAPS = 192


def _tensor_map(i: runtime.ArrayInfo, rows: int) -> Any:
    """A 4-D ``CUtensorMap`` (d, seq, heads, batch) of a (batch, heads, seq, d) operand: boxes of 64
    columns x ``rows`` rows of one head, 128-byte swizzle, zero fill past every edge (cached by
    everything it encodes)."""
    b, h, s, d = i.shape
    item = ITEMSIZE[i.dtype]
    # byte strides of seq, heads, batch; a dimension of size 1 may carry any stride: give it a valid one
    st = [i.strides[2] * item, i.strides[1] * item, i.strides[0] * item]
    sizes = (s, h, b)
    for n in range(3):
        if sizes[n] == 1 and (st[n] <= 0 or st[n] % 16):
            st[n] = (st[n - 1] * sizes[n - 1]) if n else d * item
    key = (i.ptr, i.dtype, i.shape, tuple(st), rows)
    with _maps_lock:
        m = _maps.get(key)
        if m is not None:
            _maps.move_to_end(key)
            return m
    driver = tma._driver()
    types = driver.CUtensorMapDataType
    dt = {"float16": types.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "bfloat16": types.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16}[i.dtype]
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    try:
        err, m = driver.cuTensorMapEncodeTiled(
            dt, 4, i.ptr, [u64(d), u64(s), u64(h), u64(b)], [u64(x) for x in st], [u32(64), u32(rows), u32(1), u32(1)],
            [u32(1)] * 4, driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    except Exception as exc:  # no driver library, or a binding that takes other argument types
        raise KernelsUnavailable(f"cuTensorMapEncodeTiled could not be called ({type(exc).__name__}: {exc}); "
                                 "the wgmma attention kernel needs the NVIDIA driver and cuda-bindings >= 12.0"
                                 ) from exc
    tma._check(err, f"cuTensorMapEncodeTiled({i.name} {i.dtype} {i.shape}, byte strides {st})")
    with _maps_lock:
        _maps[key] = m
        while len(_maps) > _MAX_MAPS:
            _maps.popitem(last=False)
    return m


class _WgScalars(ctypes.Structure):
    """The wgmma kernel's parameters after its three tensor maps (kernels/attention_wgmma.cu), in order."""
    _fields_ = [("o", ctypes.c_void_p), ("o_bs", ctypes.c_longlong), ("o_hs", ctypes.c_longlong),
                ("o_rs", ctypes.c_longlong), ("q_len", ctypes.c_int), ("k_len", ctypes.c_int),
                ("scale_log2", ctypes.c_float), ("causal", ctypes.c_int)]


_wg_kernels: dict[tuple[str, int], Any] = {}


def _launch_wgmma(qi: runtime.ArrayInfo, ki: runtime.ArrayInfo, vi: runtime.ArrayInfo, oi: runtime.ArrayInfo,
                  scale: float, causal: bool, schedule: str) -> str:
    """Launch the wgmma kernel on fixed-length (batch, heads, seq, d) operands whose strides TMA can
    read (checked by the caller); returns the kernel's name."""
    from hookmagic.kernels.gemm_wgmma import check_device
    dev = qi.device
    check_device(dev, "attention(variant='wgmma')")
    # TMA strides are positive: a broadcast (stride 0) dimension is copied out first
    qi, ki, vi = (i if all(st > 0 for n, st in zip(i.shape[:3], i.strides[:3]) if n > 1) else runtime.contiguous(i)
                  for i in (qi, ki, vi))
    batch, heads, sq, d = qi.shape
    sk = ki.shape[2]
    name = _wgmma_name(qi.dtype, d, schedule)
    kern = _wg_kernels.get((name, dev))
    if kern is None:
        kern = runtime.get_kernel("attention_wgmma", name, dev, arch_specific=True)
        runtime.set_dynamic_smem(kern, wgmma_smem(d), dev)
        _wg_kernels[(name, dev)] = kern
    maps = (_tensor_map(qi, WG_BM), _tensor_map(ki, WG_BN), _tensor_map(vi, WG_BN))
    scalars = _WgScalars(oi.ptr, oi.strides[0], oi.strides[1], oi.strides[2], sq, sk,
                         scale * math.log2(math.e), int(causal))
    grid = (-(-sq // WG_BM), heads, batch)
    tma.launch(kern, dev, runtime.current_stream_handle(qi), grid, (WG_THREADS, 1, 1), wgmma_smem(d), maps, scalars)
    return name


def _pairs(sq: int, sk: int, causal: bool) -> int:
    """(query, key) pairs attended: sq * sk, or with the top-left causal mask sum_i min(i + 1, sk)."""
    if not causal:
        return sq * sk
    full = max(0, min(sq, sk))        # rows 0..full-1 see i + 1 keys
    return full * (full + 1) // 2 + max(0, sq - full) * sk


__all__ = ["attention", "explain_attention", "wgmma_smem", "HEAD_DIMS", "BLOCK_M", "VARIANTS", "SCHEDULES",
           "HOPPER_ATTENTION_RESULTS"]
