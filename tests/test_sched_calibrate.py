"""The calibration fit (hookmagic.sched.calibrate) recovers the parameters of a known system.

Reference: the simulator itself, run with known (synthetic) per-model parameters on the
calibration workloads, stands in for the real driver; the fit, which reads only the result
tables, must give those parameters back. The real driver's ``dispatch_s`` (when the launch call
returned) is the decision time plus ``host_ms``, i.e. ``start_s - launch_ms + host_ms``."""
import numpy as np
import pytest

from hookmagic import sched as S
from hookmagic.common.errors import InvalidArgument
from hookmagic.sched import calibrate as C

MAX_BATCH = 8


def _synthetic_truth(cv):
    return {"det": S.ModelSpec.linear("det", 0.9, 0.05, MAX_BATCH, service_cv=cv, launch_ms=0.05,
                                      host_ms=0.16, switch_ms=0.04, share_slowdown=(0.3, 0.5)),
            "cls": S.ModelSpec.linear("cls", 0.4, 0.02, MAX_BATCH, service_cv=cv, launch_ms=0.04,
                                      host_ms=0.12, switch_ms=0.02, share_slowdown=(0.25, 0.45)),
            "seg": S.ModelSpec.linear("seg", 1.2, 0.08, MAX_BATCH, service_cv=cv, launch_ms=0.06,
                                      host_ms=0.15, switch_ms=0.0, share_slowdown=(0.35, 0.6))}


def _driver_run(truth, wl, pol, seed):
    """``wl`` served by a simulated driver with the true parameters, with the real driver's
    host stamp ``dispatch_s`` (the launch call returns ``host_ms - launch_ms`` after the start)."""
    res = S.simulate(list(truth.values()), wl, pol, seed=seed)
    b = res.batches
    launch = b["model"].astype(str).map({n: s.launch_ms / 1e3 for n, s in truth.items()})
    host = b["model"].astype(str).map({n: s.host_ms / 1e3 for n, s in truth.items()})
    b["dispatch_s"] = b["start_s"] - launch.to_numpy() + host.to_numpy()
    return res


def _idle_of(truth):
    """The rough idle-GPU tables the calibration workloads are sized from (3 % off the truth)."""
    return {n: S.ModelSpec.linear(n, s.latency_ms[0] * 0.97, 0.0, MAX_BATCH) for n, s in truth.items()}


def _on_a_slower_host(truth, factor=1.6, share=0.8):
    """``truth`` with launch gap and launch call ``factor`` times longer, the GPU waiting through
    ``share`` of the longer call (as on the H100/H200 runs of 2026-11-26)."""
    def slow(s):
        launch, call = factor * s.launch_ms, factor * (s.host_ms - s.launch_ms)
        longer = share * (call - (s.host_ms - s.launch_ms))
        return s.with_(launch_ms=launch, host_ms=launch + call,
                       latency_ms=tuple(x + longer for x in s.latency_ms))
    return {n: slow(s) for n, s in truth.items()}


def _simulated_driver(truth):
    """The calibration runs, simulated with the true parameters; ``dispatch_s`` added."""
    idle = _idle_of(truth)
    names = list(truth)
    runs = {key: _driver_run(truth, wl, pol, seed=4)
            for key, (wl, pol) in C.calibration_workloads(idle, MAX_BATCH).items()}
    return runs, idle, names


def test_fit_recovers_a_deterministic_system_exactly():
    truth = _synthetic_truth(cv=0.0)
    runs, idle, names = _simulated_driver(truth)
    got = C.fit(runs, idle, MAX_BATCH)
    for n, spec in truth.items():
        g = got[n]
        seen = [z for z in range(1, MAX_BATCH + 1)]
        assert g["service_ms"] == pytest.approx([spec.latency(z) for z in seen], rel=1e-6)
        assert g["launch_ms"] == pytest.approx(spec.launch_ms, rel=1e-6)
        assert g["host_ms"] == pytest.approx(spec.host_ms, rel=1e-6)
        assert g["switch_ms"] == pytest.approx(spec.switch_ms, abs=1e-6)
        assert g["share_slowdown"] == pytest.approx(list(spec.share_slowdown), rel=1e-6)
        assert min(g["overlap_ms"]) > 0  # both one and two others were seen


