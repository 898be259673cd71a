"""Where frames come from: any iterable, a video file decoded on the CPU (PyAV) or on the GPU's
NVDEC (PyNvVideoCodec or torchcodec), an image folder, or N synthetic cameras paced in real
time.

A source is a list of *streams*; each stream is read by its own thread of the pipeline and its
reads are timed as the pipeline's first stage (``decode`` for video, ``read`` otherwise), so a
decode-bound pipeline names decoding as its bottleneck. PyAV releases the GIL while FFmpeg
decodes, so a thread per stream decodes in parallel with the other stages.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from hookmagic.common.errors import InputFileError, InvalidArgument, MissingDependency, Unavailable
from hookmagic.common.optional import install_command
from hookmagic.pipeline import color


@dataclass(frozen=True)
class Captured:
    """A frame with its capture time on the host clock (``time.perf_counter_ns``), as a live
    stream's iterator yields it; the pipeline measures end-to-end latency from that time."""

    frame: Any
    captured_ns: int


@dataclass(frozen=True)
class Lost:
    """``count`` frames the stream skipped (a gap in its timestamps, or an outage): the pipeline
    records them as dropped with ``reason``; ``captured_ns`` is when the gap was seen."""

    count: int
    captured_ns: int
    reason: str


@dataclass
class Stream:
    """One sequence of frames: ``open()`` returns a fresh iterator; ``fps`` paces it (None: as
    fast as it can be read)."""

    name: str
    open: Callable[[], Iterator[Any]]
    fps: float | None = None
    description: str = ""


@dataclass
class Source:
    """Frames for :meth:`Pipeline.run`: one or several streams and the name of the read stage."""

    streams: list[Stream]
    stage: str = "read"
    description: str = ""
    meta: dict = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        """The frames themselves, without a pipeline: each stream in turn, unpaced
        (``for frame in video_file(path)``); a live stream's frames as they arrive."""
        for stream in self.streams:
            for item in stream.open():
                if isinstance(item, Captured):
                    yield item.frame
                elif not isinstance(item, Lost):
                    yield item


def frames(iterable: Iterable[Any], name: str = "frames", fps: float | None = None) -> Source:
    """Frames from any iterable (NumPy arrays, tensors, anything a stage accepts)."""
    if fps is not None:
        _check_fps(fps)
    return Source([Stream(name, lambda: iter(iterable), fps, "iterable")], "read",
                  f"iterable {name!r}")


def _check_fps(fps: float) -> None:
    if not isinstance(fps, (int, float)) or not np.isfinite(fps) or fps <= 0:
        raise InvalidArgument(f"fps must be a finite number > 0, got {fps!r}")


#: the largest synthetic frame side, in pixels (8K is 7680)
MAX_SIDE = 8192


