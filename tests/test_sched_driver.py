"""The real driver's control loop, exercised on the synthetic CPU backend (threads that sleep).

No GPU here: SleepEngine sleeps each batch's table latency on a worker thread. That checks the
loop (arrival replay, polling, record assembly, the shared dispatcher) and that a real-time
run lands near the simulation of the same thing; the GPU fidelity check is
benchmarks/sched_fidelity.py.
"""
import numpy as np
import pytest

from hookmagic import sched as S
from hookmagic.sched.engines import SleepEngine, ThreadBackend, gpu_available


def test_run_without_gpu_says_so():
    ok, why = gpu_available()
    if ok:
        pytest.skip("a GPU is present")
    spec = S.ModelSpec.constant("a", 1.0)
    with pytest.raises(RuntimeError, match="no GPU"):
        S.run([SleepEngine(spec)], [S.Poisson("a", 10)], duration_s=0.1)


def test_threads_run_matches_simulation():
    specs = [S.ModelSpec.linear("det", 3.0, 0.5, 8), S.ModelSpec.linear("cls", 2.0, 0.2, 8)]
    w = S.make_workload([S.Cameras("det", n=4, fps=30, jitter_ms=1.0, slo_ms=40),
                         S.Poisson("cls", 60, slo_ms=30, priority=1)], 2.0, seed=2)
    pol = S.Policy(order="priority", batching=S.Batching(4, 2.0), streams=2)
    real = S.run([SleepEngine(s) for s in specs], w, pol, backend=ThreadBackend())
    sim = S.simulate(specs, w, pol)
    assert isinstance(real, S.RunResult) and real.meta["mode"] == "real"
    assert list(real.requests.columns) == list(sim.requests.columns)
    assert (real.requests["status"] == "done").all()
    # every batch's compute is at least the slept latency
    exp = np.array([specs[0 if m == "det" else 1].latency(b) for m, b in
                    zip(real.batches["model"], real.batches["size"])])
    assert (real.batches["compute_ms"].to_numpy() >= exp - 0.05).all()
    rm, sm = real.metrics(), sim.metrics()
    # sleeping threads on a shared CPU are noisy; the loop must still land close to the model
    assert rm.loc["det", "p50_ms"] == pytest.approx(sm.loc["det", "p50_ms"], rel=0.2)
    assert rm.loc["cls", "slo_pct"] > 95


def test_run_accepts_sources_and_mapping():
    spec = S.ModelSpec.constant("a", 1.0)
    res = S.run({"a": SleepEngine(spec)}, [S.Poisson("a", 100, slo_ms=50)], duration_s=0.3,
                seed=1, backend=ThreadBackend())
    assert len(res.requests) > 10 and res.meta["backend"].startswith("threads")
    assert "dispatch_s" in res.batches
