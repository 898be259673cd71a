"""Streams sharing one GPU and model switches in the simulator, checked against hand-worked
timelines (synthetic specs and arrivals, chosen so the answers can be computed on paper)."""
import numpy as np
import pandas as pd
import pytest

from hookmagic import sched as S
from hookmagic.common.errors import InvalidArgument
from tests.synthetic import batch_timeline, synthetic_requests


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_overlap_slows_both_batches_while_they_share(engine):
    # a (1 ms alone) and b (2 ms alone) start together on two streams; each runs at 1/1.5 of
    # its speed while the other computes. a: 1 ms of work at 1/1.5 -> ends at 1.5 ms. b has done
    # 1 ms of work by then and runs its last 1 ms alone -> ends at 2.5 ms.
    specs = [S.ModelSpec.constant("a", 1.0, share_slowdown=0.5),
             S.ModelSpec.constant("b", 2.0, share_slowdown=0.5)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a"), (0.0, "b")]), S.Policy(streams=2), engine=engine)
    assert res.meta["engine"] == engine
    assert batch_timeline(res) == [("a", 0.0, 1.5), ("b", 0.0, 2.5)]


def test_each_model_has_its_own_slowdown_and_late_starters_slow_the_running():
    # a alone from 0; b joins at 0.5 ms. a has 0.5 ms of work left and runs at 1/(1+1.0) -> 1 ms
    # more: ends at 1.5. b (f=0.25) does 1/1.25 ms of work per ms while a runs: 0.8 ms by 1.5,
    # then its last 0.2 ms alone -> ends at 1.7 ms.
    specs = [S.ModelSpec.constant("a", 1.0, share_slowdown=1.0),
             S.ModelSpec.constant("b", 1.0, share_slowdown=0.25)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a"), (0.0005, "b")]), S.Policy(streams=2))
    assert batch_timeline(res) == [("a", 0.0, 1.5), ("b", 0.5, 1.7)]


def test_interference_argument_is_the_default_slowdown():
    specs = [S.ModelSpec.constant("a", 1.0), S.ModelSpec.constant("b", 2.0)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a"), (0.0, "b")]), S.Policy(streams=2),
                     interference=0.5)
    assert batch_timeline(res) == [("a", 0.0, 1.5), ("b", 0.0, 2.5)]


def test_one_stream_never_shares():
    specs = [S.ModelSpec.constant("a", 1.0, share_slowdown=3.0)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a"), (0.0, "a")]), S.Policy())
    assert batch_timeline(res) == [("a", 0.0, 1.0), ("a", 1.0, 2.0)]


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_switch_cost_paid_only_when_the_model_changes(engine):
    # one stream, no batching, FIFO, arrivals queued before the first batch ends in the order
    # a, a, b, a: the first batch
    # pays a's switch (nothing ran before), the second none, then b's, then a's again.
    specs = [S.ModelSpec.constant("a", 1.0, switch_ms=0.25), S.ModelSpec.constant("b", 2.0, switch_ms=0.5)]
    wl = synthetic_requests([(0.0, "a"), (0.0001, "a"), (0.0002, "b"), (0.0003, "a")])
    res = S.simulate(specs, wl, S.Policy(), engine=engine)
    assert batch_timeline(res) == [("a", 0.0, 1.25), ("a", 1.25, 2.25), ("b", 2.25, 4.75),
                             ("a", 4.75, 6.0)]


def test_fast_and_general_agree_with_switch_costs():
    specs = [S.ModelSpec.linear("det", 2.0, 0.5, 16, service_cv=0.2, switch_ms=0.05),
             S.ModelSpec.linear("cls", 0.5, 0.1, 32, switch_ms=0.02)]
    wl = S.make_workload([S.Poisson("det", 200, slo_ms=50), S.Poisson("cls", 900, slo_ms=20,
                                                                        priority=1)], 5, seed=3)
    pol = S.Policy(order="priority", streams=2, batching=S.Batching(8, 1.0))
    a = S.simulate(specs, wl, pol, seed=3, engine="general")
    b = S.simulate(specs, wl, pol, seed=3, engine="fast")
    pd.testing.assert_frame_equal(a.requests, b.requests)


@pytest.mark.parametrize("bad", [float("nan"), -0.1, float("inf")])
def test_bad_slowdowns_and_switch_costs_rejected(bad):
    with pytest.raises(ValueError, match="share_slowdown"):
        S.ModelSpec.constant("a", 1.0, share_slowdown=bad)
    with pytest.raises(ValueError, match="switch_ms"):
        S.ModelSpec.constant("a", 1.0, switch_ms=bad)
    with pytest.raises(ValueError, match="interference"):
        S.simulate([S.ModelSpec.constant("a", 1.0)], synthetic_requests([(0.0, "a")]),
                   S.Policy(streams=2), interference=bad)


def test_sharing_conserves_work_under_load():
    # Whatever the overlaps, each batch's alone-work is done: with equal slowdown f on two
    # busy streams, total busy time across streams equals (1 + f) times the alone-work while
    # both compute. Checked loosely via the mean: every batch lasts at least its alone time and
    # at most (1 + f) times it.
    specs = [S.ModelSpec.constant("a", 1.0, share_slowdown=0.4, max_batch=1),
             S.ModelSpec.constant("b", 0.7, share_slowdown=0.4, max_batch=1)]
    wl = S.make_workload([S.Poisson("a", 700), S.Poisson("b", 900)], 2, seed=5)
    res = S.simulate(specs, wl, S.Policy(streams=2))
    b = res.batches
    alone = np.where(b.model == "a", 1.0, 0.7)
    dur = (b.end_s - b.start_s).to_numpy() * 1e3
    assert (dur >= alone - 1e-9).all() and (dur <= 1.4 * alone + 1e-9).all()
    assert (dur > alone + 1e-6).mean() > 0.5  # busy streams do overlap most of the time


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_slowdown_per_number_of_others(engine):
    # three batches of 1 ms start together; a's slowdown is 1.5 beside one other, 1.8 beside two.
    # All three share at 1/1.8 until the first ends: b and c are alike (default 0.5 per other ->
    # 2.0 beside two), so a is ahead: a ends at 1.8 ms. Then b and c (slowdown 1.5 beside one)
    # have done 1.8/2.0 = 0.9 ms of work; their last 0.1 ms takes 0.15 ms: they end at 1.95 ms.
    specs = [S.ModelSpec.constant("a", 1.0, share_slowdown=(0.5, 0.8)),
             S.ModelSpec.constant("b", 1.0), S.ModelSpec.constant("c", 1.0)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a"), (0.0, "b"), (0.0, "c")]), S.Policy(streams=3),
                     interference=0.5, engine=engine)
    assert batch_timeline(res) == [("a", 0.0, 1.8), ("b", 0.0, 1.95), ("c", 0.0, 1.95)]


def test_slowdown_table_extends_its_last_step():
    spec = S.ModelSpec.constant("a", 1.0, share_slowdown=(0.5, 0.8))
    assert [spec.slowdown(k) for k in range(5)] == pytest.approx([1.0, 1.5, 1.8, 2.1, 2.4])
    assert S.ModelSpec.constant("b", 1.0, share_slowdown=0.25).slowdown(3) == pytest.approx(1.75)


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_launch_time_delays_the_start_and_keeps_the_stream(engine):
    # one stream, a takes 1 ms on the GPU after 0.2 ms of host launch: the first batch is decided
    # at 0, starts at 0.2 and ends at 1.2; the second (queued meanwhile) is decided at 1.2,
    # starts at 1.4, ends at 2.4.
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.2)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a"), (0.0001, "a")]), S.Policy(), engine=engine)
    assert batch_timeline(res) == [("a", 0.2, 1.2), ("a", 1.4, 2.4)]


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_a_launching_batch_neither_slows_nor_is_slowed(engine):
    # a (1 ms of GPU work after 0.2 ms of launch) and b (1 ms, no launch) both decided at 0 on
    # two streams, slowdown 1.5 beside one other. b computes alone until 0.2 (0.2 ms done), then
    # both share: b's last 0.8 ms take 1.2 -> ends at 1.4; a has done 1.2/1.5 = 0.8 ms by then,
    # its last 0.2 ms alone -> ends at 1.6.
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.2, share_slowdown=0.5),
             S.ModelSpec.constant("b", 1.0, share_slowdown=0.5)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a"), (0.0, "b")]), S.Policy(streams=2), engine=engine)
    assert batch_timeline(res) == [("b", 0.0, 1.4), ("a", 0.2, 1.6)]


def test_one_host_thread_launches_one_batch_at_a_time():
    # two streams, both free at 0 with one request each; every dispatch holds the host 0.3 ms.
    # a is decided at 0 (starts at 0.1 after its launch); b waits for the host: decided at 0.3,
    # starts at 0.4. Independent streams (no slowdown): a ends at 1.1, b at 1.4.
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.1, host_ms=0.3),
             S.ModelSpec.constant("b", 1.0, launch_ms=0.1, host_ms=0.3)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a"), (0.0, "b")]), S.Policy(streams=2))
    assert batch_timeline(res) == [("a", 0.1, 1.1), ("b", 0.4, 1.4)]