def _check_size(width: Any, height: Any) -> None:
    for what, v in (("width", width), ("height", height)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_SIDE:
            raise InvalidArgument(f"{what} must be an int in 1..{MAX_SIDE}, got {v!r}")


def _import_av():
    try:
        import av  # type: ignore[import-not-found]
    except ImportError as err:
        raise Unavailable("decoding a video file needs PyAV: pip install av") from err
    return av


def video_file(path: str | os.PathLike, fmt: str = "rgb24", threads: int = 0,
               name: str | None = None, color_matrix: str | None = None,
               color_range: str | None = None) -> Source:
    """A video file decoded on the CPU with PyAV (FFmpeg inside the wheel).

    Each frame is an ``H×W×3`` uint8 NumPy array (``fmt`` is any PyAV pixel format). ``rgb24``
    is converted by swscale with the stream's own matrix and range (BT.601/BT.709,
    limited/full; ``color_matrix="bt601"|"bt709"`` and ``color_range="limited"|"full"``
    override; see :mod:`hookmagic.pipeline.color`), the same table :func:`nvdec_video` uses on
    the GPU, so both decoders give the same RGB. The file is
    probed here, so a missing, unreadable or corrupt file raises one
    :class:`~hookmagic.common.errors.InputFileError` naming the file and the decoder's message.
    ``threads`` > 0 lets FFmpeg decode with that many threads.
    """
    av = _import_av()
    color.check(color_matrix, color_range)
    path = Path(path)
    info = probe_video(path)
    matrix, rng = color.choose(info["colorspace"], info["color_range"], info["height"],
                               color_matrix, color_range)
    info = {**info, "rgb_matrix": matrix, "rgb_range": rng}
    convert = color.swscale_args(matrix, rng) if fmt == "rgb24" else None

    def open_() -> Iterator[np.ndarray]:
        return _decode(av, path, fmt, threads, convert)

    return Source([Stream(name or path.stem, open_, None, f"{path.name} (PyAV CPU decode)")],
                  "decode", f"{path.name}: {info['codec']} {info['width']}x{info['height']}"
                  f" {info['frames']} frames, PyAV {av.__version__} CPU decode", meta=info)


def probe_video(path: str | os.PathLike) -> dict:
    """Codec, size, frame count and rate of a video file (one InputFileError if unreadable)."""
    av = _import_av()
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{path}: no such video file")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputFileError(f"{path}: no video stream in this file")
            stream = container.streams.video[0]
            info = {"file": path.name, "codec": stream.codec_context.name,
                    "width": stream.codec_context.width, "height": stream.codec_context.height,
                    "frames": int(stream.frames or 0),
                    "rate": float(stream.average_rate) if stream.average_rate else None}
            # decode the first frame: a corrupt stream fails here, not inside a pipeline thread
            first = next(container.decode(stream), None)
            info["colorspace"] = int(first.colorspace) if first is not None else 0
            info["color_range"] = int(first.color_range) if first is not None else 0
    except InputFileError:
        raise
    except (av.error.FFmpegError, OSError, ValueError, StopIteration) as err:
        raise InputFileError(f"{path}: cannot be decoded by PyAV/FFmpeg: {err}") from err
    return info


def _decode(av: Any, path: Path, fmt: str, threads: int,
            convert: dict | None = None) -> Iterator[np.ndarray]:
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError) as err:
        raise InputFileError(f"{path}: cannot be decoded by PyAV/FFmpeg: {err}") from err
    try:
        stream = container.streams.video[0]
        if threads > 0:
            stream.thread_type = "AUTO"
            stream.codec_context.thread_count = threads
        try:
            for frame in container.decode(stream):
                if convert is not None:
                    yield frame.reformat(format=fmt, **convert).to_ndarray()
                else:
                    yield frame.to_ndarray(format=fmt)
        except av.error.FFmpegError as err:
            raise InputFileError(f"{path}: decoding failed in PyAV/FFmpeg: {err}") from err
    finally:
        container.close()


def _import_nvdec() -> tuple[str, Any]:
    """The GPU decoder library to use: PyNvVideoCodec, else torchcodec with CUDA; one
    Unavailable naming both reasons when neither imports."""
    why = []
    try:
        import PyNvVideoCodec as nvc  # type: ignore[import-not-found]
        return "PyNvVideoCodec", nvc
    except Exception as err:  # noqa: BLE001 - its import also fails on missing driver libraries
        why.append(f"PyNvVideoCodec: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    try:
        from torchcodec.decoders import VideoDecoder  # type: ignore[import-not-found]
        return "torchcodec", VideoDecoder
    except Exception as err:  # noqa: BLE001 - torchcodec raises RuntimeError without FFmpeg
        why.append(f"torchcodec: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    raise Unavailable(
        "NVDEC decoding needs PyNvVideoCodec (pip install pynvvideocodec; it brings its own "
        "FFmpeg demuxer and needs the NVIDIA driver's video libraries libnvcuvid.so and "
        "libnvidia-encode.so, in containers NVIDIA_DRIVER_CAPABILITIES must include 'video') "
        "or torchcodec built with CUDA (needs FFmpeg's shared libraries); here: "
        + "; ".join(why))


def _primary_context(gpu: int) -> int:
    """The handle of the GPU's primary CUDA context (the one torch uses), retained once."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), gpu)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev))):
        rc = getattr(cuda, call)(*args)
        if rc != 0:
            raise Unavailable(f"NVDEC: {call} failed with CUDA error {rc}")
    return int(ctx.value or 0)


class _CudaBytes:
    """A device buffer by address, for torch.as_tensor (CUDA array interface)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None}


