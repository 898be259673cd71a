"""The host's slow periods: measured by a real canary process, turned into windows, and given to
both simulator engines (hand-worked timelines with synthetic specs; the stretch against a
step-by-step integration of the host's speed)."""
import time

import numpy as np
import pandas as pd
import pytest

from hookmagic import sched as S
from hookmagic.common.errors import InvalidArgument
from hookmagic.sched.host_speed import (HostCanary, canary_cpu, check_windows, cpu_cores,
                                        meter_pass, pass_bins, slow_windows, speed_windows)
from hookmagic.sched.pacing import stretched
from tests.synthetic import batch_timeline, synthetic_requests


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_a_launch_in_a_slow_period_stretches(engine):
    # one stream; 0.2 ms of launch, 1 ms on the GPU; the host runs 4x slower in [0.1, 0.3) ms.
    # Decided at 0: 0.1 ms of launch done by 0.1; the rest would take 0.4 ms at a quarter speed
    # but the period ends at 0.3 after 0.05 ms of it; the last 0.05 ms at full speed: start 0.35.
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.2)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a")]), S.Policy(), engine=engine,
                     host_windows=[(0.1e-3, 0.3e-3, 4.0)])
    assert batch_timeline(res) == [("a", 0.35, 1.35)]


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_a_faster_host_shrinks_the_launch(engine):
    # the host runs host work in half the time over [0, 1) ms: 0.2 ms of launch ends at 0.1
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.2)]
    res = S.simulate(specs, synthetic_requests([(0.0, "a")]), S.Policy(), engine=engine,
                     host_windows=[(0.0, 1e-3, 0.5)])
    assert batch_timeline(res) == [("a", 0.1, 1.1)]


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_the_gpu_waits_through_its_share_of_a_slower_call(engine):
    # launch 0.1 ms, call 0.2 ms (host 0.3), GPU 1 ms of which call_share 0.5 of the call is
    # the GPU waiting for the graph's kernels. Host 2x slower over [0, 1) ms: the launch ends
    # at 0.2, the call then takes 0.4 instead of 0.2, so the GPU waits 0.5 * 0.2 = 0.1 ms more:
    # 0.2 to 1.3. 3x faster over [0, 1): launch ends at 0.1/3, the call takes 0.2/3,
    # 0.5 * (0.2 - 0.2/3) = 1/15 ms less GPU time. At the specs' speed GPU time stays 1 ms.
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.1, host_ms=0.3, call_share=0.5)]
    wl = synthetic_requests([(0.0, "a")])
    slow = S.simulate(specs, wl, S.Policy(), engine=engine, host_windows=[(0.0, 1e-3, 2.0)])
    assert batch_timeline(slow) == [("a", 0.2, 1.3)]
    fast = S.simulate(specs, wl, S.Policy(), engine=engine, host_windows=[(0.0, 1e-3, 1 / 3)])
    ((_, start, end),) = batch_timeline(fast)
    assert start == pytest.approx(0.1 / 3) and end - start == pytest.approx(1.0 - 1 / 15)
    assert batch_timeline(S.simulate(specs, wl, S.Policy(), engine=engine)) == [("a", 0.1, 1.1)]


def test_call_share_is_a_share():
    with pytest.raises(InvalidArgument):
        S.ModelSpec.constant("a", 1.0, call_share=1.5)
    with pytest.raises(InvalidArgument):
        S.ModelSpec.constant("a", 1.0, call_share=-0.1)


@pytest.mark.parametrize("engine", ["general", "fast"])
def test_the_host_stays_busy_longer_in_a_slow_period(engine):
    # two streams, one request each at 0; each dispatch holds the host 0.3 ms (launch 0.1 ms);
    # the host is 2x slower from 0 to 1 ms: a's launch ends at 0.2, the host frees at 0.6, so
    # b is decided at 0.6 and starts at 0.8. Without the period: 0.1 and 0.4 (as hand-worked in
    # test_sched_sharing).
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.1, host_ms=0.3),
             S.ModelSpec.constant("b", 1.0, launch_ms=0.1, host_ms=0.3)]
    wl = synthetic_requests([(0.0, "a"), (0.0, "b")])
    res = S.simulate(specs, wl, S.Policy(streams=2), engine=engine, host_windows=[(0.0, 1e-3, 2.0)])
    assert batch_timeline(res) == [("a", 0.2, 1.2), ("b", 0.8, 1.8)]
    assert batch_timeline(S.simulate(specs, wl, S.Policy(streams=2), engine=engine)) == [
        ("a", 0.1, 1.1), ("b", 0.4, 1.4)]


def test_stretch_matches_stepping_through_the_host_speed():
    # independent reference: advance time in 1 µs steps, adding 1/slowdown µs of work per step
    rng = np.random.default_rng(5)
    for _ in range(20):
        edges = np.sort(rng.uniform(0, 20e-3, 8))
        w = np.column_stack([edges[0::2], edges[1::2], rng.uniform(1, 12, 4)])
        t, work = rng.uniform(0, 15e-3), rng.uniform(0, 3e-3)
        dt, pos, done = 1e-7, t, 0.0
        while done < work:
            inside = (w[:, 0] <= pos) & (pos < w[:, 1])
            done += dt / (w[inside, 2][0] if inside.any() else 1.0)
            pos += dt
        assert stretched(t, work, w) == pytest.approx(pos, abs=2e-6)