def test_launch_time_is_queueing_time_of_an_md1_queue():
    # Independent reference (M/D/1, Pollaczek-Khinchine): one stream, no batching, Poisson
    # arrivals at rate lam, every request costs D = launch + latency deterministically; the mean
    # wait in queue is rho * D / (2 (1 - rho)). The launch part is paid inside the service, so
    # the queue sees D, and each request's latency is wait + D.
    lam, launch, lat = 500.0, 0.2e-3, 1.0e-3
    d = launch + lat
    specs = [S.ModelSpec.constant("a", lat * 1e3, launch_ms=launch * 1e3)]
    wl = S.make_workload([S.Poisson("a", lam)], 400.0, seed=11)
    res = S.simulate(specs, wl, S.Policy(), engine="fast")
    rho = lam * d
    want = rho * d / (2 * (1 - rho)) + d
    got = (res.requests.end_s - res.requests.arrival_s).mean()
    assert got == pytest.approx(want, rel=0.03)


def test_fast_and_general_agree_with_launch_and_host_times():
    specs = [S.ModelSpec.linear("det", 2.0, 0.5, 16, service_cv=0.2, switch_ms=0.05, launch_ms=0.06,
                                host_ms=0.2),
             S.ModelSpec.linear("cls", 0.5, 0.1, 32, launch_ms=0.03, host_ms=0.1)]
    wl = S.make_workload([S.Poisson("det", 200, slo_ms=50), S.Poisson("cls", 900, slo_ms=20,
                                                                        priority=1)], 5, seed=3)
    pol = S.Policy(order="priority", streams=2, batching=S.Batching(8, 1.0))
    a = S.simulate(specs, wl, pol, seed=3, engine="general")
    b = S.simulate(specs, wl, pol, seed=3, engine="fast")
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.batches, b.batches)



