"""The NVDEC source's CPU-side behaviour, and the lossless synthetic H.264 writer the GPU test
decodes: FFmpeg (PyAV) must return exactly the YUV samples written (H.264 decoding is
bit-exact), so the same clip checks NVDEC exactly on the GPU machine (tests/gpu)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from hookmagic.common.errors import HookmagicError, InputFileError, InvalidArgument, Unavailable
from hookmagic.pipeline import Pipeline, Stage, nvdec_video, video_file
from tests.synthetic_h264 import (synthetic_yuv_frames, write_pcm_h264,
                                         yuv420_to_rgb_bt601)

av = pytest.importorskip("av", reason="PyAV is not installed (pip install av; in the dev extra)")


def _pyav_yuv(path):
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="yuv420p") for f in c.decode(video=0)]


@pytest.mark.parametrize("size", [(320, 240), (200, 120)])  # 200x120: padded and cropped
def test_ffmpeg_decodes_the_pcm_clip_to_exactly_the_written_samples(tmp_path, size):
    w, h = size
    frames = synthetic_yuv_frames(5, w, h, seed=3)
    path = write_pcm_h264(tmp_path / "synthetic.h264", frames, fps=25)
    got = _pyav_yuv(path)
    assert len(got) == 5
    for g, (y, u, v) in zip(got, frames):
        assert g.shape == (h * 3 // 2, w)
        assert np.array_equal(g[:h], y)
        assert np.array_equal(g[h:h + h // 4].reshape(h // 2, w // 2), u)
        assert np.array_equal(g[h + h // 4:].reshape(h // 2, w // 2), v)
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        assert (s.codec_context.name, s.codec_context.width, s.codec_context.height) == (
            "h264", w, h)


def test_the_pcm_clip_runs_through_a_cpu_pipeline(tmp_path):
    frames = synthetic_yuv_frames(8, 64, 48)
    path = write_pcm_h264(tmp_path / "synthetic.h264", frames)
    run = Pipeline([Stage("mean", lambda f: float(f.mean()))]).run(video_file(path))
    assert run.outcomes.to_dict() == {"done": 8}


def test_the_bt601_reference_agrees_with_the_cpu_decoders_rgb(tmp_path):
    frames = synthetic_yuv_frames(2, 64, 48)
    path = write_pcm_h264(tmp_path / "synthetic.h264", frames)  # untagged, 48 lines: BT.601
    rgb = list(video_file(path))
    assert len(rgb) == 2
    for got, (y, u, v) in zip(rgb, frames):
        d = np.abs(got.astype(int) - yuv420_to_rgb_bt601(y, u, v).astype(int))
        assert d.max() <= 1


@pytest.mark.parametrize("bad", [
    lambda p: write_pcm_h264(p, []),
    lambda p: write_pcm_h264(p, [(np.zeros((15, 16), np.uint8),) * 3]),
    lambda p: write_pcm_h264(p, [(np.zeros((16, 16), np.uint8), np.zeros((8, 8), np.uint8),
                                  np.zeros((4, 8), np.uint8))]),
    lambda p: write_pcm_h264(p, [(np.zeros((16, 16)), np.zeros((8, 8)), np.zeros((8, 8)))]),
])
def test_the_writer_refuses_what_it_cannot_write(tmp_path, bad):
    with pytest.raises(InvalidArgument):
        bad(tmp_path / "x.h264")


def test_nvdec_without_a_decoder_library_names_what_is_missing(tmp_path, monkeypatch):
    path = write_pcm_h264(tmp_path / "synthetic.h264", synthetic_yuv_frames(1, 32, 32))
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)  # import fails
    monkeypatch.setitem(sys.modules, "torchcodec", None)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)
    with pytest.raises(Unavailable) as err:
        nvdec_video(path)
    msg = str(err.value)
    assert "PyNvVideoCodec" in msg and "torchcodec" in msg and "libnvcuvid" in msg
    assert isinstance(err.value, HookmagicError)


def test_nvdec_argument_and_file_errors(tmp_path):
    with pytest.raises(InputFileError, match="no such video file"):
        nvdec_video(tmp_path / "missing.mp4")
    with pytest.raises(InvalidArgument):
        nvdec_video(tmp_path / "missing.mp4", fmt="bgr")
    with pytest.raises(InvalidArgument):
        nvdec_video(tmp_path / "missing.mp4", gpu=-1)


def test_decoded_surfaces_of_any_exported_layout_become_the_picture():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from hookmagic.pipeline.sources import _frame_layout

    h, w = 6, 8
    nv12 = torch.arange(h * 3 // 2 * w, dtype=torch.int32).reshape(h * 3 // 2, w)
    # a surface padded to 8 luma rows and a 16-byte pitch: picture rows, then chroma rows
    padded = torch.full((12, 16), -1, dtype=torch.int32)
    padded[:h, :w], padded[8:8 + h // 2, :w] = nv12[:h], nv12[h:]
    assert torch.equal(_frame_layout(padded, h, w, "nv12"), nv12)
    assert torch.equal(_frame_layout(nv12.flatten(), h, w, "nv12"), nv12)
    rgb = torch.arange(h * w * 3).reshape(h, w, 3)
    assert torch.equal(_frame_layout(rgb.permute(2, 0, 1), h, w, "rgb"), rgb)  # planar
    assert torch.equal(_frame_layout(torch.nn.functional.pad(rgb, (0, 0, 0, 4, 0, 2)), h, w,
                                     "rgb"), rgb)
    assert _frame_layout(torch.zeros(5), h, w, "rgb") is None


def test_the_gpu_side_nv12_to_rgb_agrees_with_the_numpy_bt601_reference():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    from hookmagic.pipeline.sources import _nv12_to_rgb

    for y, u, v in synthetic_yuv_frames(2, 64, 48):
        nv12 = np.concatenate([y, np.stack([u, v], -1).reshape(24, 64)])
        got = _nv12_to_rgb(torch.from_numpy(nv12), 48, 64).numpy().astype(int)
        assert np.abs(got - yuv420_to_rgb_bt601(y, u, v).astype(int)).max() <= 1