def test_fit_recovers_a_noisy_system_closely_and_specs_carry_it():
    truth = _synthetic_truth(cv=0.03)
    runs, idle, names = _simulated_driver(truth)
    got = C.fit(runs, idle, MAX_BATCH)
    for n, spec in truth.items():
        g = got[n]
        # sizes seen often enough: means within 2 % (cv 3 %, dozens of batches each)
        assert np.allclose(g["service_ms"], [spec.latency(z) for z in range(1, MAX_BATCH + 1)],
                           rtol=0.02)
        assert g["service_cv"] == pytest.approx(0.03, rel=0.4)
        assert g["launch_ms"] == pytest.approx(spec.launch_ms, rel=1e-6)
        assert g["share_slowdown"] == pytest.approx(list(spec.share_slowdown), abs=0.06)
    specs = C.specs_from_fit(got, idle)
    assert [s.name for s in specs] == names
    assert specs[0].launch_ms == pytest.approx(truth["det"].launch_ms)
    assert specs[0].slowdown(2) == pytest.approx(1 + got["det"]["share_slowdown"][1])


def test_switch_cost_is_read_against_the_same_run_not_the_alone_runs():
    # synthetic: the host runs 1.6x slower during the switch run than during the alone runs,
    # and the GPU waits through 0.8 of the longer launch call (as on real H100/H200 hosts).
    # The switch run's own same-model batches carry that too, so the fit gives the true switch
    # costs back; compared with the alone runs, the host's drift would read as a switch cost.
    truth = _synthetic_truth(cv=0.0)
    idle = _idle_of(truth)

    slow_truth = _on_a_slower_host(truth)
    runs = {key: _driver_run(slow_truth if key == "switch" else truth, wl, pol, seed=4)
            for key, (wl, pol) in C.calibration_workloads(idle, MAX_BATCH).items()}
    got = C.fit(runs, idle, MAX_BATCH)
    for n, spec in truth.items():
        assert got[n]["switch_identified"]
        assert got[n]["same_seen"] >= C.MIN_SWITCH_BATCHES
        assert got[n]["switch_ms"] == pytest.approx(spec.switch_ms, abs=1e-6)
    # a switch run where (almost) every batch follows another model leaves the cost
    # unidentified, and then none is simulated
    m = len(idle)
    mixed = S.make_workload([S.Poisson(n, C._mixed_rate(s, 1.0) / m, slo_ms=1e6)
                             for n, s in idle.items()], 1.0, seed=98)
    runs["switch"] = _driver_run(slow_truth, mixed, S.Policy(batching=S.Batching(MAX_BATCH, 0.0)),
                                 seed=4)
    got = C.fit(runs, idle, MAX_BATCH)
    assert not all(got[n]["switch_identified"] for n in truth)
    assert all(got[n]["switch_ms"] == 0.0 for n in truth if not got[n]["switch_identified"])


def test_sharing_is_read_net_of_the_hosts_speed_in_the_share_runs():
    # synthetic: the host runs 1.6x slower in the share runs than in the alone runs and the GPU
    # waits through 0.8 of the longer launch call; given each model's alone-run call and call
    # share (what fit passes), fit_sharing takes that wait out before reading sharing. Without
    # them the same runs read the host's wait as sharing (a1 too high).
    truth = _synthetic_truth(cv=0.0)
    idle = _idle_of(truth)

    slow_truth = _on_a_slower_host(truth)
    runs = {key: _driver_run(slow_truth if key.startswith("share") else truth, wl, pol, seed=4)
            for key, (wl, pol) in C.calibration_workloads(idle, MAX_BATCH).items()}
    shares = [res for key, res in runs.items() if key.startswith("share")]
    costs = {n: (list(s.latency(np.arange(1, MAX_BATCH + 1))), s.switch_ms) for n, s in truth.items()}
    calls = {n: (s.host_ms - s.launch_ms, 0.8) for n, s in truth.items()}
    net = C.fit_sharing(shares, costs, calls=calls)
    naive = C.fit_sharing(shares, costs)
    for n, spec in truth.items():
        assert net[n]["share_slowdown"] == pytest.approx(list(spec.share_slowdown), rel=1e-6)
        assert naive[n]["share_slowdown"][0] > spec.share_slowdown[0] + 0.03