@pytest.mark.parametrize("order,streams,seed", [("fifo", 2, 1), ("priority", 3, 2), ("fifo", 3, 3),
                                                ("priority", 2, 4)])
def test_fast_and_general_agree_with_sharing(order, streams, seed):
    # synthetic specs with every per-batch cost at once: spread, switch, launch, host, sharing
    specs = [S.ModelSpec.linear("det", 1.0, 0.1, 8, service_cv=0.1, switch_ms=0.05,
                                launch_ms=0.05, host_ms=0.15, share_slowdown=(0.3, 0.5)),
             S.ModelSpec.linear("cls", 0.4, 0.03, 8, service_cv=0.05, launch_ms=0.04,
                                host_ms=0.12, share_slowdown=(0.25, 0.4)),
             S.ModelSpec.linear("seg", 1.5, 0.2, 8, switch_ms=0.02, launch_ms=0.06, host_ms=0.1)]
    wl = S.make_workload([S.Poisson("det", 1500, slo_ms=30), S.Bursty("cls", 9000, 0.05, 0.2,
                                                                       slo_ms=10, priority=1),
                          S.Poisson("seg", 500, slo_ms=40, priority=2)], 3, seed=seed)
    pol = S.Policy(order=order, streams=streams, batching=S.Batching(8, 1.0))
    a = S.simulate(specs, wl, pol, seed=seed, engine="general", interference=0.2)
    b = S.simulate(specs, wl, pol, seed=seed, engine="fast", interference=0.2)
    assert (a.batches["end_s"] - a.batches["start_s"] > 1e-4).all()
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.batches, b.batches, check_exact=True)


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_slowdown_grows_with_the_size_of_the_batches_beside(engine):
    # a (1 ms, one request) beside b's batch of 4 (1 ms, no slowdown of its own): a stands still
    # 1 - 1/1.25 = 0.2 of the time for the count, plus 0.1 * sqrt(4): 0.4 in all, a slowdown of
    # 1/0.6. When b ends at 1 ms, a has done 0.6 ms of work; alone it ends at 1.4 ms.
    # Beside a batch of 1 instead: 0.3 -> slowdown 1/0.7, 0.7 ms done by 1 ms, end at 1.3 ms.
    specs = [S.ModelSpec.constant("a", 1.0, share_slowdown=(0.25,), share_by_size=(0.1,)),
             S.ModelSpec.constant("b", 1.0, max_batch=4)]
    pol = S.Policy(streams=2, batching=S.Batching(4, 0.0))
    four = synthetic_requests([(0.0, "a")] + [(0.0, "b")] * 4)
    assert batch_timeline(S.simulate(specs, four, pol, engine=engine)) == [("a", 0.0, 1.4), ("b", 0.0, 1.0)]
    one = synthetic_requests([(0.0, "a"), (0.0, "b")])
    assert batch_timeline(S.simulate(specs, one, pol, engine=engine)) == [("a", 0.0, 1.3), ("b", 0.0, 1.0)]
    assert specs[0].shared_slowdown(1, [4]) == pytest.approx(1 / 0.6)
    # beside two: the count's step extends (1 + 0.5), 1/3 standing still, plus 0.1 * (1 + 1)
    assert specs[0].shared_slowdown(2, [1, 1]) == pytest.approx(1 / (1 - (1 / 3 + 0.2)))
    assert specs[0].shared_slowdown(1, []) == pytest.approx(1.25)
    assert specs[0].by_size(3) == 0.1 and specs[1].by_size(1) == 0.0