def test_no_windows_changes_nothing():
    specs = [S.ModelSpec.linear("det", 2.0, 0.5, 16, launch_ms=0.06, host_ms=0.2),
             S.ModelSpec.linear("cls", 0.5, 0.1, 32, launch_ms=0.03, host_ms=0.1)]
    wl = S.make_workload([S.Poisson("det", 200), S.Poisson("cls", 900, priority=1)], 2, seed=3)
    pol = S.Policy(order="priority", streams=2, batching=S.Batching(8, 1.0))
    for engine in ("general", "fast"):
        a = S.simulate(specs, wl, pol, seed=3, engine=engine)
        b = S.simulate(specs, wl, pol, seed=3, engine=engine, host_windows=np.zeros((0, 3)))
        pd.testing.assert_frame_equal(a.requests, b.requests)


@pytest.mark.parametrize("streams,seed", [(1, 1), (2, 2), (3, 3)])
def test_fast_and_general_agree_with_slow_periods(streams, seed):
    specs = [S.ModelSpec.linear("det", 2.0, 0.5, 16, service_cv=0.2, switch_ms=0.05, launch_ms=0.06,
                                host_ms=0.2, share_slowdown=(0.3, 0.5)),
             S.ModelSpec.linear("cls", 0.5, 0.1, 32, launch_ms=0.03, host_ms=0.1,
                                share_slowdown=(0.2, 0.4))]
    wl = S.make_workload([S.Poisson("det", 300, slo_ms=50), S.Poisson("cls", 1500, slo_ms=20,
                                                                        priority=1)], 2, seed=seed)
    pol = S.Policy(order="priority", streams=streams, batching=S.Batching(8, 1.0))
    win = [(0.2, 0.22, 10.0), (0.9, 0.95, 3.0), (1.5, 1.516, 20.0)]
    a = S.simulate(specs, wl, pol, seed=seed, engine="general", host_windows=win)
    b = S.simulate(specs, wl, pol, seed=seed, engine="fast", host_windows=win)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.batches, b.batches)
    # a speed that moves both ways all through the run, and GPU time that follows the call
    paced = [s.with_(call_share=0.75) for s in specs]
    bins = [(k * 0.05, (k + 1) * 0.05, 0.6 + 0.9 * ((k * 7) % 5) / 4) for k in range(40)]
    a = S.simulate(paced, wl, pol, seed=seed, engine="general", host_windows=bins)
    b = S.simulate(paced, wl, pol, seed=seed, engine="fast", host_windows=bins)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.batches, b.batches)
    a = S.simulate(specs, wl, pol, seed=seed, engine="general", host_windows=win)
    # and the periods cost latency: the same run with a steady host is quicker
    c = S.simulate(specs, wl, pol, seed=seed, engine="fast")
    assert a.requests["latency_ms"].mean() > c.requests["latency_ms"].mean()


@pytest.mark.parametrize("bad", [[(0.0, float("nan"), 2.0)], [(1.0, 0.5, 2.0)], [(0.0, 1.0, 0.0)],
                                 [(0.0, 1.0, -1.0)],
                                 [(0.0, 1.0, 2.0), (0.5, 2.0, 2.0)], [(0.0, 1.0)]])
def test_bad_windows_rejected(bad):
    with pytest.raises(InvalidArgument):
        check_windows(bad)
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.2)]
    with pytest.raises(InvalidArgument):
        S.simulate(specs, synthetic_requests([(0.0, "a")]), S.Policy(), host_windows=bad)


def test_windows_from_a_synthetic_pass_trace():
    # synthetic canary trace: 10 µs passes, then 100 passes of 200 µs (a 20 ms period 20x
    # slower), then 10 µs passes again, and one lone 3 ms pass (the canary put off its CPU)
    lengths = np.r_[np.full(2000, 10e-6), np.full(100, 200e-6), np.full(2000, 10e-6), [3e-3],
                    np.full(500, 10e-6)]
    starts = np.r_[0.0, np.cumsum(lengths)[:-1]]
    w = slow_windows(starts, lengths)
    assert w.shape == (1, 3)
    assert w[0, 0] == pytest.approx(0.02)
    assert w[0, 1] == pytest.approx(0.04)
    assert w[0, 2] == pytest.approx(20.0)


def test_canary_measures_the_block_it_wraps():
    with HostCanary() as c:
        t0 = time.perf_counter()
        time.sleep(0.3)
        t1 = time.perf_counter()
    assert c.ok, c.why
    # its passes cover the block (it started before and stopped after it)
    assert c.starts[0] <= t0 and c.starts[-1] + c.lengths[-1] >= t1 - 0.01
    assert 0 < np.median(c.lengths) < 1e-3
    w = c.windows(t0)
    assert (w[:, 2] >= 1).all()