def test_overlap_by_count_splits_time_by_number_of_others():
    # synthetic intervals (s): a [0, 4], b [1, 3], c [2, 5]
    import pandas as pd
    b = pd.DataFrame({"start_s": [0.0, 1.0, 2.0], "end_s": [4.0, 3.0, 5.0]})
    ov = C.overlap_by_count(b, 2)
    # a: beside one other 1-2 and 3-4 (2 s), beside two 2-3 (1 s); b: one 1-2, two 2-3;
    # c: two 2-3, one 3-4
    assert ov.tolist() == [[2.0, 1.0], [1.0, 1.0], [1.0, 1.0]]


def test_self_check_of_an_exact_fit_agrees():
    truth = _synthetic_truth(cv=0.0)
    runs, idle, names = _simulated_driver(truth)
    specs = C.specs_from_fit(C.fit(runs, idle, MAX_BATCH), idle)
    check = C.self_check(runs, specs, idle, MAX_BATCH)
    assert set(check["run"]) == set(runs)
    assert check["gpu_err_pct"].abs().max() < 1e-6
    assert check["p50_err_pct"].abs().max() < 1e-6


def test_fit_sharing_refines_a_spec_from_any_multi_stream_run():
    # a priority scenario on three streams (not a calibration workload), simulated with known
    # slowdowns: the per-batch regression on its batches gives them back
    truth = _synthetic_truth(cv=0.0)
    wl = S.make_workload([S.Poisson("det", 1200, slo_ms=30),
                          S.Bursty("cls", 12000, 0.05, 0.15, slo_ms=10, priority=1),
                          S.Poisson("seg", 600, slo_ms=40, priority=2)], 2.0, seed=8)
    res = S.simulate(list(truth.values()), wl, S.Policy(order="priority", streams=3,
                                                        batching=S.Batching(8, 1.0)), seed=8)
    got = C.fit_sharing([res], truth)
    for n, spec in truth.items():
        assert got[n]["share_slowdown"] == pytest.approx(list(spec.share_slowdown), rel=1e-6)


def test_fit_recovers_sharing_that_grows_with_the_size_beside():
    # the simulator's size term (ModelSpec.share_by_size) is fitted back from the calibration
    # runs, beside the count-only slowdowns
    truth = {n: s.with_(share_by_size=e) for (n, s), e in
             zip(_synthetic_truth(cv=0.0).items(), [(0.03, 0.035), (0.05, 0.04), (0.015, 0.03)])}
    runs, idle, names = _simulated_driver(truth)
    got = C.fit(runs, idle, MAX_BATCH)
    for n, spec in truth.items():
        assert got[n]["share_slowdown"] == pytest.approx(list(spec.share_slowdown), rel=1e-6)
        assert got[n]["share_by_size"] == pytest.approx(list(spec.share_by_size), rel=1e-6)
    specs = C.specs_from_fit(got, idle)
    for s, t in zip(specs, truth.values()):
        assert s.share_by_size == pytest.approx(t.share_by_size, rel=1e-6)


def test_fit_without_size_variety_keeps_the_count_alone():
    truth = _synthetic_truth(cv=0.0)
    runs, idle, names = _simulated_driver(truth)
    got = C.fit(runs, idle, MAX_BATCH)
    assert all(got[n]["share_by_size"] == [] for n in truth)  # none in the truth: none fitted
    res = runs["share3"]
    one = res.batches.assign(size=1)  # every batch of one request: the term cannot be told apart
    ov, w = C.overlap_and_weight(one, 2)
    assert np.allclose(w, ov * [1, 2])  # one request beside one, two beside two: proportional
    only = C.fit_sharing([res.__class__(res.requests, one, res.meta)], truth)
    assert all(only[n]["share_by_size"] == [] for n in truth)


