"""Simulated vs real: does the scheduler simulator predict what the GPU does?

    python benchmarks/sched_fidelity.py OUTDIR [--seconds 4] [--models resnet50,resnet18,...]

On a GPU machine (PyTorch with CUDA, torchvision): builds torchvision models with random
weights (fp16, channels-last, CUDA graphs), measures each one's latency per batch size with CUDA
events, then for three scenarios runs the real driver (``hookmagic.sched.run``) for
``--seconds`` of arrivals and simulates the same workload and policy from the measured tables.
Writes into OUTDIR:

- ``fidelity.md`` / ``fidelity.csv``: per scenario (all requests, and per model), simulated vs
  real p50 and p99 (error relative to real) and SLO attainment (difference in points), with
  the pass criteria p50/p99 within 10 % and SLO attainment within 2 points;
- ``latency_tables.csv``: the measured latency tables (median, std, p90 per batch size);
- ``calibration.json``: measured dispatch gap and two-stream interference, GPU, driver, date;
- ``<scenario>.real.requests.parquet`` / ``.batches.parquet`` and the same for ``.sim``: the raw
  per-request and per-batch records (``hookmagic.sched.load_result(OUTDIR/<scenario>.real)``).

What the simulator is given, all measured here, before the real runs: the latency tables (plus
their spread as ``service_cv``), the mean host dispatch gap between one batch's end and the
next batch's start on a busy stream (added to each batch's service time), and for the
two-stream scenario the slowdown of a batch when another stream runs concurrently. Nothing is
fitted to the real runs being compared.

``--synthetic-cpu`` runs the whole pipeline without a GPU on sleeping CPU threads; its tables
are labelled synthetic and prove only that the script works.

Budget: about 1-2 minutes of model setup and measurement plus ~3 x (seconds + graph capture);
well under 5 minutes on one H100 with the defaults.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hookmagic import sched as S
from hookmagic.sched import metrics as M
from hookmagic.sched.engines import (CudaBackend, SleepEngine, ThreadBackend, TorchEngine,
                                     gpu_available, measure)

WARMUP_S = 0.5  # requests arriving earlier are left out of both sides


def build(args):
    """(engines by name, backend, label) for the GPU or the synthetic CPU mode."""
    names = args.models.split(",")
    if args.synthetic_cpu:
        made_up = {n: S.ModelSpec.linear(n, 1.0 + 0.5 * k, 0.25 + 0.1 * k, args.max_batch,
                                         service_cv=0.02) for k, n in enumerate(names)}
        return {n: SleepEngine(made_up[n]) for n in names}, ThreadBackend, "SYNTHETIC CPU threads"
    ok, why = gpu_available()
    if not ok:
        sys.exit(f"no GPU here ({why}); run on the GPU machine, or pass --synthetic-cpu to "
                 "check the script itself")
    engines = {n: TorchEngine(n, n, precision="fp16", max_batch=args.max_batch,
                              cuda_graphs=not args.no_graphs) for n in names}
    return engines, CudaBackend, None


def measure_all(engines, make_backend, max_batch, repeats):
    """Latency tables per engine: CUDA events around one batch on an idle stream."""
    tables = []
    for e in engines.values():
        backend = make_backend()
        lanes = backend.lanes([S.Stream()])
        t = measure(e, backend, range(1, max_batch + 1), repeats=repeats, lanes=lanes)
        tables.append(t)
        # the spec the driver uses as is (EDF needs latency(1)); the simulator gets gap added
        e.spec = S.ModelSpec.from_sweep(t, name=e.name, max_batch=max_batch)
        print(f"  {e.name:20s} b=1 {t.latency_ms.iloc[0]:6.2f} ms   b={max_batch} "
              f"{t.latency_ms.iloc[-1]:6.2f} ms   cv {e.spec.service_cv:.3f}", flush=True)
    return pd.concat(tables, ignore_index=True)


def dispatch_gap_ms(engine, make_backend, seconds=0.6):
    """Median GPU idle time between back-to-back batches under the real driver.

    A short saturating calibration run (its own workload, never a scenario's): for consecutive
    batches on the stream where the next batch's oldest request was already waiting when the
    previous one ended, the gap from that end to the next start is the driver's overhead
    (completion polling plus launch).
    """
    spec = engine.spec
    rate = 1.5 * spec.throughput(4)
    wl = S.make_workload([S.Poisson(engine.name, rate, slo_ms=1e6)], seconds, seed=99)
    res = S.run([engine], wl, S.Policy(batching=S.Batching(4, 0.0)), backend=make_backend())
    b = res.batches.sort_values("start_s").reset_index(drop=True)
    first_arrival = res.requests.groupby("batch")["arrival_s"].min()
    nxt = b.iloc[1:].reset_index(drop=True)
    prev_end = b["end_s"].iloc[:-1].to_numpy()
    waiting = first_arrival.loc[nxt["batch"]].to_numpy() < prev_end
    gaps = nxt["start_s"].to_numpy()[waiting] - prev_end[waiting]
    return 1e3 * float(np.median(gaps)) if len(gaps) else 0.0


def _wait(handle, threads: bool) -> None:
    # thread lanes need the GIL to finish: yield it while polling
    while not handle.done():
        if threads:
            time.sleep(0)


def interference(engines, make_backend, batch=4, n=30):
    """Slowdown of a batch while another stream runs one: mean(concurrent / alone) - 1."""
    a, b = list(engines.values())[:2]
    backend = make_backend()
    threads = getattr(backend, "kind", "") == "threads"
    lanes = backend.lanes([S.Stream(), S.Stream()])
    a.setup(backend, lanes, max_batch=batch)
    b.setup(backend, lanes, max_batch=batch)
    ratios = []
    for _ in range(n):
        ha = backend.submit(lanes[0], lambda: a.launch(batch, 0))
        hb = backend.submit(lanes[1], lambda: b.launch(batch, 1))
        _wait(ha, threads)
        _wait(hb, threads)
        for h, e in ((ha, a), (hb, b)):
            s, t = h.times()
            ratios.append((t - s) * 1e3 / e.spec.latency(batch))
    return max(0.0, float(np.mean(ratios)) - 1.0)


def rate_for(spec, load, batch):
    """Requests per second that keep ``spec`` busy a share ``load`` of the time at ``batch``."""
    return load * batch / (spec.latency(batch) / 1e3)


def scenarios(specs, names, seconds, interf):
    """Three scenarios sized from the measured tables."""
    n = names
    out = {}
    # 1. mixed priorities, up to 3 models on one stream, strict priority, dynamic batching
    m3 = n[:3]
    slo = {m: 4 * specs[m].latency(8) + 2 for m in m3}
    src = [S.Poisson(m3[0], rate_for(specs[m3[0]], 0.25, 4), slo_ms=slo[m3[0]], priority=0)]
    if len(m3) > 1:
        src.append(S.Poisson(m3[1], rate_for(specs[m3[1]], 0.2, 4), slo_ms=slo[m3[1]], priority=1))
    if len(m3) > 2:
        src.append(S.Bursty(m3[2], rate_for(specs[m3[2]], 0.9, 8), on_s=0.15, off_s=0.6,
                            slo_ms=slo[m3[2]], priority=2))
    out["mixed_priorities"] = (src, S.Policy(order="priority", batching={
        m: S.Batching(8, 2.0) for m in m3}), 0.0)
    # 2. cameras plus bursty traffic: EDF with early drop, camera fairness
    det, other = n[0], n[-1]
    cams_fps = 30.0
    n_cams = int(max(2, min(16, 0.35 * specs[det].throughput(8) / cams_fps)))
    src2 = [S.Cameras(det, n=n_cams, fps=cams_fps, jitter_ms=2.0, slo_ms=3 * specs[det].latency(8) + 15),
            S.Bursty(other, rate_for(specs[other], 1.0, 8), on_s=0.1, off_s=0.5,
                     slo_ms=4 * specs[other].latency(8) + 5, priority=1)]
    out["cameras_bursty_edf"] = (src2, S.Policy(order="edf", fairness=S.CameraFairness(),
                                                batching={det: S.Batching(8, 3.0),
                                                          other: S.Batching(8, 1.0)}), 0.0)
    # 3. two streams, every model, FIFO batching; concurrency slowdown measured beforehand
    src3 = [S.Poisson(m, rate_for(specs[m], 0.6 / len(n) * 2, 4),
                      slo_ms=4 * specs[m].latency(8) + 5, priority=0) for m in n]
    out["two_streams_fifo"] = (src3, S.Policy(order="fifo", streams=2,
                                              batching=S.Batching(8, 1.0)), interf)
    return {k: (S.make_workload(s, seconds, seed=17 + j), pol, a)
            for j, (k, (s, pol, a)) in enumerate(out.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--models", default="resnet50,resnet18,mobilenet_v3_large,efficientnet_b0")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--no-graphs", action="store_true", help="eager PyTorch instead of CUDA graphs")
    ap.add_argument("--synthetic-cpu", action="store_true",
                    help="no GPU: sleeping CPU threads (synthetic; checks the script only)")
    args = ap.parse_args()
    t_start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    engines, make_backend, label = build(args)
    print("measuring latency tables ...", flush=True)
    tables = measure_all(engines, make_backend, args.max_batch, args.repeats)
    tables.to_csv(args.out / "latency_tables.csv", index=False)
    gap = dispatch_gap_ms(next(iter(engines.values())), make_backend)
    interf = interference(engines, make_backend) if len(engines) > 1 else 0.0
    info = make_backend().describe()
    info.update(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), dispatch_gap_ms=gap,
                interference=interf, label=label or "real GPU measurement",
                models=list(engines), max_batch=args.max_batch, cuda_graphs=not args.no_graphs)
    (args.out / "calibration.json").write_text(json.dumps(info, indent=2, default=str))
    print(f"dispatch gap {gap:.3f} ms, two-stream interference {interf:.3f}", flush=True)

    specs = {n: e.spec for n, e in engines.items()}
    # the simulator's view of a batch: measured GPU time plus the measured dispatch gap
    sim_specs = [s.with_(latency_ms=tuple(x + gap for x in s.latency_ms)) for s in specs.values()]
    for spec in sim_specs:  # the driver's dispatcher decides from the very same specs
        engines[spec.name].spec = spec
    rows = []
    for name, (wl, pol, a) in scenarios(specs, list(engines), args.seconds, interf).items():
        print(f"scenario {name}: {len(wl)} requests over {args.seconds:g} s, {pol.describe()}",
              flush=True)
        real = S.run(engines, wl, pol, backend=make_backend())
        sim = S.simulate(sim_specs, wl, pol, seed=1, interference=a)
        real.save(args.out / f"{name}.real")
        sim.save(args.out / f"{name}.sim")
        for by in (None, "model"):
            f = M.fidelity(sim.metrics(by=by, warmup_s=WARMUP_S), real.metrics(by=by, warmup_s=WARMUP_S))
            f.insert(0, "scenario", name)
            f.index.name = "group"
            rows.append(f.reset_index())
        print(f"  real arrival lag p99 {real.meta['arrival_lag_p99_ms']:.3f} ms", flush=True)
    table = pd.concat(rows, ignore_index=True)
    table.to_csv(args.out / "fidelity.csv", index=False)
    head = [f"# Scheduler fidelity: simulated vs real ({info['label']})", "",
            f"GPU: {info.get('gpu', 'n/a')}, driver {info.get('driver', 'n/a')}, "
            f"torch {info.get('torch', 'n/a')}, CUDA {info.get('cuda', 'n/a')}; {info['date']}.",
            f"Models: {', '.join(engines)} (fp16, random weights, "
            f"{'CUDA graphs' if not args.no_graphs else 'eager'}), max batch {args.max_batch}; "
            f"{args.seconds:g} s of arrivals per scenario, first {WARMUP_S:g} s left out.",
            f"Measured beforehand: dispatch gap {gap:.3f} ms, two-stream interference {interf:.3f}.",
            "Pass: p50 and p99 within 10 % of real, SLO attainment within 2 points.",
            f"Re-run: `python benchmarks/sched_fidelity.py OUTDIR --seconds {args.seconds:g}`.", "",
            "| scenario | group | p50 sim | p50 real | err % | p99 sim | p99 real | err % | "
            "SLO sim % | SLO real % | diff pts | ok |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in table.itertuples():
        head.append(f"| {r.scenario} | {r.group} | {r.p50_sim_ms:.2f} | {r.p50_real_ms:.2f} | "
                    f"{r.p50_err_pct:+.1f} | {r.p99_sim_ms:.2f} | {r.p99_real_ms:.2f} | "
                    f"{r.p99_err_pct:+.1f} | {r.slo_sim_pct:.1f} | {r.slo_real_pct:.1f} | "
                    f"{r.slo_diff_pts:+.1f} | {'yes' if r.ok else 'NO'} |")
    head += ["", f"Total wall time {time.perf_counter() - t_start:.0f} s."]
    (args.out / "fidelity.md").write_text("\n".join(head) + "\n")
    print("\n".join(head))


if __name__ == "__main__":
    main()