def nvdec_video(path: str | os.PathLike, gpu: int = 0, fmt: str = "rgb",
                name: str | None = None, color_matrix: str | None = None,
                color_range: str | None = None) -> Source:
    """A video file decoded on the GPU's hardware decoder (NVDEC).

    Each frame is a CUDA tensor on GPU ``gpu``: ``fmt="rgb"`` an ``H×W×3`` uint8 tensor (the
    layout :func:`video_file` gives on the CPU), ``fmt="nv12"`` the decoder's native
    ``(H·3/2)×W`` uint8 NV12 surface (luma rows, then interleaved U/V rows). Frames are copies
    the decoder no longer touches, complete on the GPU when the next stage gets them.

    Uses PyNvVideoCodec (NVIDIA's bindings, with their own FFmpeg demuxer: MP4, MKV, raw H.264 /
    HEVC streams ...) or, without it, torchcodec's CUDA decoder (``fmt="rgb"`` only). Neither
    importable → :class:`~hookmagic.common.errors.Unavailable` naming what is missing. A missing
    or undecodable file → one InputFileError naming the file and the decoder's message.

    With PyNvVideoCodec, ``fmt="rgb"`` converts the NV12 surface here with the stream's matrix
    and range (read with PyAV when it is installed, else as PyNvVideoCodec's demuxer reports
    them; ``meta["color_tags"]`` says which; ``color_matrix=`` / ``color_range=`` override)
    from the table :func:`video_file` uses (:mod:`hookmagic.pipeline.color`).
    torchcodec converts with its own choice; ``meta["rgb_matrix"]`` says which path ran.
    """
    color.check(color_matrix, color_range)
    if fmt not in ("rgb", "nv12"):
        raise InvalidArgument(f"fmt must be 'rgb' or 'nv12', got {fmt!r}")
    if not isinstance(gpu, int) or gpu < 0:
        raise InvalidArgument(f"gpu must be a device index >= 0, got {gpu!r}")
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{path}: no such video file")
    backend, lib = _import_nvdec()
    if backend == "torchcodec" and fmt != "rgb":
        raise Unavailable("fmt='nv12' needs PyNvVideoCodec (torchcodec returns RGB only)")
    if backend == "PyNvVideoCodec":
        try:
            dmx = lib.CreateDemuxer(str(path))
            info = {"file": path.name, "codec": str(dmx.GetNvCodecId()),
                    "width": int(dmx.Width()), "height": int(dmx.Height()),
                    "rate": float(dmx.FrameRate()) or None}
            demuxer_tags = _demuxer_color_tags(dmx)
            del dmx
        except Exception as err:  # noqa: BLE001 - PyNvVideoCodec raises its own types
            raise InputFileError(f"{path}: cannot be demuxed by PyNvVideoCodec: {err}") from err
        tags = _color_tags(path)
        info["color_tags"] = "PyAV"
        if tags == (0, 0):  # no PyAV (or it read no tags): the demuxer's reading of the stream
            tags = demuxer_tags
            info["color_tags"] = ("PyNvVideoCodec demuxer" if tags != (0, 0)
                                  else "none (HD/SD convention)")
        info["rgb_matrix"], info["rgb_range"] = color.choose(
            tags[0], tags[1], info["height"], color_matrix, color_range)
        open_ = _pynvc_frames(lib, path, gpu, fmt, info)
    else:
        try:
            dec = lib(str(path), device=f"cuda:{gpu}")
            md = dec.metadata
            info = {"file": path.name, "codec": str(md.codec), "width": int(md.width),
                    "height": int(md.height), "frames": int(md.num_frames or 0),
                    "rate": float(md.average_fps or 0) or None,
                    "rgb_matrix": "torchcodec's own"}
            del dec
        except Exception as err:  # noqa: BLE001 - torchcodec raises RuntimeError/ValueError
            raise InputFileError(f"{path}: cannot be decoded by torchcodec: {err}") from err
        open_ = _torchcodec_frames(lib, path, gpu)
    info["decoder"] = f"{backend} NVDEC"
    return Source([Stream(name or path.stem, open_, None, f"{path.name} ({backend} NVDEC)")],
                  "decode", f"{path.name}: {info['codec']} {info['width']}x{info['height']}, "
                  f"{backend} NVDEC decode on GPU {gpu} ({fmt})", meta=info)