@pytest.mark.parametrize("order,streams,seed", [("fifo", 2, 1), ("priority", 3, 2)])
def test_fast_and_general_agree_with_sharing_by_size(order, streams, seed):
    specs = [S.ModelSpec.linear("det", 1.0, 0.1, 8, service_cv=0.1, switch_ms=0.05, launch_ms=0.05,
                                host_ms=0.15, share_slowdown=(0.3, 0.5), share_by_size=(0.03, 0.035)),
             S.ModelSpec.linear("cls", 0.4, 0.03, 8, service_cv=0.05, launch_ms=0.04, host_ms=0.12,
                                share_slowdown=(0.25, 0.4), share_by_size=(0.05, 0.05)),
             S.ModelSpec.linear("seg", 1.5, 0.2, 8, switch_ms=0.02, launch_ms=0.06, host_ms=0.1,
                                share_by_size=(0.5,))]  # extreme: hits the 0.9 cap
    wl = S.make_workload([S.Poisson("det", 1500, slo_ms=30), S.Bursty("cls", 9000, 0.05, 0.2,
                                                                       slo_ms=10, priority=1),
                          S.Poisson("seg", 500, slo_ms=40, priority=2)], 3, seed=seed)
    pol = S.Policy(order=order, streams=streams, batching=S.Batching(8, 1.0))
    a = S.simulate(specs, wl, pol, seed=seed, engine="general")
    b = S.simulate(specs, wl, pol, seed=seed, engine="fast")
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.batches, b.batches, check_exact=True)
    plain = S.simulate([s.with_(share_by_size=()) for s in specs], wl, pol, seed=seed)
    # the size term only adds to the sharing: requests wait longer
    assert a.requests["latency_ms"].mean() > plain.requests["latency_ms"].mean()


