"""Scheduler inputs: constructors validate, misspelt model
names and engine names are errors naming what is known, engines cannot loop on non-finite
times, and an empty workload gives an empty result with every metric column."""
from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd
import pytest

from hookmagic import sched as S
from hookmagic.common.errors import InvalidArgument
from hookmagic.sched.metrics import SUMMARY_COLUMNS
from hookmagic.sched.settings import policy_from_settings, settings_from, sources_from_settings


@pytest.mark.parametrize("make", [
    lambda: S.ModelSpec("m", (1, 2), (1.0, math.nan)),
    lambda: S.ModelSpec("m", (1,), (math.inf,)),
    lambda: S.ModelSpec("m", (1,), (-1.0,)),
    lambda: S.ModelSpec("m", (1.5,), (1.0,)),
    lambda: S.ModelSpec("m", (1,), ("2",)),
    lambda: S.ModelSpec("m", (1,), (1.0,), service_cv=math.nan),
    lambda: S.ModelSpec("", (1,), (1.0,)),
    lambda: S.ModelSpec.linear("m", math.nan, 0.1),
    lambda: S.ModelSpec.linear("m", 1.0, 0.1, max_batch=0),
    lambda: S.AIMD(max_batch=0),
    lambda: S.AIMD(backoff=1.5),
    lambda: S.AIMD(slo_ms=math.nan),
    lambda: S.Cameras("m", fps=0),
    lambda: S.Cameras("m", n=0),
    lambda: S.Cameras("m", fps=math.inf),
    lambda: S.Batching(max_batch=2.5),
    lambda: S.Batching(max_batch=4, max_delay_ms=math.nan),
    lambda: S.Batching(max_batch=4, preferred=(2.5,)),
    lambda: S.Poisson("m", rate=math.nan),
    lambda: S.Poisson("m", rate=-1),
    lambda: S.Poisson("m", rate=10, slo_ms=math.nan),
    lambda: S.Poisson("m", rate=10, priority=0.5),
    lambda: S.Bursty("m", rate_on=10, on_s=0),
    lambda: S.Replay("m", (0.1, math.nan)),
    lambda: S.QueuePolicy(timeout_ms=math.nan),
    lambda: S.QueuePolicy(max_size=-1),
    lambda: S.QueuePolicy(action="drop"),
    lambda: S.CameraFairness(per_camera=0),
    lambda: S.Limit(("m",), max_concurrent=0),
    lambda: S.Policy(order="lifo"),
    lambda: S.Policy(streams=0),
    lambda: S.Policy(batching={"m": 4}),
    lambda: S.make_workload([S.Poisson("m", rate=1)], duration_s=math.nan),
    lambda: S.make_workload([S.Poisson("m", rate=1e12)], duration_s=10),
    lambda: S.make_workload([S.Bursty("m", rate_on=1, on_s=1e-12, off_s=1e-12)], duration_s=10),
    lambda: S.ModelSpec("m", (1, 2**40), (1.0, 2.0)),
    lambda: S.Batching(max_batch=10**9),
])
def test_constructors_refuse_bad_values(make):
    with pytest.raises(InvalidArgument):
        make()


def test_valid_values_are_normalised():
    assert S.Batching(max_batch=8.0).max_batch == 8
    assert S.Batching(8, preferred=(4, 16)).preferred == (4,)
    assert S.Poisson("m", rate=5, slo_ms=math.inf).slo_ms == math.inf   # no SLO


def _models():
    return [S.ModelSpec.linear("det", 2.0, 0.3, 8), S.ModelSpec.linear("cls", 0.5, 0.1, 8)]


def _workload():
    return S.make_workload([S.Poisson("det", rate=200, slo_ms=50),
                            S.Poisson("cls", rate=300, slo_ms=20)], 2.0, seed=1)


@pytest.mark.parametrize("engine", ["general", "fast", "auto"])
def test_misspelt_model_in_per_model_policy_is_an_error(engine):
    pol = S.Policy(batching={"dett": S.Batching(8, 2.0)})
    with pytest.raises(InvalidArgument, match=r"\['dett'\].*\['det', 'cls'\]"):
        S.simulate(_models(), _workload(), pol, engine=engine)


