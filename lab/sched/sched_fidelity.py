"""Simulated vs real: does the scheduler simulator predict what the GPU does?

    python lab/sched/sched_fidelity.py OUTDIR [--seconds 4] [--processes 3] [--models ...]
    python lab/sched/sched_fidelity.py --replay DIR [--refit] [OUTDIR]     # no GPU needed

On a GPU machine (PyTorch with CUDA, torchvision): builds torchvision models with random
weights (fp16, channels-last, CUDA graphs), measures each one's latency per batch size with CUDA
events, runs calibration workloads of its own and fits the simulator's parameters on them, then
for four scenarios runs the real driver (``hookmagic.sched.run``) for ``--seconds`` of arrivals
and simulates the same workload and policy. ``--processes 3`` repeats all of it in three fresh
processes and writes the min–max. Writes into OUTDIR (or OUTDIR/runK per process):

- ``fidelity.md`` / ``fidelity.csv``: per scenario (all requests, and per model), simulated vs
  real p50 and p99 (error relative to real) and SLO attainment (difference in points), with
  the pass criteria p50/p99 within 10 % and SLO attainment within 2 points;
- ``fidelity_runs.md`` / ``.csv`` (with ``--processes``): min–max over the processes;
- ``latency_tables.csv``: the measured latency tables (median, std, p90 per batch size);
- ``calibration.json`` (format 2): per model the fitted parameters (``fit``); GPU, driver, date;
- ``calibration/*.parquet``: the raw calibration runs the fit was made on;
- ``<scenario>.real.requests.parquet`` / ``.batches.parquet`` and the same for ``.sim``: the raw
  per-request and per-batch records (``hookmagic.sched.load_result(OUTDIR/<scenario>.real)``).

``--replay DIR`` recomputes every table from such a folder without a GPU: the scenarios are
rebuilt from the stored latency tables (and checked to equal the stored real arrivals), the
simulator runs with the stored calibration (``--refit``: fitted again, by this code, on the
stored calibration runs) and is compared with the stored real runs. Format-1 folders (before
2026-11-25 22:00: ``batch_excess_ms``, one slowdown per other stream) replay as they were run.

What the simulator is given, all fitted on calibration runs of their own before the scenarios
(nothing is fitted to the real runs being compared; ``hookmagic.sched.calibrate.fit`` says
exactly how): per
model and batch size the mean GPU time of a batch under the driver (start to end event, in the
same process, so with that process's clocks); the launch time (previous batch's end to this
one's start when it was ready: the driver noticing, choosing and recording) and host time (to
the launch call's return: one host thread launches for every stream); the mean extra cost
after another model (``switch_ms``); and how much slower each model computes beside one and
beside two other streams (``share_slowdown``, applied only while batches' GPU parts overlap),
and how much more the bigger those other batches are (``share_by_size``, since 2026-11-26).
The fourth scenario (three streams, five models, cameras and bursts) is held out: it was never
used to choose the model or the calibration.

Since 2026-11-26 06:25 UTC each scenario is preceded by a probe: 1 s of the scenario's own sources
drawn with another seed (``calibrate.probe_workload``), served by the real driver under the same
policy; from it the simulator's launch and host times and each model's GPU-time scale are taken
as they are right now (``calibrate.refine_from_probe``; switch costs and sharing stay as
calibrated). None of the predicted arrivals is in it. ``fidelity.csv`` is that prediction;
``fidelity_calibration_only.csv`` the same real runs predicted from the calibration alone.
Since 2026-11-26 08:06 UTC a canary process on another CPU measures the machine's own speed
during each probe and real run (``hookmagic.sched.host_speed.HostCanary``): on an H100 machine
the whole virtual machine stalled for 16-24 ms one to seven times in 3 s (canary 9-24x slower,
the driver's CUDA calls 7-9x). Its stall periods (4x or slower since 08:35; runs before that
stored milder ones too), (start, end, slowdown) from the canary alone, are stored in the run's meta and
given to the simulator like the arrivals (``simulate(host_windows=...)``): inside them launch and
host times stretch. ``fidelity_steady_host.csv``: the same prediction without them.
Since 2026-11-26 10:50 UTC (calibration.json ``"prediction": 3``) the prediction is given the
host's speed through the run, as it is given the arrivals: on the H100 machine the driver's CPU
switched between speeds up to ~2x apart within a 3 s run, pinned to one CPU or not, so no
measurement made before a run can say how fast its host will be. The speed is read off the
run's launch calls (``calibrate.speed_from_calls``: per 20 ms, how long the calls took over how
long the same calls took in the probe; a launch call is a fixed piece of host work whatever the
scheduler decided);
launch and host times stretch or shrink with it, and each batch's GPU time follows by its
model's ``call_share`` of the change in its call (the GPU waits through ~0.8 of the call for
the graph's kernels; fitted on the calibration's alone runs, ``calibrate.call_share_of``).
Everything else (GPU times, sharing, switches, batching, queueing, EDF's drops) is simulated,
and the simulated dispatcher decides from the specs the real one had (``decide_with``: the
engines' calibrated specs). ``fidelity_meter.csv``: the same with the speed from the driver's
own meters instead (``meta["backend_meter"]``, an event record and query on a stream of its
own, else ``meta["host_meter"]``, interpreter work; both about once a ms), which are
independent of the batches; ``fidelity_steady_host.csv``: the host at the probe's speed
throughout (the prediction with nothing measured during the run);
``fidelity_calibration_only.csv``: the calibration alone. The canary's stall periods stay in
process.csv as a diagnostic. Since 11:25 UTC (``"prediction": 4``) every simulation in these
tables is the pool of 8 draws of the simulator's own randomness (``simulate_pooled``): one draw
moved a group's p99 by up to ±7 % from seed to seed, noise the real run does not share.
``--pin-cpu auto`` keeps each process on one CPU, ``--pin-cpu core`` on the first thread of the
last physical core (experiments: ``sched.sh`` pins only with ``SCHED_PIN_CPU`` set).

``--second-run`` serves each scenario's arrivals a second time, right after the first real run, in
the same process (stored as ``<scenario>.again``) and writes two more tables:
``fidelity_again.csv``, the same prediction (its host speed read off the second run's launch
calls) against the second run, and ``fidelity_repeat.csv``, the machine against itself: the second
real run in the simulation's place, judged by the same bounds. A group that fails the bounds
there is one the GPU and host do not reproduce from one run to the next; no prediction can be
sure to hold it.

``--synthetic-cpu`` runs the whole pipeline without a GPU on sleeping CPU threads; its tables
are labelled synthetic and prove only that the script works.

Budget per process on one H100: about a minute of model setup and latency tables, ~15 s of
calibration runs, then ~4 x (1 s probe + seconds + graph capture).
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
from hookmagic.sched import calibrate as C
from hookmagic.sched import metrics as M
from hookmagic.sched.engines import (CudaBackend, SleepEngine, ThreadBackend, TorchEngine,
                                     gpu_available, measure)
from hookmagic.sched.host_speed import HostCanary, canary_cpu, cpu_cores, speed_windows
from hookmagic.sched.result import SimResult

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


CALIBRATION_FORMAT = 2  # calibration.json written by this version (1: batch_excess_ms, one f)
#: the calibration runs this script draws (``calibrate.calibration_workloads``; stored as
#: calibration.json's ``calibration_version``)
CALIBRATION_RUNS = 2


def sim_specs_from(cal, idle, streams: int = 1):
    """The simulator's ModelSpecs from a calibration.json for a policy with ``streams`` streams
    (format 2: ``fit``, with the launch time per number of streams where it has one; format 1
    as it was run: idle table + one mean excess per batch, one slowdown f per other stream)."""
    if cal.get("format", 1) >= 2:
        return C.specs_from_fit(cal["fit"], idle, streams)
    return [spec.with_(latency_ms=tuple(x + cal["batch_excess_ms"][name] for x in spec.latency_ms),
                       switch_ms=cal["switch_ms"][name], share_slowdown=cal["share_slowdown"][name])
            for name, spec in idle.items()]


def rate_for(spec, load, batch):
    """Requests per second that keep ``spec`` busy a share ``load`` of the time at ``batch``."""
    return load * batch / (spec.latency(batch) / 1e3)


#: the scenarios this script draws (stored as calibration.json's ``scenario_version``): the
#: same bursts in every process and on every GPU, arrivals scaled by the rates
SCENARIO_VERSION = 2


def scenarios(specs, names, seconds):
    """Three calibration-free scenarios sized from the measured tables, plus a held-out one.

    Nothing here is tuned to the real runs; the held-out scenario (three streams, five models,
    cameras plus bursts) was added after the model changes and is never used to choose them.
    """
    n = names
    Bursty = S.Bursty  # noqa: N806
    out = {}
    # 1. mixed priorities, up to 3 models on one stream, strict priority, dynamic batching
    m3 = n[:3]
    slo = {m: 4 * specs[m].latency(8) + 2 for m in m3}
    src = [S.Poisson(m3[0], rate_for(specs[m3[0]], 0.25, 4), slo_ms=slo[m3[0]], priority=0)]
    if len(m3) > 1:
        src.append(S.Poisson(m3[1], rate_for(specs[m3[1]], 0.2, 4), slo_ms=slo[m3[1]], priority=1))
    if len(m3) > 2:
        src.append(Bursty(m3[2], rate_for(specs[m3[2]], 0.9, 8), on_s=0.15, off_s=0.6,
                            slo_ms=slo[m3[2]], priority=2))
    out["mixed_priorities"] = (src, S.Policy(order="priority", batching={
        m: S.Batching(8, 2.0) for m in m3}))
    # 2. cameras plus bursty traffic: EDF with early drop, camera fairness
    det, other = n[0], n[min(3, len(n) - 1)]
    cams_fps = 30.0
    n_cams = int(max(2, min(16, 0.35 * specs[det].throughput(8) / cams_fps)))
    src2 = [S.Cameras(det, n=n_cams, fps=cams_fps, jitter_ms=2.0, slo_ms=3 * specs[det].latency(8) + 15),
            Bursty(other, rate_for(specs[other], 1.0, 8), on_s=0.1, off_s=0.5,
                     slo_ms=4 * specs[other].latency(8) + 5, priority=1)]
    out["cameras_bursty_edf"] = (src2, S.Policy(order="edf", fairness=S.CameraFairness(),
                                                batching={det: S.Batching(8, 3.0),
                                                          other: S.Batching(8, 1.0)}))
    # 3. two streams, four models, FIFO batching
    n4 = n[:4]
    src3 = [S.Poisson(m, rate_for(specs[m], 0.6 / len(n4) * 2, 4),
                      slo_ms=4 * specs[m].latency(8) + 5, priority=0) for m in n4]
    out["two_streams_fifo"] = (src3, S.Policy(order="fifo", streams=2, batching=S.Batching(8, 1.0)))
    # 4. held out: three streams, every model, cameras + bursts + steady traffic, priorities
    if len(n) >= 5:
        cams = int(max(2, min(12, 0.2 * specs[n[0]].throughput(8) / cams_fps)))
        src4 = [S.Cameras(n[0], n=cams, fps=cams_fps, jitter_ms=2.0,
                          slo_ms=3 * specs[n[0]].latency(8) + 15, priority=0),
                Bursty(n[1], rate_for(specs[n[1]], 0.8, 8), on_s=0.12, off_s=0.5,
                         slo_ms=4 * specs[n[1]].latency(8) + 5, priority=1),
                S.Poisson(n[2], rate_for(specs[n[2]], 0.15, 4),
                          slo_ms=4 * specs[n[2]].latency(8) + 5, priority=1),
                S.Poisson(n[3], rate_for(specs[n[3]], 0.15, 4),
                          slo_ms=4 * specs[n[3]].latency(8) + 5, priority=2),
                Bursty(n[4], rate_for(specs[n[4]], 0.6, 8), on_s=0.2, off_s=0.8,
                         slo_ms=4 * specs[n[4]].latency(8) + 5, priority=2)]
        out["held_out_three_streams"] = (src4, S.Policy(order="priority", streams=3,
                                                        batching=S.Batching(8, 1.5)))
    return {k: (S.make_workload(src_, seconds, seed=17 + j), pol)
            for j, (k, (src_, pol)) in enumerate(out.items())}


def _calibrate(engines, make_backend, idle, max_batch, out: Path, compact: bool = False):
    """Run and fit the calibration; save its raw runs under ``out/calibration/`` (``compact``:
    as :func:`save_compact` writes them)."""
    t0 = time.perf_counter()
    runs = C.run_calibration(engines, idle, max_batch, make_backend)
    for key, res in runs.items():
        stem = out / "calibration" / key.replace(":", "_")
        save_compact(res, stem) if compact else res.save(stem)
    fit = C.fit(runs, idle, max_batch)
    check = C.self_check(runs, lambda n: C.specs_from_fit(fit, idle, n), idle, max_batch)
    check.to_csv(out / "calibration_check.csv", index=False)
    print(f"calibration runs and fit: {time.perf_counter() - t0:.1f} s; in-sample check "
          f"(sim vs real, calibration_check.csv): p50 error {check['p50_err_pct'].min():+.1f} … "
          f"{check['p50_err_pct'].max():+.1f} %", flush=True)
    return fit


def load_calibration_runs(run_dir: Path, names) -> dict:
    """The raw calibration runs a format-2 process saved (for ``--replay --refit``), in full or
    as compact copies (``<key>.fate.parquet``; the arrivals rebuilt from the latency tables and
    checked against the stored policy)."""
    from hookmagic.sched.result import load_result
    d = run_dir / "calibration"
    if not (d / "switch.fate.parquet").exists():
        runs = {f"alone:{n}": load_result(d / f"alone_{n}") for n in names}
        runs["switch"] = load_result(d / "switch")
        for p in sorted(d.glob("share*.requests.parquet")):
            key = p.name.split(".")[0]
            runs[key] = load_result(d / key)
        return runs
    info = json.loads((run_dir / "calibration.json").read_text())
    tab = pd.read_csv(run_dir / "latency_tables.csv")
    idle = {n: S.ModelSpec.from_sweep(tab, name=n, max_batch=info["max_batch"]) for n in names}
    runs = {}
    if info.get("calibration_version", 1) != CALIBRATION_RUNS:
        raise SystemExit(f"{run_dir}: its calibration runs were drawn by an older version of "
                         "this study; replay it with the code of its commit")
    for key, (wl, pol) in C.calibration_workloads(idle, info["max_batch"]).items():
        f = key.replace(":", "_")
        if not (d / f"{f}.fate.parquet").exists():
            continue
        use = [key.split(":", 1)[1]] if key.startswith("alone:") else list(names)
        res = _from_compact(d / f"{f}.fate.parquet", d / f"{f}.batches.parquet", wl, use, key)
        if repr(pol) != res.meta.get("policy") or not np.allclose(
                wl.requests["arrival_s"].to_numpy(), res.requests["arrival_s"].to_numpy()):
            raise SystemExit(f"{run_dir}: calibration run {key} rebuilt from the stored tables "
                             "differs from the stored one")
        runs[key] = res
    return runs


def pin_cpu(which: str | None) -> int | None:
    """Keep this process (the driver's one host thread and every thread it starts: call it
    before CUDA starts) on one CPU: ``"auto"`` the last one it may use (CPU 0 takes most
    interrupts), ``"core"`` the first thread of the last physical core (``host_speed.cpu_cores``:
    the host canary then runs on another core and nothing of ours on this one's SMT sibling), a
    number that CPU, None or ``"none"`` no pinning. The driver's launch gap and
    launch call are host work that the simulator takes from the calibration; unpinned, they
    varied 0.7-2.3x between the processes and scenarios of one run (H100, 2026-11-26 06:05 UTC),
    as the thread moved between cores, and switched between two speeds ~2x apart within a
    scenario (08:06 UTC). Returns the CPU, or None."""
    import os
    if which in (None, "none") or not hasattr(os, "sched_setaffinity"):
        return None
    if which == "core":
        cpu = cpu_cores()[-1][0]
    else:
        cpu = max(os.sched_getaffinity(0)) if which == "auto" else int(which)
    os.sched_setaffinity(0, {cpu})
    return cpu


def host_counters() -> dict:
    """The machine's CPU time by kind (``/proc/stat``, ticks) and this thread's involuntary
    context switches, for :func:`host_interference`; empty where not Linux."""
    import resource
    try:
        with open("/proc/stat") as fh:
            cpu = [int(x) for x in fh.readline().split()[1:9]]
        switches = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)).ru_nivcsw
    except (OSError, ValueError):
        return {}
    return {"cpu": cpu, "switches": switches}


def host_interference(before: dict, after: dict) -> dict:
    """What else the host did during a real run (a diagnostic of the driver's slow phases):
    the share of CPU time the hypervisor gave to others (``steal``, % of all CPU time of the
    machine) and how often the driver's thread was put off its CPU against its will."""
    if not before or not after:
        return {"cpu_steal_pct": float("nan"), "forced_switches": -1}
    d = [b - a for a, b in zip(before["cpu"], after["cpu"])]
    total = sum(d)
    return {"cpu_steal_pct": 100.0 * d[7] / total if total > 0 else float("nan"),
            "forced_switches": after["switches"] - before["switches"]}


def one_process(args) -> None:
    """Calibrate, run every scenario real and simulated, write the tables (one process)."""
    t_start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    pinned = pin_cpu(args.pin_cpu)
    engines, make_backend, label = build(args)
    print("measuring latency tables ...", flush=True)
    tables = measure_all(engines, make_backend, args.max_batch, args.repeats)
    tables.to_csv(args.out / "latency_tables.csv", index=False)
    idle = {n: e.spec for n, e in engines.items()}
    fit = _calibrate(engines, make_backend, idle, args.max_batch, args.out, args.compact)
    info = make_backend().describe()
    cores = cpu_cores()
    info.update(cpu_topology={"cpus": sum(map(len, cores)), "cores": len(cores),
                              "threads_per_core": max(map(len, cores)), "canary_cpu": canary_cpu()})
    info.update(pinned_cpu=pinned, format=CALIBRATION_FORMAT, prediction=PREDICTION,
                scenario_version=SCENARIO_VERSION, calibration_version=CALIBRATION_RUNS,
                date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), fit=fit,
                label=label or "real GPU measurement", models=list(engines),
                max_batch=args.max_batch, cuda_graphs=not args.no_graphs, seconds=args.seconds)
    (args.out / "calibration.json").write_text(json.dumps(info, indent=2, default=str))
    for n, c in fit.items():
        print(f"  {n:20s} service b=1 {c['service_ms'][0]:.3f} ms (idle {idle[n].latency(1):.3f})"
              f"  launch {c['launch_ms']:.3f}  host {c['host_ms']:.3f}  switch "
              f"{c['switch_ms']:.3f} ms  share {', '.join(f'{a:.3f}' for a in c['share_slowdown'])}"
              f" by size {', '.join(f'{e:.4f}' for e in c.get('share_by_size', []))}",
              flush=True)

    # The simulator's view of a batch: calibrated GPU time, launch and host time, model-switch
    # cost and sharing slowdowns. The driver decides from the same latencies.
    sim_specs = sim_specs_from(info, idle)
    for spec in sim_specs:
        engines[spec.name].spec = spec
    rows, refined, proc, extra = [], [], [], {}
    for name, (wl, pol) in scenarios(idle, list(engines), args.seconds).items():
        print(f"scenario {name}: {wl!r}", flush=True)
        t0 = time.perf_counter()
        # the probe: the same policy on other arrivals of the same kind, just before
        with HostCanary() as probe_canary:
            probe = S.run(engines, C.probe_workload(wl), pol, backend=make_backend())
        probe.meta.update(host_canary=probe_canary.pass_times(probe.meta["host_t0"]))
        host0 = host_counters()
        with HostCanary() as canary:  # the machine's own speed meanwhile, from another CPU
            real = S.run(engines, wl, pol, backend=make_backend())
        host1 = host_counters()
        real.meta.update(host_canary_ok=canary.ok, host_canary_why=canary.why,
                         host_windows=canary.windows(real.meta["host_t0"]).tolist(),
                         host_canary=canary.pass_times(real.meta["host_t0"]))
        # the same arrivals again, at once: how far the machine reproduces itself
        again = S.run(engines, wl, pol, backend=make_backend()) if args.second_run else None
        win = host_windows(real)  # the canary's stall periods
        specs_cal = sim_specs_from(info, idle, len(pol.streams))
        specs_here, how = C.refine_from_probe(specs_cal, probe, pol)
        sim, other = predict(name, wl, pol, info, idle, specs_here, real, probe)
        if again is not None:
            other.update(second_run_rows(name, wl, pol, info, idle, specs_here, real, again))
        for table, got in other.items():
            extra.setdefault(table, []).extend(got)
        kept = [(real, "real"), (probe, "probe")] + ([(again, "again")] if again is not None else [])
        for res, kind in kept:  # compact: what --replay needs, a few hundred kB; sims recomputed
            save_compact(res, args.out / f"{name}.{kind}") if args.compact else \
                res.save(args.out / f"{name}.{kind}")
        if not args.compact:
            sim.save(args.out / f"{name}.sim")
        rows += compare(name, sim, real)
        speed = C.speed_from_calls(real, specs_here)
        print(f"scenario {name}: host speed from the launch calls over the probe's: "
              f"{np.percentile(speed[:, 2], 10) if len(speed) else 1:.2f} … "
              f"{np.percentile(speed[:, 2], 90) if len(speed) else 1:.2f} (p10 … p90 of "
              f"{C.SPEED_BIN_S * 1e3:g} ms); "
              f"host slow periods (canary): {len(win)}, "
              f"{1e3 * float((win[:, 1] - win[:, 0]).sum()):.1f} ms; canary median pass (µs): "
              f"probe {probe.meta['host_canary']['median_pass_us'] or float('nan'):.2f}, run "
              f"{real.meta['host_canary']['median_pass_us'] or float('nan'):.2f}"
              + ("" if canary.ok else f" (no canary: {canary.why})"), flush=True)
        print(f"scenario {name}: probe host ratio {how['host_ratio']:.3f} ({how['clean']} clean "
              "batches), GPU scale " + ", ".join(f"{m} {v['gpu_scale']:.3f} ({v['batches']})"
                                                 for m, v in how['models'].items()), flush=True)
        try:  # a diagnostic: never let it cost the measurement
            refined += refined_rows(name, specs_cal, wl, pol, real, proc, how)
            proc[-1].update(host_interference(host0, host1), **slow_periods(win))
        except Exception as exc:  # noqa: BLE001
            print(f"scenario {name}: DIAGNOSTIC FAILED (refined table, process.csv): {exc!r}",
                  flush=True)
        stalls = int(((real.batches["dispatch_s"] - real.batches["start_s"]) > 5e-4).sum())
        print(f"scenario {name}: {len(wl)} requests over {args.seconds:g} s, {pol.describe()}; "
              f"real arrival lag p99 {real.meta['arrival_lag_p99_ms']:.3f} ms; "
              f"launch calls over 0.5 ms: {stalls} of {len(real.batches)}; "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    if refined:
        write_process(args.out, refined, proc)
    for table, got in extra.items():
        pd.concat(got, ignore_index=True).to_csv(args.out / table, index=False)
    text = write_tables(args.out, rows, info, engines=list(engines), seconds=args.seconds,
                        graphs=not args.no_graphs, max_batch=args.max_batch,
                        wall_s=time.perf_counter() - t_start)
    print(text)


#: a launch call that held the driver's one host thread longer than this stalled it (s)
STALL_S = C.STALL_S


def refined_rows(name, sim_specs, wl, pol, real, proc: list, probe: dict | None = None) -> list:
    """The comparison again with the calibrated specs ``sim_specs`` given the launch and host
    times of the real run itself (``calibrate.refine_host``: not a prediction, a diagnostic of
    how much of the error is the host's speed during the run); appends the process's evidence
    row for ``name`` to ``proc``: the host's stalls and speed, the clock drift, what the probe
    run before it measured (``probe``: ``calibrate.refine_from_probe``'s second value), and the
    groups passing either way."""
    ht = C.host_times_in(real, pol)
    specs, how = C.refine_host(sim_specs, real, pol, times=ht)
    sim_r = S.simulate(specs, wl, pol, seed=1)
    out = compare(name, sim_r, real)
    b = real.batches
    call = (b["dispatch_s"] - b["start_s"]).to_numpy()
    clean = ht[ht["clean"]]
    cal_launch = {s.name: s.launch_ms for s in sim_specs}
    proc.append({
        "scenario": name, "batches": len(b), "stalls": int((call > STALL_S).sum()),
        "longest_call_ms": float(call.max() * 1e3) if len(call) else float("nan"),
        "clean_gap_p50_us": float(clean["gap_ms"].median() * 1e3) if len(clean) else float("nan"),
        "calibrated_launch_us": (float(np.median([cal_launch[m] for m in clean["model"]])) * 1e3
                                 if len(clean) else float("nan")),
        "host_speed": how["host_speed"],
        "probe_host_ratio": probe["host_ratio"] if probe else float("nan"),
        "probe_gpu_scale": (" ".join(f"{m}:{v['gpu_scale']:.3f}" for m, v in probe["models"].items()
                                     if v["batches"]) if probe else ""),
        "clock_drift_ppm": real.meta.get("clock_drift_ppm", float("nan")),
        "clock_corrected": {True: "driver", "afterwards": "estimated"}.get(
            real.meta.get("clock_corrected"), "no")})
    return out


def write_process(out: Path, refined: list, proc: list) -> None:
    """``fidelity_refined.csv`` (the table with the run's own host times) and ``process.csv``
    (per scenario: stalls, host speed, clock drift, groups passing as predicted / refined)."""
    table = pd.concat(refined, ignore_index=True)
    table.to_csv(out / "fidelity_refined.csv", index=False)
    p = pd.DataFrame(proc)
    ok_r = table.groupby("scenario")["ok"].agg(["sum", "size"])
    p["groups"] = p["scenario"].map(ok_r["size"])
    p["ok_refined"] = p["scenario"].map(ok_r["sum"])
    p.to_csv(out / "process.csv", index=False)


def compare(name, sim, real):
    """Rows of the fidelity table for one scenario: all requests, then per model."""
    rows = []
    for by in (None, "model"):
        f = M.fidelity(sim.metrics(by=by, warmup_s=WARMUP_S), real.metrics(by=by, warmup_s=WARMUP_S))
        f.insert(0, "scenario", name)
        f.index.name = "group"
        rows.append(f.reset_index())
    return rows


def write_tables(out: Path, rows, info, *, engines, seconds, graphs, max_batch, wall_s=None,
                 note=None) -> str:
    """Write fidelity.csv and fidelity.md into ``out``; returns the markdown."""
    table = pd.concat(rows, ignore_index=True)
    table.to_csv(out / "fidelity.csv", index=False)
    how = ("per model: GPU time per batch size under the driver, launch and host time, "
           "model-switch cost, sharing slowdown beside one and two other streams (and per "
           "size of the batches beside, where calibration.json has share_by_size)"
           if info.get("format", 1) >= 2 else
           "(format 1) per model: idle table plus one mean excess per batch, model-switch cost, "
           "one sharing slowdown f per other stream")
    head = [f"# Scheduler fidelity: simulated vs real ({info['label']})", "",
            f"GPU: {info.get('gpu', 'n/a')}, driver {info.get('driver', 'n/a')}, "
            f"torch {info.get('torch', 'n/a')}, CUDA {info.get('cuda', 'n/a')}; {info['date']}.",
            f"Models: {', '.join(engines)} (fp16, random weights, "
            f"{'CUDA graphs' if graphs else 'eager'}), max batch {max_batch}; "
            f"{seconds:g} s of arrivals per scenario, first {WARMUP_S:g} s left out.",
            f"Measured beforehand in calibration runs of their own (calibration.json): {how}.",
            "Pass: p50 and p99 within 10 % of real, SLO attainment within 2 points.",
            f"Re-run: `python lab/sched/sched_fidelity.py OUTDIR --seconds {seconds:g}`; "
            "recompute from the stored runs: `python lab/sched/sched_fidelity.py --replay DIR`."]
    if note:
        head.append(note)
    head += ["", "| scenario | group | p50 sim | p50 real | err % | p99 sim | p99 real | err % | "
             "SLO sim % | SLO real % | diff pts | ok |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in table.itertuples():
        head.append(f"| {r.scenario} | {r.group} | {r.p50_sim_ms:.2f} | {r.p50_real_ms:.2f} | "
                    f"{r.p50_err_pct:+.1f} | {r.p99_sim_ms:.2f} | {r.p99_real_ms:.2f} | "
                    f"{r.p99_err_pct:+.1f} | {r.slo_sim_pct:.1f} | {r.slo_real_pct:.1f} | "
                    f"{r.slo_diff_pts:+.1f} | {'yes' if r.ok else 'NO'} |")
    if wall_s is not None:
        head += ["", f"Total wall time {wall_s:.0f} s."]
    text = "\n".join(head) + "\n"
    (out / "fidelity.md").write_text(text)
    return text


def _from_compact(fate_path: Path, batches_path: Path, wl, names, what: str):
    """A RunResult rebuilt from a compact copy (each request's batch, status and drop time; the
    batches) and the workload it served (the arrivals)."""
    from hookmagic.sched.dispatcher import STATUS_NAMES
    from hookmagic.sched.result import RunResult, assemble
    from hookmagic.common import files
    t = files.read_parquet(fate_path, f"compact real run {what}")
    meta = json.loads(t.schema.metadata[b"hookmagic.sched"])
    fate = t.to_pandas()
    bat = files.read_parquet(batches_path, f"real batches {what}").to_pandas()
    if len(fate) != len(wl):
        raise SystemExit(f"{fate_path}: {len(fate)} stored requests, the rebuilt workload has "
                         f"{len(wl)}")
    served = np.flatnonzero(fate["batch"].to_numpy() >= 0)
    served = served[np.argsort(fate["batch"].to_numpy()[served], kind="stable")]
    codes = np.array([STATUS_NAMES.index(str(x)) for x in fate["status"]], dtype=np.int8)
    req, b2 = assemble(wl.requests, names, codes, fate["drop_s"].to_numpy(float),
                       np.array([names.index(str(m)) for m in bat["model"]]),
                       bat["stream"].to_numpy(), bat["start_s"].to_numpy(),
                       bat["end_s"].to_numpy(), bat["size"].to_numpy(), served)
    for col in bat.columns:  # the driver's host stamps (dispatch_s; loop_s, decide_s since 11-26)
        if col not in ("model", "stream", "size", "start_s", "end_s"):
            b2[col] = bat[col].to_numpy()
    return RunResult(req, b2, meta)


def stored_run(run_dir: Path):
    """What one process stored: (calibration.json as a dict, idle specs rebuilt from its
    latency tables, {scenario: (workload, policy)} rebuilt from them, {scenario: real result}).

    Real results are read in full (``<scenario>.real.*.parquet``) or from a compact copy
    (``<scenario>.real.fate.parquet``: each request's batch and status, and the batches; the
    arrivals come from the rebuilt scenario). Either way the rebuilt scenario must give the
    stored arrivals and policy, else this code is not the code that ran."""
    from hookmagic.sched.result import load_result
    from hookmagic.common import files
    info = json.loads((run_dir / "calibration.json").read_text())
    tab = pd.read_csv(run_dir / "latency_tables.csv")
    names = list(info["models"])
    idle = {n: S.ModelSpec.from_sweep(tab, name=n, max_batch=info["max_batch"]) for n in names}
    full = {p.name[: -len(".real.requests.parquet")]: p for p in run_dir.glob("*.real.requests.parquet")}
    compact = {p.name[: -len(".real.fate.parquet")]: p for p in run_dir.glob("*.real.fate.parquet")}
    if not full and not compact:
        raise SystemExit(f"{run_dir}: no stored real runs (*.real.requests.parquet)")
    seconds = info.get("seconds")
    if seconds is None:
        if full:
            seconds = load_result(run_dir / f"{next(iter(full))}.real").meta["duration_s"]
        else:
            t = files.read_parquet(next(iter(compact.values())), "compact real run")
            seconds = json.loads(t.schema.metadata[b"hookmagic.sched"])["duration_s"]
    if info.get("scenario_version", 1) != SCENARIO_VERSION:
        raise SystemExit(f"{run_dir}: its scenarios were drawn by an older version of this "
                         "study; replay it with the code of its commit")
    built = scenarios(idle, names, seconds)
    real = {}
    for name, (wl, pol) in built.items():
        if name in full:
            res = load_result(run_dir / f"{name}.real")
        elif name in compact:
            res = _from_compact(compact[name], run_dir / f"{name}.real.batches.parquet", wl,
                                names, name)
        else:
            continue
        same = (len(wl) == len(res.requests) and np.allclose(
            wl.requests["arrival_s"].to_numpy(), res.requests["arrival_s"].to_numpy())
            and repr(pol) == res.meta.get("policy"))
        if not same:
            raise SystemExit(f"{run_dir}: scenario {name} rebuilt from the stored tables differs "
                             "from the stored real run (other code version?)")
        real[name] = res
    return info, idle, {k: v for k, v in built.items() if k in real}, real


#: how fidelity.csv predicts a real run (calibration.json's "prediction"; stored runs replay as
#: they were predicted): 1 (absent) the probe's specs, with the canary's stall periods where
#: stored (2026-11-26 08:06-10:30 UTC); 3 (since 10:50 UTC) the probe's specs with the host's
#: speed through the run read off its launch calls (``calibrate.speed_from_calls``), GPU time
#: following the call (``call_share``), and the simulated dispatcher deciding from the specs
#: the real one had (the engines' calibrated specs: EDF's early drops); 4 (since 11:25 UTC) as 3,
#: each simulation the pool of SIM_DRAWS draws of its randomness (:func:`simulate_pooled`)
PREDICTION = 4
#: draws of the simulator's own randomness (service-time spread, host jitter) pooled per prediction
SIM_DRAWS = 8


def simulate_pooled(specs, wl, pol, draws: int = SIM_DRAWS, **kw):
    """``S.simulate`` with seeds 1..``draws``, the requests and batches of all pooled into one
    result: the simulator's expected latency distribution rather than one draw of it. One draw
    of a 3 s scenario moved a group's p99 by up to ±7 % and an SLO by up to ±0.7 points from
    seed to seed (H100 runs of 2026-11-26 10:58-11:05 UTC, cameras_bursty_edf), noise the real
    run does not share; the real run is one draw of its own."""
    sims = [S.simulate(specs, wl, pol, seed=k, **kw) for k in range(1, draws + 1)]
    if draws == 1:
        return sims[0]
    return SimResult(pd.concat([x.requests for x in sims], ignore_index=True),
                     pd.concat([x.batches for x in sims], ignore_index=True),
                     dict(sims[0].meta, draws=draws))


def sim_draws(info: dict) -> int:
    """How many simulator draws a prediction pools (calibration.json's ``prediction`` 4 or later:
    ``SIM_DRAWS``; before: one)."""
    return SIM_DRAWS if int(info.get("prediction", 1)) >= 4 else 1


def predicted(wl, pol, info, idle, specs_here, real):
    """The prediction of ``real`` (calibration.json's ``prediction`` 3 or later): the probe's
    specs, the host's speed through the run read off its launch calls, the dispatcher deciding
    from the engines' specs, pooled over the simulator's draws."""
    return simulate_pooled(specs_here, wl, pol, sim_draws(info),
                           decide_with=sim_specs_from(info, idle),
                           host_windows=C.speed_from_calls(real, specs_here))


def second_run_rows(name, wl, pol, info, idle, specs_here, real, again) -> dict:
    """The tables of ``--second-run`` for one scenario: ``fidelity_again.csv`` (the same
    prediction against the second real run ``again``) and ``fidelity_repeat.csv`` (``again`` in
    the simulation's place against the first real run ``real``: the machine against itself)."""
    return {"fidelity_again.csv": compare(name, predicted(wl, pol, info, idle, specs_here, again),
                                          again),
            "fidelity_repeat.csv": compare(name, again, real)}


def predict(name, wl, pol, info, idle, specs_here, real, probe):
    """The simulation that ``fidelity.csv`` compares with ``real``, and the comparison rows of
    the other tables ({csv name: rows}), as calibration.json's ``prediction`` says."""
    version = int(info.get("prediction", 1))
    specs_cal = sim_specs_from(info, idle, len(pol.streams))
    stalls = host_windows(real)  # the canary's (empty where it measured none)
    other = {}
    if version >= 3:
        draws = sim_draws(info)
        decide = sim_specs_from(info, idle)  # what the engines' specs said (one stream)
        sim = predicted(wl, pol, info, idle, specs_here, real)
        meter = real.meta.get("backend_meter") or real.meta.get("host_meter")
        ref = meter_reference(probe, "backend_meter" if real.meta.get("backend_meter")
                              else "host_meter")
        other["fidelity_meter.csv"] = compare(name, simulate_pooled(
            specs_here, wl, pol, draws, decide_with=decide,
            host_windows=speed_windows(meter, ref)), real)
        other["fidelity_steady_host.csv"] = compare(name, simulate_pooled(
            specs_here, wl, pol, draws, decide_with=decide), real)
        other["fidelity_calibration_only.csv"] = compare(name, simulate_pooled(
            specs_cal, wl, pol, draws, decide_with=decide), real)
        return sim, other
    sim = S.simulate(specs_here, wl, pol, seed=1, host_windows=stalls)
    if probe is not None:
        other["fidelity_calibration_only.csv"] = compare(name, S.simulate(
            specs_cal, wl, pol, seed=1, host_windows=stalls), real)
    if "host_windows" in real.meta:
        other["fidelity_steady_host.csv"] = compare(name, S.simulate(specs_here, wl, pol, seed=1),
                                                    real)
    return sim, other


def meter_reference(probe, which: str = "host_meter") -> float | None:
    """The driver's meter pass (µs; ``which``: ``host_meter`` or ``backend_meter``) in the part
    of a probe its host times are taken from (from ``calibrate.PROBE_SKIP_S`` on, as
    ``refine_from_probe``): the speed the refined specs hold; None without a meter."""
    m = (probe.meta.get(which) if probe is not None else None) or {}
    bins = m.get("bins_us") or []
    skip = int(round(C.PROBE_SKIP_S / m["width_s"])) if bins else 0
    kept = [b for b in bins[skip:] if b is not None]
    return float(np.median(kept)) if kept else None


def host_windows(real) -> np.ndarray:
    """The host's slow periods a real run stored (``meta["host_windows"]``, measured by a
    ``HostCanary`` beside it since 2026-11-26 08:06 UTC; none before): (start_s, end_s,
    slowdown) rows on the run's clock."""
    return np.asarray(real.meta.get("host_windows") or [], dtype=float).reshape(-1, 3)


def slow_periods(win: np.ndarray) -> dict:
    """process.csv's columns on the host's slow periods during one real run."""
    return {"host_slow_periods": len(win),
            "host_slow_ms": 1e3 * float((win[:, 1] - win[:, 0]).sum()),
            "host_slowdown_max": float(win[:, 2].max()) if len(win) else 1.0}


def stored_side_runs(run_dir: Path, built: dict, names: list, kind: str = "probe") -> dict:
    """The real runs one process stored beside its scenarios' own: {scenario: real result},
    each checked against its rebuilt workload. ``kind="probe"``: the probes before each scenario
    (``<scenario>.probe.*``, since 2026-11-26 07:00 UTC; none before); ``kind="again"``: the
    second runs of ``--second-run`` after it (``<scenario>.again.*``, the scenario's own
    arrivals)."""
    from hookmagic.sched.result import load_result
    out = {}
    for name, (wl, pol) in built.items():
        pw = C.probe_workload(wl) if kind == "probe" else wl
        if (run_dir / f"{name}.{kind}.requests.parquet").exists():
            res = load_result(run_dir / f"{name}.{kind}")
        elif (run_dir / f"{name}.{kind}.fate.parquet").exists():
            res = _from_compact(run_dir / f"{name}.{kind}.fate.parquet",
                                run_dir / f"{name}.{kind}.batches.parquet", pw, names,
                                f"{name} {kind}")
        else:
            continue
        if not (len(pw) == len(res.requests) and np.allclose(
                pw.requests["arrival_s"].to_numpy(), res.requests["arrival_s"].to_numpy())
                and repr(pol) == res.meta.get("policy")):
            raise SystemExit(f"{run_dir}: the {kind} run of {name} rebuilt differs from the "
                             "stored one")
        out[name] = res
    return out


def store_compact(run_dir: Path, dst: Path) -> None:
    """Copy one process's real runs compactly (each request's batch, status and drop time; the
    batches; calibration.json and latency tables): about 0.3 MB instead of 3-7 MB."""
    info, idle, built, real = stored_run(run_dir)
    dst.mkdir(parents=True, exist_ok=True)
    cal = {}
    if info.get("format", 1) >= 2 and (run_dir / "calibration").is_dir():
        cal = load_calibration_runs(run_dir, list(idle))
    for f in ("calibration.json", "latency_tables.csv", "fidelity.csv", "calibration_check.csv",
              "fidelity_refined.csv", "process.csv", "fidelity.md", "fidelity_steady_host.csv",
              "fidelity_calibration_only.csv", "fidelity_meter.csv"):
        if (run_dir / f).exists():  # fidelity.csv: the table as the process computed it
            (dst / f).write_bytes((run_dir / f).read_bytes())
    targets = [(res, dst / f"{name}.real") for name, res in real.items()]
    targets += [(res, dst / "calibration" / key.replace(":", "_")) for key, res in cal.items()]
    for res, stem in targets:
        save_compact(res, stem)
    check = dict(stored_run(dst)[3])
    if cal:
        check.update({("cal", k): v for k, v in load_calibration_runs(dst, list(idle)).items()})
    for name, res in list(real.items()) + [(("cal", k), v) for k, v in cal.items()]:
        # the copy must give back the same tables
        a, c = res.requests, check[name].requests
        same = (np.allclose(a["latency_ms"], c["latency_ms"], rtol=0, atol=1e-9, equal_nan=True)
                and all((a[k].astype(str).to_numpy() == c[k].astype(str).to_numpy()).all()
                        for k in ("met_slo", "status", "batch")))
        if not same:
            raise SystemExit(f"compact copy of {run_dir}/{name} differs from it")


def save_compact(res, stem: Path) -> None:
    """Write one real run compactly: ``<stem>.fate.parquet`` (each request's batch, status and
    drop time; the run's meta) and ``<stem>.batches.parquet`` (model, stream, size, GPU start
    and end, and the driver's host stamps), zstd. The arrivals are not stored: the replay
    rebuilds them from the latency tables and checks them against the stored policy."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from hookmagic.common import files
    stem.parent.mkdir(parents=True, exist_ok=True)
    r, b = res.requests, res.batches
    fate = pa.Table.from_pandas(pd.DataFrame({
        "batch": r["batch"].to_numpy().astype(np.int32),
        "status": r["status"].astype(str).astype("category"),
        "drop_s": r["drop_s"].to_numpy(float)}), preserve_index=False)
    fate = fate.replace_schema_metadata({b"hookmagic.sched": json.dumps(res.meta, default=str).encode()})
    cols = {"model": b["model"].astype(str).astype("category"), "stream": b["stream"].astype(np.int8),
            "size": b["size"].astype(np.int16), "start_s": b["start_s"], "end_s": b["end_s"]}
    for extra in ("dispatch_s", "loop_s", "decide_s"):
        if extra in b.columns:
            cols[extra] = b[extra]
    if "host_cpu" in b.columns:  # the driver stamps it since 2026-11-26 08:55 UTC
        cols["host_cpu"] = b["host_cpu"].astype(np.int16)
    bat = pa.Table.from_pandas(pd.DataFrame(cols), preserve_index=False)
    for table, suffix in ((fate, "fate"), (bat, "batches")):
        path = stem.parent / f"{stem.name}.{suffix}.parquet"
        files.atomic_write(path, lambda fh, t=table: pq.write_table(t, fh, compression="zstd",
                                                                      compression_level=19),
                           "a compact real run")


#: the driver's default ``lead_s``: its clock reference is taken that long before run time 0
LEAD_S = 0.05


def estimate_drift(res) -> float:
    """The GPU-vs-host clock drift of a run stored before the driver measured it, from its own
    records (a heuristic, for old runs only): a launch call takes about as long throughout a
    run, so the growth of ``dispatch_s - start_s`` (host clock minus GPU time mapped through one
    reference) over the run is the drift. Per 0.25 s, the 10th percentile (stalls are long,
    never short); the slope of a line through them. NaN with fewer than three such windows."""
    b = res.batches
    if "dispatch_s" not in b.columns or len(b) < 60:
        return float("nan")
    call = (b["dispatch_s"] - b["start_s"]).to_numpy()
    t = b["start_s"].to_numpy()
    xs, ys = [], []
    for lo in np.arange(0.0, t.max(), 0.25):
        sel = (t >= lo) & (t < lo + 0.25)
        if sel.sum() >= 20:
            xs.append(float(np.median(t[sel])))
            ys.append(float(np.percentile(call[sel], 10)))
    return float(np.polyfit(xs, ys, 1)[0]) if len(xs) >= 3 else float("nan")


def corrected_clock(results: dict, drift: float) -> dict:
    """``results`` (name -> real run) with GPU times put on the host clock given ``drift``
    (``driver.with_clock_corrected``), where the driver did not do it itself."""
    from hookmagic.sched.driver import with_clock_corrected
    return {k: (v if v.meta.get("clock_corrected") is True
                else with_clock_corrected(v, -LEAD_S, drift)) for k, v in results.items()}


def replay_run(run_dir: Path, out: Path, refit: bool = False, clock: bool = False) -> None:
    """Recompute one process's sim-vs-real table from what it stored: the latency tables and
    calibration.json (or, with ``refit``, the fit redone on its saved calibration runs), the
    scenarios rebuilt from the tables (their arrivals must equal the stored real ones), the
    stored real results. No GPU needed. ``clock``: runs stored before the driver corrected
    its GPU times for clock drift (2026-11-26 04:00 UTC) get corrected here, by the process's
    median :func:`estimate_drift` over its real and calibration runs (diagnostic)."""
    info, idle, built, real = stored_run(run_dir)
    names = list(idle)
    cal_runs = None
    if clock:
        cal_runs = (load_calibration_runs(run_dir, names)
                    if info.get("format", 1) >= 2 and (run_dir / "calibration").is_dir() else {})
        est = [estimate_drift(r) for r in list(real.values()) + list(cal_runs.values())]
        drift = float(np.nanmedian(est))
        real = corrected_clock(real, drift)
        cal_runs = corrected_clock(cal_runs, drift)
        info["clock_drift_estimated_ppm"] = 1e6 * drift
    if refit:
        if info.get("format", 1) < 2:
            raise SystemExit(f"{run_dir}: calibration format 1 stored no calibration runs to refit")
        if cal_runs is None:
            cal_runs = load_calibration_runs(run_dir, names)
        info["fit"] = C.fit(cal_runs, idle, info["max_batch"])
    probes = stored_side_runs(run_dir, built, names)
    agains = stored_side_runs(run_dir, built, names, kind="again")
    out.mkdir(parents=True, exist_ok=True)
    rows, refined, proc, extra = [], [], [], {}
    seconds = next(iter(real.values())).meta["duration_s"]
    for name, (wl, pol) in built.items():
        win = host_windows(real[name])
        specs_cal = sim_specs_from(info, idle, len(pol.streams))
        specs_here, how = specs_cal, None
        if name in probes:
            specs_here, how = C.refine_from_probe(specs_cal, probes[name], pol)
        sim, other = predict(name, wl, pol, info, idle, specs_here, real[name], probes.get(name))
        if name in agains:
            other.update(second_run_rows(name, wl, pol, info, idle, specs_here, real[name],
                                         agains[name]))
        for table, got in other.items():
            extra.setdefault(table, []).extend(got)
        sim.save(out / f"{name}.sim")
        rows += compare(name, sim, real[name])
        if "dispatch_s" in real[name].batches.columns:
            refined += refined_rows(name, specs_cal, wl, pol, real[name], proc, how)
            if "host_windows" in real[name].meta:
                proc[-1].update(slow_periods(win))
    if refined:
        write_process(out, refined, proc)
    for table, got in extra.items():
        pd.concat(got, ignore_index=True).to_csv(out / table, index=False)
    (out / "calibration.json").write_text(json.dumps(info, indent=2, default=str))
    how = "refitted on its calibration runs" if refit else "its calibration.json"
    note = (f"Replayed offline from {run_dir} ({how}); " + (
        "real runs as stored." if not clock else
        f"real and calibration runs put on the host clock afterwards (GPU-host clock drift "
        f"estimated from their launch calls: {info['clock_drift_estimated_ppm']:+.1f} ppm)."))
    write_tables(out, rows, info, engines=names, seconds=seconds,
                 graphs=info.get("cuda_graphs", True), max_batch=info["max_batch"], note=note)


def _minmax(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Per (scenario, group): min and max of each error over the processes, pass in all."""
    t = pd.concat(frames, ignore_index=True)
    g = t.groupby(["scenario", "group"], sort=False)
    return pd.DataFrame({
        "p50_err_min": g["p50_err_pct"].min(), "p50_err_max": g["p50_err_pct"].max(),
        "p99_err_min": g["p99_err_pct"].min(), "p99_err_max": g["p99_err_pct"].max(),
        "slo_diff_min": g["slo_diff_pts"].min(), "slo_diff_max": g["slo_diff_pts"].max(),
        "runs": g["run"].nunique(), "ok_all": g["ok"].all()}).reset_index()


def _minmax_md(agg: pd.DataFrame) -> list[str]:
    lines = ["| scenario | group | p50 err % | p99 err % | SLO diff pts | runs | pass in all |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in agg.itertuples():
        lines.append(f"| {r.scenario} | {r.group} | {r.p50_err_min:+.1f} … {r.p50_err_max:+.1f} | "
                     f"{r.p99_err_min:+.1f} … {r.p99_err_max:+.1f} | "
                     f"{r.slo_diff_min:+.1f} … {r.slo_diff_max:+.1f} | {r.runs} | "
                     f"{'yes' if r.ok_all else 'NO'} |")
    return lines


def _other_table(out: Path, numbered: list, name: str, title: str, what: str,
                 more: str | None = None) -> list[str]:
    """A min–max section of fidelity_runs.md for another table the processes wrote (``name``
    in each of the ``(k, run dir)`` pairs that has it), saved as ``fidelity_runs_<rest>``;
    ``more``: a paragraph after the counts."""
    frames = [pd.read_csv(r / name).assign(run=k) for k, r in numbered if (r / name).exists()]
    if not frames:
        return []
    agg = _minmax(frames)
    agg.to_csv(out / name.replace("fidelity_", "fidelity_runs_", 1), index=False)
    per = ", ".join(f"{int(f['run'].iloc[0])}: {int(f['ok'].sum())}" for f in frames)
    return (["", f"## {title}", "", f"{what} Passing groups: {int(agg['ok_all'].sum())} of "
             f"{len(agg)} (per process: {per})."] + ([""] if more is None else ["", more, ""])
            + _minmax_md(agg))


def _prediction_beside_machine(numbered: list) -> str | None:
    """Per process, how the prediction's passes (``fidelity.csv``) line up with the machine's own
    (``fidelity_repeat.csv``, the second real run against the first): a markdown cross-tab of
    the groups, and the groups the machine misses in every process."""
    rows, missed = [], None
    for k, r in numbered:
        if not (r / "fidelity_repeat.csv").exists() or not (r / "fidelity.csv").exists():
            continue
        key = ["scenario", "group"]
        both = pd.read_csv(r / "fidelity.csv")[key + ["ok"]].merge(
            pd.read_csv(r / "fidelity_repeat.csv")[key + ["ok"]], on=key,
            suffixes=("_pred", "_rep"))
        pred, rep = both["ok_pred"].astype(bool), both["ok_rep"].astype(bool)
        rows.append(f"| {k} | {int((pred & rep).sum())} | {int((pred & ~rep).sum())} | "
                    f"{int((~pred & rep).sum())} | {int((~pred & ~rep).sum())} |")
        miss = set(both.loc[~rep, "scenario"] + "/" + both.loc[~rep, "group"])
        missed = miss if missed is None else missed & miss
    if not rows:
        return None
    head = ["Groups per process, the prediction (against the first run) beside the machine "
            "(second run against the first):", "",
            "| process | both pass | prediction only | machine only | neither |",
            "|---|---|---|---|---|"]
    tail = (["", "Missed by the machine itself in every process: "
             + ", ".join(sorted(missed)) + "."] if missed else [])
    return "\n".join(head + rows + tail)


def summarize_runs(out: Path, runs: list[Path]) -> str:
    """Min–max over fresh processes of each group's errors; pass only if every run passes.

    Where the processes stored ``process.csv`` / ``fidelity_refined.csv`` (since 2026-11-26
    04:00 UTC, or any replay of a run with the driver's host stamps): beside it, each process's
    own result with its host's stalls, speed and clock drift (no process is left out), and the
    table again with launch and host times from each run itself (a diagnostic, not a
    prediction)."""
    frames = [pd.read_csv(r / "fidelity.csv").assign(run=k) for k, r in enumerate(runs, 1)
              if (r / "fidelity.csv").exists()]
    if not frames:
        raise SystemExit("no run finished")
    agg = _minmax(frames)
    agg.to_csv(out / "fidelity_runs.csv", index=False)
    info = json.loads((runs[0] / "calibration.json").read_text())
    lines = [f"# Scheduler fidelity over {len(frames)} fresh processes ({info['label']})", "",
             f"GPU: {info.get('gpu', 'n/a')}, driver {info.get('driver', 'n/a')}, "
             f"torch {info.get('torch', 'n/a')}, CUDA {info.get('cuda', 'n/a')}; {info['date']}.",
             "Each process measures its own tables and calibration, then runs every scenario real "
             "and simulated. Errors: simulated vs real, min–max over the processes.",
             f"Pass: every run within 10 % (p50, p99) and 2 points (SLO). Passing groups: "
             f"{int(agg['ok_all'].sum())} of {len(agg)}.", ""] + _minmax_md(agg)
    procs = [(k, r) for k, r in enumerate(runs, 1) if (r / "process.csv").exists()]
    if procs:
        rows = []
        for k, r in procs:
            p = pd.read_csv(r / "process.csv")
            f = pd.read_csv(r / "fidelity.csv")
            ok = f.groupby("scenario")["ok"].sum()
            for x in p.itertuples():
                rows.append({"process": k, "scenario": x.scenario,
                             "pass (predicted)": f"{int(ok.get(x.scenario, 0))} of {x.groups}",
                             "pass (run's host times)": f"{x.ok_refined} of {x.groups}",
                             "launch calls > 0.5 ms": f"{x.stalls} of {x.batches}",
                             "longest call ms": f"{x.longest_call_ms:.2f}",
                             "launch gap p50 µs (calibrated)": f"{x.clean_gap_p50_us:.1f} ({x.calibrated_launch_us:.1f})",
                             "host speed": f"{x.host_speed:.2f}",
                             "host slow periods (canary): n; ms; max slowdown": (
                                 f"{int(x.host_slow_periods)}; {x.host_slow_ms:.1f}; "
                                 f"{x.host_slowdown_max:.1f}x"
                                 if getattr(x, "host_slow_periods", -1) >= 0 else "not measured"),
                             "CPU steal %; forced switches": (
                                 f"{x.cpu_steal_pct:.2f}; {int(x.forced_switches)}"
                                 if getattr(x, "forced_switches", -1) >= 0 else "n/a"),
                             "probe: host ratio; GPU scale": (
                                 f"{x.probe_host_ratio:.2f}; " + (
                                     x.probe_gpu_scale if isinstance(x.probe_gpu_scale, str)
                                     else "no model alone long enough")
                                 if getattr(x, "probe_host_ratio", float("nan")) == getattr(
                                     x, "probe_host_ratio", float("nan")) else "no probe"),
                             "clock drift ppm": (f"{x.clock_drift_ppm:+.1f}" + {
                                 "driver": "", "estimated": " (estimated afterwards)"}.get(
                                 str(x.clock_corrected), " (uncorrected)"))
                             if x.clock_drift_ppm == x.clock_drift_ppm else "n/a (not measured)"})
        ev = pd.DataFrame(rows)
        ev.to_csv(out / "processes.csv", index=False)
        done = [(k, r) for k, r in enumerate(runs, 1) if (r / "fidelity.csv").exists()]
        per = ", ".join(f"{k}: {int(pd.read_csv(r / 'fidelity.csv')['ok'].sum())} of "
                        f"{len(pd.read_csv(r / 'fidelity.csv'))}" for k, r in done)
        missing = [k for k, r in enumerate(runs, 1) if (k, r) not in procs]
        lines += ["", "## Each process beside its host", "",
                  "Groups passing per process and scenario as predicted (the criterion above) and "
                  "with launch and host times taken from the run itself (`calibrate.refine_host`: "
                  "the real driver's own measurements; not a prediction). Launch calls that held "
                  "the driver's one host thread over 0.5 ms are host stalls the simulator does not "
                  "model; launch gap: previous batch's end to the start of a batch that waited "
                  "for its stream, with the host free; host speed: that gap over the calibrated "
                  "one (median); clock drift: GPU event clock vs host clock, corrected by the driver "
                  f"where measured. Groups passing per process: {per}."
                  + (f" No host evidence stored by process(es) {missing}." if missing else ""), "",
                  "| " + " | ".join(ev.columns) + " |", "|" + "---|" * len(ev.columns)]
        lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in ev.itertuples(index=False)]
    numbered = list(enumerate(runs, 1))
    lines += _other_table(
        out, numbered, "fidelity_again.csv", "The same prediction against a second real run",
        "Each scenario's arrivals served a second time by the real driver, right after the first "
        "run in the same process (`--second-run`), and predicted as the first (the host's speed "
        "read off this run's launch calls); the bounds as above.")
    lines += _other_table(
        out, numbered, "fidelity_repeat.csv", "The machine against itself",
        "The second real run in the simulation's place, against the first (same process, same "
        "arrivals, same policy, a few seconds apart); the bounds as above.",
        more=_prediction_beside_machine(numbered))
    lines += _other_table(
        out, procs, "fidelity_refined.csv", "Diagnostic: launch and host times from each run itself",
        "Not a prediction: the same simulator with each model's launch gap and launch call "
        "measured in the real run being compared (everything else as calibrated).")
    lines += _other_table(
        out, numbered, "fidelity_calibration_only.csv",
        "For comparison: the calibration alone, no probe",
        "The same simulator given the calibration's numbers only (the prediction before "
        "2026-11-26 07:00 UTC), against the same real runs.")
    lines += _other_table(
        out, numbered, "fidelity_meter.csv",
        "For comparison: the host's speed from the driver's meters instead of its launch calls",
        "The same prediction with the host's speed through each run taken from the driver's "
        "meter (a CUDA event record and query on a stream of its own, about once a ms, "
        "independent of the batches) over the probe's, instead of from the launch calls.")
    lines += _other_table(
        out, numbered, "fidelity_steady_host.csv",
        "For comparison: the host at its probed speed throughout",
        "The same prediction without the host's speed through each real run (its launch "
        "calls since 2026-11-26 10:50 UTC, the canary's stall periods before): the simulator "
        "as if the host kept the probe's speed; nothing measured during the run is used.")
    text = "\n".join(lines) + "\n"
    (out / "fidelity_runs.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?",
                    help="output folder (with --replay: default DIR/replay)")
    ap.add_argument("--replay", type=Path, metavar="DIR",
                    help="no GPU: recompute the sim-vs-real tables from a folder this script "
                         "wrote (run1, run2, ... or one process's files)")
    ap.add_argument("--store-compact", action="store_true",
                    help="with --replay: write compact copies of the stored real runs into OUTDIR "
                         "(checked to give back the same tables) instead of replaying")
    ap.add_argument("--clock-estimate", action="store_true",
                    help="with --replay: correct runs stored before the driver measured the "
                         "GPU-host clock drift (2026-11-26 04:00 UTC) by a drift estimated from "
                         "their launch calls (diagnostic)")
    ap.add_argument("--refit", action="store_true",
                    help="with --replay: redo the calibration fit on the stored calibration runs")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--models", default="resnet50,resnet18,mobilenet_v3_large,efficientnet_b0,resnet34")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--processes", type=int, default=1,
                    help="run the whole measurement in this many fresh processes and write "
                         "fidelity_runs.md with min–max errors")
    ap.add_argument("--second-run", action="store_true",
                    help="serve each scenario a second time right after the first (same process) "
                         "and write fidelity_again.csv (the prediction against it) and "
                         "fidelity_repeat.csv (the second real run against the first)")
    ap.add_argument("--no-graphs", action="store_true", help="eager PyTorch instead of CUDA graphs")
    ap.add_argument("--compact", action="store_true",
                    help="store the real runs compactly (each request's batch and status, the "
                         "batches, the calibration runs; what --replay needs, ~1 MB per process) "
                         "and not the simulated ones")
    ap.add_argument("--pin-cpu", default="none", metavar="CPU",
                    help="keep each process on one CPU: 'auto' (the last one allowed), 'core' "
                         "(the first thread of the last physical core), a CPU number, or 'none' "
                         "(default)")
    ap.add_argument("--synthetic-cpu", action="store_true",
                    help="no GPU: sleeping CPU threads (synthetic; checks the script only)")
    args = ap.parse_args()
    if args.replay is not None:
        src = args.replay
        out = args.out or src / "replay"
        subs = sorted(p for p in src.glob("run*") if (p / "calibration.json").exists())
        if args.store_compact:
            for sub in subs or [src]:
                store_compact(sub, out / sub.name if subs else out)
            print(f"compact copies of {len(subs) or 1} run(s) in {out}")
            return
        if not subs:
            replay_run(src, out, args.refit, args.clock_estimate)
            print((out / "fidelity.md").read_text())
            return
        done = []
        for sub in subs:
            replay_run(sub, out / sub.name, args.refit, args.clock_estimate)
            done.append(out / sub.name)
        print(summarize_runs(out, done))
        return
    if args.out is None:
        ap.error("the output folder is required (or --replay DIR)")
    if args.processes <= 1:
        one_process(args)
        return
    import subprocess
    runs = []
    for k in range(args.processes):
        sub = args.out / f"run{k + 1}"
        cmd = [sys.executable, __file__, str(sub), "--seconds", str(args.seconds), "--models",
               args.models, "--max-batch", str(args.max_batch), "--repeats", str(args.repeats)]
        cmd += ["--no-graphs"] * args.no_graphs + ["--synthetic-cpu"] * args.synthetic_cpu
        cmd += ["--compact"] * args.compact + ["--second-run"] * args.second_run
        cmd += ["--pin-cpu", args.pin_cpu]
        print(f"process {k + 1}/{args.processes}: {' '.join(cmd[1:])}", flush=True)
        subprocess.run(cmd, check=False)
        runs.append(sub)
    print(summarize_runs(args.out, runs))


if __name__ == "__main__":
    main()