def test_random_launch_time_is_queueing_time_of_an_mg1_queue():
    # Independent reference (M/G/1, Pollaczek-Khinchine): one stream, no batching, Poisson
    # arrivals at rate lam; each request's service is its launch L (drawn from launch_ms plus
    # one of the equally likely launch_jitter_ms values) plus the latency D, held on the stream.
    # Mean wait in queue lam E[S^2] / (2 (1 - lam E[S])), latency = wait + E[S].
    lam, lat, launch = 500.0, 1.0e-3, 0.2e-3
    jit = np.array([-0.15, -0.1, -0.05, 0.0, 0.0, 0.05, 0.1, 0.55]) * 1e-3  # a long tail
    jit = jit - jit.mean()
    specs = [S.ModelSpec.constant("a", lat * 1e3, launch_ms=launch * 1e3, host_ms=launch * 1e3,
                                  launch_jitter_ms=tuple(jit * 1e3), host_jitter_ms=tuple(jit * 1e3))]
    wl = S.make_workload([S.Poisson("a", lam)], 400.0, seed=12)
    res = S.simulate(specs, wl, S.Policy(), engine="fast", seed=5)
    s = lat + launch + jit                   # equally likely service times
    es, es2 = s.mean(), (s * s).mean()
    want = lam * es2 / (2 * (1 - lam * es)) + es
    got = (res.requests.end_s - res.requests.arrival_s).mean()
    assert got == pytest.approx(want, rel=0.03)
    # and it is not the constant-launch answer (the spread matters here)
    const = lam * es * es / (2 * (1 - lam * es)) + es
    assert abs(got - const) > 0.5 * abs(want - const) > 0


@pytest.mark.parametrize("streams,seed", [(1, 1), (2, 2), (3, 3)])
def test_fast_and_general_agree_with_host_jitter(streams, seed):
    jit = tuple(np.linspace(-0.02, 0.06, 16) - np.linspace(-0.02, 0.06, 16).mean())
    specs = [S.ModelSpec.linear("det", 1.0, 0.1, 8, service_cv=0.1, switch_ms=0.05, launch_ms=0.03,
                                host_ms=0.1, share_slowdown=(0.3, 0.5), launch_jitter_ms=jit,
                                host_jitter_ms=tuple(2 * x for x in jit)),
             S.ModelSpec.linear("cls", 0.4, 0.03, 8, launch_ms=0.02, host_ms=0.08,
                                launch_jitter_ms=jit)]
    wl = S.make_workload([S.Poisson("det", 1500, slo_ms=30),
                          S.Poisson("cls", 6000, slo_ms=10, priority=1)], 2, seed=seed)
    pol = S.Policy(order="priority", streams=streams, batching=S.Batching(8, 1.0))
    a = S.simulate(specs, wl, pol, seed=seed, engine="general")
    b = S.simulate(specs, wl, pol, seed=seed, engine="fast")
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.batches, b.batches)
    # the draws changed something: without them the run differs
    c = S.simulate([s.with_(launch_jitter_ms=(), host_jitter_ms=()) for s in specs], wl, pol,
                   seed=seed, engine="fast")
    assert not np.allclose(a.batches["start_s"].to_numpy()[:50], c.batches["start_s"].to_numpy()[:50])


def test_jitter_tables_must_be_finite_and_alike():
    with pytest.raises(InvalidArgument):
        S.ModelSpec.constant("a", 1.0, launch_jitter_ms=(0.0, float("nan")))
    with pytest.raises(InvalidArgument):
        S.ModelSpec.constant("a", 1.0, launch_jitter_ms=(0.1, -0.1), host_jitter_ms=(0.1, 0.0, -0.1))