@pytest.mark.parametrize("streams", [1, 2])
def test_refine_host_recovers_the_host_times_a_run_paid(streams):
    """``refine_host`` reads launch and host times off one run (the real driver's own
    measurements): on a run of a simulated driver whose host is 1.8x slower than the specs it
    is handed say, it must give back the slower host's times exactly (clean batches only:
    waiting for the one host thread or for a batching timer is not launch time), and keep
    everything else."""
    truth = _synthetic_truth(0.0)
    slow = {n: s.with_(launch_ms=1.8 * s.launch_ms, host_ms=1.8 * s.host_ms) for n, s in truth.items()}
    srcs = [S.Poisson(n, 1.2 * s.throughput(4) / len(truth), slo_ms=50) for n, s in truth.items()]
    wl = S.make_workload(srcs, 2.0, seed=5)
    pol = S.Policy(order="fifo", streams=streams, batching=S.Batching(MAX_BATCH, 0.5))
    res = _driver_run(slow, wl, pol, seed=2)
    res.meta["clock_corrected"] = True
    specs, how = C.refine_host(list(truth.values()), res, pol)
    assert how["clean"] > 100
    assert how["host_speed"] == pytest.approx(1.8, rel=1e-6)
    for s in specs:
        assert s.launch_ms == pytest.approx(slow[s.name].launch_ms, rel=1e-6)
        assert s.host_ms == pytest.approx(slow[s.name].host_ms, rel=1e-6)
        assert s.latency_ms == truth[s.name].latency_ms
        assert s.share_slowdown == truth[s.name].share_slowdown
    # an uncorrected run's launch calls are not trusted: the calibrated call is kept
    res.meta["clock_corrected"] = False
    specs, _ = C.refine_host(list(truth.values()), res, pol)
    for s in specs:
        assert s.host_ms - s.launch_ms == pytest.approx(truth[s.name].host_ms - truth[s.name].launch_ms)


def test_batches_whose_launch_stalled_the_host_are_not_the_models_cost():
    """A stalled launch call (the host held over STALL_S) leaves the GPU waiting inside the
    batch: on the simulated driver, every 20th alone batch made 0.4 ms longer with its launch
    call 0.7 ms long must not move the fitted GPU times, while the same lengthened batches with
    a launch call that did not stall do. (Only GPU times: lengthening a batch in place, as
    here, would also shorten the next batch's launch gap, which a real stall does not.)"""
    truth = _synthetic_truth(cv=0.0)
    exact = [truth[n].latency(z) for n in truth for z in range(1, MAX_BATCH + 1)]

    def fitted(call_s: float) -> list[float]:
        runs, idle, names = _simulated_driver(truth)
        for key, res in runs.items():
            if key.startswith("alone:"):
                b = res.batches
                hit = np.arange(len(b)) % 20 == 7
                b.loc[hit, "end_s"] += 4e-4
                b.loc[hit, "dispatch_s"] = b.loc[hit, "start_s"] + call_s
        got = C.fit(runs, idle, MAX_BATCH)
        return [v for n in truth for v in got[n]["service_ms"]]

    assert fitted(7e-4) == pytest.approx(exact, rel=1e-6)
    assert np.mean(fitted(C.STALL_S / 2)) > np.mean(exact) + 0.01


def test_launch_time_per_number_of_streams_is_recovered_and_carried():
    """The simulated driver launches 6 µs later on two streams and 9 µs later on three than
    alone (its loop polls more streams): the fit gives that back (``launch_streams_ms``), and
    ``specs_from_fit`` hands each engine the launch time of the policy's stream count; the
    other parameters stay exact."""
    truth = _synthetic_truth(cv=0.0)
    idle = _idle_of(truth)
    extra = {1: 0.0, 2: 0.006, 3: 0.009}
    runs = {}
    for key, (wl, pol) in C.calibration_workloads(idle, MAX_BATCH).items():
        k = len(pol.streams)
        specs = [s.with_(launch_ms=s.launch_ms + extra[k], host_ms=s.host_ms + extra[k])
                 for s in truth.values()]
        res = S.simulate(specs, wl, pol, seed=4)
        b = res.batches
        name = b["model"].astype(str)
        b["dispatch_s"] = (b["start_s"] - name.map({s.name: s.launch_ms / 1e3 for s in specs})
                           + name.map({s.name: s.host_ms / 1e3 for s in specs})).to_numpy()
        runs[key] = res
    got = C.fit(runs, idle, MAX_BATCH)
    for n, spec in truth.items():
        assert got[n]["launch_streams_ms"] == pytest.approx([0.0, 0.006, 0.009], abs=1e-9)
        assert got[n]["launch_ms"] == pytest.approx(spec.launch_ms, rel=1e-6)
    for k, more in extra.items():
        for s in C.specs_from_fit(got, idle, k):
            assert s.launch_ms == pytest.approx(truth[s.name].launch_ms + more, rel=1e-6)
            assert s.host_ms == pytest.approx(max(truth[s.name].host_ms, s.launch_ms), rel=1e-6)
    assert C.launch_for_streams([0.0, 0.006, 0.009], 5) == pytest.approx(0.015)
    assert C.launch_for_streams([0.0], 3) == 0.0


