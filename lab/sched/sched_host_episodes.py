"""What slows the scheduler driver's host thread now and then (GPU machine).

On some processes of an H100 (2026-11-26 06:35 UTC, process 3 of three) the driver's one host
thread ran ~10x slower for 5-20 ms about once a second: launch calls of 0.3-0.4 ms instead of
0.03, dispatcher decisions of 0.2-0.7 ms instead of 5-20 µs, with no CPU steal and few forced
context switches. Requests queued behind those episodes and the held-out scenario's p99 came out
15-30 % above the simulator's. This script tells where that time goes, in several fresh processes:

- the held-out scenario of ``sched_fidelity.py`` served by the real driver on a backend that
  times each of its host calls (CUDA event create and record, the graph launch, event queries,
  event-time reads) on the wall clock and in the thread's own CPU time;
- beside it, a canary process on another CPU doing a fixed unit of Python work in a loop and
  stamping every pass (``hookmagic.sched.host_speed.HostCanary``), and a sampler counting the
  interrupts that reach the driver's CPU.

An episode is a run of launch calls over 0.2 ms. For each process it writes the calls' times
inside and outside episodes, the share of the wall time in those calls the thread spent running
(near 1: the CPU ran this thread slowly or it spun in the driver; well below 1: it waited), the
canary's pass time inside and outside (slow too: the whole machine slowed; not: this process or
its CPU) and the interrupts per ms on the driver's CPU.

    python lab/sched/sched_host_episodes.py OUT [--processes 6] [--seconds 3]

Needs a GPU; without one it says so and exits.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sched_fidelity as SF  # noqa: E402

from hookmagic import sched as S  # noqa: E402
from hookmagic.sched.engines import CudaBackend, _CudaHandle, gpu_available  # noqa: E402
from hookmagic.sched.host_speed import HostCanary  # noqa: E402

EPISODE_LAUNCH_S = 2e-4  # a launch call longer than this is part of an episode
SCENARIO = "held_out_three_streams"

SAMPLER = r"""
import os, sys, time, numpy as np
os.sched_setaffinity(0, {int(sys.argv[1])})
col = int(sys.argv[2]) + 1
stop_file, limit = sys.argv[3], time.perf_counter() + 120
rows = []
while not os.path.exists(stop_file) and time.perf_counter() < limit:
    with open('/proc/interrupts') as fh:
        n = 0
        for line in fh.readlines()[1:]:
            f = line.split()
            if len(f) > col and f[col].isdigit():
                n += int(f[col])
    rows.append((time.perf_counter(), n))
    time.sleep(0.002)
np.save(sys.argv[4], np.array(rows).T)
"""


class TimedBackend(CudaBackend):
    """The driver's CUDA backend with every host call timed: (kind, start, wall s, cpu s)."""

    #: event queries are polled in a spin: every QUERY_SAMPLE-th is kept, and every slow one
    QUERY_SAMPLE = 64

    def __init__(self, *a, **k) -> None:
        self.calls: list[tuple[str, float, float, float, bool]] = []
        self.queries = 0
        super().__init__(*a, **k)

    def _timed(self, kind, fn, *args, keep=True):
        c0, t0 = time.thread_time(), time.perf_counter()
        out = fn(*args)
        t1, c1 = time.perf_counter(), time.thread_time()
        if keep or t1 - t0 > 2e-5:
            self.calls.append((kind, t0, t1 - t0, c1 - c0, keep))
        return out

    def submit(self, lane, launch):
        start = self._timed("event create", self._event)
        end = self._event()
        self._timed("record start", start.record, lane)

        def go():
            with self.stream_context(lane):
                launch()
        self._timed("graph launch", go)
        self._timed("record end", end.record, lane)
        return _CudaHandle(self, start, end)

    def _query(self, ev) -> bool:
        self.queries += 1
        return self._timed("event query", super()._query, ev,
                           keep=self.queries % self.QUERY_SAMPLE == 0)

    def _elapsed(self, a, b) -> float:
        return self._timed("event time", super()._elapsed, a, b)


