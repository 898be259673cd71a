"""Fused frame preprocessing: uint8 frames -> resize (or letterbox) -> normalise -> NCHW/NHWC, one kernel.

What a detector or classifier needs from decoded video, in one launch per batch instead of a chain
of four or five torch operations::

    x = kernels.preprocess(frames, (640, 640), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    x = kernels.preprocess(frames, (640, 640), letterbox=True)           # aspect kept, padded with 114
    p = kernels.letterbox_params(frames.shape[1:3], (640, 640))         # to map boxes back

The result equals torchvision's ``v2.functional.resize(img.float(), size, antialias=False)``
(bilinear, ``align_corners=False``) followed by ``/ 255`` and ``v2.functional.normalize(mean, std)``,
computed in FP32 and rounded once to the output dtype. (torchvision's resize of a *uint8* image
rounds the resized pixels back to integers first; this kernel does not round in between.)
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from hookmagic.kernels import registry, runtime
from hookmagic.kernels.errors import KernelArgumentError
from hookmagic.kernels.registry import ITEMSIZE, KernelSpec, register

_OUT_DTYPES = ("float32", "float16", "bfloat16")
_SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
FORMATS = ("RGB", "BGR", "NV12")
LAYOUTS = ("NCHW", "NHWC")
#: YUV -> RGB matrices of NV12 frames: (Kr, Kb) of ITU-R BT.601 and BT.709
COLOR_MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
#: nominal arithmetic per output element (4-tap bilinear, index math, the affine normalisation)
_OPS_PER_ELEMENT = 12
_BLOCK = (32, 8, 1)

register(KernelSpec("preprocess", "fused", "preprocess", {d: f"preprocess_{s}" for d, s in _SUFFIX.items()},
                    _BLOCK, (8, 32), min_arch=70,
                    description="uint8 HWC RGB/BGR or NV12 frames -> bilinear resize or letterbox -> "
                                "normalise -> NCHW/NHWC, one thread per output pixel"))


register(KernelSpec("preprocess", "fused4", "preprocess", {d: f"preprocess4_{s}" for d, s in _SUFFIX.items()},
                    _BLOCK, (8, 128), min_arch=70,
                    description="as 'fused', four output pixels a thread (lane-interleaved: each warp "
                                "instruction covers 32 consecutive pixels), vertical taps shared, RGB tap pairs from "
                                "aligned 4-byte loads, NV12 chroma pairs as 2-byte loads"))
register(KernelSpec("preprocess", "fused1w", "preprocess", {d: f"preprocess1w_{s}" for d, s in _SUFFIX.items()},
                    _BLOCK, (8, 32), min_arch=70,
                    description="as 'fused', one output pixel a thread, RGB tap pairs from aligned 4-byte loads, "
                                "NV12 chroma pairs as 2-byte loads"))
for _v, _tile, _what in (("x2", (8, 64), "two adjacent output pixels a thread (NCHW rows of even width written as "
                                         "2-element stores)"),
                         ("y2", (16, 32), "two output pixels a thread, 8 rows apart"),
                         ("xy", (16, 64), "2 x 2 output pixels a thread (adjacent columns, rows 8 apart)")):
    register(KernelSpec("preprocess", _v, "preprocess", {d: f"preprocess_{_v}_{s}" for d, s in _SUFFIX.items()},
                        _BLOCK, _tile, min_arch=70,
                        description=f"as 'fused' (byte taps, the same arithmetic), {_what}: every tap loaded "
                                    "before the first is used"))
#: impl -> (variant, output columns a thread, output rows a thread). "pixel": one pixel a thread
#: with byte loads; "w1": one pixel a thread with word-wide tap loads; "w4": four pixels a thread
#: (lane-interleaved) with word-wide tap loads; "x2", "y2", "xy": 2 or 2 x 2 pixels a thread with
#: byte loads. "auto" is :func:`auto_impl`'s pick. Chosen by preprocess's ``impl=``; the benchmark
#: compares them in one process (``python -m benchmarks.kernel_infer_cases``).
IMPLS = {"auto": ("fused", 1, 1), "pixel": ("fused", 1, 1), "w1": ("fused1w", 1, 1), "w4": ("fused4", 4, 1),
         "x2": ("x2", 2, 1), "y2": ("y2", 1, 2), "xy": ("xy", 2, 2)}


def auto_impl(letterbox: bool) -> str:
    """The design ``impl="auto"`` runs: "x2", two adjacent output pixels a thread. On an H200
    (8 x 1080p -> 640 x 640 FP16, kernel time from a cold L2, 3 fresh processes) "x2" took 27.4-28.3 us
    against "pixel"'s 28.4-29.1 (RGB), 21.9-22.4 against 22.2-22.3 letterboxed and 37.7-38.0 against
    42.2-42.7 (NV12); 2 rows a thread ("y2", "xy") was slower than both in all three (one process).
    Figures: benchmarks/results/kernels-infer-h200.md."""
    return "x2"


@dataclass(frozen=True)
class LetterboxParams:
    """Where the resized frame sits inside the letterboxed output: ``x_out = x_in * scale + pad_x``."""
    scale: float
    pad_x: int
    pad_y: int
    width: int     # of the resized frame inside the output
    height: int

    def to_frame(self, boxes: Any) -> Any:
        """Map xyxy boxes in output pixels back to the original frame's pixels (a new array)."""
        out = boxes * 1.0
        out[..., 0::2] = (out[..., 0::2] - self.pad_x) / self.scale
        out[..., 1::2] = (out[..., 1::2] - self.pad_y) / self.scale
        return out


