"""The real driver's GPU-to-host clock correction (``driver.clock_corrected``) against the true
host times of a synthetic GPU clock that runs at another rate (synthetic data: no GPU here;
tests/gpu/test_sched_driver_gpu.py checks a real one)."""
import numpy as np
import pytest

from hookmagic.sched.driver import clock_corrected, usable_drift


@pytest.mark.parametrize("drift", [-40e-6, 0.0, 18e-6, 300e-6])
def test_times_mapped_through_one_reference_come_back_to_the_host_clock(drift):
    rng = np.random.default_rng(3)
    ref = -0.05                                   # first reference, host seconds (run time)
    host = np.sort(rng.uniform(0.0, 4.0, 500))    # when the events really happened
    gpu_elapsed = (host - ref) / (1.0 + drift)    # what a clock slower by `drift` counts
    mapped = ref + gpu_elapsed                    # one-reference mapping: drifts early
    assert np.abs(mapped - host).max() == pytest.approx(abs(drift) * 4.05 / (1 + drift), rel=1e-3)
    np.testing.assert_allclose(clock_corrected(mapped, ref, drift), host, rtol=0, atol=1e-12)


def test_only_plausible_fits_are_used():
    ok = {"drift": 18e-6, "uncertainty": 3e-6, "span_s": 3.2, "ref_host": 0.0}
    assert usable_drift(ok)
    assert not usable_drift({**ok, "span_s": 0.05})        # too short to tell
    assert not usable_drift({**ok, "drift": 2e-3})          # a jump, not a drift
    assert not usable_drift({**ok, "uncertainty": 400e-6})  # the references were too noisy


def test_a_stored_run_corrected_afterwards_equals_the_true_one():
    """A run recorded through a drifting clock (the engines' arrays, mapped early, assembled by
    the same path the driver uses) and corrected afterwards gives the true run's tables."""
    from hookmagic import sched as S
    from hookmagic.sched.driver import with_clock_corrected
    from hookmagic.sched.result import RunResult, assemble
    from hookmagic.sched.simulator import service_multipliers, simulate_raw
    specs = [S.ModelSpec.linear("a", 1.0, 0.2, 8), S.ModelSpec.linear("b", 0.5, 0.1, 8)]
    wl = S.make_workload([S.Poisson("a", 900, slo_ms=4.0), S.Poisson("b", 1500, slo_ms=3.0)], 3.0, seed=1)
    pol = S.Policy(batching=S.Batching(8, 1.0))
    arrays = wl.arrays(["a", "b"])
    raw, _ = simulate_raw(specs, arrays, service_multipliers(specs, arrays["model"], 0), pol)
    status, drop, m, st, b_start, b_end, size, served = raw
    ref, drift = -0.05, 25e-6
    true = RunResult(*assemble(wl.requests, ["a", "b"], status, drop, m, st, b_start, b_end, size, served))
    early = lambda t: ref + (t - ref) / (1 + drift)  # noqa: E731
    seen = RunResult(*assemble(wl.requests, ["a", "b"], status, drop, m, st, early(b_start),
                               early(b_end), size, served))
    assert (seen.requests["latency_ms"] < true.requests["latency_ms"]).mean() > 0.99
    assert seen.requests["met_slo"].sum() > true.requests["met_slo"].sum()  # looked better
    fixed = with_clock_corrected(seen, ref, drift)
    for col in ("start_s", "end_s", "queue_ms", "compute_ms", "latency_ms"):
        np.testing.assert_allclose(fixed.requests[col], true.requests[col], rtol=0, atol=1e-9)
    assert (fixed.requests["met_slo"] == true.requests["met_slo"]).all()
    np.testing.assert_allclose(fixed.batches["compute_ms"], true.batches["compute_ms"], atol=1e-9)
