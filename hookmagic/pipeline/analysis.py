"""Pure analyses of a :class:`~hookmagic.pipeline.run.PipelineRun`: the per-frame table, stage
statistics, queue occupancy, the bottleneck with its evidence, and the per-batch table classic
frame profilers write. No plotting, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument
from hookmagic.common.results import Headline
from hookmagic.pipeline.run import PipelineRun

#: a stage busier than this (fraction of the run, per worker) counts as saturated
SATURATED = 0.7


def _span(run: PipelineRun) -> tuple[int, int]:
    ev = run.events
    if ev.empty:
        return 0, 1
    t0 = int(min(ev["enqueue_ns"].min(), ev["start_ns"].min()))
    t1 = int(max(ev["end_ns"].max(), ev["put_ns"].max()))
    return t0, max(t1, t0 + 1)


def require_events(run: PipelineRun, what: str) -> None:
    """Refuse (InvalidArgument) to draw or model a run that recorded no stage execution: an
    empty chart or model would look like a measurement of nothing."""
    if run.events.empty:
        raise InvalidArgument(f"{what}: the run recorded no frame at any stage "
                              f"({len(run.frame_outcomes)} frames): nothing to show")


def stage_meta(run: PipelineRun, stage: str) -> dict:
    for s in run.meta["stages"]:
        if s["name"] == stage:
            return s
    raise InvalidArgument(f"no stage {stage!r} in this run; stages: {run.stage_names}")


def batches(run: PipelineRun, stage: str) -> pd.DataFrame:
    """One row per execution of ``stage``'s fn: worker, start_ns, end_ns, size, blocked_ns,
    gpu_ms, cpu_ns (the thread's CPU time in it; -1 where the run did not record it)."""
    cols = ["worker", "start_ns", "end_ns", "size", "blocked_ns", "gpu_ms", "cpu_ns"]
    ev = run.events[run.events["stage"] == stage]
    if ev.empty:
        return pd.DataFrame(columns=cols)
    if "cpu_ns" not in ev.columns:
        ev = ev.assign(cpu_ns=-1)
    g = ev.groupby(["worker", "start_ns"], sort=True)
    out = g.agg(end_ns=("end_ns", "first"), size=("frame", "size"), put_ns=("put_ns", "max"),
                gpu_start=("gpu_start_ns", "first"), gpu_end=("gpu_end_ns", "first"),
                cpu_ns=("cpu_ns", "first"))
    out = out.reset_index()
    out["blocked_ns"] = out["put_ns"] - out["end_ns"]
    out["gpu_ms"] = np.where(out["gpu_start"] >= 0, (out["gpu_end"] - out["gpu_start"]) / 1e6,
                             np.nan)
    return out[cols]


def batch_cost(sizes: np.ndarray, durations_s: np.ndarray,
               gpu: bool) -> tuple[float, float]:
    """``(a, b)``: a stage's steady service time of a batch of n frames, modelled as ``a + b·n``
    (both >= 0), from its executions' sizes and durations. Two or more sizes: the least-squares
    line through each size's median, weighted by how often the size ran. One size ``m`` with
    median ``t``: ``(t, 0)`` for a GPU stage (a smaller batch costs the same), ``(0, t/m)`` for a
    CPU stage (cost per frame). Only sizes a run never measured are drawn through this line."""
    sizes = np.asarray(sizes, dtype=float)
    durations_s = np.asarray(durations_s, dtype=float)
    if len(sizes) == 0:
        return 0.0, 0.0
    us = np.unique(sizes)
    med = np.array([np.median(durations_s[sizes == s]) for s in us])
    if len(us) == 1:
        return (float(med[0]), 0.0) if gpu else (0.0, float(med[0] / us[0]))
    w = np.array([(sizes == s).sum() for s in us], dtype=float)
    mx, my = np.average(us, weights=w), np.average(med, weights=w)
    b = float(np.sum(w * (us - mx) * (med - my)) / np.sum(w * (us - mx) ** 2))
    a = my - b * mx
    if b < 0:           # larger batches measured faster: noise; no size effect
        return float(my), 0.0
    if a < 0:           # through the origin instead
        return 0.0, float(np.sum(w * us * med) / np.sum(w * us * us))
    return float(a), b


#: one of the first executions at a batch size that takes this many times the steady-state time
#: of that size is warm-up (lazy initialisation, cuDNN/TensorRT autotuning of a new shape)
WARMUP_FACTOR = 3.0
#: steady executions (after the first ones) a size needs to be its own reference
WARMUP_MIN_STEADY = 4


def warmup_flags(b: pd.DataFrame, workers: int) -> np.ndarray:
    """For each row of ``b`` (:func:`batches`), whether it is a warm-up execution: among the
    first ``workers`` executions of its batch size (each worker may initialise once), and over
    :data:`WARMUP_FACTOR` × the steady time of that size. A size seen too few times to be its
    own reference (a partial batch) is compared with the nearest larger well-sampled size (a
    smaller batch takes no longer in steady state), else the nearest smaller one scaled
    linearly. When no size is well sampled (short runs of many partial sizes), the reference is
    the :func:`batch_cost` line through all the later executions, if there are
    :data:`WARMUP_MIN_STEADY` of them."""
    flags = np.zeros(len(b), dtype=bool)
    if b.empty:
        return flags
    dur = (b["end_ns"] - b["start_ns"]).to_numpy(dtype=float)
    size = b["size"].to_numpy()
    order = np.argsort(b["start_ns"].to_numpy(), kind="stable")
    first = np.zeros(len(b), dtype=bool)
    for s in np.unique(size):
        idx = order[size[order] == s]
        first[idx[:workers]] = True
    steady: dict[int, float] = {}
    for s in np.unique(size):
        rest = dur[(size == s) & ~first]
        if len(rest) >= WARMUP_MIN_STEADY:
            steady[int(s)] = float(np.median(rest))
    later = ~first
    if not steady:
        if later.sum() < WARMUP_MIN_STEADY:
            return flags
        a, b_ = batch_cost(size[later], dur[later], gpu=True)
        biggest = int(size[later].max())
        for i in np.nonzero(first)[0]:
            s = int(size[i])
            ref = a + b_ * s if b_ > 0 or s <= biggest else a * s / biggest
            flags[i] = dur[i] > WARMUP_FACTOR * ref
        return flags
    known = np.array(sorted(steady))
    for i in np.nonzero(first)[0]:
        s = int(size[i])
        if s in steady:
            ref = steady[s]
        elif (known >= s).any():
            ref = steady[int(known[known >= s][0])]
        else:
            near = int(known[-1])
            ref = steady[near] * s / near
        flags[i] = dur[i] > WARMUP_FACTOR * ref
    return flags


def warmup(run: PipelineRun) -> pd.DataFrame:
    """The warm-up executions of every stage (see :func:`warmup_flags`): stage, worker, size,
    ``t_ms`` (after the run start), ``ms`` and ``steady_p50_ms`` (the median of that stage's
    other executions of the same size; NaN when it has none). The what-if model replays them
    once instead of drawing them as steady-state service times."""
    t0, _ = _span(run)
    rows = []
    for st in run.meta["stages"]:
        b = batches(run, st["name"])
        flags = warmup_flags(b, int(st.get("workers") or 1))
        dur = (b["end_ns"] - b["start_ns"]).to_numpy() / 1e6
        for i in np.nonzero(flags)[0]:
            same = (b["size"].to_numpy() == b["size"].iloc[i]) & ~flags
            rows.append({"stage": st["name"], "worker": int(b["worker"].iloc[i]),
                         "size": int(b["size"].iloc[i]),
                         "t_ms": (int(b["start_ns"].iloc[i]) - t0) / 1e6, "ms": float(dur[i]),
                         "steady_p50_ms": float(np.median(dur[same])) if same.any()
                         else np.nan})
    return pd.DataFrame(rows, columns=["stage", "worker", "size", "t_ms", "ms",
                                       "steady_p50_ms"])


def queue_depth(run: PipelineRun, stage: str) -> pd.DataFrame:
    """Frames waiting in ``stage``'s input queue over time (a step function): columns
    ``t_ms`` (after the run start) and ``depth``. The read stage has no input queue."""
    queued = run.stage_names[1:]
    if stage not in queued:
        raise InvalidArgument(f"no stage {stage!r} with an input queue in this run "
                              f"(stages: {queued})")
    ev = run.events[(run.events["stage"] == stage) & (run.events["stage_index"] > 0)]
    t0, _ = _span(run)
    if ev.empty:
        return pd.DataFrame({"t_ms": [0.0], "depth": [0]})
    times = np.concatenate([ev["enqueue_ns"].to_numpy(), ev["start_ns"].to_numpy()])
    steps = np.concatenate([np.ones(len(ev), int), -np.ones(len(ev), int)])
    order = np.lexsort((-steps, times))  # at equal times, enter before leave
    depth = np.cumsum(steps[order])
    return pd.DataFrame({"t_ms": (times[order] - t0) / 1e6, "depth": depth})


def _occupancy(run: PipelineRun, stage: str, capacity: int) -> tuple[float, float, float]:
    """Mean depth, fraction of the run full, fraction empty."""
    q = queue_depth(run, stage)
    t0, t1 = _span(run)
    span_ms = (t1 - t0) / 1e6
    t = np.append(q["t_ms"].to_numpy(), span_ms)
    d = q["depth"].to_numpy()
    dt = np.clip(np.diff(t), 0, None)
    lead = max(q["t_ms"].iloc[0], 0.0)  # empty before the first frame arrives
    mean = float((d * dt).sum() / span_ms)
    full = float(dt[d >= capacity].sum() / span_ms)
    empty = float((dt[d <= 0].sum() + lead) / span_ms)
    return mean, min(full, 1.0), min(empty, 1.0)


def stage_stats(run: PipelineRun) -> pd.DataFrame:
    """Per stage: frames, fps, latency p50/p90/p99 (ms, of the batch each frame was in), GPU ms
    p50, utilisation (busy fraction of the run, per worker, and each worker's), capacity (fps the
    stage sustains busy all the time at the batch sizes it ran), load (utilisation, or for a batch
    stage the busy fraction it would have had running its steady frames in full batches — the
    :func:`batch_cost` line — plus its warm-ups: a stage busy on partial batches has room),
    queue wait p50/p99, blocked fraction (waiting to hand its output to a full queue), and its
    input queue's mean depth and fractions of the run full and empty."""
    t0, t1 = _span(run)
    span_s = (t1 - t0) / 1e9
    rows = []
    for st in run.meta["stages"]:
        name, workers = st["name"], int(st["workers"])
        ev = run.events[run.events["stage"] == name]
        b = batches(run, name)
        n = len(ev)
        if n == 0:
            rows.append({"stage": name, "frames": 0, "workers": workers})
            continue
        service = (b["end_ns"] - b["start_ns"]).to_numpy() / 1e6
        per_frame = (ev["end_ns"] - ev["start_ns"]).to_numpy() / 1e6
        wait = (ev["start_ns"] - ev["enqueue_ns"]).to_numpy() / 1e6
        busy_by_worker = b.assign(d=service).groupby("worker")["d"].sum() / 1e3 / span_s
        util = float(service.sum() / 1e3 / (workers * span_s))
        blocked = float(b["blocked_ns"].sum() / 1e9 / (workers * span_s))
        mean_size = float(b["size"].mean())
        capacity = workers * mean_size / (service.mean() / 1e3) if service.mean() > 0 else np.inf
        load = min(util, 1.0)
        full = int(st.get("batch") or 1)
        if full > 1:
            # busy time had every steady execution been a full batch (the cost line through the
            # steady executions), plus the warm-ups as they ran
            warm = warmup_flags(b, workers)
            sizes = b["size"].to_numpy()
            a, slope = batch_cost(sizes[~warm], service[~warm] / 1e3,
                                  gpu=st.get("device") == "cuda")
            need = service[warm].sum() / 1e3 + sizes[~warm].sum() * (a + slope * full) / full
            load = min(load, need / (workers * span_s))
        row = {
            "stage": name, "device": st.get("device", "cpu"), "workers": workers,
            "batch": st.get("batch") or 1, "frames": n, "batches": len(b),
            "mean_batch": mean_size, "fps": n / span_s,
            "p50_ms": float(np.percentile(per_frame, 50)),
            "p90_ms": float(np.percentile(per_frame, 90)),
            "p99_ms": float(np.percentile(per_frame, 99)),
            "mean_ms": float(service.mean()),
            "gpu_p50_ms": float(np.nanpercentile(b["gpu_ms"], 50)) if b["gpu_ms"].notna().any()
            else np.nan,
            "utilisation": min(util, 1.0),
            "worker_utilisation": [round(float(x), 3) for x in busy_by_worker],
            "capacity_fps": float(capacity),
            "load": float(load),
            "wait_p50_ms": float(np.percentile(wait, 50)),
            "wait_p99_ms": float(np.percentile(wait, 99)),
            "blocked": min(blocked, 1.0),
        }
        if st.get("kind") == "source":
            row.update(queue_mean=np.nan, queue_full=np.nan, queue_empty=np.nan)
        else:
            mean, full, empty = _occupancy(run, name, int(run.meta["queue_size"]))
            row.update(queue_mean=mean, queue_full=full, queue_empty=empty)
        rows.append(row)
    return pd.DataFrame(rows).set_index("stage")


def frames_table(run: PipelineRun) -> pd.DataFrame:
    """One row per frame: source, index, outcome, reason, error, ``e2e_ms`` (created to the end
    of its last stage), and per stage ``<stage>_ms``, ``<stage>_wait_ms``, ``<stage>_gpu_ms``
    (GPU stages), ``<stage>_batch`` (batched stages)."""
    ev = run.events.copy()
    fr = run.frame_outcomes.set_index("frame")
    ev["ms"] = (ev["end_ns"] - ev["start_ns"]) / 1e6
    ev["wait_ms"] = (ev["start_ns"] - ev["enqueue_ns"]) / 1e6
    ev["gpu_ms"] = np.where(ev["gpu_start_ns"] >= 0,
                            (ev["gpu_end_ns"] - ev["gpu_start_ns"]) / 1e6, np.nan)
    out = fr[["source", "index", "outcome", "reason", "error"]].copy()
    last_end = ev.groupby("frame")["end_ns"].max()
    out["e2e_ms"] = (last_end.reindex(out.index) - fr["created_ns"]) / 1e6
    out.loc[out["outcome"] != "done", "e2e_ms"] = np.nan
    for st in run.meta["stages"]:
        name = st["name"]
        sub = ev[ev["stage"] == name].set_index("frame")
        out[f"{name}_ms"] = sub["ms"].reindex(out.index)
        out[f"{name}_wait_ms"] = sub["wait_ms"].reindex(out.index)
        if st.get("device") == "cuda":
            out[f"{name}_gpu_ms"] = sub["gpu_ms"].reindex(out.index)
        if st.get("batch"):
            out[f"{name}_batch"] = sub["batch"].reindex(out.index)
    return out


def throughput(run: PipelineRun) -> dict:
    """Done frames per second over the run, and end-to-end latency p50/p90/p99 (ms)."""
    t0, t1 = _span(run)
    ft = frames_table(run)
    e2e = ft["e2e_ms"].dropna().to_numpy()
    done = int((ft["outcome"] == "done").sum())
    pct = (lambda q: float(np.percentile(e2e, q))) if len(e2e) else (lambda q: np.nan)
    return {"fps": done / ((t1 - t0) / 1e9), "frames_done": done,
            "p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99)}


def headline(run: PipelineRun) -> Headline:
    """The run's headline: done fps, frames by outcome, end-to-end latency p50/p99 and the
    bottleneck stage (``"-"`` when no frame finished: nothing limited a run that did nothing)."""
    thr = throughput(run)
    counts = run.outcomes
    values: dict = {"fps": thr["fps"]}
    units = {"fps": "frames/s"}
    for outcome in ("done", "dropped", "failed", "cancelled"):
        values[f"frames_{outcome}"] = int(counts.get(outcome, 0))
        units[f"frames_{outcome}"] = "frames"
    values.update(latency_p50=thr["p50_ms"], latency_p99=thr["p99_ms"])
    units.update(latency_p50="ms", latency_p99="ms")
    notes = [run.label]
    if values["frames_done"]:
        values["bottleneck"] = bottleneck(run).stage or "none (the source paced the run)"
    else:
        values["bottleneck"] = "-"
        notes.append("no frame finished: no throughput, latency or bottleneck to report")
    warm = warmup(run)
    if len(warm):
        notes.append(f"{len(warm)} warm-up execution(s) (first batches of a size, "
                     f"{warm['ms'].sum():.0f} ms in all): see run.warmup()")
    for s in run.meta.get("stuck_workers") or []:
        notes.append(f"worker {s.get('worker')} of stage {s.get('stage')!r} never returned "
                     "(left behind when the run ended)")
    return Headline(f"Pipeline run {run.meta.get('pipeline', '')}: "
                    + " → ".join(run.stage_names), values, units, notes)


def per_batch(run: PipelineRun) -> pd.DataFrame:
    """The per-batch table classic frame profilers write: ``batch``, ``frames``, one
    ``<stage>_ms`` per stage (the time that stage spent on this batch's frames), ``e2e_ms``
    (first frame created to last frame finished) and ``fps`` (frames / e2e).

    Batches are those of the first batched stage; without one, every frame is a batch."""
    ev = run.events
    batched = [s["name"] for s in run.meta["stages"] if s.get("batch")]
    if batched:
        key = ev[ev["stage"] == batched[0]].set_index("frame")["batch"]
    else:
        key = pd.Series(np.arange(len(run.frame_outcomes)), index=run.frame_outcomes["frame"])
    created = run.frame_outcomes.set_index("frame")["created_ns"]
    ev = ev[ev["frame"].isin(key.index)].assign(b=lambda e: key.reindex(e["frame"]).to_numpy())
    rows = []
    for b, grp in ev.groupby("b", sort=True):
        row = {"batch": int(b), "frames": int(grp["frame"].nunique())}
        for st in run.meta["stages"]:
            sub = grp[grp["stage"] == st["name"]].drop_duplicates(["worker", "start_ns"])
            row[f"{st['name']}_ms"] = float(((sub["end_ns"] - sub["start_ns"]).sum()) / 1e6)
        first = created.reindex(grp["frame"].unique()).min()
        row["e2e_ms"] = float((grp["end_ns"].max() - first) / 1e6)
        row["fps"] = row["frames"] / (row["e2e_ms"] / 1e3) if row["e2e_ms"] > 0 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class Bottleneck:
    """The stage that limits the run (None when no stage is saturated: the source paces it),
    why, and the stage table it was read from."""

    stage: str | None
    verdict: str
    evidence: list[str] = field(default_factory=list)
    stats: pd.DataFrame | None = None

    def __str__(self) -> str:
        return "\n".join([self.verdict] + [f"  - {e}" for e in self.evidence])

    def _repr_pretty_(self, p, cycle) -> None:  # IPython
        p.text(str(self))


def bottleneck(run: PipelineRun) -> Bottleneck:
    """Name the limiting stage: the most loaded one (``load`` of :func:`stage_stats`: busy
    fraction per worker, or for a batch stage running partial batches the share of what it
    sustains with full ones), with the evidence around it — its input queue full and the stage
    before it blocked on handing frames over, the stage after it starved (input queue empty,
    low utilisation)."""
    stats = stage_stats(run)
    if stats["frames"].sum() == 0:
        return Bottleneck(None, "no frames were processed", [], stats)
    order = list(stats.index)
    util = stats["load"].fillna(0.0)
    top = util.max()
    cands = util[util >= top - 0.02].index
    stage = min(cands, key=lambda s: stats.loc[s, "capacity_fps"])
    k = order.index(stage)
    r = stats.loc[stage]
    paced = [s["fps"] for s in run.meta.get("streams", []) if s.get("fps")]
    evidence = [f"{stage}: busy {r['utilisation']:.0%} of the run on {int(r['workers'])} "
                f"worker(s); it sustains {r['capacity_fps']:.1f} fps, the run reached "
                f"{r['fps']:.1f} fps"]
    partial = [f"{s} ran partial batches (mean {stats.loc[s, 'mean_batch']:.1f} of "
               f"{int(stats.loc[s, 'batch'])}), busy {stats.loc[s, 'utilisation']:.0%} but using "
               f"{stats.loc[s, 'load']:.0%} of what full batches sustain"
               for s in order if stats.loc[s, "load"] < stats.loc[s, "utilisation"] - 0.02]
    evidence += partial
    if k > 0 and not np.isnan(r["queue_full"]):
        up = stats.iloc[k - 1]
        evidence.append(f"its input queue held {r['queue_mean']:.1f} frames on average, full "
                        f"{r['queue_full']:.0%} of the time; {order[k - 1]} (before it) was "
                        f"blocked handing frames over {up['blocked']:.0%} of the time")
    if k + 1 < len(order):
        down = stats.iloc[k + 1]
        evidence.append(f"{order[k + 1]} (after it) was starved: input queue empty "
                        f"{down['queue_empty']:.0%} of the time, busy {down['utilisation']:.0%}")
    if top < SATURATED:
        rate = f" at {sum(paced):g} fps in all" if paced else ""
        return Bottleneck(None, f"no stage is saturated (busiest: {stage}, "
                          f"{top:.0%}): the source{rate} paces the run", evidence, stats)
    return Bottleneck(stage, f"bottleneck: {stage}", evidence, stats)


def kernels_by_frame(run: PipelineRun, trace) -> pd.DataFrame:
    """Join the GPU kernels of a capture taken around ``run`` (``with hookmagic.capture() as
    trace: run = pipe.run(...)``) to the frames they worked on.

    Each stage execution is a ``hookmagic.range`` named after the stage, so every kernel carries
    the id of the execution that launched it. Ranges of a stage are matched to the run's
    executions of that stage in start order (both clocks are monotonic), and the capture's clock
    is placed on the run's by the median offset of the matched starts. Returns one row per
    kernel per frame: frame, stage, name, start_ns, end_ns (run clock), batch.
    """
    cols = ["frame", "stage", "name", "start_ns", "end_ns", "batch"]
    ranges, kernels = trace.ranges, trace.kernels
    if ranges is None or kernels is None or ranges.empty or kernels.empty:
        return pd.DataFrame(columns=cols)
    pairs, offsets = [], []
    for stage in run.stage_names[1:]:
        r = ranges[ranges["name"] == stage].sort_values("start_ns")
        b = batches(run, stage).sort_values("start_ns")
        n = min(len(r), len(b))
        if n == 0:
            continue
        r, b = r.iloc[:n], b.iloc[:n]
        offsets.append(r["start_ns"].to_numpy() - b["start_ns"].to_numpy())
        pairs.append(pd.DataFrame({"range_id": r["range_id"].to_numpy(), "stage": stage,
                                   "worker": b["worker"].to_numpy(),
                                   "exec_start": b["start_ns"].to_numpy()}))
    if not pairs:
        return pd.DataFrame(columns=cols)
    offset = int(np.median(np.concatenate(offsets)))
    pairs = pd.concat(pairs, ignore_index=True)
    k = kernels[["range_id", "name", "start_ns", "end_ns"]].merge(pairs, on="range_id")
    ev = run.events[["frame", "stage", "worker", "start_ns", "batch"]].rename(
        columns={"start_ns": "exec_start"})
    k = k.merge(ev, on=["stage", "worker", "exec_start"])
    k["start_ns"] = k["start_ns"] - offset
    k["end_ns"] = k["end_ns"] - offset
    return k[cols].sort_values(["frame", "start_ns"]).reset_index(drop=True)
