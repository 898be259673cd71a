"""NVDEC through hookmagic.pipeline.nvdec_video on a real GPU.

The clip is made at test time: synthetic YUV frames written as lossless I_PCM H.264
(tests/synthetic_h264.py; no encoder needed). H.264 decoding is bit-exact, so NVDEC must
return exactly the written samples (NV12), as FFmpeg does on the CPU (tests/test_pipeline_nvdec.py).
The RGB output is compared with a BT.601 reference conversion: mean |difference| <= 2 and 99th
percentile <= 6 (8-bit levels; converters differ in rounding and chroma upsampling). Where PyAV
is installed, an x264-encoded clip is also decoded on both sides and must agree exactly in YUV.
Without PyNvVideoCodec (or torchcodec with CUDA) the tests skip with the reason the source gives.
"""
from __future__ import annotations

import numpy as np
import pytest

from hookmagic.common.errors import Unavailable
from hookmagic.pipeline import Pipeline, Stage, nvdec_video
from tests.synthetic_h264 import (synthetic_yuv_frames, write_pcm_h264,
                                         yuv420_to_rgb_bt601)
from hookmagic.pipeline.sources import _import_nvdec

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

W, H, N = 320, 240, 24


@pytest.fixture(scope="module")
def backend():
    try:
        name, _ = _import_nvdec()
    except Unavailable as err:
        pytest.skip(f"NVDEC unavailable here: {err}")
    return name


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    frames = synthetic_yuv_frames(N, W, H, seed=7)
    return write_pcm_h264(tmp_path_factory.mktemp("nvdec") / "synthetic_pcm.h264", frames), frames


def _split_nv12(t, h, w):
    a = t.cpu().numpy()
    assert a.shape == (h * 3 // 2, w)
    uv = a[h:].reshape(h // 2, w // 2, 2)
    return a[:h], uv[..., 0], uv[..., 1]


def test_nvdec_returns_exactly_the_samples_of_a_lossless_clip(backend, clip):
    if backend != "PyNvVideoCodec":
        pytest.skip("NV12 output needs PyNvVideoCodec (torchcodec returns RGB)")
    path, frames = clip
    got = list(nvdec_video(path, fmt="nv12").streams[0].open())
    assert len(got) == N
    assert got[0].is_cuda and got[0].dtype == torch.uint8
    mismatched = []
    for i, (g, (y, u, v)) in enumerate(zip(got, frames)):
        gy, gu, gv = _split_nv12(g, H, W)
        if not (np.array_equal(gy, y) and np.array_equal(gu, u) and np.array_equal(gv, v)):
            mismatched.append((i, int(np.abs(gy.astype(int) - y).max()),
                               int(np.abs(gu.astype(int) - u).max()),
                               int(np.abs(gv.astype(int) - v).max())))
    assert not mismatched, f"(frame, max |dY|, |dU|, |dV|): {mismatched[:5]}"


def test_nvdec_rgb_is_within_the_stated_tolerance_of_a_bt601_conversion(backend, clip):
    path, frames = clip
    got = list(nvdec_video(path, fmt="rgb").streams[0].open())
    assert len(got) == N
    d = np.concatenate([np.abs(g.cpu().numpy().astype(int) - yuv420_to_rgb_bt601(*f).astype(int))
                        .ravel() for g, f in zip(got, frames)])
    print(f"NVDEC RGB vs BT.601 reference: mean {d.mean():.3f}, p99 {np.percentile(d, 99):.0f},"
          f" max {d.max()}")
    assert got[0].shape == (H, W, 3)
    if backend == "PyNvVideoCodec":  # converted here with the table the CPU path uses
        assert d.max() <= 1
    else:  # torchcodec converts with its own choice
        assert d.mean() <= 2.0 and np.percentile(d, 99) <= 6


@pytest.mark.parametrize("size, matrix", [((1280, 720), None), ((640, 480), "bt601"),
                                          ((1280, 720), "bt709")],
                         ids=["720p-untagged", "sd-bt601-limited", "hd-bt709-limited"])
def test_nvdec_rgb_equals_the_cpu_decoders_rgb(backend, tmp_path, size, matrix):
    """One colour truth: the same x264 clip (natural-looking, B-frames) gives the same RGB from
    NVDEC and from PyAV/FFmpeg, within one level."""
    pytest.importorskip("av", reason="PyAV is not installed on this machine")
    if backend != "PyNvVideoCodec":
        pytest.skip("torchcodec converts with its own matrix; the agreement is PyNvVideoCodec's")
    from hookmagic.pipeline import video_file, write_synthetic_video
    w, h = size
    path = write_synthetic_video(tmp_path / "synthetic_x264.mp4", frames=12, width=w, height=h,
                                 pattern="natural", color_matrix=matrix)
    cpu_src, gpu_src = video_file(path), nvdec_video(path)
    assert gpu_src.meta["rgb_matrix"] == cpu_src.meta["rgb_matrix"]
    cpu = list(cpu_src)
    gpu = [g.cpu().numpy() for g in gpu_src]
    assert len(cpu) == len(gpu) == 12
    d = np.concatenate([np.abs(a.astype(int) - b.astype(int)).ravel() for a, b in zip(cpu, gpu)])
    print(f"NVDEC vs PyAV RGB ({cpu_src.meta['rgb_matrix']}, {cpu_src.meta['rgb_range']}): "
          f"mean {d.mean():.3f}, max {d.max()}")
    assert d.max() <= 1


def test_nvdec_agrees_with_pyav_cpu_decode_of_an_x264_clip(backend, tmp_path):
    av = pytest.importorskip("av", reason="PyAV is not installed on this machine (the lossless "
                                          "clip above is the exact check)")
    from hookmagic.pipeline import write_synthetic_video
    path = write_synthetic_video(tmp_path / "synthetic_x264.mp4", frames=30, width=W, height=H)
    with av.open(str(path)) as c:
        cpu = [f.to_ndarray(format="yuv420p") for f in c.decode(video=0)]
    if backend == "PyNvVideoCodec":
        gpu = [g.cpu().numpy() for g in nvdec_video(path, fmt="nv12").streams[0].open()]
        assert len(gpu) == len(cpu) == 30
        for g, c_ in zip(gpu, cpu):
            gy, gu, gv = _split_nv12(torch.from_numpy(g), H, W)
            assert np.array_equal(gy, c_[:H])
            assert np.array_equal(gu, c_[H:H + H // 4].reshape(H // 2, W // 2))
            assert np.array_equal(gv, c_[H + H // 4:].reshape(H // 2, W // 2))
    else:
        assert len(list(nvdec_video(path).streams[0].open())) == len(cpu)


def test_an_nvdec_source_feeds_a_gpu_pipeline(backend, clip):
    path, _ = clip
    run = Pipeline([Stage("preprocess", lambda f: f.permute(2, 0, 1).float().mean(),
                          device="cuda"),
                    Stage("post", lambda x: float(x), device="cuda")]).run(nvdec_video(path))
    assert run.outcomes.to_dict() == {"done": N}
    assert run.stage_names[0] == "decode"
    ev = run.events[run.events["stage"] == "preprocess"]
    ev = ev[ev["gpu_start_ns"] >= 0]  # the timed executions (INTERVAL_S apart)
    assert len(ev) >= 1 and (ev["gpu_end_ns"] >= ev["gpu_start_ns"]).all()