def test_a_canary_that_cannot_start_says_why_and_the_block_runs():
    ran = False
    with HostCanary(cpu=10 ** 6) as c:  # no such CPU: its process fails at once
        ran = True
    assert ran and not c.ok and "canary" in c.why
    assert c.windows().shape == (0, 3)


def test_canary_pass_times_per_bin():
    with HostCanary() as c:
        t0 = time.perf_counter()
        time.sleep(0.1)
    p = c.pass_times(t0, width_s=0.02)
    assert p["median_pass_us"] == pytest.approx(np.median(c.lengths) * 1e6)
    assert len(p["bins_us"]) >= 5  # 0.1 s of block in 20 ms bins, and the canary's stop
    assert all(b is None or b > 0 for b in p["bins_us"])


def test_a_mildly_slow_period_is_not_a_stall():
    # synthetic: 200 passes at 3x the median (a busy sibling core, not the machine stalling)
    lengths = np.r_[np.full(2000, 10e-6), np.full(200, 30e-6), np.full(2000, 10e-6)]
    starts = np.r_[0.0, np.cumsum(lengths)[:-1]]
    assert slow_windows(starts, lengths).shape == (0, 3)
    assert slow_windows(starts, lengths, factor=2.0, min_slowdown=2.0).shape == (1, 3)


def test_cpu_cores_read_the_kernels_topology(tmp_path):
    # a synthetic sysfs: 4 CPUs, two cores of two hardware threads (0,2) and (1,3)
    (tmp_path / "online").write_text("0-3\n")
    for cpu, sib in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}.items():
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(sib + "\n")
    assert cpu_cores(tmp_path) == [(0, 2), (1, 3)]
    # no topology files: one core per CPU
    (tmp_path / "cpu3" / "topology" / "thread_siblings_list").unlink()
    assert cpu_cores(tmp_path)[-1] == (3,)
    # and this machine's own: every online CPU once
    mine = cpu_cores()
    assert sorted(c for core in mine for c in core) == sorted(set(c for core in mine for c in core))


def test_the_canary_keeps_off_the_drivers_core():
    cores = [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert canary_cpu(cores, mine={3}) in (0, 1, 2)           # pinned driver: another core
    assert canary_cpu(cores, mine={7}) in (0, 1, 2)           # its sibling's core is its own
    assert canary_cpu(cores, mine=set(range(8))) == 2         # unpinned: the middle core
    assert canary_cpu([(0, 1)], mine={0}) is None             # one core: nowhere else to go
    assert canary_cpu([(0,)], mine={0}) is None


def test_pass_bins_and_speed_windows_from_a_synthetic_meter():
    # synthetic meter: a 1 µs pass every ms for 0.1 s, 2 µs from 0.05 s on (the host at half
    # speed), stamped from t0 = 100 s on the perf_counter clock
    t0 = 100.0
    at = t0 + np.arange(100) * 1e-3
    d = np.where(np.arange(100) < 50, 1e-6, 2e-6)
    m = pass_bins(at, d, t0, 0.025)
    assert m["width_s"] == 0.025 and m["bins_us"] == pytest.approx([1, 1, 2, 2])
    w = speed_windows(m, 1.0)
    np.testing.assert_allclose(w, [(0, 0.025, 1), (0.025, 0.05, 1), (0.05, 0.075, 2),
                                   (0.075, 0.1, 2)])
    # against a probe that ran at 2 µs, the first half was twice as fast
    assert speed_windows(m, 2.0)[:, 2] == pytest.approx([0.5, 0.5, 1, 1])
    # no meter, no reference, an empty bin: no window there, not a guess
    assert len(speed_windows(None, 1.0)) == 0 and len(speed_windows(m, None)) == 0
    gap = dict(m, bins_us=[1.0, None, 4.0])
    np.testing.assert_allclose(speed_windows(gap, 1.0), [(0, 0.025, 1), (0.05, 0.075, 4)])
    check_windows(w)  # what the simulator accepts


def test_the_meter_times_its_work():
    # the same unit of work, timed by the meter and by a loop of 200 of them
    t = time.perf_counter()
    for _ in range(200):
        meter_pass()
    each = (time.perf_counter() - t) / 200
    passes = [meter_pass() for _ in range(200)]
    assert 0 < np.median(passes) <= 3 * each


def test_the_driver_stores_its_host_meter():
    from hookmagic.sched.engines import SleepEngine, ThreadBackend
    spec = S.ModelSpec.linear("a", 1.0, 0.2, 8)
    wl = S.make_workload([S.Poisson("a", 200)], 0.5, seed=1)
    res = S.run({"a": SleepEngine(spec)}, wl, S.Policy(), backend=ThreadBackend())
    m = res.meta["host_meter"]
    # about one pass a ms through 0.5 s of arrivals, in 50 ms bins from run time 0
    assert m["width_s"] == 0.05 and len(m["bins_us"]) >= 10
    assert all(b is None or 0 < b < 1e3 for b in m["bins_us"])
    assert len(speed_windows(m, m["median_pass_us"])) >= 10
