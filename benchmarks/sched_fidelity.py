"""Simulated vs real: does the scheduler simulator predict what the GPU does?

    python benchmarks/sched_fidelity.py OUTDIR [--seconds 4] [--models resnet50,resnet18,...]

On a GPU machine (PyTorch with CUDA, torchvision): builds torchvision models with random
weights (fp16, channels-last, CUDA graphs), measures each one's latency per batch size with CUDA
events, calibrates what a batch costs beyond its table, then for four scenarios runs the real
driver (``hookmagic.sched.run``) for ``--seconds`` of arrivals and simulates the same workload
and policy. ``--processes 3`` repeats all of it in three fresh processes and writes the min–max.
Writes into OUTDIR (or OUTDIR/runK per process):

- ``fidelity.md`` / ``fidelity.csv``: per scenario (all requests, and per model), simulated vs
  real p50 and p99 (error relative to real) and SLO attainment (difference in points), with
  the pass criteria p50/p99 within 10 % and SLO attainment within 2 points;
- ``fidelity_runs.md`` / ``.csv`` (with ``--processes``): min–max over the processes;
- ``latency_tables.csv``: the measured latency tables (median, std, p90 per batch size);
- ``calibration.json``: per model the driver-measured service times, the model-switch cost
  and the sharing slowdowns; GPU, driver, date;
- ``<scenario>.real.requests.parquet`` / ``.batches.parquet`` and the same for ``.sim``: the raw
  per-request and per-batch records (``hookmagic.sched.load_result(OUTDIR/<scenario>.real)``).

What the simulator is given, all measured in calibration runs of their own before the scenarios
(nothing is fitted to the real runs being compared): per model and batch size, the mean cost of
a batch under the real driver (gap since the previous batch plus compute; measured in the same
process, so with that process's clocks); the mean extra cost after another model
(``switch_ms``: colder caches, another CUDA graph); and how much slower each model computes
beside one and beside two other streams (``share_slowdown``, applied for exactly the time
batches overlap). The fourth scenario (three streams, five models, cameras and bursts) is held
out: it was not used to choose the model.

``--synthetic-cpu`` runs the whole pipeline without a GPU on sleeping CPU threads; its tables
are labelled synthetic and prove only that the script works.

Budget: about a minute of model setup and calibration plus ~4 x (seconds + graph capture) per
process on one H100.
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


def _back_to_back(res):
    """Consecutive batches on each stream whose next batch's oldest request was already waiting
    when the previous one ended: (previous model, batch model, size, gap s, duration s)."""
    first_arrival = res.requests.groupby("batch")["arrival_s"].min()
    rows = []
    for _, b in res.batches.groupby("stream"):
        b = b.sort_values("start_s").reset_index(drop=True)
        prev, nxt = b.iloc[:-1].reset_index(drop=True), b.iloc[1:].reset_index(drop=True)
        waiting = first_arrival.loc[nxt["batch"]].to_numpy() < prev["end_s"].to_numpy()
        rows.append(pd.DataFrame({
            "prev": prev["model"].astype(str).to_numpy()[waiting],
            "model": nxt["model"].astype(str).to_numpy()[waiting],
            "size": nxt["size"].to_numpy()[waiting],
            "gap_s": (nxt["start_s"].to_numpy() - prev["end_s"].to_numpy())[waiting],
            "dur_s": (nxt["end_s"] - nxt["start_s"]).to_numpy()[waiting]}))
    return pd.concat(rows, ignore_index=True)


def service_tables(engines, make_backend, max_batch, seconds=0.12):
    """Per model and batch size: the mean GPU time a batch costs under the real driver.

    For each size ``b`` a saturating calibration run of its own (never a scenario's workload):
    one stream, batches of exactly ``b`` taken as soon as the stream frees. For back-to-back
    batches (the next one's requests were already waiting) the cost is the gap since the
    previous batch ended (completion polling, launch) plus its compute. Means, not medians: a
    queue drains at the mean cost. Measured under the driver and in the same process as the
    scenarios, so it carries that process's clocks, unlike a table from an idle GPU.
    Returns {model: ModelSpec with these latencies}.
    """
    out = {}
    for name, e in engines.items():
        base = e.spec
        lat = []
        for b in range(1, max_batch + 1):
            wl = S.make_workload([S.Poisson(name, 2.0 * base.throughput(b), slo_ms=1e6)],
                                 seconds, seed=90 + b)
            res = S.run([e], wl, S.Policy(batching=S.Batching(b, 0.0)), backend=make_backend(),
                        drain_s=0.2)
            rows = _back_to_back(res)
            rows = rows[rows["size"] == b]
            lat.append(1e3 * float((rows["gap_s"] + rows["dur_s"]).mean()) if len(rows)
                       else base.latency(b))
        out[name] = base.with_(batch_sizes=tuple(range(1, max_batch + 1)), latency_ms=tuple(lat))
    return out


def switch_costs(engines, make_backend, service, seconds=0.8):
    """Per model: the mean extra cost of a batch that follows another model on its stream
    (colder caches, another CUDA graph) beyond its driver-measured service time. One saturating
    FIFO run of its own over every model, batches of 4."""
    srcs = [S.Poisson(n, 2.0 / len(engines) * service[n].throughput(4), slo_ms=1e6)
            for n in engines]
    wl = S.make_workload(srcs, seconds, seed=98)
    res = S.run(list(engines.values()), wl, S.Policy(batching=S.Batching(4, 0.0)),
                backend=make_backend(), drain_s=0.2)
    rows = _back_to_back(res)
    rows = rows[rows["prev"] != rows["model"]]
    cost = 1e3 * (rows["gap_s"] + rows["dur_s"]).to_numpy()
    extra = cost - np.array([service[m].latency(int(z)) for m, z in zip(rows["model"], rows["size"])])
    by = pd.Series(extra, index=rows["model"].to_numpy())
    return {n: max(0.0, float(by.loc[[n]].mean())) if n in by.index else 0.0 for n in engines}


def _overlap_by_count(batches, most=2):
    """Per batch (in ``batches``' order): seconds it ran beside exactly k other batches, k=1..most."""
    b = batches.reset_index(drop=True)
    events = sorted([(t, 1, i) for i, t in enumerate(b["start_s"])]
                    + [(t, -1, i) for i, t in enumerate(b["end_s"])])
    running, last = set(), None
    ov = np.zeros((len(b), most + 1))
    for t, kind, i in events:
        if last is not None and len(running) > 1:
            k = min(len(running) - 1, most)
            for j in running:
                ov[j, k] += t - last
        last = t
        running.add(i) if kind == 1 else running.discard(i)
    return ov[:, 1:]


def share_slowdowns(engines, make_backend, streams=3, seconds=1.0):
    """Per model: how much slower it computes beside one and beside two other streams.

    One calibration run of its own: every model's requests, FIFO, batches of up to 4, on
    ``streams`` streams, loaded so that one, two or three streams compute at different times.
    A batch of alone-time ``L`` (the idle-GPU table) that ran ``ov_k`` seconds beside ``k``
    others lasts ``L + sum_k ov_k * a_k / (1 + a_k)`` if it computes at ``1/(1+a_k)`` of its
    speed meanwhile: ``a_1, a_2`` are fitted by least squares — exactly the model the simulator
    runs (``ModelSpec.share_slowdown``).
    """
    specs = {n: e.spec for n, e in engines.items()}
    srcs = [S.Poisson(n, 1.4 / len(engines) * specs[n].throughput(4), slo_ms=1e6)
            for n in engines]
    wl = S.make_workload(srcs, seconds, seed=97)
    res = S.run(list(engines.values()), wl, S.Policy(streams=streams, batching=S.Batching(4, 0.0)),
                backend=make_backend(), drain_s=0.2)
    b = res.batches.sort_values("start_s").reset_index(drop=True)
    ov = _overlap_by_count(b, streams - 1)
    alone = np.array([specs[m].latency(int(z)) / 1e3 for m, z in zip(b["model"], b["size"])])
    extra = (b["end_s"] - b["start_s"]).to_numpy() - alone
    out = {}
    for name in engines:
        sel = (b["model"].astype(str) == name).to_numpy()
        x, y = ov[sel], extra[sel]
        keep = x.sum(axis=0) > 0
        c = np.zeros(x.shape[1])
        if keep.any():
            c[keep] = np.linalg.lstsq(x[:, keep], y, rcond=None)[0]
        c = np.clip(c, 0.0, 0.9)  # 0.9: a tenfold slowdown; beyond it the fit is noise
        a = c / (1.0 - c)
        out[name] = tuple(float(v) for v in np.maximum.accumulate(a))  # more sharers never help
    return out


def rate_for(spec, load, batch):
    """Requests per second that keep ``spec`` busy a share ``load`` of the time at ``batch``."""
    return load * batch / (spec.latency(batch) / 1e3)


def scenarios(specs, names, seconds):
    """Three calibration-free scenarios sized from the measured tables, plus a held-out one.

    Nothing here is tuned to the real runs; the held-out scenario (three streams, five models,
    cameras plus bursts) was added after the model changes and is never used to choose them.
    """
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
        m: S.Batching(8, 2.0) for m in m3}))
    # 2. cameras plus bursty traffic: EDF with early drop, camera fairness
    det, other = n[0], n[min(3, len(n) - 1)]
    cams_fps = 30.0
    n_cams = int(max(2, min(16, 0.35 * specs[det].throughput(8) / cams_fps)))
    src2 = [S.Cameras(det, n=n_cams, fps=cams_fps, jitter_ms=2.0, slo_ms=3 * specs[det].latency(8) + 15),
            S.Bursty(other, rate_for(specs[other], 1.0, 8), on_s=0.1, off_s=0.5,
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
                S.Bursty(n[1], rate_for(specs[n[1]], 0.8, 8), on_s=0.12, off_s=0.5,
                         slo_ms=4 * specs[n[1]].latency(8) + 5, priority=1),
                S.Poisson(n[2], rate_for(specs[n[2]], 0.15, 4),
                          slo_ms=4 * specs[n[2]].latency(8) + 5, priority=1),
                S.Poisson(n[3], rate_for(specs[n[3]], 0.15, 4),
                          slo_ms=4 * specs[n[3]].latency(8) + 5, priority=2),
                S.Bursty(n[4], rate_for(specs[n[4]], 0.6, 8), on_s=0.2, off_s=0.8,
                         slo_ms=4 * specs[n[4]].latency(8) + 5, priority=2)]
        out["held_out_three_streams"] = (src4, S.Policy(order="priority", streams=3,
                                                        batching=S.Batching(8, 1.5)))
    return {k: (S.make_workload(src_, seconds, seed=17 + j), pol)
            for j, (k, (src_, pol)) in enumerate(out.items())}


def one_process(args) -> None:
    """Calibrate, run every scenario real and simulated, write the tables (one process)."""
    t_start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    engines, make_backend, label = build(args)
    print("measuring latency tables ...", flush=True)
    tables = measure_all(engines, make_backend, args.max_batch, args.repeats)
    tables.to_csv(args.out / "latency_tables.csv", index=False)
    service = service_tables(engines, make_backend, args.max_batch)
    switch = switch_costs(engines, make_backend, service)
    slow = (share_slowdowns(engines, make_backend) if len(engines) > 1
            else {n: () for n in engines})
    info = make_backend().describe()
    info.update(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                service_ms={n: list(sp.latency_ms) for n, sp in service.items()},
                switch_ms=switch, share_slowdown=slow, label=label or "real GPU measurement",
                models=list(engines), max_batch=args.max_batch, cuda_graphs=not args.no_graphs)
    (args.out / "calibration.json").write_text(json.dumps(info, indent=2, default=str))
    for n in engines:
        print(f"  {n:20s} service b=1 {service[n].latency(1):.3f} ms (idle table "
              f"{engines[n].spec.latency(1):.3f})  switch {switch[n]:.3f} ms  share slowdown "
              f"{', '.join(f'{a:.3f}' for a in slow[n])}", flush=True)

    specs = {n: e.spec for n, e in engines.items()}
    # The simulator's view of a batch: its driver-measured service time, plus the model-switch
    # cost and the sharing slowdown. The driver decides from the same latencies.
    sim_specs = [service[n].with_(switch_ms=switch[n], share_slowdown=slow[n]) for n in engines]
    for spec in sim_specs:
        engines[spec.name].spec = spec
    rows = []
    for name, (wl, pol) in scenarios(specs, list(engines), args.seconds).items():
        print(f"scenario {name}: {len(wl)} requests over {args.seconds:g} s, {pol.describe()}",
              flush=True)
        real = S.run(engines, wl, pol, backend=make_backend())
        sim = S.simulate(sim_specs, wl, pol, seed=1)
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
            "Measured beforehand in calibration runs of their own (calibration.json): per model, "
            "service time per batch size under the driver, model-switch cost, sharing slowdown "
            "beside one and two other streams.",
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


def summarize_runs(out: Path, runs: list[Path]) -> str:
    """Min–max over fresh processes of each group's errors; pass only if every run passes."""
    frames = [pd.read_csv(r / "fidelity.csv").assign(run=k) for k, r in enumerate(runs)
              if (r / "fidelity.csv").exists()]
    if not frames:
        raise SystemExit("no run finished")
    t = pd.concat(frames, ignore_index=True)
    g = t.groupby(["scenario", "group"], sort=False)
    agg = pd.DataFrame({
        "p50_err_min": g["p50_err_pct"].min(), "p50_err_max": g["p50_err_pct"].max(),
        "p99_err_min": g["p99_err_pct"].min(), "p99_err_max": g["p99_err_pct"].max(),
        "slo_diff_min": g["slo_diff_pts"].min(), "slo_diff_max": g["slo_diff_pts"].max(),
        "runs": g["run"].nunique(), "ok_all": g["ok"].all()}).reset_index()
    agg.to_csv(out / "fidelity_runs.csv", index=False)
    info = json.loads((runs[0] / "calibration.json").read_text())
    lines = [f"# Scheduler fidelity over {len(frames)} fresh processes ({info['label']})", "",
             f"GPU: {info.get('gpu', 'n/a')}, driver {info.get('driver', 'n/a')}, "
             f"torch {info.get('torch', 'n/a')}, CUDA {info.get('cuda', 'n/a')}; {info['date']}.",
             "Each process measures its own tables and calibration, then runs every scenario real "
             "and simulated. Errors: simulated vs real, min–max over the processes.",
             f"Pass: every run within 10 % (p50, p99) and 2 points (SLO). Passing groups: "
             f"{int(agg['ok_all'].sum())} of {len(agg)}.", "",
             "| scenario | group | p50 err % | p99 err % | SLO diff pts | runs | pass in all |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in agg.itertuples():
        lines.append(f"| {r.scenario} | {r.group} | {r.p50_err_min:+.1f} … {r.p50_err_max:+.1f} | "
                     f"{r.p99_err_min:+.1f} … {r.p99_err_max:+.1f} | "
                     f"{r.slo_diff_min:+.1f} … {r.slo_diff_max:+.1f} | {r.runs} | "
                     f"{'yes' if r.ok_all else 'NO'} |")
    text = "\n".join(lines) + "\n"
    (out / "fidelity_runs.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--models", default="resnet50,resnet18,mobilenet_v3_large,efficientnet_b0,resnet34")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--processes", type=int, default=1,
                    help="run the whole measurement in this many fresh processes and write "
                         "fidelity_runs.md with min–max errors")
    ap.add_argument("--no-graphs", action="store_true", help="eager PyTorch instead of CUDA graphs")
    ap.add_argument("--synthetic-cpu", action="store_true",
                    help="no GPU: sleeping CPU threads (synthetic; checks the script only)")
    args = ap.parse_args()
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
        print(f"process {k + 1}/{args.processes}: {' '.join(cmd[1:])}", flush=True)
        subprocess.run(cmd, check=False)
        runs.append(sub)
    print(summarize_runs(args.out, runs))


if __name__ == "__main__":
    main()
