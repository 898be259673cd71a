"""The simulator against queueing theory's closed forms (synthetic workloads, named so).

Each case simulates a few hundred thousand requests; tolerances are a few percent, set from the
run-to-run spread of these sample sizes at these loads.
"""
import math

import numpy as np
import pytest

from hookmagic import sched as S
from hookmagic.sched import metrics as M


def _mean_wait_ms(res, model=None):
    r = res.requests
    if model is not None:
        r = r[r["model"] == model]
    r = r[r["arrival_s"] > 5.0]  # leave out the start-up transient
    return r["queue_ms"].mean(), r["latency_ms"].mean()


def _one_server(cv, rate, mean_ms, duration, engine, seed=7):
    spec = S.ModelSpec.constant("m", mean_ms, service_cv=cv)
    wl = S.make_workload([S.Poisson("m", rate=rate)], duration, seed=seed)
    return S.simulate([spec], wl, S.Policy(), seed=seed, engine=engine)


@pytest.mark.parametrize("engine", ["fast", "general"])
def test_mm1_mean_wait_and_sojourn(engine):
    lam, mu = 700.0, 1000.0  # rho 0.7
    res = _one_server(1.0, lam, 1.0, 600 if engine == "fast" else 300, engine)
    wq, w = _mean_wait_ms(res)
    wq_theory = lam / (mu * (mu - lam)) * 1e3        # 2.333 ms
    w_theory = 1.0 / (mu - lam) * 1e3                # 3.333 ms
    assert wq == pytest.approx(wq_theory, rel=0.04)
    assert w == pytest.approx(w_theory, rel=0.04)


def test_md1_pollaczek_khinchine():
    lam, mu = 800.0, 1000.0
    res = _one_server(0.0, lam, 1.0, 400, "fast")
    wq, _ = _mean_wait_ms(res)
    rho = lam / mu
    assert wq == pytest.approx(rho / (2 * mu * (1 - rho)) * 1e3, rel=0.03)  # 2.0 ms


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_mg1_pk_mean(cv):
    lam, mean_s = 600.0, 1e-3
    res = _one_server(cv, lam, 1.0, 600, "fast")
    wq, _ = _mean_wait_ms(res)
    es2 = (1 + cv * cv) * mean_s ** 2
    rho = lam * mean_s
    assert wq == pytest.approx(lam * es2 / (2 * (1 - rho)) * 1e3, rel=0.06)


def erlang_c(c: int, a: float) -> float:
    """Probability of waiting in M/M/c with offered load a = lambda/mu."""
    rho = a / c
    s = sum(a ** k / math.factorial(k) for k in range(c))
    top = a ** c / math.factorial(c) / (1 - rho)
    return top / (s + top)


@pytest.mark.parametrize("engine", ["fast", "general"])
def test_mmc_erlang_c(engine):
    c, mu, lam = 3, 1000.0, 2400.0
    spec = S.ModelSpec.constant("m", 1.0, service_cv=1.0)
    wl = S.make_workload([S.Poisson("m", rate=lam)], 200 if engine == "fast" else 100, seed=3)
    res = S.simulate([spec], wl, S.Policy(streams=c), seed=3, engine=engine)
    wq, _ = _mean_wait_ms(res)
    theory = erlang_c(c, lam / mu) / (c * mu - lam) * 1e3
    assert wq == pytest.approx(theory, rel=0.05)
    # share of requests that waited at all is Erlang C itself
    waited = (res.requests["queue_ms"] > 0).mean()
    assert waited == pytest.approx(erlang_c(c, lam / mu), abs=0.015)


@pytest.mark.parametrize("engine", ["fast", "general"])
def test_cobham_nonpreemptive_priority(engine):
    # class 0: exponential service 1 ms at 300/s; class 1: deterministic 2 ms at 200/s
    hi = S.ModelSpec.constant("hi", 1.0, service_cv=1.0)
    lo = S.ModelSpec.constant("lo", 2.0)
    dur = 800 if engine == "fast" else 300
    wl = S.make_workload([S.Poisson("hi", 300.0, priority=0), S.Poisson("lo", 200.0, priority=1)],
                         dur, seed=11)
    res = S.simulate([hi, lo], wl, S.Policy(order="priority"), seed=11, engine=engine)
    w0 = 300.0 * 2 * 1e-6 / 2 + 200.0 * 4e-6 / 2
    s0, s1 = 0.3, 0.7
    assert _mean_wait_ms(res, "hi")[0] == pytest.approx(w0 / (1 - s0) * 1e3, rel=0.05)
    assert _mean_wait_ms(res, "lo")[0] == pytest.approx(w0 / ((1 - s0) * (1 - s1)) * 1e3, rel=0.06)


def test_littles_law_queue_depth():
    res = _one_server(1.0, 700.0, 1.0, 200, "fast")
    depth = M.queue_depth(res.requests, by=None)
    T = res.duration_s
    r = res.requests
    lam = len(r) / T
    mean_l = M.mean_depth(depth, 0.0, T, by=None).iloc[0]
    # L = lambda W over the same window (requests served after T are few at rho 0.7)
    assert mean_l == pytest.approx(lam * r["queue_ms"].mean() / 1e3, rel=0.01)


def test_littles_law_in_system_with_batching():
    spec = S.ModelSpec.linear("m", 1.0, 0.2, 16, service_cv=0.3)
    wl = S.make_workload([S.Poisson("m", 3000.0)], 100, seed=5)
    res = S.simulate([spec], wl, S.Policy(batching=S.Batching(16, 2.0)), seed=5)
    r = res.requests
    T = float(r["end_s"].max())
    # time-average number in system, from arrival to completion
    t = np.concatenate([r["arrival_s"], r["end_s"]])
    d = np.concatenate([np.ones(len(r)), -np.ones(len(r))])
    o = np.argsort(t, kind="stable")
    level = np.cumsum(d[o])
    L = float(np.sum(level[:-1] * np.diff(t[o])) / T)
    assert L == pytest.approx(len(r) / T * r["latency_ms"].mean() / 1e3, rel=1e-6)
