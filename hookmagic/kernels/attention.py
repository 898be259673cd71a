"""Fused attention forward (flash-style): ``softmax(scale * q @ k^T [causal]) @ v`` without a score matrix.

    o = kernels.attention(q, k, v)                     # (batch, heads, seq, d), like F.scaled_dot_product_attention
    o = kernels.attention(q, k, v, causal=True)        # top-left causal mask, as torch's is_causal
    o = kernels.attention(q, k, v, offsets=cu_seqlens) # packed (tokens, heads, d), variable lengths

FP16 or BF16, head dimension 64 or 128, FP32 accumulation and softmax statistics (mma.sync Tensor
Cores, online softmax in base 2 as FlashAttention-2).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from hookmagic.kernels import registry, runtime
from hookmagic.kernels.errors import KernelArgumentError
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
              offsets: Any = None, kv_offsets: Any = None, block_m: int = 64) -> Any:
    """Attention forward, equal to ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
    is_causal=causal, scale=scale)`` within FlashAttention's error (FP32 statistics).

    Fixed length: ``q`` ``(batch, heads, seq_q, d)``, ``k``/``v`` ``(batch, heads, seq_k, d)``.
    Variable length (packed, FlashAttention's ``varlen``): ``q`` ``(tokens_q, heads, d)``,
    ``k``/``v`` ``(tokens_k, heads, d)`` and ``offsets`` int32 ``(batch + 1,)`` cumulative starts
    (sequence ``i`` is rows ``offsets[i]:offsets[i+1]``); ``kv_offsets`` for keys when they differ.
    float16 or bfloat16, ``d`` 64 or 128; ``scale`` defaults to ``1/sqrt(d)``. The causal mask is
    top-left aligned (query ``i`` sees keys ``j <= i``). A query with no keys gives zeros.
    ``block_m``: query rows per block, 64 (4 warps) or 128 (8 warps: half the K/V traffic).
    Returns a new array shaped like ``q``.
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
    name = f"attention_{_SUFFIX[qi.dtype]}_d{d}" + ("" if block_m == 64 else f"_m{block_m}")
    kern = runtime.get_kernel("attention", name, qi.device)
    smem = 2 * 64 * (d + 8) * ITEMSIZE[qi.dtype]
    runtime.set_dynamic_smem(kern, smem, qi.device)
    grid = (-(-max_q // block_m), heads, batch)
    args = (qi.ptr, ki.ptr, vi.ptr, oi.ptr, *(np.int64(s) for st in strides for s in st), off_ptrs[0], off_ptrs[1],
            np.int32(lens[0]), np.int32(lens[1]), np.float32(sc * math.log2(math.e)), np.int32(bool(causal)))
    runtime.launch(kern, qi, grid, (2 * block_m, 1, 1), args, smem=smem)
    pairs = sum(_pairs(a, b, bool(causal)) for a, b in zip(q_lens, k_lens)) * heads
    item = ITEMSIZE[qi.dtype]
    nbytes = heads * d * item * (2 * sum(q_lens) + 2 * sum(k_lens))
    registry.record(name, 4 * pairs * d, nbytes, batch=batch, heads=heads, max_seq_q=max_q, head_dim=d,
                    causal=bool(causal), dtype=qi.dtype)
    return out


def _pairs(sq: int, sk: int, causal: bool) -> int:
    """(query, key) pairs attended: sq * sk, or with the top-left causal mask sum_i min(i + 1, sk)."""
    if not causal:
        return sq * sk
    full = max(0, min(sq, sk))        # rows 0..full-1 see i + 1 keys
    return full * (full + 1) // 2 + max(0, sq - full) * sk


__all__ = ["attention", "HEAD_DIMS", "BLOCK_M"]
