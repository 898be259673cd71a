"""Host side of the Hopper kernels: TMA tensor maps and launches that pass them by value.

A TMA (cp.async.bulk.tensor) load reads through a ``CUtensorMap``: a 128-byte descriptor of a
global tensor (address, sizes, byte strides), the box one load copies and its shared-memory
swizzle. It is built on the host with the driver's ``cuTensorMapEncodeTiled`` (cuda-bindings)
and passed to the kernel as a ``const __grid_constant__`` parameter, so the launch goes through
``cuLaunchKernel`` with a hand-built parameter array (each entry points at the argument's bytes).

Encoded maps are cached by everything they encode (address, dtype, sizes, strides, box), so a
GEMM called again on the same tensors does not encode again. Besides the tiled maps
(:func:`encode_2d`), :func:`encode_im2col_nhwc` builds the im2col maps the Hopper convolution
reads its activations through.
"""
from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from typing import Any, Sequence

from hookmagic.kernels import runtime
from hookmagic.kernels.errors import KernelArgumentError, KernelsUnavailable

_lock = threading.Lock()
_maps: OrderedDict[tuple, Any] = OrderedDict()
_MAX_MAPS = 256
_functions: dict[tuple[int, int], Any] = {}
_smem_allowed: dict[tuple[int, int], int] = {}


_driver_mod: list[Any] = []


def _driver() -> Any:
    if _driver_mod:
        return _driver_mod[0]
    try:
        from cuda.bindings import driver
    except Exception as exc:  # ImportError or a broken wheel
        raise KernelsUnavailable(f"cuda-bindings could not be imported ({exc}); "
                                 "pip install 'hookmagic[kernels]'") from exc
    _driver_mod.append(driver)
    return driver


def _check(err: Any, what: str) -> None:
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        raise KernelsUnavailable(f"{what} failed: {name} ({int(err)})")


def encode_2d(ptr: int, dtype: str, inner: int, outer: int, row_bytes: int, box: tuple[int, int]) -> Any:
    """A ``CUtensorMap`` for a row-major 2-D tensor at ``ptr``: ``outer`` rows of ``inner`` elements,
    rows ``row_bytes`` apart; loads copy ``box`` = (inner, outer) elements with the 128-byte swizzle
    and zero-fill whatever lies outside the tensor. ``ptr`` and ``row_bytes`` must be multiples of 16."""
    if ptr % 16 or row_bytes % 16:
        raise KernelArgumentError(f"TMA needs a 16-byte aligned address and row stride (address {ptr:#x}, "
                                  f"row stride {row_bytes} bytes)")
    key = (ptr, dtype, inner, outer, row_bytes, box)
    with _lock:   # one look-up: a hit moves the map to the end, a miss encodes and inserts it
        m = _maps.get(key)
        if m is None:
            m = _remember(key, _encode_tiled(ptr, dtype, inner, outer, row_bytes, box))
        else:
            _maps.move_to_end(key)
    return m


def _remember(key: tuple, m: Any) -> Any:
    """Insert a new map, dropping the least recently used beyond :data:`_MAX_MAPS` (under ``_lock``)."""
    _maps[key] = m
    if len(_maps) > _MAX_MAPS:
        _maps.popitem(last=False)
    return m


def map_bytes(m: Any) -> bytes:
    """The 128 bytes of an encoded ``CUtensorMap`` (what a launch passes by value)."""
    return ctypes.string_at(int(m.getPtr()), runtime.MAP_BYTES)


