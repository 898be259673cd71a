"""One colour truth: the CPU decoder's RGB follows the stream's matrix and range, matches the
ITU formulas applied to the decoded YUV, and the GPU path's NV12 → RGB (run here on CPU tensors)
gives the same pixels. Clips are synthetic, really encoded with PyAV's x264."""
from __future__ import annotations

import numpy as np
import pytest

av = pytest.importorskip("av")

from hookmagic.common.errors import InvalidArgument  # noqa: E402
from hookmagic.pipeline import video_file  # noqa: E402

# (Kr, Kb) straight from ITU-R BT.601-7 and BT.709-6, independent of hookmagic.pipeline.color
ITU = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
W, H = 96, 64


def _encode(path, colorspace=None, color_range=None, frames=3):
    """A synthetic clip of saturated colour blocks (where BT.601 and BT.709 differ most)."""
    rng = np.random.default_rng(1)
    blocks = rng.integers(0, 256, (H // 16, W // 16, 3)).astype(np.uint8)
    img = np.kron(blocks, np.ones((16, 16, 1), np.uint8))
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.options = {"preset": "veryfast", "qp": "0"}
        if colorspace is not None:
            s.codec_context.colorspace = colorspace
        if color_range is not None:
            s.codec_context.color_range = color_range
        for _ in range(frames):
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def _yuv_planes(path):
    with av.open(str(path)) as c:
        f = next(c.decode(video=0))
        yuv = f.to_ndarray(format="yuv420p")
    y = yuv[:H].astype(float)
    u = yuv[H:H + H // 4].reshape(H // 2, W // 2).astype(float)
    v = yuv[H + H // 4:].reshape(H // 2, W // 2).astype(float)
    return y, u, v


def _itu_rgb(y, u, v, matrix, full):
    """The textbook conversion; pixel (x, y) takes chroma sample ((x + 1) // 2, y // 2), the
    sample FFmpeg's swscale takes with point sampling and full chroma interpolation."""
    kr, kb = ITU[matrix]
    kg = 1 - kr - kb
    cols = np.minimum((np.arange(W) + 1) // 2, W // 2 - 1)
    rows = np.arange(H) // 2
    u = u[rows][:, cols] - 128
    v = v[rows][:, cols] - 128
    if not full:
        y, u, v = (y - 16) * 255 / 219, u * 255 / 224, v * 255 / 224
    r = y + 2 * (1 - kr) * v
    g = y - 2 * (1 - kb) * kb / kg * u - 2 * (1 - kr) * kr / kg * v
    b = y + 2 * (1 - kb) * u
    return np.clip(np.round(np.stack([r, g, b], -1)), 0, 255)


@pytest.mark.parametrize("tags, matrix, full", [
    ((1, 1), "bt709", False),      # AVCOL_SPC_BT709, limited
    ((5, 1), "bt601", False),      # AVCOL_SPC_BT470BG, limited
    ((6, 2), "bt601", True),       # SMPTE170M, full range
    ((None, None), "bt601", False),  # untagged, under 720 lines: BT.601 limited
])
def test_cpu_rgb_follows_the_streams_matrix_and_range(tmp_path, tags, matrix, full):
    clip = _encode(tmp_path / "synthetic.mp4", *tags)
    src = video_file(clip)
    assert (src.meta["rgb_matrix"], src.meta["rgb_range"]) == (matrix,
                                                                "full" if full else "limited")
    got = next(iter(src)).astype(float)
    ref = _itu_rgb(*_yuv_planes(clip), matrix, full)
    assert np.abs(got - ref).max() <= 1
    other = _itu_rgb(*_yuv_planes(clip), "bt709" if matrix == "bt601" else "bt601", full)
    assert np.abs(got - other).max() > 8  # the matrices really differ on these colours


def test_color_matrix_override_wins_over_the_tags(tmp_path):
    clip = _encode(tmp_path / "synthetic.mp4", 1, 1)  # tagged BT.709
    got = next(iter(video_file(clip, color_matrix="bt601"))).astype(float)
    ref = _itu_rgb(*_yuv_planes(clip), "bt601", False)
    assert np.abs(got - ref).max() <= 1
    with pytest.raises(InvalidArgument):
        video_file(clip, color_matrix="bt2020")
    with pytest.raises(InvalidArgument):
        video_file(clip, color_range="tv")


@pytest.mark.parametrize("tags", [(1, 1), (5, 1), (6, 2)])
def test_gpu_path_conversion_agrees_with_ffmpegs(tmp_path, tags):
    torch = pytest.importorskip("torch")
    from hookmagic.pipeline.sources import _nv12_to_rgb

    clip = _encode(tmp_path / "synthetic.mp4", *tags)
    src = video_file(clip)
    cpu = next(iter(src)).astype(int)
    y, u, v = _yuv_planes(clip)
    nv12 = np.concatenate([y, np.stack([u, v], -1).reshape(H // 2, W)]).astype(np.uint8)
    gpu_path = _nv12_to_rgb(torch.from_numpy(nv12), H, W, src.meta["rgb_matrix"],
                            src.meta["rgb_range"]).numpy().astype(int)
    assert np.abs(gpu_path - cpu).max() <= 1


@pytest.mark.parametrize("space, rng, codes", [
    ("ColorSpace.BT_709", "ColorRange.MPEG", (1, 1)),
    ("ColorSpace.BT_601", "ColorRange.JPEG", (5, 2)),
    ("ColorSpace.UNSPEC", "ColorRange.UDEF", (0, 0)),
])
def test_nvdec_reads_the_tags_from_pynvvideocodecs_demuxer_without_pyav(space, rng, codes):
    from hookmagic.pipeline import color
    from hookmagic.pipeline.sources import _demuxer_color_tags

    class Demuxer:  # synthetic: what PyNvVideoCodec 2.2's demuxer answers (enum values)
        def ColorSpace(self):  # noqa: N802 - its method names
            return space

        def ColorRange(self):  # noqa: N802
            return rng

    assert _demuxer_color_tags(Demuxer()) == codes
    # the codes mean to color.choose what FFmpeg's would: a 480-line BT.709 stream is BT.709
    matrix, full = color.choose(*codes, height=480)
    assert (matrix, full) == {(1, 1): ("bt709", "limited"), (5, 2): ("bt601", "full"),
                              (0, 0): ("bt601", "limited")}[codes]
    assert _demuxer_color_tags(object()) == (0, 0)  # a build without the methods
