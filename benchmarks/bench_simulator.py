"""Simulator speed: requests per second of the general engine and the compiled fast path.

For each case, the engine alone (the event loop over prepared arrays) and the whole
``simulate()`` call (also drawing service times and building the per-request DataFrame); best
of ``repeats``. Cases are numbered in the order of :func:`cases`.
"""
from __future__ import annotations

import time


from hookmagic import sched as S
from hookmagic.sched.simulator import service_multipliers, simulate_raw
from hookmagic.sched.sweep import sweep


def cases():
    mm1 = ([S.ModelSpec.constant("m", 1.0, service_cv=1.0)],
           S.make_workload([S.Poisson("m", 900.0)], 200_000 / 900.0, seed=1), S.Policy())
    det = S.ModelSpec.linear("det", 4.0, 0.8, 16, service_cv=0.05)
    cams = ([det], S.make_workload([S.Cameras("det", n=8, fps=30, slo_ms=66)], 600, seed=1),
            S.Policy(batching=S.Batching(8, 2.0)))
    models = [det, S.ModelSpec.linear("cls", 0.6, 0.1, 32), S.ModelSpec.constant("seg", 6.0, service_cv=0.2)]
    mixed_w = S.make_workload([S.Cameras("det", n=8, fps=30, slo_ms=66),
                               S.Poisson("cls", 400, slo_ms=20, priority=1),
                               S.Bursty("cls", 3000, 0.1, 0.6, slo_ms=50, priority=2),
                               S.Poisson("seg", 40, slo_ms=200, priority=0)], 300, seed=1)
    mixed = (models, mixed_w, S.Policy(order="priority", streams=2, batching={
        "det": S.Batching(8, 2.0, (4, 8)), "cls": S.Batching(16, 1.0), "seg": S.Batching(1)}))
    full = (models, mixed_w, S.Policy(order="edf", streams=2, batching=S.Batching(8, 2.0),
                                      queue=S.QueuePolicy(max_size=64, timeout_ms=100),
                                      fairness=S.CameraFairness(max_frames=2),
                                      adaptive={"cls": S.AIMD(max_batch=16)},
                                      limits=[S.Limit(("det", "seg"), 1)]))
    return {
        "M/M/1 rho 0.9, 200k requests, FIFO unbatched": (*mm1, ("general", "fast")),
        "8 cameras x 30 fps x 10 min (144k frames), batch 8 / 2 ms": (*cams, ("general", "fast")),
        "3 models, 4 sources, priority, 2 streams, batching (300 s)": (*mixed, ("general", "fast")),
        "same + EDF drop, queue policy, camera fairness, AIMD, limit": (*full, ("general",)),
    }


def best_of(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


DESCRIPTION = ("scheduler simulator speed: requests/s of the event loop (engine) and of the "
               "whole simulate() call on four workloads, and a 36-configuration sweep")
PARAMS = {"repeats": 3}
NEEDS: tuple[str, ...] = ()


def measure(repeats: int) -> dict[str, float]:
    out = {}
    for i, (name, (specs, w, pol, engines)) in enumerate(cases().items()):
        arrays = w.arrays([s.name for s in specs])
        mult = service_multipliers(specs, arrays["model"], 0)
        for eng in engines:
            simulate_raw(specs, arrays, mult, pol, eng)  # compile / warm caches
            t_engine = best_of(lambda: simulate_raw(specs, arrays, mult, pol, eng), repeats)
            t_total = best_of(lambda: S.simulate(specs, w, pol, engine=eng), repeats)
            out[f"case{i + 1}_{eng}_engine_M_req_per_s"] = len(w) / t_engine / 1e6
            out[f"case{i + 1}_{eng}_end_to_end_M_req_per_s"] = len(w) / t_total / 1e6
    specs, w, pol, _ = cases()["8 cameras x 30 fps x 10 min (144k frames), batch 8 / 2 ms"]
    grid = {"max_batch": [1, 2, 4, 8, 16, 32], "max_delay_ms": [0, 1, 2, 5, 10, 20]}
    sweep(specs, w, grid)
    out["sweep_36_configurations_ms"] = best_of(lambda: sweep(specs, w, grid), repeats) * 1e3
    return out