def test_misspelt_model_in_settings_is_an_error():
    models, wl = _models(), _workload()
    settings = settings_from(models, wl.sources, S.Policy())
    settings["models"]["dett"] = settings["models"].pop("det")
    with pytest.raises(InvalidArgument, match="dett"):
        sources_from_settings(wl.sources, settings)
    with pytest.raises(InvalidArgument, match="dett"):
        S.simulate(models, wl, policy_from_settings(settings))
    settings["models"]["cls"]["rate_hz"] = 3
    with pytest.raises(InvalidArgument, match="rate_hz"):
        policy_from_settings(settings)


def test_unknown_engine_is_an_error():
    with pytest.raises(InvalidArgument, match="'general'.*got 'genral'"):
        S.simulate(_models(), _workload(), engine="genral")


def test_stream_and_limit_model_names_are_checked():
    pol = S.Policy(streams=[S.Stream(models=("det",)), S.Stream(models=("clss",))])
    with pytest.raises(InvalidArgument, match="clss"):
        S.simulate(_models(), _workload(), pol)


def test_engines_refuse_non_finite_service_times():
    # a spec cannot hold NaN any more; an engine fed non-finite multipliers directly stops
    from hookmagic.sched.simulator import simulate_raw
    models, wl = _models(), _workload()
    arrays = wl.arrays([m.name for m in models])
    mult = np.full(len(wl), np.nan)
    with pytest.raises(InvalidArgument, match="finite"):
        simulate_raw(models, arrays, mult, S.Policy(order="edf"), "general")


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_empty_workload_gives_empty_result_with_metric_columns(engine):
    wl = S.make_workload([S.Poisson("det", rate=0)], 1.0)
    res = S.simulate(_models(), wl, S.Policy(), engine=engine)
    assert len(res.requests) == 0 and len(res.batches) == 0
    m = res.metrics()
    assert list(m.columns) == list(SUMMARY_COLUMNS) and len(m) == 0
    assert list(res.metrics(by=None).columns) == list(SUMMARY_COLUMNS)
    empty = S.make_workload([], 1.0)
    assert list(S.simulate(_models(), empty, engine=engine).metrics().columns) == list(SUMMARY_COLUMNS)


def test_workload_table_with_nan_arrivals_is_refused():
    with pytest.raises(InvalidArgument, match="arrival"):
        S.Workload(pd.DataFrame({"arrival_s": [0.1, math.nan], "model": ["det", "det"]}))


def test_a_misspelt_model_name_lists_the_known_ones_closest_first():
    import pandas as pd
    table = pd.DataFrame({"model": ["resnet18", "resnet18", "resnet50"], "batch_size": [1, 2, 1],
                          "latency_ms": [0.4, 0.5, 0.9]})  # synthetic
    with pytest.raises(InvalidArgument, match=r"unknown model 'resnt18'; known: resnet18, resnet50"):
        S.ModelSpec.from_sweep(table, name="resnt18")
    spec = S.ModelSpec.constant("resnet18", 1.0)
    with pytest.raises(InvalidArgument, match=r"unknown model 'resnt18'; known: resnet18"):
        S.simulate([spec], [S.Poisson("resnt18", 10.0)], S.Policy(), duration_s=1.0)


def test_an_engine_for_a_misspelt_torchvision_model_names_the_known_ones(monkeypatch):
    """TorchEngine looks architecture names up in ``torchvision.models.list_models()``. torchvision
    is a GPU-machine package (its PyPI wheels need CUDA torch), so here a stand-in module answers
    with a synthetic list of names; the precision check needs only torch."""
    import types

    import torch
    from hookmagic.sched.engines import TorchEngine

    synthetic = types.ModuleType("torchvision")
    synthetic.models = types.SimpleNamespace(list_models=lambda: ["alexnet", "resnet18", "resnet50"])
    monkeypatch.setitem(sys.modules, "torchvision", synthetic)
    with pytest.raises(InvalidArgument, match=r"unknown model 'resnt18'; known: resnet18, resnet50"):
        TorchEngine("r", "resnt18")._build()
    with pytest.raises(InvalidArgument, match="unknown precision 'fp8'; known: fp16, bf16, fp32"):
        TorchEngine("r", torch.nn.Linear(2, 2), precision="fp8")._build()
