"""The five result types answer the same verbs the same way (docs/architecture.md): each
``save(path)`` writes what ``hookmagic.load(path)`` opens again as the same type, and each
``summary()`` is a Headline whose ``to_frame()`` is a table of the same numbers before and after
the round trip. Made from a real recording (Trace), a trtexec sample (LayerProfile), synthetic
ranks (TraceSet), a small synthetic simulation (scheduler Result) and a synthetic pipeline."""
from __future__ import annotations

import warnings

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell

import hookmagic
from hookmagic.common.results import Headline


def _trace(tmp_path):
    return hookmagic.recordings.load("mlp_training")


def _layer_profile(tmp_path):
    from hookmagic.layers.samples import load_sample

    return load_sample("resnet50_fp16")


def _traceset(tmp_path):
    pytest.importorskip("duckdb")
    from hookmagic.trace.folder import save_trace_folder
    from tests.synthetic_ranks import synthetic_rank_traces

    host = [[0.4, 0, 0], [0, 0, 0], [0, 5, 0]]
    extra = [[0, 0, 0], [0, 0, 3], [0, 0, 0]]
    for r, t in enumerate(synthetic_rank_traces(host, extra, world_size=3)):
        save_trace_folder(t, tmp_path / "ranks" / f"rank={r}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hookmagic.load_many(tmp_path / "ranks")


def _sched_result(tmp_path):
    from hookmagic import sched as S

    return S.simulate([S.ModelSpec.linear("det", 2.0, 0.5, 16)], [S.Cameras("det", n=4, fps=30, slo_ms=12)],
                      S.Policy(batching=S.Batching(4, 2.0)), duration_s=1, seed=1)


def _pipeline_run(tmp_path):
    from hookmagic.pipeline import Pipeline, Stage

    return Pipeline([Stage("double", lambda x: 2 * x, batch=2)]).run(range(12))


MAKERS = {"Trace": _trace, "LayerProfile": _layer_profile, "TraceSet": _traceset,
          "Result": _sched_result, "PipelineRun": _pipeline_run}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_save_load_and_summary_are_the_same_verbs(kind, tmp_path):
    made = MAKERS[kind](tmp_path)
    assert kind in [c.__name__ for c in type(made).__mro__]
    head = made.summary()
    assert isinstance(head, Headline) or kind == "Trace"   # a Trace's Summary also lists top kernels
    frame = head.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) > 0 and "value" in frame.columns
    # what Jupyter shows: HTML in a notebook, text in a terminal
    shown, _ = InteractiveShell.instance().display_formatter.format(head)
    assert "<table" in shown["text/html"] and shown["text/plain"]

    saved = made.save(tmp_path / f"saved_{kind}")
    back = hookmagic.load(saved)
    try:
        assert type(back) is type(made)
        again = back.summary().to_frame()
        pd.testing.assert_frame_equal(again, frame, check_dtype=False)
    finally:
        for result in (back, made):
            if hasattr(result, "close"):
                result.close()


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_misspelt_argument_of_any_method_is_the_projects_own_error(kind, tmp_path):
    """Every public method of every result type, called with a keyword it does not take, raises
    InvalidArgument naming the method, whether the class defines the method
    itself or has it attached from a floor above."""
    from hookmagic.common.errors import InvalidArgument

    made = MAKERS[kind](tmp_path)
    cls = type(made)
    names = [n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n, None))
             and not isinstance(getattr(cls, n), type)]
    assert len(names) >= 3
    try:
        for name in names:
            with pytest.raises(InvalidArgument) as err:
                getattr(made, name)(no_such_option=1)
            # the method, or the keyword (a method with a required argument names that first)
            assert f".{name}()" in str(err.value) or "'no_such_option'" in str(err.value)
    finally:
        if hasattr(made, "close"):
            made.close()


def test_a_type_error_inside_a_correct_call_passes_unchanged():
    """Only the call's own mismatch becomes InvalidArgument: an error the method itself raises
    (here a TypeError deep inside) is not renamed into a complaint about its arguments."""
    from hookmagic.common.accessors import checked

    def add(a, b=1):
        return a + b

    wrapped = checked(add, "Demo")
    assert wrapped(1, b=2) == 3
    with pytest.raises(TypeError) as err:
        wrapped("x", b=2)          # correctly called; str + int fails inside
    assert "InvalidArgument" not in type(err.value).__name__
    from hookmagic.common.errors import InvalidArgument
    with pytest.raises(InvalidArgument, match=r"Demo.add\(\).*'c'"):
        wrapped(1, c=2)
