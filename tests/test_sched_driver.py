"""The real driver's control loop, exercised on the synthetic CPU backend (threads that sleep).

No GPU here: SleepEngine sleeps each batch's table latency on a worker thread. That checks the
loop (arrival replay, polling, record assembly, the shared dispatcher); how near a real run
lands to the simulation is checked on the GPU (tests/gpu/test_sched_driver_gpu.py,
lab/sched/sched_fidelity.py).
"""
import os
import sys

import numpy as np
import pytest

from hookmagic import sched as S
from hookmagic.common.errors import Unavailable
from hookmagic.sched.engines import SleepEngine, ThreadBackend


def test_run_without_gpu_says_so(monkeypatch):
    from hookmagic.sched import engines
    monkeypatch.setattr(engines, "gpu_available", lambda: (False, "SYNTHETIC: no CUDA device"))
    spec = S.ModelSpec.constant("a", 1.0)
    with pytest.raises(Unavailable, match="no GPU to run on: SYNTHETIC: no CUDA device"):
        S.run([SleepEngine(spec)], [S.Poisson("a", 10)], duration_s=0.1)


def test_threads_run_keeps_the_simulators_books():
    """What the loop must get right however busy the machine: every request served once, in a
    batch the policy allows, never before it arrived, computing at least the model's latency.
    How close real latencies come to simulated ones depends on the host's load, so that is
    measured on the GPU (tests/gpu/test_sched_driver_gpu.py, lab/sched/sched_fidelity.py)."""
    specs = [S.ModelSpec.linear("det", 3.0, 0.5, 8), S.ModelSpec.linear("cls", 2.0, 0.2, 8)]
    w = S.make_workload([S.Cameras("det", n=4, fps=30, jitter_ms=1.0, slo_ms=40),
                         S.Poisson("cls", 60, slo_ms=30, priority=1)], 2.0, seed=2)
    pol = S.Policy(order="priority", batching=S.Batching(4, 2.0), streams=2)
    real = S.run([SleepEngine(s) for s in specs], w, pol, backend=ThreadBackend())
    sim = S.simulate(specs, w, pol)
    assert isinstance(real, S.RunResult) and real.meta["mode"] == "real"
    assert list(real.requests.columns) == list(sim.requests.columns)
    req, bat = real.requests, real.batches
    assert (req["status"] == "done").all()
    assert sorted(req["id"]) == sorted(sim.requests["id"]) == list(range(len(w)))
    assert (req["start_s"] >= req["arrival_s"]).all()
    assert (req["latency_ms"] >= req["compute_ms"]).all()
    # the loop's own host stamps per batch: pass began <= chosen <= launch call returned, and
    # it was chosen after every request in it arrived
    assert (bat["loop_s"] <= bat["decide_s"]).all() and (bat["decide_s"] <= bat["dispatch_s"]).all()
    last = req[req["batch"] >= 0].groupby("batch")["arrival_s"].max()
    assert (bat.set_index("batch")["decide_s"].loc[last.index] >= last).all()
    assert real.meta["clock_corrected"] is False  # one clock on the thread backend
    # the CPU each batch was launched from: one this process may run on (Linux), else -1
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    assert bat["host_cpu"].isin(allowed | {-1}).all()
    if sys.platform.startswith("linux"):
        assert (bat["host_cpu"] >= 0).all()
    # batches: within the policy's max batch, each request in exactly one, sizes add up
    assert bat["size"].between(1, 4).all() and bat["size"].sum() == len(w)
    assert (req.groupby("batch").size().sort_index().to_numpy()
            == bat.set_index("batch")["size"].sort_index().to_numpy()).all()
    # every batch's compute is at least the latency SleepEngine slept (its table's)
    slept = np.array([specs[0 if m == "det" else 1].latency(b) for m, b in
                      zip(bat["model"], bat["size"])])
    assert (bat["compute_ms"].to_numpy() >= slept - 0.05).all()
    # batches on one stream never overlap
    for _, b in bat.sort_values("start_s").groupby("stream"):
        assert (b["start_s"].to_numpy()[1:] >= b["end_s"].to_numpy()[:-1]).all()


def test_run_accepts_sources_and_mapping():
    spec = S.ModelSpec.constant("a", 1.0)
    res = S.run({"a": SleepEngine(spec)}, [S.Poisson("a", 100, slo_ms=50)], duration_s=0.3,
                seed=1, backend=ThreadBackend())
    assert len(res.requests) > 10 and res.meta["backend"].startswith("threads")
    assert "dispatch_s" in res.batches
