"""hookmagic.load opens every kind hookmagic saves, recognised by content, and a bundled
recording by its name."""
from __future__ import annotations

import pytest

import hookmagic
from hookmagic import sched as S


def test_a_saved_scheduler_result_opens_through_hookmagic_load(tmp_path):
    spec = S.ModelSpec.constant("m", 1.0, service_cv=0.5)
    res = S.simulate([spec], S.make_workload([S.Poisson("m", 300.0)], 2.0, seed=3), S.Policy(),
                     seed=3)
    path = res.save(tmp_path / "run")
    assert path.name == "run.hmsched"
    back = hookmagic.load(path)
    assert type(back) is type(res)
    assert back.requests["latency_ms"].to_numpy() == pytest.approx(
        res.requests["latency_ms"].to_numpy(), nan_ok=True)


def test_a_saved_pipeline_run_opens_through_hookmagic_load(tmp_path):
    from hookmagic.pipeline import Pipeline, Stage
    from hookmagic.pipeline.run import PipelineRun

    run = Pipeline([Stage("double", lambda x: 2 * x)]).run(range(20))
    path = run.save(tmp_path / "synthetic")
    back = hookmagic.load(path)
    assert isinstance(back, PipelineRun)
    assert len(back.events) == len(run.events)


def test_a_recording_name_opens_as_its_trace():
    assert len(hookmagic.load("resnet18_inference_churn").kernels) > 0


def test_a_missing_path_is_one_project_error(tmp_path):
    with pytest.raises(hookmagic.HookmagicError):
        hookmagic.load(tmp_path / "nope.hmtrace")
