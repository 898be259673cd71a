"""Real video through hookmagic.pipeline: synthetic H.264 clips encoded here with PyAV (the
pictures are generated, the encoding and decoding are real FFmpeg), decoded by video_file."""
from __future__ import annotations

import numpy as np
import pytest

from hookmagic.common.errors import InputFileError
from hookmagic.pipeline import (Pipeline, Stage, image_folder, probe_video, video_file,
                                write_synthetic_video)

av = pytest.importorskip("av", reason="PyAV is not installed (pip install av; in the dev extra)")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_synthetic_video(tmp_path_factory.mktemp("video") / "synthetic_clip.mp4",
                                 frames=30, width=160, height=96, fps=25)


def test_probe_reads_what_was_encoded(clip):
    info = probe_video(clip)
    assert (info["codec"], info["width"], info["height"], info["frames"]) == ("h264", 160, 96, 30)
    assert info["rate"] == 25


def test_decoded_frames_match_the_generated_pictures(clip):
    # regenerate the pictures write_synthetic_video encoded and compare after lossy H.264
    src = video_file(clip)
    frames = list(src.streams[0].open())
    assert len(frames) == 30 and frames[0].shape == (96, 160, 3) and frames[0].dtype == np.uint8
    # reference: PyAV's own YUV planes through the BT.601 limited-range formula (the clip is
    # untagged and under 720 lines)
    from tests.synthetic_h264 import yuv420_to_rgb_bt601
    h, w = 96, 160
    with av.open(str(clip)) as c:
        planes = [f.to_ndarray(format="yuv420p") for f in c.decode(video=0)]
    ref = [yuv420_to_rgb_bt601(p[:h], p[h:h + h // 4].reshape(h // 2, w // 2),
                               p[h + h // 4:].reshape(h // 2, w // 2)) for p in planes]
    assert len(ref) == 30
    assert max(int(np.abs(a.astype(int) - b.astype(int)).max()) for a, b in zip(frames, ref)) <= 1
    # consecutive frames differ (the bands move), so this is not one frame repeated
    assert np.abs(frames[1].astype(int) - frames[0].astype(int)).mean() > 1


def test_a_video_pipeline_records_decode_as_its_first_stage(clip):
    means = []
    run = Pipeline([Stage("preprocess", lambda f: f.astype(np.float32) / 255),
                    Stage("reduce", lambda x: means.append(float(x.mean())) or x)]).run(
        video_file(clip))
    assert run.stage_names == ["decode", "preprocess", "reduce"]
    assert run.outcomes.to_dict() == {"done": 30} and len(means) == 30
    assert run.stages().loc["decode", "frames"] == 30
    assert "h264 160x96 30 frames" in run.meta["source"]


def test_a_corrupt_video_raises_one_error_naming_the_file(tmp_path, clip):
    bad = tmp_path / "synthetic_corrupt.mp4"
    data = bytearray(clip.read_bytes())
    bad.write_bytes(b"\x00" * 64 + bytes(data[64: len(data) // 3]))
    with pytest.raises(InputFileError, match="synthetic_corrupt.mp4"):
        video_file(bad)
    junk = tmp_path / "synthetic_junk.mp4"
    junk.write_bytes(b"this is not a video")
    with pytest.raises(InputFileError, match="synthetic_junk.mp4.*PyAV/FFmpeg"):
        video_file(junk)
    with pytest.raises(InputFileError, match="no such video file"):
        video_file(tmp_path / "missing.mp4")


def test_image_folder_reads_images_in_name_order(tmp_path):
    from PIL import Image

    for i in range(3):
        Image.fromarray(np.full((8, 8, 3), 50 * i, np.uint8)).save(tmp_path / f"synthetic_{i}.png")
    seen = []
    run = Pipeline([Stage("v", lambda f: seen.append(int(f[0, 0, 0])) or f)]).run(
        image_folder(tmp_path))
    assert seen == [0, 50, 100] and run.stage_names[0] == "read"
    with pytest.raises(InputFileError, match="no files match"):
        image_folder(tmp_path, "*.jpg")
