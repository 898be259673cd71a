"""Transposes (2-D, batched, NCHW <-> NHWC) and row reductions (sum, max over the last dimension).

    t = kernels.transpose(x)                         # (R, C) -> (C, R), contiguous
    y = kernels.transpose(x, "NCHW->NHWC")           # (N, C, H, W) -> (N, H, W, C)
    s = kernels.row_sum(x); m = kernels.row_max(x)   # x.sum(-1), x.amax(-1) with FP32 accumulation
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hookmagic.kernels import registry, runtime
from hookmagic.kernels.errors import KernelArgumentError
from hookmagic.kernels.registry import KernelSpec, register

#: element size -> kernel suffix; every dtype of that size moves the same way
_BY_SIZE = {1: "b1", 2: "b2", 4: "b4", 8: "b8"}
_SIZE = {"uint8": 1, "int8": 1, "bool": 1, "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2,
         "float32": 4, "int32": 4, "uint32": 4, "float64": 8, "int64": 8, "uint64": 8, "complex64": 8}
LAYOUTS = ("NCHW->NHWC", "NHWC->NCHW")
_RED_DTYPES = ("float32", "float16", "bfloat16")
_RED_SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}

register(KernelSpec("transpose", "tiled", "layout", {f"{n}-byte": f"transpose_{s}" for n, s in _BY_SIZE.items()},
                    (32, 8, 1), (32, 32), min_arch=70,
                    description="batched 2-D transpose through a padded 32x33 shared tile (NCHW<->NHWC)"))
register(KernelSpec("transpose", "pairs", "layout", {"2-byte": "transpose2_b2", "4-byte": "transpose2_b4"},
                    (32, 8, 1), (64, 64), min_arch=70,
                    description="2/4-byte transpose moving element pairs with 4/8-byte accesses through a 64x64 "
                                "tile (even R and C)"))
#: transpose's ``impl=``: "auto": the pair kernels where they apply (2/4-byte elements, even
#: sizes); "tile": always the 32x32 one-element kernels (for comparisons).
TRANSPOSE_IMPLS = ("auto", "tile")
for _op in ("row_sum", "row_max"):
    register(KernelSpec(_op, "rowwise", "layout", {d: f"{_op}_{s}" for d, s in _RED_SUFFIX.items()}, (256, 1, 1),
                        (1, 1), min_arch=70, description=f"{_op.replace('row_', '')} over the last dimension, FP32 "
                                                         "accumulation; a warp per short row, a block per long row"))


def _device_check(xi: runtime.ArrayInfo, op: str) -> None:
    if xi.device < 0:
        raise KernelArgumentError(f"{op}: x must be on a CUDA device, got {xi.where()}")


def transpose(x: Any, layout: str | None = None, impl: str = "auto") -> Any:
    """A transposed, contiguous copy of ``x`` (torch tensor or CuPy array of any 1/2/4/8-byte dtype).

    ``layout=None``: ``(R, C) -> (C, R)``, or batched ``(B, R, C) -> (B, C, R)``.
    ``layout='NCHW->NHWC'``: ``(N, C, H, W) -> (N, H, W, C)``; ``'NHWC->NCHW'`` the reverse.
    Non-contiguous inputs are first copied to row-major. ``impl``: one of :data:`TRANSPOSE_IMPLS`.
    """
    if impl not in TRANSPOSE_IMPLS:
        raise KernelArgumentError(f"transpose: impl must be one of {', '.join(TRANSPOSE_IMPLS)}, got {impl!r}")
    xi = runtime.inspect_array(x, "x")
    if xi.dtype not in _SIZE:
        raise KernelArgumentError(f"transpose: x must have a 1, 2, 4 or 8-byte dtype, got {xi.where()}")
    nd = len(xi.shape)
    if layout is None:
        if nd not in (2, 3):
            raise KernelArgumentError(f"transpose: x must be 2-D (R, C) or 3-D (B, R, C) without a layout, "
                                      f"got {xi.where()} (4-D needs layout='NCHW->NHWC' or 'NHWC->NCHW')")
        b, r, c = (1, *xi.shape) if nd == 2 else xi.shape
        out_shape = (c, r) if nd == 2 else (b, c, r)
    else:
        lay = str(layout).upper().replace(" ", "")
        if lay not in LAYOUTS:
            raise KernelArgumentError(f"transpose: layout must be one of {LAYOUTS} or None, got {layout!r}")
        if nd != 4:
            raise KernelArgumentError(f"transpose: layout {lay} needs a 4-D x ({lay[:4]}), got {xi.where()}")
        n, d1, d2, d3 = xi.shape
        if lay == "NCHW->NHWC":
            b, r, c, out_shape = n, d1, d2 * d3, (n, d2, d3, d1)
        else:
            b, r, c, out_shape = n, d1 * d2, d3, (n, d3, d1, d2)
    _device_check(xi, "transpose")
    xi = runtime.contiguous(xi)
    y = runtime.empty_like_kind(xi, out_shape, xi.dtype)
    if b * r * c == 0:
        return y
    size = _SIZE[xi.dtype]
    yi = runtime.inspect_array(y, "y")
    if impl != "tile" and size in (2, 4) and r % 2 == 0 and c % 2 == 0 and xi.ptr % (2 * size) == 0 \
            and yi.ptr % (2 * size) == 0 and -(-c // 64) <= 65535 and b <= 65535:
        name = f"transpose2_b{size}"
        kern = runtime.get_kernel("layout", name, xi.device)
        runtime.launch(kern, xi, (-(-r // 64), -(-c // 64), b), (32, 8, 1), (xi.ptr, yi.ptr, np.int32(r), np.int32(c)))
        registry.record(name, 0, 2 * b * r * c * size, batch=b, rows=r, cols=c, dtype=xi.dtype)
        return y
    gx, gy = -(-r // 32), -(-c // 32)
    if gy > 65535 or b > 65535 or r > 2**31 - 1 or c > 2**31 - 1:
        raise KernelArgumentError(f"transpose: at most 65535 tiles of 32 columns and 65535 batches, got {xi.where()}")
    name = f"transpose_{_BY_SIZE[size]}"
    kern = runtime.get_kernel("layout", name, xi.device)
    runtime.launch(kern, xi, (gx, gy, b), (32, 8, 1), (xi.ptr, yi.ptr, np.int32(r), np.int32(c)))
    registry.record(name, 0, 2 * b * r * c * size, batch=b, rows=r, cols=c, dtype=xi.dtype)
    return y


def _reduce(x: Any, op: str) -> Any:
    xi = runtime.inspect_array(x, "x")
    if xi.dtype not in _RED_DTYPES:
        raise KernelArgumentError(f"{op}: x must be float32, float16 or bfloat16, got {xi.where()}")
    if len(xi.shape) == 0:
        raise KernelArgumentError(f"{op}: x must have at least one dimension, got {xi.where()}")
    cols = xi.shape[-1]
    if op == "row_max" and cols == 0 and int(np.prod(xi.shape[:-1])) > 0:
        raise KernelArgumentError(f"row_max: the last dimension of x is empty (no maximum), got {xi.where()}")
    _device_check(xi, op)
    xi = runtime.contiguous(xi)
    y = runtime.empty_like_kind(xi, xi.shape[:-1], xi.dtype)
    rows = int(np.prod(xi.shape[:-1]))
    if rows == 0:
        return y
    yi = runtime.inspect_array(y, "y")
    nv = 16 // registry.ITEMSIZE[xi.dtype]
    vec = int(cols % nv == 0 and xi.ptr % 16 == 0)
    nvec = -(-cols // nv)
    warp_rows = int(nvec <= 1024 if vec else cols <= 2048)   # a warp per row: up to 32 vectors a lane
    per_block = 8 if warp_rows else 1
    threads = 256 if warp_rows else int(min(1024, max(256, -(-nvec // 8 // 32) * 32)))
    grid = min(-(-rows // per_block), 1 << 20)
    name = f"{op}_{_RED_SUFFIX[xi.dtype]}"
    kern = runtime.get_kernel("layout", name, xi.device)
    runtime.launch(kern, xi, (grid, 1, 1), (threads, 1, 1),
                   (xi.ptr, yi.ptr, np.int32(rows), np.int32(cols), np.int32(vec), np.int32(warp_rows)))
    item = registry.ITEMSIZE[xi.dtype]
    registry.record(name, rows * cols, rows * cols * item + rows * item, rows=rows, cols=cols, dtype=xi.dtype)
    return y


def row_sum(x: Any) -> Any:
    """``x.sum(-1)`` for float32/float16/bfloat16, accumulated in FP32, same dtype as ``x``."""
    return _reduce(x, "row_sum")


def row_max(x: Any) -> Any:
    """``x.amax(-1)`` for float32/float16/bfloat16 (NaN propagates); an empty last dimension is an error."""
    return _reduce(x, "row_max")


__all__ = ["transpose", "row_sum", "row_max", "LAYOUTS"]