def _pynvc_frames(nvc: Any, path: Path, gpu: int, fmt: str,
                  info: dict) -> Callable[[], Iterator[Any]]:
    def open_() -> Iterator[Any]:
        import torch

        dev = torch.device("cuda", gpu)
        stream = torch.cuda.Stream(device=dev)
        h, w = info["height"], info["width"]
        # always NV12 from the decoder: RGB is converted here with the stream's own matrix and
        # range, as the CPU path converts it (PyNvVideoCodec's RGB output picks its own)
        convert = fmt == "rgb"
        try:
            dmx = nvc.CreateDemuxer(str(path))
            kw = dict(gpuid=gpu, codec=dmx.GetNvCodecId(), cudacontext=_primary_context(gpu),
                      cudastream=stream.cuda_stream, usedevicememory=True)
            try:
                dec = nvc.CreateDecoder(**kw, outputColorType=nvc.OutputColorType.NATIVE)
            except TypeError:  # a build without outputColorType: native NV12 already
                dec = nvc.CreateDecoder(**kw)
        except Unavailable:
            raise
        except Exception as err:  # noqa: BLE001
            raise InputFileError(f"{path}: PyNvVideoCodec cannot decode it: {err}") from err

        def take(frame: Any) -> Any:
            try:
                t = torch.from_dlpack(frame)
            except Exception:  # noqa: BLE001 - older builds: the CUDA array interface instead
                n = int(frame.framesize())
                t = torch.as_tensor(_CudaBytes(int(frame.GetPtrToPlane(0)), n), device=dev)
            t = _frame_layout(t, h, w, "nv12" if convert else fmt)
            if t is None:
                raise InputFileError(f"{path}: NVDEC frame of shape {tuple(t_shape(frame))} "
                                     f"does not fit {w}x{h} ({fmt})")
            return (_nv12_to_rgb(t, h, w, info["rgb_matrix"], info["rgb_range"]) if convert
                    else t.clone(memory_format=torch.contiguous_format))

        def t_shape(frame: Any) -> Any:
            try:
                return torch.from_dlpack(frame).shape
            except Exception:  # noqa: BLE001
                return (int(frame.framesize()),)

        # a blocking-sync event: the reader sleeps while the GPU finishes its frames instead of
        # spinning on a core (and its CPU time stays the time it works)
        ready = torch.cuda.Event(blocking=True)
        try:
            for packet in dmx:
                with torch.cuda.device(dev), torch.cuda.stream(stream):
                    try:
                        out = [take(f) for f in dec.Decode(packet)]
                    except InputFileError:
                        raise
                    except Exception as err:  # noqa: BLE001
                        raise InputFileError(f"{path}: NVDEC decoding failed: {err}") from err
                    if out:  # complete before another stream reads them
                        ready.record(stream)
                        ready.synchronize()
                yield from out
        finally:
            del dec, dmx
    return open_


