"""YUV → RGB: the one table of coefficients every decoder path converts with.

A stream says which matrix (BT.601 or BT.709) and range (limited 16–235/240 or full 0–255) its
YUV samples use. The CPU path (:func:`hookmagic.pipeline.video_file`) hands that to FFmpeg's
swscale; the GPU path (:func:`hookmagic.pipeline.nvdec_video`) converts NVDEC's NV12 with
:func:`rgb_matrix` of the same matrix and range, so both give a model the same pixels.

A stream that does not say (x264's default) is read as FFmpeg players and browsers do: BT.709
from 720 lines up, BT.601 below, limited range. ``color_matrix=`` / ``color_range=`` override.
"""
from __future__ import annotations

from typing import Any

from hookmagic.common.errors import InvalidArgument

#: (Kr, Kb) of each matrix (ITU-R BT.601-7 and BT.709-6); Kg = 1 - Kr - Kb
MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
RANGES = ("limited", "full")
#: FFmpeg's AVColorSpace codes (frame.colorspace) that name one of the matrices
_AV_MATRIX = {1: "bt709", 5: "bt601", 6: "bt601"}
#: FFmpeg's AVColorRange codes (frame.color_range)
_AV_RANGE = {1: "limited", 2: "full"}
#: the lines from which a stream that names no matrix is read as BT.709
HD_LINES = 720


def choose(colorspace: Any, color_range: Any, height: int, color_matrix: str | None = None,
           range_override: str | None = None) -> tuple[str, str]:
    """The (matrix, range) to convert with: the overrides, else the stream's own tags (FFmpeg
    codes), else the HD/SD convention of the module docstring."""
    check(color_matrix, range_override)
    matrix = color_matrix or _AV_MATRIX.get(_code(colorspace)) or (
        "bt709" if height >= HD_LINES else "bt601")
    rng = range_override or _AV_RANGE.get(_code(color_range)) or "limited"
    return matrix, rng


def check(color_matrix: str | None, color_range: str | None) -> None:
    """Refuse a matrix or range this module has no coefficients for."""
    if color_matrix is not None and color_matrix not in MATRICES:
        raise InvalidArgument(f"color_matrix must be one of {sorted(MATRICES)}, "
                              f"got {color_matrix!r}")
    if color_range is not None and color_range not in RANGES:
        raise InvalidArgument(f"color_range must be one of {list(RANGES)}, got {color_range!r}")


def _code(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def rgb_matrix(matrix: str, rng: str) -> tuple[tuple[float, float], list[list[float]]]:
    """``((y_offset, y_scale, c_scale), M)``: RGB = M · (y_scale·(Y - y_offset),
    c_scale·(U - 128), c_scale·(V - 128)), all in 0–255 units."""
    check(matrix, rng)
    kr, kb = MATRICES[matrix]
    kg = 1.0 - kr - kb
    m = [[1.0, 0.0, 2 * (1 - kr)],
         [1.0, -2 * (1 - kb) * kb / kg, -2 * (1 - kr) * kr / kg],
         [1.0, 2 * (1 - kb), 0.0]]
    scale = (16.0, 255 / 219, 255 / 224) if rng == "limited" else (0.0, 1.0, 1.0)
    return scale, m  # type: ignore[return-value]


def chroma_index(n: int, full: int) -> list[int]:
    """For each of ``full`` luma columns, the chroma column it takes (``n`` columns in all): the
    sample at or right after it, as swscale's point sampling with full chroma interpolation
    does; rows take row ``y // 2`` (pass ``full`` rows and use ``[y // 2 ...]``)."""
    return [min((x + 1) // 2, n - 1) for x in range(full)]


def swscale_args(matrix: str, rng: str) -> dict:
    """Keyword arguments for PyAV's ``VideoFrame.reformat`` that make swscale convert from
    ``matrix``/``rng`` to full-range RGB exactly (accurate rounding, full chroma, point
    sampling: the formula of :func:`rgb_matrix` with the chroma of :func:`chroma_index`,
    instead of swscale's fast tables, which are off by one level on most pixels)."""
    from av.video.reformatter import ColorRange, Colorspace, Interpolation
    return {"src_colorspace": Colorspace.ITU709 if matrix == "bt709" else Colorspace.ITU601,
            "src_color_range": ColorRange.MPEG if rng == "limited" else ColorRange.JPEG,
            "dst_color_range": ColorRange.JPEG,
            "interpolation": (Interpolation.POINT | Interpolation.ACCURATE_RND
                              | Interpolation.FULL_CHR_H_INT)}


def swscale_from_rgb_args(matrix: str) -> dict:
    """Keyword arguments for PyAV's ``VideoFrame.reformat`` from full-range RGB to limited-range
    YUV with ``matrix`` (writing a clip tagged with that matrix, accurately rounded)."""
    from av.video.reformatter import ColorRange, Colorspace, Interpolation
    check(matrix, None)
    return {"dst_colorspace": Colorspace.ITU709 if matrix == "bt709" else Colorspace.ITU601,
            "src_color_range": ColorRange.JPEG, "dst_color_range": ColorRange.MPEG,
            "interpolation": Interpolation.BILINEAR | Interpolation.ACCURATE_RND}