def _encode_tiled(ptr: int, dtype: str, inner: int, outer: int, row_bytes: int, box: tuple[int, int]) -> Any:
    driver = _driver()
    types = driver.CUtensorMapDataType
    # FP8 has no tensor-map type of its own: TMA copies bytes, so UINT8 moves them unchanged
    dt = {"float16": types.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "bfloat16": types.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
          "float8_e4m3fn": types.CU_TENSOR_MAP_DATA_TYPE_UINT8, "float8_e5m2": types.CU_TENSOR_MAP_DATA_TYPE_UINT8}[dtype]
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    try:
        err, m = driver.cuTensorMapEncodeTiled(
            dt, 2, ptr, [u64(inner), u64(outer)], [u64(row_bytes)], [u32(box[0]), u32(box[1])], [u32(1), u32(1)],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    except Exception as exc:  # no driver library, or a binding that takes other argument types
        raise KernelsUnavailable(f"cuTensorMapEncodeTiled could not be called ({type(exc).__name__}: {exc}); "
                                 "TMA kernels need the NVIDIA driver and cuda-bindings >= 12.0") from exc
    _check(err, f"cuTensorMapEncodeTiled({dtype}, {inner} x {outer}, box {box[0]} x {box[1]})")
    return m


def encode_im2col_nhwc(ptr: int, dtype: str, shape: tuple[int, int, int, int], pad: int, filt: int, stride: int,
                       box: tuple[int, int]) -> Any:
    """A ``CUtensorMap`` in im2col mode (``cuTensorMapEncodeIm2col``) for a row-major NHWC tensor of
    ``shape`` (N, H, W, C) at ``ptr``, convolved by a ``filt`` x ``filt`` filter with ``pad`` and
    ``stride``: the bounding box of the filter's top-left corner runs from -pad to W + pad - filt
    (and likewise in H), walked with steps of ``stride``; a load copies ``box`` = (channels,
    pixels) elements (128-byte swizzle), the pixels being consecutive output pixels (W, then H, then
    N) each read at its corner + the load's (w, h) offsets; whatever lies outside the tensor
    (the padding) is zero-filled. Rows (C elements) must be a multiple of 16 bytes."""
    n, h, w, c = shape
    item = 2
    if ptr % 16 or (c * item) % 16:
        raise KernelArgumentError(f"TMA im2col needs a 16-byte aligned address and rows of 16-byte multiples "
                                  f"(address {ptr:#x}, {c} channels)")
    lower, upper = -pad, pad - (filt - 1)
    if not (-128 <= lower <= 127 and -128 <= upper <= 127 and 1 <= stride <= 8):
        raise KernelArgumentError(f"TMA im2col takes padding and filter offsets in [-128, 127] and strides 1-8 "
                                  f"(padding {pad}, filter {filt}, stride {stride})")
    key = ("im2col", ptr, dtype, shape, pad, filt, stride, box)
    with _lock:   # one look-up, as in encode_2d
        m = _maps.get(key)
        if m is None:
            m = _remember(key, _encode_im2col(ptr, dtype, shape, pad, filt, stride, box))
        else:
            _maps.move_to_end(key)
    return m


def _encode_im2col(ptr: int, dtype: str, shape: tuple[int, int, int, int], pad: int, filt: int, stride: int,
                   box: tuple[int, int]) -> Any:
    n, h, w, c = shape
    item = 2
    lower, upper = -pad, pad - (filt - 1)
    driver = _driver()
    types = driver.CUtensorMapDataType
    dt = {"float16": types.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "bfloat16": types.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16}[dtype]
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    try:
        err, m = driver.cuTensorMapEncodeIm2col(
            dt, 4, ptr, [u64(c), u64(w), u64(h), u64(n)], [u64(c * item), u64(w * c * item), u64(h * w * c * item)],
            [lower, lower], [upper, upper], box[0], box[1], [u32(1), u32(stride), u32(stride), u32(1)],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    except Exception as exc:
        raise KernelsUnavailable(f"cuTensorMapEncodeIm2col could not be called ({type(exc).__name__}: {exc}); "
                                 "TMA kernels need the NVIDIA driver and cuda-bindings >= 12.0") from exc
    _check(err, f"cuTensorMapEncodeIm2col({dtype}, NHWC {shape}, pad {pad}, filter {filt}, stride {stride})")
    return m


def _function(kernel: Any, ordinal: int) -> Any:
    """The ``CUfunction`` of a cuda-core kernel in the current context (cuda-core loads cubins as
    libraries, whose kernels are ``CUkernel`` handles)."""
    key = (id(kernel), ordinal)
    f = _functions.get(key)
    if f is None:
        driver = _driver()
        h = kernel.handle
        if isinstance(h, driver.CUfunction):
            f = h
        else:
            kh = h if isinstance(h, driver.CUkernel) else driver.CUkernel(int(h))
            err, f = driver.cuKernelGetFunction(kh)
            if int(err) != 0:   # cuLaunchKernel takes a CUkernel too (CUDA >= 12)
                f = kh
        _functions[key] = f
    return f


_streams: dict[int, Any] = {}        # CUstream handle -> its cuda-bindings object
_offsets: dict[type, tuple[int, ...]] = {}


def launch(kernel: Any, ordinal: int, stream: int, grid: tuple[int, int, int], block: tuple[int, int, int],
           smem: int, maps: Sequence[Any], scalars: ctypes.Structure) -> None:
    """``cuLaunchKernel`` with the kernel's parameters in order: the ``CUtensorMap`` objects of
    ``maps`` (passed by value, 128 bytes each), then each field of ``scalars``, a ctypes Structure
    whose fields are the remaining parameters' C types (``c_void_p`` pointers, ``c_int`` ints)."""
    driver = _driver()
    runtime.make_current(ordinal)
    offs = _offsets.get(type(scalars))
    if offs is None:
        offs = _offsets[type(scalars)] = tuple(getattr(type(scalars), f[0]).offset for f in scalars._fields_)
    base = ctypes.addressof(scalars)
    params = (ctypes.c_void_p * (len(maps) + len(offs)))(*[m.getPtr() for m in maps], *[base + o for o in offs])
    f = _function(kernel, ordinal)
    if smem > 48 * 1024 and _smem_allowed.get((id(kernel), ordinal), 0) < smem and isinstance(f, driver.CUfunction):
        # the CUkernel's attribute (runtime.set_dynamic_smem) should carry over; set it on the function too
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        (err,) = driver.cuFuncSetAttribute(f, attr, smem)
        _check(err, f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={smem})")
        _smem_allowed[(id(kernel), ordinal)] = smem
    cs = _streams.get(stream)
    if cs is None:
        cs = _streams[stream] = driver.CUstream(stream)
    (err,) = driver.cuLaunchKernel(f, *grid, *block, smem, cs, ctypes.addressof(params), 0)
    if err:   # the message is built only on failure: this is the per-call path
        _check(err, f"cuLaunchKernel(grid={grid}, block={block}, smem={smem})")


__all__ = ["encode_2d", "encode_im2col_nhwc", "launch", "map_bytes"]