def _frame_layout(t: Any, h: int, w: int, fmt: str) -> Any:
    """A decoded frame as ``h×w×3`` (rgb) or ``(h·3/2)×w`` (nv12), from what the decoder
    exported: the exact shape, a padded surface (rows or pitch beyond the picture), planar RGB,
    or flat bytes. None if it fits none of them."""
    if fmt == "rgb":
        if t.dim() == 3 and t.shape[-1] == 3 and t.shape[0] >= h and t.shape[1] >= w:
            return t[:h, :w]
        if t.dim() == 3 and t.shape[0] == 3 and t.shape[1] >= h and t.shape[2] >= w:
            return t[:, :h, :w].permute(1, 2, 0)
        return t.reshape(h, w, 3) if t.numel() == h * w * 3 else None
    if t.dim() == 2 and t.shape[1] >= w and t.shape[0] * 2 % 3 == 0 and t.shape[0] * 2 // 3 >= h:
        rows = t.shape[0] * 2 // 3  # the surface's luma rows (>= h when padded)
        if rows == h:
            return t[:, :w]
        import torch
        return torch.cat([t[:h, :w], t[rows:rows + h // 2, :w]])
    return t.reshape(h * 3 // 2, w) if t.numel() == h * w * 3 // 2 else None


def _demuxer_color_tags(dmx: Any) -> tuple[int, int]:
    """The stream's colour tags as PyNvVideoCodec's demuxer reports them (``ColorSpace()``:
    BT_601 / BT_709 / UNSPEC, ``ColorRange()``: MPEG / JPEG / UDEF), as FFmpeg's codes
    ((0, 0): unknown, or a demuxer without these methods)."""
    try:
        space, rng = str(dmx.ColorSpace()).upper(), str(dmx.ColorRange()).upper()
    except Exception:  # noqa: BLE001 - older builds lack the methods
        return 0, 0
    return (1 if "709" in space else 5 if "601" in space else 0,
            1 if "MPEG" in rng else 2 if "JPEG" in rng else 0)


def _color_tags(path: Path) -> tuple[int, int]:
    """The stream's FFmpeg colorspace and range codes, read with PyAV ((0, 0): unknown)."""
    try:
        info = probe_video(path)
    except (Unavailable, InputFileError):
        return 0, 0
    return info["colorspace"], info["color_range"]


def _nv12_to_rgb(t: Any, h: int, w: int, matrix: str = "bt601", rng: str = "limited") -> Any:
    """NV12 → ``h×w×3`` uint8 RGB on the GPU with :func:`hookmagic.pipeline.color.rgb_matrix`'s
    coefficients and :func:`~hookmagic.pipeline.color.chroma_index`'s chroma samples: the
    pixels :func:`video_file`'s swscale conversion gives."""
    import torch
    (y0, ys, cs), m = color.rgb_matrix(matrix, rng)
    y = (t[:h].float() - y0) * ys
    uv = t[h:].reshape(h // 2, w // 2, 2).float().sub(128).mul(cs)
    cols = torch.tensor(color.chroma_index(w // 2, w), device=t.device)
    uv = uv.repeat_interleave(2, 0)[:h].index_select(1, cols)
    u, v = uv[..., 0], uv[..., 1]
    rgb = torch.stack([m[0][0] * y + m[0][1] * u + m[0][2] * v,
                       m[1][0] * y + m[1][1] * u + m[1][2] * v,
                       m[2][0] * y + m[2][1] * u + m[2][2] * v], -1)
    return rgb.round().clamp(0, 255).to(torch.uint8)


def _torchcodec_frames(decoder_cls: Any, path: Path, gpu: int) -> Callable[[], Iterator[Any]]:
    def open_() -> Iterator[Any]:
        import torch

        dec = decoder_cls(str(path), device=f"cuda:{gpu}")
        for i in range(len(dec)):
            try:
                t = dec[i]
            except Exception as err:  # noqa: BLE001
                raise InputFileError(f"{path}: torchcodec NVDEC decoding failed: {err}") from err
            out = t.permute(1, 2, 0).contiguous()
            torch.cuda.current_stream(out.device).synchronize()
            yield out
    return open_


def image_folder(path: str | os.PathLike, pattern: str = "*.png") -> Source:
    """Images of a folder in name order, decoded with Pillow to ``H×W×3`` uint8 arrays."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputFileError(f"{folder}: no such folder")
    files = sorted(folder.glob(pattern))
    if not files:
        raise InputFileError(f"{folder}: no files match {pattern!r}")
    try:
        from PIL import Image
    except ImportError as err:
        raise MissingDependency("reading an image folder needs Pillow: "
                                f"{install_command('pipeline')}") from err

    def open_() -> Iterator[np.ndarray]:
        for file in files:
            try:
                with Image.open(file) as img:
                    yield np.asarray(img.convert("RGB"))
            except OSError as err:
                raise InputFileError(f"{file}: cannot be read as an image: {err}") from err

    return Source([Stream(folder.name, open_, None, f"{len(files)} images")], "read",
                  f"image folder {folder.name} ({len(files)} files)")


def synthetic_cameras(n: int, fps: float, height: int = 720, width: int = 1280,
                      seed: int = 0) -> Source:
    """``n`` synthetic cameras, each producing ``height×width×3`` uint8 frames at ``fps`` in real
    time (frame ``i`` of each camera is due ``i/fps`` seconds after the run starts).

    The pixels are synthetic (a few pre-made random frames, cycled); the pacing is real.
    """
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 1024:
        raise InvalidArgument(f"n (cameras) must be an int in 1..1024 (a thread each), got {n!r}")
    _check_fps(fps)
    _check_size(width, height)
    rng = np.random.default_rng(seed)
    pool = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(4)]

    def make(cam: int) -> Callable[[], Iterator[np.ndarray]]:
        def open_() -> Iterator[np.ndarray]:
            i = cam
            while True:
                yield pool[i % len(pool)].copy()
                i += 1
        return open_

    return Source([Stream(f"cam{c}", make(c), float(fps), f"synthetic camera {c}")
                   for c in range(n)], "capture",
                  f"{n} synthetic cameras at {fps:g} fps, {width}x{height}")


def as_source(obj: Any) -> Source:
    """A :class:`Source` as is; anything iterable wrapped by :func:`frames`."""
    if isinstance(obj, Source):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return video_file(obj)
    if hasattr(obj, "__iter__"):
        return frames(obj)
    raise InvalidArgument(f"not a frame source: {type(obj).__name__} (give an iterable of "
                          "frames, a video path, or a hookmagic.pipeline source)")


#: the patterns :func:`write_synthetic_video` draws
PATTERNS = ("bands", "natural")
#: FFmpeg's colorspace code written into a synthetic clip's stream for each matrix
_TAG = {"bt601": 6, "bt709": 1}


def write_synthetic_video(path: str | os.PathLike, frames: int = 60, width: int = 320,
                          height: int = 240, fps: int = 30, codec: str = "libx264",
                          preset: str = "veryfast", seed: int = 0, pattern: str = "bands",
                          color_matrix: str | None = None) -> Path:
    """Encode a *synthetic* test video with PyAV, ``frames`` long, ``width×height`` at ``fps``
    (``codec`` libx264 → H.264, yuv420p).

    ``pattern="bands"``: a moving gradient over fixed noise. ``"natural"``: a camera panning
    over a generated landscape-like texture (1/f amplitude spectrum, the statistics of natural
    images, with correlated colour channels) while a textured disc crosses it, so the encoder
    finds real motion and fine detail. ``color_matrix="bt601"|"bt709"`` converts the RGB
    pictures with that matrix (limited range) and tags the stream so (SMPTE 170M / BT.709);
    None leaves the stream untagged (FFmpeg's default conversion).

    For tests, notebooks and benchmarks: the file is really encoded, the pictures are generated.
    """
    if pattern not in PATTERNS:
        raise InvalidArgument(f"pattern must be one of {list(PATTERNS)}, got {pattern!r}")
    color.check(color_matrix, None)
    if not isinstance(frames, int) or isinstance(frames, bool) or not 1 <= frames <= 1_000_000:
        raise InvalidArgument(f"frames must be an int in 1..1000000, got {frames!r}")
    _check_size(width, height)
    if width % 2 or height % 2:
        raise InvalidArgument(f"yuv420p needs an even width and height, got {width}x{height}")
    _check_fps(fps)
    av = _import_av()
    if codec not in av.codecs_available:
        raise InvalidArgument(f"codec {codec!r} is not in this PyAV build (try libx264 or mpeg4)")
    path = Path(path)
    if not path.parent.is_dir():
        raise InvalidArgument(f"cannot write {path}: its folder does not exist")
    rng = np.random.default_rng(seed)
    picture = (_natural_pictures(frames, width, height, rng) if pattern == "natural"
               else _band_pictures(width, height, rng))
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if codec == "libx264":
            stream.options = {"preset": preset}
        if color_matrix is not None:
            stream.codec_context.colorspace = _TAG[color_matrix]
            stream.codec_context.color_range = 1  # limited (MPEG)
            convert = color.swscale_from_rgb_args(color_matrix)
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(picture(i), format="rgb24")
            if color_matrix is not None:
                frame = frame.reformat(format="yuv420p", **convert)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _band_pictures(width: int, height: int, rng: np.random.Generator) -> Callable[[int], Any]:
    """Frame i of the "bands" pattern: a gradient over fixed noise whose bands move."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.int32)
    base = np.stack([xx, yy, xx + yy], axis=-1)
    base = (base + rng.integers(0, 24, base.shape)).astype(np.uint8)
    step = np.array([4, 2, 1], dtype=np.uint8)
    return lambda i: base + (step * (i % 256)).astype(np.uint8)  # uint8 wraps: moving bands


def _one_over_f(h: int, w: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """A zero-mean, unit-variance ``h×w`` field whose amplitude spectrum falls as 1/f^exponent."""
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.hypot(fx, fy)
    f[0, 0] = 1.0
    spec = (rng.standard_normal(f.shape) + 1j * rng.standard_normal(f.shape)) / f ** exponent
    spec[0, 0] = 0.0
    x = np.fft.irfft2(spec, s=(h, w))
    return (x - x.mean()) / (x.std() or 1.0)


def _texture(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """An ``h×w×3`` uint8 landscape-like texture: 1/f luminance, smoother and weaker colour."""
    lum = _one_over_f(h, w, 1.0, rng)
    c1, c2 = _one_over_f(h, w, 1.5, rng), _one_over_f(h, w, 1.5, rng)
    rgb = np.stack([118 + 48 * lum + 34 * c1, 112 + 48 * lum - 12 * c1 + 14 * c2,
                    100 + 48 * lum - 40 * c2], axis=-1)
    return np.clip(np.round(rgb), 0, 255).astype(np.uint8)


def _natural_pictures(frames: int, width: int, height: int,
                      rng: np.random.Generator) -> Callable[[int], Any]:
    """Frame i of the "natural" pattern: a window panning (3 px right, 1 px down a frame, back
    and forth) over a larger texture, with a textured disc crossing it the other way."""
    span = min(frames, 240)  # the pan turns back after this many frames
    big = _texture(height + span + 1, width + 3 * span + 1, rng)
    d = max(8, min(width, height) // 4)
    disc = _texture(d, d, rng)
    yy, xx = np.mgrid[0:d, 0:d]
    inside = (yy - d / 2) ** 2 + (xx - d / 2) ** 2 <= (d / 2) ** 2

    def picture(i: int) -> np.ndarray:
        k = i % (2 * span)
        k = k if k < span else 2 * span - k
        img = big[k:k + height, 3 * k:3 * k + width].copy()
        x = int((width - d) * (1 - (i % frames) / max(frames - 1, 1)))
        y = (height - d) // 2
        img[y:y + d, x:x + d][inside] = disc[inside]
        return img
    return picture
