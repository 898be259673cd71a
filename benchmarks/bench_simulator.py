"""Simulator speed: requests per second of the general engine and the compiled fast path.

    python benchmarks/bench_simulator.py [--out benchmarks/results] [--repeats 3]

Writes ``sched_simulator.md`` and ``sched_simulator.csv``: for each case, the engine alone
("engine": the event loop over prepared arrays) and the whole ``simulate()`` call ("end to end":
also drawing service times and building the per-request DataFrame). Best of ``--repeats``.
The machine (CPU, cores, Python, numba) and date are written beside the numbers.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numba
import numpy as np
import pandas as pd

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


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"numpy {np.__version__}, numba {numba.__version__}, {time.strftime('%Y-%m-%d')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for name, (specs, w, pol, engines) in cases().items():
        arrays = w.arrays([s.name for s in specs])
        mult = service_multipliers(specs, arrays["model"], 0)
        for eng in engines:
            simulate_raw(specs, arrays, mult, pol, eng)  # compile / warm caches
            t_engine = best_of(lambda: simulate_raw(specs, arrays, mult, pol, eng), args.repeats)
            t_total = best_of(lambda: S.simulate(specs, w, pol, engine=eng), args.repeats)
            rows.append({"case": name, "engine": eng, "requests": len(w),
                         "engine_s": t_engine, "engine_req_per_s": len(w) / t_engine,
                         "end_to_end_s": t_total, "end_to_end_req_per_s": len(w) / t_total})
            print(f"{name:62s} {eng:8s} {len(w) / t_engine / 1e6:8.2f} M req/s engine, "
                  f"{len(w) / t_total / 1e6:6.2f} M req/s end to end")
    specs, w, pol, _ = cases()["8 cameras x 30 fps x 10 min (144k frames), batch 8 / 2 ms"]
    grid = {"max_batch": [1, 2, 4, 8, 16, 32], "max_delay_ms": [0, 1, 2, 5, 10, 20]}
    sweep(specs, w, grid)
    t_sweep = best_of(lambda: sweep(specs, w, grid), args.repeats)
    print(f"36-configuration sweep on the camera case: {t_sweep * 1e3:.0f} ms")
    table = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "sched_simulator.csv", index=False)
    md = ["# Scheduler simulator speed", "", f"Machine: {machine()}.", "",
          "Re-run: `python benchmarks/bench_simulator.py`. Engine = event loop over prepared "
          "arrays; end to end = the whole `simulate()` call including the per-request DataFrame. "
          f"Best of {args.repeats}.", "",
          "| case | engine | requests | engine M req/s | end-to-end M req/s |", "|---|---|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['case']} | {r['engine']} | {r['requests']:,} | "
                  f"{r['engine_req_per_s'] / 1e6:.2f} | {r['end_to_end_req_per_s'] / 1e6:.2f} |")
    md += ["", f"36-configuration sweep (max batch x delay) on the camera case: "
           f"{t_sweep * 1e3:.0f} ms.", ""]
    (out / "sched_simulator.md").write_text("\n".join(md))
    print(f"wrote {out / 'sched_simulator.md'}")


if __name__ == "__main__":
    main()