def _size(size: Any, what: str = "size") -> tuple[int, int]:
    if isinstance(size, (int, np.integer)):
        size = (int(size), int(size))
    try:
        h, w = (int(s) for s in size)
    except (TypeError, ValueError):
        raise KernelArgumentError(f"preprocess: {what} must be an int or (height, width), got {size!r}") from None
    if h < 1 or w < 1:
        raise KernelArgumentError(f"preprocess: {what} must be positive, got {(h, w)}")
    return h, w


def letterbox_params(frame_size: Sequence[int], size: Any) -> LetterboxParams:
    """The letterbox geometry ``preprocess(..., letterbox=True)`` uses for frames of ``frame_size``
    ``(height, width)`` into ``size``: the largest scale that fits, the resized frame centred
    (extra pixel of odd padding on the right/bottom)."""
    ih, iw = _size(frame_size, "frame_size")
    oh, ow = _size(size)
    r = min(oh / ih, ow / iw)
    nw, nh = max(1, min(ow, int(iw * r + 0.5))), max(1, min(oh, int(ih * r + 0.5)))
    return LetterboxParams(r, (ow - nw) // 2, (oh - nh) // 2, nw, nh)


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype.removeprefix("torch.")
    if type(dtype).__module__.split(".")[0] == "torch":
        return str(dtype).removeprefix("torch.")
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


def _triple(v: Any, name: str) -> tuple[float, float, float]:
    if isinstance(v, (int, float, np.integer, np.floating)):
        return (float(v),) * 3
    try:
        t = tuple(float(x) for x in v)
    except (TypeError, ValueError):
        t = ()
    if len(t) != 3:
        raise KernelArgumentError(f"preprocess: {name} must be a number or 3 numbers (one per channel), got {v!r}")
    return t  # type: ignore[return-value]


def yuv_coefficients(matrix: str = "bt601", full_range: bool = False) -> tuple[float, ...]:
    """``(cy, y0, crv, cgu, cgv, cbu)``: R = cy (Y - y0) + crv (V - 128), G = cy (Y - y0) + cgu (U - 128)
    + cgv (V - 128), B = cy (Y - y0) + cbu (U - 128) for ``matrix`` ('bt601' or 'bt709'), video
    (limited, 16-235) range unless ``full_range``."""
    if matrix not in COLOR_MATRICES:
        raise KernelArgumentError(f"preprocess: color matrix must be one of {sorted(COLOR_MATRICES)}, got {matrix!r}")
    kr, kb = COLOR_MATRICES[matrix]
    kg = 1.0 - kr - kb
    cy, y0, cs = (1.0, 0.0, 1.0) if full_range else (255.0 / 219.0, 16.0, 255.0 / 224.0)
    return (cy, y0, 2 * (1 - kr) * cs, -2 * (1 - kb) * kb / kg * cs, -2 * (1 - kr) * kr / kg * cs, 2 * (1 - kb) * cs)


@dataclass
class _Frames:
    ref: runtime.ArrayInfo
    batch: int
    height: int
    width: int
    pitch: int
    frame_stride: int
    base: int
    table: Any          # device array of frame pointers (a list of frames), else None
    nbytes: int         # bytes of one frame as read


def _one_frame_geometry(fi: runtime.ArrayInfo, fmt: str, batched: bool) -> tuple[int, int, int]:
    """(height, width, pitch) of a frame array (batched: leading batch dimension)."""
    nd = 4 if (batched and fmt != "NV12") else 3 if (batched or fmt != "NV12") else 2
    want = {("NV12", True): "(batch, height*3/2, width)", ("NV12", False): "(height*3/2, width)",
            ("RGB", True): "(batch, height, width, 3)", ("RGB", False): "(height, width, 3)"}[(
                "NV12" if fmt == "NV12" else "RGB", batched)]
    if len(fi.shape) != nd or (fmt != "NV12" and fi.shape[-1] != 3):
        raise KernelArgumentError(f"preprocess: {fi.name} must be uint8 {fmt} frames of shape {want}, "
                                  f"got {fi.where()}")
    if fmt == "NV12":
        rows, w = fi.shape[-2], fi.shape[-1]
        if rows % 3 or (rows * 2 // 3) % 2 or w % 2:
            raise KernelArgumentError(f"preprocess: NV12 {fi.name} must have height*3/2 rows with an even height "
                                      f"and an even width, got {fi.where()}")
        return rows * 2 // 3, w, fi.strides[-2]
    return fi.shape[-3], fi.shape[-2], fi.strides[-3]


def _layout_ok(fi: runtime.ArrayInfo, fmt: str) -> bool:
    if fmt == "NV12":
        return fi.strides[-1] == 1 or fi.shape[-1] == 1
    return (fi.strides[-1] == 1 and (fi.strides[-2] == 3 or fi.shape[-2] == 1)
            and fi.strides[-3] >= 3 * fi.shape[-2])


def _frames(frames: Any, fmt: str) -> _Frames:
    if isinstance(frames, (list, tuple)):
        if not frames:
            raise KernelArgumentError("preprocess: frames is an empty list (pass a (0, H, W, 3) array for an empty batch)")
        infos = [runtime.inspect_array(f, f"frames[{i}]") for i, f in enumerate(frames)]
        first = infos[0]
        for fi in infos:
            _check_uint8(fi)
        for fi in infos:
            if fi.kind != first.kind or fi.device != first.device:
                raise KernelArgumentError(f"preprocess: every frame must be the same kind of array on one device; "
                                          f"frames[0] is {first.where()}, {fi.name} is {fi.where()}")
        geo = [_one_frame_geometry(fi, fmt, False) for fi in infos]
        for fi, g in zip(infos, geo):
            if g[:2] != geo[0][:2]:
                raise KernelArgumentError(
                    f"preprocess: frames of one batch must share one size; frames[0] is {geo[0][0]}x{geo[0][1]} "
                    f"(height x width), {fi.name} is {g[0]}x{g[1]} (resize them in separate calls)")
        _check_device(first)
        infos = [fi if _layout_ok(fi, fmt) else runtime.contiguous(_force_copy(fi)) for fi in infos]
        geo = [_one_frame_geometry(fi, fmt, False) for fi in infos]
        pitches = {g[2] for g in geo}
        if len(pitches) > 1:  # one pitch for all: copy the odd ones out to dense rows
            infos = [runtime.contiguous(_force_copy(fi)) if not fi.contiguous else fi for fi in infos]
            geo = [_one_frame_geometry(fi, fmt, False) for fi in infos]
            if len({g[2] for g in geo}) > 1:
                raise KernelArgumentError("preprocess: frames have different row pitches even when dense")
        h, w, pitch = geo[0]
        table = _pointer_table(first, [fi.ptr for fi in infos])
        rows = h * 3 // 2 if fmt == "NV12" else h
        return _Frames(first, len(infos), h, w, pitch, 0, 0, table, rows * pitch)
    fi = runtime.inspect_array(frames, "frames")
    _check_uint8(fi)
    batched = len(fi.shape) == (3 if fmt == "NV12" else 4)
    if not batched and len(fi.shape) != (2 if fmt == "NV12" else 3):
        _one_frame_geometry(fi, fmt, True)  # raises with the expected shape
    _one_frame_geometry(fi, fmt, batched)
    _check_device(fi)
    if not _layout_ok(fi, fmt):
        fi = runtime.contiguous(_force_copy(fi))
    h, w, pitch = _one_frame_geometry(fi, fmt, batched)
    batch = fi.shape[0] if batched else 1
    stride = fi.strides[0] if batched else 0
    rows = h * 3 // 2 if fmt == "NV12" else h
    return _Frames(fi, batch, h, w, pitch, stride, fi.ptr, None, rows * pitch)


def _force_copy(fi: runtime.ArrayInfo) -> runtime.ArrayInfo:
    x = fi.obj.contiguous() if fi.kind == "torch" else __import__("cupy").ascontiguousarray(fi.obj)
    return runtime.inspect_array(x, fi.name)


def _check_uint8(fi: runtime.ArrayInfo) -> None:
    if fi.dtype != "uint8":
        raise KernelArgumentError(f"preprocess: {fi.name} must be uint8 pixels, got {fi.where()}")


def _check_device(fi: runtime.ArrayInfo) -> None:
    if fi.device < 0:
        raise KernelArgumentError(f"preprocess: {fi.name} must be on a CUDA device, got {fi.where()}")


def _pointer_table(ref: runtime.ArrayInfo, ptrs: list[int]) -> Any:
    if ref.kind == "torch":
        import torch
        return torch.tensor(ptrs, dtype=torch.int64, device=f"cuda:{ref.device}")
    import cupy
    with cupy.cuda.Device(ref.device):
        return cupy.asarray(np.asarray(ptrs, dtype=np.uint64))


def _table_ptr(table: Any) -> int:
    if table is None:
        return 0
    return int(table.data_ptr()) if hasattr(table, "data_ptr") else int(table.data.ptr)


def preprocess(frames: Any, size: Any, mean: Any = (0.0, 0.0, 0.0), std: Any = (1.0, 1.0, 1.0),
               layout: str = "NCHW", dtype: Any = "float16", letterbox: bool = False, *,
               format: str = "RGB", channels: str = "RGB", pad_value: Any = 114,
               color_matrix: str = "bt601", full_range: bool = False, impl: str = "auto") -> Any:
    """Resize and normalise a batch of uint8 frames in one kernel; returns a new array of the
    frames' kind (torch tensor or CuPy array) on their device, on the caller's current stream.

    ``frames``: ``format`` ``'RGB'``/``'BGR'`` frames as a ``(batch, H, W, 3)`` or ``(H, W, 3)``
    array (rows may be padded or cropped: any row stride), or ``'NV12'`` frames as ``(batch,
    H*3/2, W)`` / ``(H*3/2, W)`` (the Y plane then the interleaved UV plane; colours by
    ``color_matrix`` 'bt601'/'bt709', limited range unless ``full_range``); or a list of such
    single frames of one size (no stacking copy: the kernel reads each where it is). Frames of
    different sizes raise :class:`KernelArgumentError`. ``size``: ``(height, width)`` of the
    output (an int means a square, unlike torchvision's ``Resize(int)``).

    Bilinear resampling exactly as ``torch.nn.functional.interpolate(mode='bilinear',
    align_corners=False, antialias=False)``; then ``(v / 255 - mean) / std`` per output channel
    (``mean``/``std`` in 0..1 units as torchvision's ``Normalize`` after ``ToDtype(scale=True)``).
    ``letterbox=True`` keeps the aspect ratio (:func:`letterbox_params`) and fills the rest with
    ``pad_value`` (pixel units, normalised like the pixels). ``channels`` is the output's channel
    order ('RGB' or 'BGR'); ``layout`` 'NCHW' -> ``(batch, 3, h, w)``, 'NHWC' -> ``(batch, h, w, 3)``;
    ``dtype`` float16, bfloat16 or float32. A single frame still gives a batch of one.
    ``impl`` picks the kernel design (:data:`IMPLS`; "auto" is the fastest measured).
    """
    if type(frames) is _Tensor:   # a torch batch of a signature seen before: the call plan
        try:
            key = (frames.shape, frames.stride(), frames.dtype, frames.get_device(), size, mean, std, layout, dtype,
                   letterbox, format, channels, pad_value, color_matrix, full_range, impl)
            c = _calls.get(key)
        except Exception:   # an unhashable option (a list): the full path
            c = key = None
        if c is not None:
            prep, work, shape, tdtype, stride, head, tail = c
            out = frames.new_empty(shape, dtype=tdtype)
            runtime.launch_prepared(prep, "torch", key[3], (frames.data_ptr(), 0, stride, *head, out.data_ptr(), *tail))
            registry.record_work(work)
            return out
    if impl not in IMPLS:
        raise KernelArgumentError(f"preprocess: impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    fmt = str(format).upper()
    if fmt not in FORMATS:
        raise KernelArgumentError(f"preprocess: format must be one of {FORMATS}, got {format!r}")
    chans = str(channels).upper()
    if chans not in ("RGB", "BGR"):
        raise KernelArgumentError(f"preprocess: channels must be 'RGB' or 'BGR', got {channels!r}")
    lay = str(layout).upper()
    if lay not in LAYOUTS:
        raise KernelArgumentError(f"preprocess: layout must be one of {LAYOUTS}, got {layout!r}")
    dt = _dtype_name(dtype)
    if dt not in _OUT_DTYPES:
        raise KernelArgumentError(f"preprocess: dtype must be one of {_OUT_DTYPES}, got {dt}")
    oh, ow = _size(size)
    m, s, pad = _triple(mean, "mean"), _triple(std, "std"), _triple(pad_value, "pad_value")
    if any(v == 0 or not math.isfinite(v) for v in s):
        raise KernelArgumentError(f"preprocess: std must be finite and non-zero, got {s}")
    col = yuv_coefficients(color_matrix, full_range)
    fr = _frames(frames, fmt)
    shape = (fr.batch, 3, oh, ow) if lay == "NCHW" else (fr.batch, oh, ow, 3)
    out = runtime.empty_like_kind(fr.ref, shape, dt)
    if fr.batch == 0:
        return out
    if fr.height < 1 or fr.width < 1:
        raise KernelArgumentError(f"preprocess: frames must be at least 1x1, got {fr.height}x{fr.width}")
    if fr.batch > 65535:
        raise KernelArgumentError(f"preprocess: at most 65535 frames per call, got {fr.batch}")
    optr = int(out.data_ptr()) if fr.ref.kind == "torch" else runtime.inspect_array(out, "out").ptr
    head, tail = _scalars(fr.height, fr.width, fr.pitch, fmt, chans, lay, oh, ow, bool(letterbox), m, s, pad, col)
    variant, px, py = IMPLS[auto_impl(bool(letterbox)) if impl == "auto" else impl]
    spec = registry.SPECS[("preprocess", variant)]
    name = spec.entries[dt]
    kern = runtime.get_kernel(spec.family, name, fr.ref.device)
    grid = (-(-ow // (_BLOCK[0] * px)), -(-oh // (_BLOCK[1] * py)), fr.batch)
    args = (fr.base, _table_ptr(fr.table), np.int64(fr.frame_stride), *head, optr, *tail)
    runtime.launch(kern, fr.ref, grid, _BLOCK, args)
    n_out = fr.batch * 3 * oh * ow
    work = registry.record(name, _OPS_PER_ELEMENT * n_out, fr.batch * fr.nbytes + n_out * ITEMSIZE[dt],
                           batch=fr.batch, frame=(fr.height, fr.width), size=(oh, ow), format=fmt, layout=lay,
                           dtype=dt, letterbox=bool(letterbox))
    if fr.ref.obj is frames and fr.ref.kind == "torch" and type(frames).__name__ == "Tensor" \
            and _plain(size, mean, std, pad_value, dtype):
        _remember((frames.shape, frames.stride(), frames.dtype, frames.get_device(), size, mean, std, layout, dtype,
                   letterbox, format, channels, pad_value, color_matrix, full_range, impl),
                  (runtime.prepare(kern, fr.ref.device, grid, _BLOCK, args), work, shape, out.dtype, args[2], head, tail), frames)
    return out


# --- the per-call path of a torch batch whose signature was seen before --------------------------
# The frames' shape, strides, dtype and device and every option key a call plan made by the first
# call (its checks, geometry and scalars): a later call allocates the output and launches.
_calls: dict[tuple, tuple] = {}


class _NoTensor:   # stands for torch.Tensor until a torch batch was seen (torch is optional)
    pass


_Tensor: type = _NoTensor


def _plain(*options: Any) -> bool:
    """Options whose values cannot change behind the key: numbers, strings, tuples of numbers, dtypes."""
    for o in options:
        if isinstance(o, tuple):
            if any(type(v) not in (int, float) for v in o):
                return False
        elif type(o) not in (int, float, str, bool) and type(o).__module__.split(".")[0] != "torch" \
                or hasattr(o, "shape"):
            return False
    return True


def _remember(key: tuple, plan: tuple, frames: Any) -> None:
    global _Tensor
    try:
        hash(key)
    except TypeError:
        return
    if len(_calls) > 4096:   # many geometries: start over rather than grow without bound
        _calls.clear()
    _calls[key] = plan
    _Tensor = type(frames)


@functools.lru_cache(maxsize=256)
def _scalars(h: int, w: int, pitch: int, fmt: str, chans: str, lay: str, oh: int, ow: int, letterbox: bool,
             m: tuple, s: tuple, pad: tuple, col: tuple) -> tuple[tuple, tuple]:
    """The kernel's scalar arguments around the output pointer — (pitch, in_h, in_w, fmt) and
    (out_h, out_w, nhwc, box x/y/w/h, scale x/y, a[3], b[3], pad[3], swap, YUV coefficients[6]) —
    worked out once per geometry and normalisation (a call then only reads its frames' pointers).
    a = 1 / (255 std), b = -mean / std, pad normalised like a pixel, scale = input / box size."""
    if letterbox:
        lb = letterbox_params((h, w), (oh, ow))
        box = (lb.pad_x, lb.pad_y, lb.width, lb.height)
    else:
        box = (0, 0, ow, oh)
    a = [np.float32(1.0 / (255.0 * s[c])) for c in range(3)]
    b = [np.float32(-m[c] / s[c]) for c in range(3)]
    p = [np.float32((pad[c] / 255.0 - m[c]) / s[c]) for c in range(3)]
    swap = int((fmt == "BGR") != (chans == "BGR"))
    head = (np.int32(pitch), np.int32(h), np.int32(w), np.int32(FORMATS.index(fmt)))
    tail = (np.int32(oh), np.int32(ow), np.int32(lay == "NHWC"), *(np.int32(v) for v in box),
            np.float32(w) / np.float32(box[2]), np.float32(h) / np.float32(box[3]),
            *a, *b, *p, np.int32(swap), *(np.float32(c) for c in col))
    return head, tail


__all__ = ["preprocess", "letterbox_params", "LetterboxParams", "yuv_coefficients", "FORMATS", "LAYOUTS",
           "COLOR_MATRICES"]
