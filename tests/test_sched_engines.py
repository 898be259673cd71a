"""The general engine and the compiled fast path agree request for request (synthetic workloads)."""

import pandas as pd
import pytest

from hookmagic import sched as S
from hookmagic.sched import fast

MODELS = [S.ModelSpec.linear("det", 2.0, 0.5, 16, service_cv=0.2),
          S.ModelSpec.linear("cls", 0.5, 0.1, 32),
          S.ModelSpec.constant("seg", 3.0, service_cv=1.0)]


def workload(seed):
    return S.make_workload([S.Cameras("det", n=8, fps=30, slo_ms=50),
                            S.Poisson("cls", 300, slo_ms=20, priority=1),
                            S.Bursty("cls", 2000, 0.1, 0.5, slo_ms=40, priority=2),
                            S.Poisson("seg", 50, slo_ms=100, priority=0)], 30, seed=seed)


POLICIES = {
    "fifo-unbatched": S.Policy(),
    "priority-batched-2streams": S.Policy(order="priority", streams=2, batching={
        "det": S.Batching(8, 5.0, (4, 8)), "cls": S.Batching(16, 2.0)}),
    "fifo-batched-3streams": S.Policy(batching=S.Batching(4, 1.0),
                                      streams=[S.Stream(1), S.Stream(0), S.Stream(0)]),
    "priority-preferred": S.Policy(order="priority", batching=S.Batching(12, 0.5, (3, 6, 12))),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", list(POLICIES))
def test_general_and_fast_identical(name, seed):
    w = workload(seed)
    a = S.simulate(MODELS, w, POLICIES[name], seed=seed, engine="general")
    b = S.simulate(MODELS, w, POLICIES[name], seed=seed, engine="fast")
    assert a.meta["engine"] == "general" and b.meta["engine"] == "fast"
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.batches, b.batches)


def test_auto_picks_fast_only_when_exact():
    assert fast.supports(S.Policy(order="priority", batching=S.Batching(8, 1.0)), MODELS)
    assert not fast.supports(S.Policy(order="edf"), MODELS)
    assert not fast.supports(S.Policy(queue=S.QueuePolicy(max_size=3)), MODELS)
    assert not fast.supports(S.Policy(fairness=S.CameraFairness()), MODELS)
    with pytest.raises(ValueError):
        S.simulate(MODELS, workload(1), S.Policy(order="edf"), engine="fast")


def test_every_request_accounted_for():
    w = workload(3)
    pol = S.Policy(order="edf", batching=S.Batching(8, 2.0), queue=S.QueuePolicy(max_size=50),
                   fairness=S.CameraFairness(max_frames=3), streams=2,
                   limits=[S.Limit(("det", "seg"), 1)])
    r = S.simulate(MODELS, w, pol).requests
    assert len(r) == len(w)
    st = r["status"].astype(str)
    assert set(st) <= {"done", "rejected", "timeout", "late", "stale"}
    done = r[st == "done"]
    assert (done["start_s"] >= done["arrival_s"]).all()
    assert (done["end_s"] > done["start_s"]).all()
    # batches on one stream never overlap
    for _, b in S.simulate(MODELS, w, pol).batches.groupby("stream"):
        b = b.sort_values("start_s")
        assert (b["start_s"].to_numpy()[1:] >= b["end_s"].to_numpy()[:-1] - 1e-12).all()
