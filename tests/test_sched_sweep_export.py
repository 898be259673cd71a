"""Sweep over simulated configurations, and the Triton / Ray Serve exports (synthetic specs)."""
import pytest

from hookmagic import sched as S
from hookmagic.sched.export import ray_serve_params, ray_serve_snippet, triton_config
from hookmagic.sched.sweep import best_policy, sweep

SPECS = [S.ModelSpec.linear("det", 2.0, 0.5, 16, memory_bytes=100 << 20),
         S.ModelSpec.linear("cls", 1.0, 0.1, 32, memory_bytes=50 << 20)]


def workload():
    return S.make_workload([S.Cameras("det", n=8, fps=30, slo_ms=40),
                            S.Poisson("cls", 800, slo_ms=20, priority=1)], 20, seed=1)


def test_sweep_finds_a_feasible_best_and_it_reproduces():
    w = workload()
    grid = {"max_batch": [1, 4, 8], "max_delay_ms": [0, 2, 5], "streams": [1, 2]}
    t = sweep(SPECS, w, grid, base=S.Policy(order="priority"), limits={"p99_ms": 25})
    assert len(t) == 18 and t["feasible"].any()
    assert (t[t["feasible"]]["worst_model_p99_ms"] <= 25).all()
    assert t["engine"].eq("fast").all()
    feas = t[t["feasible"]]
    assert feas["goodput_rps"].is_monotonic_decreasing
    pol = best_policy(t)
    # the row's numbers are those of a full simulation of the chosen policy
    full = S.simulate(SPECS, w, pol).metrics()
    assert full["p99_ms"].max() == pytest.approx(t.iloc[0]["worst_model_p99_ms"])


def test_sweep_memory_limit_and_infeasible():
    t = sweep(SPECS, workload(), {"streams": [1, 2, 3]}, limits={"max_memory_bytes": 300 << 20})
    assert t.set_index("streams")["feasible"].to_dict() == {1: True, 2: True, 3: False}
    none = sweep(SPECS, workload(), {"max_batch": [1]}, limits={"p99_ms": 0.1})
    assert best_policy(none) is None


def test_triton_config_text():
    pol = S.Policy(order="priority", batching=S.Batching(8, 2.5, (4, 8)),
                   queue=S.QueuePolicy(max_size=64, timeout_ms=30, action="reject"),
                   streams=2, limits=[S.Limit(("det", "cls"), 1)])
    txt = triton_config("det", pol, spec=SPECS[0], priorities=[0, 1, 2])
    for line in ['name: "det"', "max_batch_size: 8", "preferred_batch_size: [ 4, 8 ]",
                 "max_queue_delay_microseconds: 2500", "priority_levels: 3",
                 "timeout_action: REJECT", "default_timeout_microseconds: 30000",
                 "max_queue_size: 64", "count: 2 kind: KIND_GPU", 'name: "limit0"',
                 "--rate-limit-resource=limit0:1"]:
        assert line in txt, line
    assert txt.count("{") == txt.count("}")
    edf = triton_config("det", S.Policy(order="edf"))
    assert "no earliest-deadline-first" in edf and "priority_levels" not in edf


def test_ray_serve_params():
    pol = S.Policy(batching={"cls": S.Batching(16, 4.0)}, queue=S.QueuePolicy(max_size=100), streams=2)
    p = ray_serve_params("cls", pol)
    assert p["max_batch_size"] == 16 and p["batch_wait_timeout_s"] == pytest.approx(0.004)
    assert p["max_concurrent_batches"] == 2 and p["max_queued_requests"] == 100
    code = ray_serve_snippet("cls", pol)
    compile(code, "<ray>", "exec")
    assert "@serve.batch(max_batch_size=16, batch_wait_timeout_s=0.004" in code
