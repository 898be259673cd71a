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
