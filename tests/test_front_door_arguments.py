"""Wrong arguments to the methods users call on results are one InvalidArgument naming what is
wrong, never a bare TypeError or AttributeError from deep inside (a real recording, a trtexec
sample, a synthetic pipeline)."""
from __future__ import annotations

import pytest

import hookmagic
from hookmagic.common.errors import InvalidArgument
from hookmagic.layers.samples import load_sample


@pytest.fixture(scope="module")
def trace():
    return hookmagic.recordings.load("mlp_training")


@pytest.fixture(scope="module")
def profile():
    return load_sample("resnet50_fp16")


@pytest.mark.parametrize("path", [None, 5, b"saved.hmtrace", 2.5])
def test_load_takes_a_path_or_a_recording_name(path):
    with pytest.raises(InvalidArgument, match="path"):
        hookmagic.load(path)


def test_saving_and_exporting_refuse_what_is_not_a_file_path(trace, tmp_path):
    with pytest.raises(InvalidArgument):
        trace.save(None)
    with pytest.raises(InvalidArgument, match="directory"):
        trace.to_chrome_trace(tmp_path)


@pytest.mark.parametrize("call, match", [
    (lambda t, p: t.flame(no_such_option=1), "unexpected keyword argument 'no_such_option'"),
    (lambda t, p: t.timeline(bogus=True), "unexpected keyword argument 'bogus'"),
    (lambda t, p: t.diff(5), "another Trace, not int"),
    (lambda t, p: t.summary(top="3"), "top must be an integer"),
    (lambda t, p: t.summary(top=-1), "top must be >= 1"),
    (lambda t, p: p.compare(5), "another LayerProfile, not int"),
    (lambda t, p: p.top(-1), "n must be >= 1"),
    (lambda t, p: p.top(3, by="nope"), "by must be one of"),
])
def test_wrong_method_arguments_are_invalid_argument(trace, profile, call, match):
    with pytest.raises(InvalidArgument, match=match):
        call(trace, profile)


def test_a_pipeline_chart_with_an_unknown_option(trace):
    from hookmagic.pipeline import Pipeline, Stage, frames
    run = Pipeline([Stage("a", lambda x: x)]).run(frames(range(4)))
    with pytest.raises(InvalidArgument, match="unexpected keyword argument 'colour'"):
        run.gantt(colour="red")
    assert run.gantt(frames=2) is not None


def test_exports_never_land_on_a_saved_result(trace, tmp_path):
    from hookmagic.pipeline import Pipeline, Stage, frames
    saved = trace.save(tmp_path / "t.hmtrace")
    before = saved.read_bytes()
    with pytest.raises(InvalidArgument, match="ending in .json"):
        trace.to_chrome_trace(saved)           # Chrome JSON over the trace it came from
    assert saved.read_bytes() == before
    run = Pipeline([Stage("a", lambda x: x)]).run(frames(range(4)))
    kept = run.save(tmp_path / "p.hmpipe")
    for export in (run.to_csv, run.to_parquet, run.to_chrome_trace):
        with pytest.raises(InvalidArgument, match="give a name ending in"):
            export(kept)
    assert hookmagic.load(kept).frames.shape == run.frames.shape


def test_a_layer_profile_is_not_saved_over_the_export_it_was_read_from(tmp_path):
    import json
    import shutil

    from hookmagic.layers import from_trtexec
    from hookmagic.layers.samples import sample_files
    profile_json = tmp_path / "model.profile.json"
    shutil.copy(sample_files("resnet50_fp16")["profile"], profile_json)
    before = profile_json.read_bytes()
    prof = from_trtexec(profile=profile_json)
    with pytest.raises(InvalidArgument, match="was read from"):
        prof.save(profile_json)
    assert profile_json.read_bytes() == before and json.loads(before)
