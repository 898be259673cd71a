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