def test_host_jitter_is_read_off_the_alone_runs():
    """A simulated driver whose launch times vary (equally likely deviations, a long tail):
    the fit's ``launch_jitter_ms`` has the same spread and tail, mean 0, and the specs carry
    it only when asked."""
    truth = _synthetic_truth(cv=0.0)
    dev = np.array([-0.01, -0.008, -0.005, -0.002, 0.0, 0.003, 0.006, 0.016])
    dev = dev - dev.mean()
    truth = {n: s.with_(launch_jitter_ms=tuple(dev), host_jitter_ms=tuple(dev)) for n, s in truth.items()}
    idle = _idle_of(truth)
    runs = {}
    for key, (wl, pol) in C.calibration_workloads(idle, MAX_BATCH).items():
        res = S.simulate(list(truth.values()), wl, pol, seed=4)
        # the driver's stamp: the host time is the launch time plus a constant call here
        b = res.batches
        name = b["model"].astype(str)
        b["dispatch_s"] = (b["start_s"] + name.map({n: (s.host_ms - s.launch_ms) / 1e3
                                                    for n, s in truth.items()})).to_numpy()
        runs[key] = res
    got = C.fit(runs, idle, MAX_BATCH)
    for n in truth:
        j = np.array(got[n]["launch_jitter_ms"])
        assert len(j) == C.JITTER_POINTS and abs(j.mean()) < 1e-12
        assert j.std() == pytest.approx(dev.std(), rel=0.1)
        assert j.max() == pytest.approx(dev.max(), rel=0.05)
    plain = C.specs_from_fit(got, idle)
    assert all(s.launch_jitter_ms == () for s in plain)
    assert all(len(s.launch_jitter_ms) == C.JITTER_POINTS for s in C.specs_from_fit(got, idle, jitter=True))


def test_probe_workload_is_the_same_kind_of_traffic_with_other_arrivals():
    """The probe before a scenario draws the scenario's own sources again with another seed:
    the same models, cameras and rates, none of the same arrival times, the same every time."""
    srcs = [S.Poisson("det", 400.0, slo_ms=20), S.Cameras("cls", n=4, fps=30.0, jitter_ms=1.0)]
    wl = S.make_workload(srcs, 3.0, seed=17)
    a, b = C.probe_workload(wl), C.probe_workload(wl)
    assert a.duration_s == C.PROBE_S
    assert np.array_equal(a.requests["arrival_s"], b.requests["arrival_s"])
    same_span = wl.requests[wl.requests["arrival_s"] < C.PROBE_S]
    assert sorted(a.requests["model"].unique()) == sorted(wl.requests["model"].unique())
    assert a.requests["camera"].max() == wl.requests["camera"].max()
    assert not np.isin(a.requests["arrival_s"], same_span["arrival_s"]).any()
    # Poisson count over 1 s at 400/s: within 5 sigma of the rate
    n_det = int((a.requests["model"] == "det").sum())
    assert abs(n_det - 400) < 5 * 20
    with pytest.raises(ValueError):
        C.probe_workload(S.Workload(wl.requests))


