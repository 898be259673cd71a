"""Model specs (tables, constructors from Trace and LayerProfile) and workload generators."""
import numpy as np
import pandas as pd
import pytest

from hookmagic import sched as S
from hookmagic.sched.settings import (offered_rate, policy_from_settings, settings_from,
                                      sources_from_settings)


def test_latency_interpolates_and_extrapolates():
    m = S.ModelSpec("m", (1, 4, 8), (2.0, 3.0, 5.0), max_batch=16)
    assert m.latency(1) == 2.0 and m.latency(2) == pytest.approx(2 + 1 / 3)
    assert m.latency(6) == pytest.approx(4.0)
    assert m.latency(12) == pytest.approx(7.0)  # slope of the last segment
    t = m.table_s()
    assert len(t) == 17 and t[8] == pytest.approx(5e-3)


def test_from_sweep_table():
    rows = [{"model": "a", "precision": "fp16", "batch_size": b, "latency_ms": 1 + b,
             "std_ms": 0.1 * (1 + b), "memory_bytes": 123} for b in (1, 2, 4)]
    rows += [{"model": "b", "precision": "fp16", "batch_size": 1, "latency_ms": 9.0,
              "std_ms": 0.0, "memory_bytes": 1}]
    table = pd.DataFrame(rows)
    a = S.ModelSpec.from_sweep(table, name="a")
    assert a.batch_sizes == (1, 2, 4) and a.latency_ms == (2.0, 3.0, 5.0)
    assert a.service_cv == pytest.approx(0.1) and a.memory_bytes == 123 and a.precision == "fp16"
    assert [s.name for s in S.specs_from_sweep(table)] == ["a", "b"]
    with pytest.raises(ValueError):
        S.ModelSpec.from_sweep(table)


def test_from_trace_sums_kernel_time():
    from hookmagic.trace.model import Trace
    k1 = pd.DataFrame({"start_ns": [0, 10], "end_ns": [1_000_000, 3_000_010],
                       "duration_ns": [1_000_000, 3_000_000], "name": ["a", "b"]})
    k8 = pd.DataFrame({"start_ns": [0], "end_ns": [20_000_000], "duration_ns": [20_000_000],
                       "name": ["a"]})
    spec = S.ModelSpec.from_trace({1: Trace({"kernels": k1}), 8: Trace({"kernels": k8},
                                                                      {"iterations": 2})}, name="net")
    assert spec.batch_sizes == (1, 8) and spec.latency_ms == pytest.approx((4.0, 10.0))


def test_from_layer_profile_total_ms():
    from hookmagic.layers.model import LayerProfile, make_layers
    prof = LayerProfile(make_layers([{"name": "conv", "mean_ms": 1.5}, {"name": "fc", "mean_ms": 0.5}]),
                        meta={"name": "resnet"})
    spec = S.ModelSpec.from_layer_profile({1: prof})
    assert spec.name == "resnet" and spec.latency_ms == (2.0,)


def test_poisson_and_cameras_rates():
    w = S.make_workload([S.Poisson("a", 500.0), S.Cameras("b", n=4, fps=30, jitter_ms=2)], 100, seed=1)
    r = w.requests
    assert (r["model"] == "a").sum() == pytest.approx(50_000, rel=0.02)
    gaps = np.diff(r.loc[r["model"] == "a", "arrival_s"])
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)  # exponential gaps
    cam = r[r["model"] == "b"]
    assert sorted(cam["camera"].unique()) == [0, 1, 2, 3]
    per = cam.groupby("camera").size()
    assert per.between(2999, 3001).all()
    assert r["arrival_s"].is_monotonic_increasing
    assert (r["deadline_s"] == r["arrival_s"] + r["slo_ms"] / 1e3).all()


def test_bursty_mean_rate_and_burstiness():
    src = S.Bursty("a", rate_on=2000.0, on_s=0.1, off_s=0.4, rate_off=100.0)
    w = S.make_workload([src], 400, seed=2)
    assert len(w) / 400 == pytest.approx(offered_rate(src), rel=0.08)
    counts = np.histogram(w.requests["arrival_s"], bins=4000)[0]
    assert counts.var() / counts.mean() > 5  # far burstier than Poisson (ratio 1)


def _bursts(arrivals: np.ndarray, gap_s: float = 0.02) -> np.ndarray:
    """(start, end) of each run of arrivals closer than ``gap_s`` apart."""
    cut = np.flatnonzero(np.diff(arrivals) > gap_s)
    return np.stack([np.r_[arrivals[0], arrivals[cut + 1]], np.r_[arrivals[cut], arrivals[-1]]], 1)


def test_bursty_periods_do_not_move_with_the_rate():
    # Sources sized from latency tables measured in each process: a rate 1 % off must not
    # give other bursts.
    def arrivals(rate: float) -> np.ndarray:
        src = S.Bursty("a", rate_on=rate, on_s=0.2, off_s=0.8)
        return S.make_workload([src], 3.0, seed=20).requests["arrival_s"].to_numpy()
    ref, lo, hi = (arrivals(r) for r in (5650.0, 5600.0, 5700.0))
    b = _bursts(ref)
    for other in (lo, hi):
        assert len(other) == pytest.approx(len(ref), rel=0.03)
        ob = _bursts(other)
        assert ob.shape == b.shape and np.allclose(ob, b, atol=2e-3)
    # the same unit-rate draws, scaled: the first arrivals move continuously with the rate
    assert np.allclose(lo[:50], ref[:50], atol=1e-4)


def test_sources_are_independent_and_seeded():
    a = S.make_workload([S.Poisson("a", 100.0)], 10, seed=3).requests
    b = S.make_workload([S.Poisson("a", 100.0), S.Poisson("b", 50.0)], 10, seed=3).requests
    assert np.array_equal(a["arrival_s"], b.loc[b["model"] == "a", "arrival_s"])
    c = S.make_workload([S.Replay("a", (0.5, 0.1, 3.0), slo_ms=5, camera=2)], 2.0)
    assert c.requests["arrival_s"].tolist() == [0.1, 0.5]


def test_settings_round_trip():
    models = [S.ModelSpec.constant("a", 1.0), S.ModelSpec.constant("b", 1.0)]
    sources = [S.Poisson("a", 100.0, slo_ms=20), S.Cameras("b", n=2, fps=30, slo_ms=50, priority=1)]
    pol = S.Policy(order="priority", batching={"a": S.Batching(4, 1.0)})
    s = settings_from(models, sources, pol)
    assert s["models"]["b"]["rate"] == 60.0 and s["models"]["a"]["max_batch"] == 4
    s["models"]["b"]["rate"] = 120.0
    s["models"]["a"]["slo_ms"] = 10.0
    s["streams"] = 3
    src2 = sources_from_settings(sources, s)
    assert src2[1].fps == 60.0 and src2[0].slo_ms == 10.0
    p2 = policy_from_settings(s, pol)
    assert len(p2.streams) == 3 and p2.batching_for("a").max_batch == 4 and p2.order == "priority"