def child(args) -> None:
    """One fresh process: tables, the held-out scenario on the timed backend, canary beside."""
    T0 = time.perf_counter()
    cpus = sorted(os.sched_getaffinity(0))
    me, canary_cpu, sampler_cpu = cpus[-1], cpus[len(cpus) // 2], cpus[len(cpus) // 2 - 1]
    os.sched_setaffinity(0, {me})
    ns = argparse.Namespace(models=args.models, synthetic_cpu=False, no_graphs=False,
                            max_batch=args.max_batch)
    engines, make_backend, _ = SF.build(ns)
    SF.measure_all(engines, make_backend, args.max_batch, args.repeats)
    specs = {n: e.spec for n, e in engines.items()}
    wl, pol = SF.scenarios(specs, list(engines), args.seconds)[SCENARIO]
    out = Path(args.child)
    print(f"  tables {time.perf_counter() - T0:.0f} s", file=sys.stderr, flush=True)
    stop = out / "stop"
    stop.unlink(missing_ok=True)
    sampler = subprocess.Popen([sys.executable, "-c", SAMPLER, str(sampler_cpu), str(me), str(stop),
                                str(out / "irq.npy")])
    backend = TimedBackend()
    with HostCanary(cpu=canary_cpu) as canary:
        res = S.run(list(engines.values()), wl, pol, backend=backend)
    stop.touch()
    sampler.wait(timeout=60)
    keep = np.arange(len(canary.starts)) % 100 == 0  # a regular sample, and every slow pass
    keep |= canary.lengths > 2e-5
    np.save(out / "canary.npy", np.array([canary.starts[keep], canary.lengths[keep],
                                          (np.arange(len(canary.starts)) % 100 == 0)[keep]]))
    print(f"  served {time.perf_counter() - T0:.0f} s", file=sys.stderr, flush=True)
    pd.DataFrame(backend.calls, columns=["kind", "t", "wall_s", "cpu_s", "sampled"]).to_parquet(
        out / "calls.parquet")
    json.dump({"cpu": me, "canary_cpu": canary_cpu, "gpu": res.meta.get("gpu"),
               "driver": res.meta.get("driver")}, open(out / "info.json", "w"))


def episodes(calls: pd.DataFrame) -> list[tuple[float, float]]:
    """[start, end) host times of runs of slow launch calls (gaps under 5 ms joined)."""
    slow = calls[(calls["kind"] == "graph launch") & (calls["wall_s"] > EPISODE_LAUNCH_S)]
    out: list[list[float]] = []
    for t, w in zip(slow["t"], slow["wall_s"]):
        if out and t - out[-1][1] < 5e-3:
            out[-1][1] = t + w
        else:
            out.append([t, t + w])
    return [(a, e) for a, e in out if e - a > 1e-3]


def inside(t: np.ndarray, eps) -> np.ndarray:
    m = np.zeros(len(t), bool)
    for a, e in eps:
        m |= (t >= a) & (t < e)
    return m


def summarise(d: Path) -> list[dict]:
    info = json.loads((d / "info.json").read_text())
    calls = pd.read_parquet(d / "calls.parquet")
    eps = episodes(calls)
    rows = []
    calls["in"] = inside(calls["t"].to_numpy(), eps)
    for (kind, ins), g in calls[calls["sampled"]].groupby(["kind", "in"]):
        rows.append({"process": d.name, "what": f"{kind} (µs)", "in episode": ins, "n": len(g),
                     "median": g["wall_s"].median() * 1e6,
                     "p90": g["wall_s"].quantile(0.9) * 1e6,
                     "running share": g["cpu_s"].sum() / max(g["wall_s"].sum(), 1e-12)})
    can = np.load(d / "canary.npy")
    can = can[:, can[2] > 0]  # the regular sample
    ci = inside(can[0], eps)
    for ins in (False, True):
        sel = can[1][ci == ins]
        if len(sel):
            rows.append({"process": d.name, "what": "canary pass, other CPU (µs)", "in episode": ins,
                         "n": len(sel), "median": np.median(sel) * 1e6,
                         "p90": np.quantile(sel, 0.9) * 1e6, "running share": np.nan})
    irq = np.load(d / "irq.npy")
    if irq.shape[1] > 2:
        rate = np.diff(irq[1]) / np.diff(irq[0]) / 1e3
        mid = 0.5 * (irq[0][1:] + irq[0][:-1])
        ii = inside(mid, eps)
        for ins in (False, True):
            sel = rate[ii == ins]
            if len(sel):
                rows.append({"process": d.name, "what": "interrupts per ms on the driver's CPU",
                             "in episode": ins, "n": len(sel), "median": np.median(sel),
                             "p90": np.quantile(sel, 0.9), "running share": np.nan})
    lengths = [1e3 * (e - a) for a, e in eps]
    rows.append({"process": d.name, "what": "episode length (ms); p90 column: their total",
                 "in episode": True, "n": len(eps),
                 "median": float(np.median(lengths)) if eps else 0.0,
                 "p90": float(sum(lengths)), "running share": np.nan})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--models", default="resnet50,resnet18,mobilenet_v3_large,efficientnet_b0,resnet34")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    ok, why = gpu_available()
    if not ok:
        sys.exit(f"no GPU here ({why}): this script measures the real driver on one")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for k in range(1, args.processes + 1):
        d = args.out / f"process{k}"
        d.mkdir(exist_ok=True)
        t = time.perf_counter()
        subprocess.run([sys.executable, __file__, str(args.out), "--child", str(d),
                        "--seconds", str(args.seconds), "--models", args.models,
                        "--max-batch", str(args.max_batch), "--repeats", str(args.repeats)],
                       check=True, stdout=subprocess.DEVNULL)
        mine = summarise(d)
        rows += mine
        print(f"process {k}: {time.perf_counter() - t:.0f} s", flush=True)
        print(pd.DataFrame(mine).drop(columns="process").round(2).to_string(index=False), flush=True)
    t = pd.DataFrame(rows)
    t.to_csv(args.out / "host_episodes.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(t.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