@pytest.mark.parametrize("streams", [1, 2])
def test_refine_from_probe_reads_the_hosts_and_the_gpus_speed_off_a_probe(streams):
    """On a probe run of a simulated driver whose host is 1.6x slower and whose GPU is 3 %
    slower than the specs say, ``refine_from_probe`` must give back the slower host's launch
    and host times and, on one stream (every batch alone), the GPU scale 1.03 exactly with the
    switch cost kept out of it; on two streams only batches with nothing beside them count,
    and the scale is still 1.03 (or 1.0 where too few ran alone). Switch and sharing stay."""
    truth = _synthetic_truth(0.0)
    slow = {n: s.with_(launch_ms=1.6 * s.launch_ms, host_ms=1.6 * s.host_ms,
                       latency_ms=tuple(1.03 * x for x in s.latency_ms)) for n, s in truth.items()}
    srcs = [S.Poisson(n, 1.1 * s.throughput(4) / len(truth) * streams, slo_ms=50)
            for n, s in truth.items()]
    wl = S.make_workload(srcs, 1.5, seed=8)
    pol = S.Policy(order="fifo", streams=streams, batching=S.Batching(MAX_BATCH, 0.5))
    res = _driver_run(slow, wl, pol, seed=2)
    res.meta["clock_corrected"] = True
    specs, how = C.refine_from_probe(list(truth.values()), res, pol)
    assert how["host_ratio"] == pytest.approx(1.6, rel=1e-6)
    for s in specs:
        assert s.launch_ms == pytest.approx(slow[s.name].launch_ms, rel=1e-6)
        assert s.host_ms == pytest.approx(slow[s.name].host_ms, rel=1e-6)
        used = how["models"][s.name]
        if streams == 1:
            assert used["batches"] >= 20
        expect = 1.03 if used["batches"] >= 20 else 1.0
        assert used["gpu_scale"] == pytest.approx(expect, rel=1e-9)
        assert s.latency_ms == pytest.approx(tuple(expect * x for x in truth[s.name].latency_ms))
        assert s.switch_ms == truth[s.name].switch_ms
        assert s.share_slowdown == truth[s.name].share_slowdown
    # the probe's first PROBE_SKIP_S are start-up: not used
    late = C.host_times_in(res, pol)
    assert how["clean"] == int((late["clean"] & (late["start_s"] >= C.PROBE_SKIP_S)).sum())


def test_refine_from_probe_refuses_a_simulated_run_and_keeps_specs_for_an_empty_probe():
    """A probe must be a real driver run (host stamps): a simulated result is refused with the
    project's error; a probe that served nothing changes nothing."""
    from hookmagic.common.errors import InvalidArgument
    truth = _synthetic_truth(0.0)
    pol = S.Policy(batching=S.Batching(MAX_BATCH, 0.5))
    wl = S.make_workload([S.Poisson("det", 500.0, slo_ms=50)], 0.5, seed=3)
    sim = S.simulate(list(truth.values()), wl, pol, seed=1)
    with pytest.raises(InvalidArgument, match="dispatch_s"):
        C.refine_from_probe(list(truth.values()), sim, pol)
    empty = S.simulate(list(truth.values()), S.make_workload([S.Poisson("det", 500.0)], 0.0, seed=3), pol)
    empty.batches["dispatch_s"] = empty.batches["start_s"]
    specs, how = C.refine_from_probe(list(truth.values()), empty, pol)
    assert specs == list(truth.values()) and how["clean"] == 0


def _paced_run(spec, windows, seed=3):
    """One model alone on one stream, served by a simulated driver whose host speed follows
    ``windows`` and whose GPU waits through ``spec.call_share`` of each launch call; with the
    real driver's stamp ``dispatch_s`` (the call, stretched as the host was, after the start)."""
    from hookmagic.sched.host_speed import check_windows
    from hookmagic.sched.pacing import stretched
    wl = S.make_workload([S.Poisson(spec.name, 1.0 * spec.throughput(4), slo_ms=50)], 2.0,
                         seed=seed)
    pol = S.Policy(batching=S.Batching(MAX_BATCH, 0.5))
    res = S.simulate([spec], wl, pol, seed=seed, host_windows=windows)
    w = check_windows(windows)
    call = (spec.host_ms - spec.launch_ms) / 1e3
    res.batches["dispatch_s"] = [stretched(t, call, w) for t in res.batches["start_s"]]
    res.meta["clock_corrected"] = True
    return res, wl, pol


def test_call_share_of_reads_how_much_of_the_call_the_gpu_waits_through():
    """On a simulated driver whose GPU waits through 0.6 of each launch call and whose host
    speed swings between 0.7x and 2.5x every 50 ms (the calls spread 0.08-0.28 ms), the
    within-size slope of GPU time on the call is 0.6; with a host that never changes speed
    there is no spread to read it from (0)."""
    spec = S.ModelSpec.linear("det", 0.9, 0.05, MAX_BATCH, launch_ms=0.05, host_ms=0.16,
                              call_share=0.6)
    swings = [(k * 0.05, (k + 1) * 0.05, (0.7, 2.5, 1.0, 1.6)[k % 4]) for k in range(60)]
    res, _, _ = _paced_run(spec, swings)
    share, used = C.call_share_of([res])
    assert used > 200
    assert share == pytest.approx(0.6, abs=1e-6)
    steady, _, _ = _paced_run(spec, None)
    assert C.call_share_of([steady])[0] == 0.0


def test_refine_host_moves_gpu_time_with_the_call():
    """A run of a simulated driver on a host 1.8x slower throughout, whose GPU waits through
    0.75 of the (longer) launch call: ``refine_host`` on specs with ``call_share`` 0.75 gives
    back the slow host's launch and host times and GPU times 0.75 x 0.8 x call longer, so that
    the simulator with those specs and a steady host makes the run again, batch for batch."""
    spec = S.ModelSpec.linear("det", 0.9, 0.05, MAX_BATCH, launch_ms=0.05, host_ms=0.16,
                              call_share=0.75)
    res, wl, pol = _paced_run(spec, [(-1.0, 100.0, 1.8)])
    (got,), how = C.refine_host([spec], res, pol)
    assert got.launch_ms == pytest.approx(1.8 * 0.05, rel=1e-6)
    assert got.host_ms == pytest.approx(1.8 * 0.16, rel=1e-6)
    assert np.array(got.latency_ms) - np.array(spec.latency_ms) == pytest.approx(
        0.75 * 0.8 * 0.11, rel=1e-6)
    again = S.simulate([got], wl, pol, seed=3)
    np.testing.assert_allclose(again.batches[["start_s", "end_s"]].to_numpy(),
                               res.batches[["start_s", "end_s"]].to_numpy(), atol=1e-9)


def test_speed_from_calls_reads_the_hosts_speed_off_the_launch_calls():
    """Hand-placed batches of a real-driver-like run (synthetic): model a's call is 0.1 ms in
    the probe-refined specs, b's 0.2 ms. In [0, 20) ms a's calls took 0.1 and 0.3 ms (0.4 of
    0.2: factor 2), in [20, 40) ms a's took 0.05 and b's 0.1 (0.15 of 0.3: 0.5); nothing started
    in [40, 60); in [60, 80) one stalled call of a took 5 ms (50x, held to 20)."""
    import pandas as pd
    specs = [S.ModelSpec.constant("a", 1.0, launch_ms=0.05, host_ms=0.15),
             S.ModelSpec.constant("b", 1.0, launch_ms=0.05, host_ms=0.25)]
    start = np.array([0.001, 0.011, 0.021, 0.031, 0.061])
    call = np.array([0.1e-3, 0.3e-3, 0.05e-3, 0.1e-3, 5e-3])
    bat = pd.DataFrame({"model": ["a", "a", "a", "b", "a"], "start_s": start,
                        "end_s": start + 1e-3, "dispatch_s": start + call})
    w = C.speed_from_calls(S.RunResult(pd.DataFrame(), bat, {}), specs)
    np.testing.assert_allclose(w, [(0.0, 0.02, 2.0), (0.02, 0.04, 0.5), (0.06, 0.08, 20.0)])
    with pytest.raises(InvalidArgument):
        C.speed_from_calls(S.simulate(specs, S.make_workload([S.Poisson("a", 100)], 0.1, seed=1)),
                           specs)
