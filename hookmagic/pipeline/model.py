"""What-if for a pipeline: a discrete-event model of the measured run.

The model is the pipeline as it ran — the same stages, worker counts, batch sizes and batch
waits, bounded FIFO queues with blocking hand-over (or drop-oldest at the source queue), the same
sources with their pacing and frame counts — driven by the *measured* service times: each stage
execution draws one of that stage's measured durations at the same batch size (a warm-up
execution, see :func:`~hookmagic.pipeline.analysis.warmup_flags`, is replayed once, the first
time the model runs that size, never drawn again), plus the framework's measured hand-over time
of that stage (:func:`handover_s`). Making a stage k× faster divides its measured durations by k.

The GIL (``gil=True``): each execution's thread CPU time (``cpu_ns``, recorded by the runner)
is taken as the part of it that holds the GIL, the rest as GIL-free; the held parts of all
stages pass through one :class:`~hookmagic.pipeline.gil.Gil` with the interpreter's switch
interval, so Python stages that take turns on the GIL run at the rate their sum allows, not at
the slowest one's. See :func:`simulate` for where that measure holds and where it does not.

Partial batches: a batch stage takes what is queued when a worker is free (after waiting up to
its ``batch_wait_ms`` for a full batch, as the runner does), so a faster pipeline may run sizes
the measured run never did. A size not measured draws from the nearest measured size, scaled
by :func:`batch_cost`: the straight line ``a + b·n`` through the measured sizes' medians when
two or more sizes were measured; with one size, a GPU stage's smaller batch takes as long as the
measured one (a batch under the GPU's width costs about the same launches and passes) and a CPU
stage's scales with its frames. Throughput and end-to-end latency are compared with the measured
run and with the model of the run as measured, which shows how far to trust it.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Mapping

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument
from hookmagic.pipeline.analysis import (WARMUP_FACTOR, WARMUP_MIN_STEADY, batch_cost, batches,
                                         throughput, warmup_flags)
from hookmagic.pipeline.gil import Gil
from hookmagic.pipeline.run import PipelineRun


#: the interpreter's default GIL switch interval, for runs that did not record theirs
SWITCH_INTERVAL_S = 0.005
#: the percentile of a stage's hand-over gaps taken as the framework's uncontended cost when
#: the GIL is modelled (a contended run's median holds GIL waits the model replays)
HANDOVER_Q_GIL = 10.0
#: fixed-point rounds that calibrate the GIL-free parts on the run as measured
CALIBRATION_ROUNDS = 6
#: a GIL-free part shorter than this is modelled as run holding the GIL: a thread that stays
#: in Python keeps it (its measured "free" time is GIL waits and timer noise)
MERGE_S = 50e-6


class _Sampler:
    """Service times of one stage, each a (GIL-held, GIL-free) pair of seconds: warm-up
    executions (``warm``) are replayed once each, the first time the model runs that batch
    size, in the order they happened; every other draw comes from the steady-state executions
    of that size, or of the nearest size scaled by the stage's :func:`batch_cost` line.

    Draws are without replacement: each size's executions in a random order, all of them
    before any again. A model that runs as many executions as the run did replays each once,
    so a few rare long ones (a decoder reopening its file) count as often as they happened
    instead of a random number of times."""

    def __init__(self, sizes: np.ndarray, held_s: np.ndarray, free_s: np.ndarray,
                 rng: np.random.Generator, warm: np.ndarray | None = None, gpu: bool = False):
        self.rng = rng
        warm = np.zeros(len(sizes), dtype=bool) if warm is None else warm
        steady = ~warm
        if not steady.any():  # every execution was a warm-up: they are all there is
            steady = np.ones(len(sizes), dtype=bool)
        pairs = np.stack([held_s, free_s], axis=1)
        self.by_size = {int(s): pairs[(sizes == s) & steady] for s in np.unique(sizes[steady])}
        self.sizes = np.array(sorted(self.by_size))
        self.warm = {int(s): deque(map(tuple, pairs[(sizes == s) & warm].tolist()))
                     for s in np.unique(sizes[warm])}
        self.cost = batch_cost(sizes[steady], (held_s + free_s)[steady], gpu)
        self.order: dict[int, list[int]] = {}

    def _next(self, size: int) -> tuple[float, float]:
        order = self.order.get(size)
        if not order:
            order = self.order[size] = self.rng.permutation(len(self.by_size[size])).tolist()
        h, f = self.by_size[size][order.pop()]
        return float(h), float(f)

    def draw(self, n: int) -> tuple[float, float]:
        pending = self.warm.get(n)
        if pending:
            return pending.popleft()
        if n in self.by_size:
            return self._next(n)
        near = int(self.sizes[np.argmin(np.abs(self.sizes - n))])
        a, b = self.cost
        scale = (a + b * n) / (a + b * near) if a + b * near > 0 else n / near
        h, f = self._next(near)
        return h * scale, f * scale


def handover_s(run: PipelineRun, stage: str, q: float = 50.0) -> float:
    """The framework's own time per execution of ``stage``: the ``q``-th percentile (median by
    default) of the gaps between a worker handing off one result and starting the next
    execution, over the executions whose input was already waiting (so the gap is hand-over and
    queue cost, not waiting for work); NaN when no execution found its input waiting. A source
    stream read as fast as it can be (no fps) always has its next frame waiting: every gap of
    its reader counts."""
    ev = run.events[run.events["stage"] == stage]
    if ev.empty:
        return 0.0
    unpaced = set()
    if run.stage_names and stage == run.stage_names[0]:
        unpaced = {i for i, s in enumerate(run.meta.get("streams") or []) if not s.get("fps")}
    g = ev.groupby(["worker", "start_ns"], sort=True).agg(
        put=("put_ns", "max"), ready=("enqueue_ns", "max")).reset_index()
    gaps = []
    for worker, w in g.groupby("worker"):
        start = w["start_ns"].to_numpy()
        put = w["put"].to_numpy()
        ready = w["ready"].to_numpy()
        waiting = (ready[1:] <= put[:-1]) | (worker in unpaced)
        gaps.append((start[1:] - put[:-1])[waiting])
    gaps = np.concatenate(gaps) if gaps else np.array([])
    gaps = gaps[gaps >= 0]
    return float(np.percentile(gaps, q)) / 1e9 if len(gaps) else float("nan")


def has_cpu_times(run: PipelineRun) -> bool:
    """Whether every stage execution of ``run`` that did not fail recorded its thread CPU time
    (``cpu_ns``): what the GIL-aware model needs (a failed one counts as GIL-free)."""
    ev = run.events
    if "cpu_ns" not in ev.columns or ev.empty:
        return False
    return bool((ev.loc[ev["status"] != "failed", "cpu_ns"] >= 0).all())


def _stage_times(run: PipelineRun, gil: bool) -> list[dict]:
    """Per stage, every execution's batch size, warm-up flag, GIL-held and GIL-free seconds.

    With ``gil``: held = the thread's CPU time in the execution (capped at its duration) plus
    the framework's hand-over (its uncontended cost: the 10th percentile of the hand-over gaps,
    which the GIL waits of a contended run inflate); free = the rest of the duration. Without:
    everything is free (independent servers) and the hand-over is the median gap."""
    stages = run.meta["stages"]
    q = HANDOVER_Q_GIL if gil else 50.0
    hand = {st["name"]: handover_s(run, st["name"], q) for st in stages}
    known = [v for k, v in hand.items() if k != stages[0]["name"] and np.isfinite(v)]
    fallback = float(np.median(known)) if known else 0.0  # a stage never fed while busy
    out = []
    runs = []
    for st in stages:
        b = batches(run, st["name"])
        if b.empty:
            raise InvalidArgument(f"stage {st['name']!r} never ran: nothing to model it from")
        warm = warmup_flags(b, int(st.get("workers") or 1))
        runs.append(b.assign(warm=warm).sort_values("start_ns", kind="stable"))
    shared, pause = shared_stalls(runs)
    for st, b, cut in zip(stages, runs, shared):
        dur = (b["end_ns"] - b["start_ns"]).to_numpy() / 1e9 - cut
        h = hand[st["name"]]
        h = h if np.isfinite(h) else fallback  # the framework's cost
        if gil:
            held = np.clip(b["cpu_ns"].to_numpy(dtype=float) / 1e9, 0.0, dur)
            free = dur - held
            held = held + h
        else:
            held = np.zeros(len(dur))
            free = dur + h
        out.append({"name": st["name"], "sizes": b["size"].to_numpy(), "held": held,
                    "free": free, "warm": b["warm"].to_numpy(),
                    "gpu": st.get("device") == "cuda"})
    out[0]["pause"] = pause  # replayed once, as a pause of the whole pipeline
    return out


def _outliers(b: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Which executions of one stage (:func:`batches` rows) are outliers — over
    WARMUP_FACTOR × the median of their batch size (of the stage, where that size ran fewer
    than WARMUP_MIN_STEADY times) — and that reference median (ns) for each execution."""
    dur = (b["end_ns"] - b["start_ns"]).to_numpy(dtype=float)
    size = b["size"].to_numpy()
    ref = np.full(len(b), float(np.median(dur)) if len(dur) else 0.0)
    for n in np.unique(size):
        same = size == n
        if same.sum() >= WARMUP_MIN_STEADY:
            ref[same] = float(np.median(dur[same]))
    return dur > WARMUP_FACTOR * ref, ref


def _union(iv: list[tuple[int, int]]) -> list[list[int]]:
    merged: list[list[int]] = []
    for a, b in sorted(iv):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def shared_stalls(runs: list[pd.DataFrame]) -> tuple[list[np.ndarray], float]:
    """Stalls that hit several stages at once (a decoder re-creating its session stalls the
    GPU stages beside it): per stage, the seconds each outlier execution (:func:`_outliers`)
    overlapped another stage's outliers — cut from it, down to no less than the stage's median
    for its size, so the model does not count a shared stall once per stage — and the total
    seconds during which two or more stages were in outliers, which the model adds once to its
    span as a pause of the whole pipeline. Each ``runs`` entry is one stage's executions."""
    flags = [_outliers(b) for b in runs]
    spans = [_union([(int(a), int(e)) for a, e, o in
                     zip(b["start_ns"], b["end_ns"], f[0]) if o]) for b, f in zip(runs, flags)]
    cuts = []
    for k, (b, (out, ref)) in enumerate(zip(runs, flags)):
        others = _union([tuple(v) for j, sp in enumerate(spans) if j != k for v in sp])
        cut = np.zeros(len(b))
        for i in np.nonzero(out)[0]:
            a, e = int(b["start_ns"].iloc[i]), int(b["end_ns"].iloc[i])
            over = sum(max(0, min(e, y) - max(a, x)) for x, y in others)
            cut[i] = min(over, max(0.0, (e - a) - ref[i])) / 1e9
        cuts.append(cut)
    # the time two or more stages were in outliers at once
    edges = sorted([(a, 1) for sp in spans for a, _ in sp] + [(e, -1) for sp in spans
                                                              for _, e in sp])
    depth, last, pause = 0, 0, 0
    for t, d in edges:
        if depth >= 2:
            pause += t - last
        depth += d
        last = t
    return cuts, pause / 1e9


def simulate(run: PipelineRun, speedup: Mapping[str, float] | None = None,
             seed: int = 0, gil: bool = False) -> dict:
    """Run the model of ``run`` with each stage of ``speedup`` that many times faster (its
    GIL-held and GIL-free parts both divided by the factor).

    ``gil=True`` models the GIL (the run must have recorded its executions' CPU times): each
    execution holds it for its held part (:func:`_stage_times`), one execution at a time
    (:class:`~hookmagic.pipeline.gil.Gil`), then runs its free part. It is not the default:
    the held part is the thread's CPU time, which holds for stages of Python code and GIL-free
    waits (sleep, I/O, GPU waits) but counts as held the CPU time C code spends without the
    GIL (NumPy, PyTorch's operator dispatch and kernel launches, a hardware decoder's
    driver), so it overstates the GIL's load there (docs/pipeline.md gives the figures). A contended run's
    measured durations already hold the GIL waits the model replays, so the free parts are first
    calibrated on the run as measured: each stage's free part is scaled until the model's mean
    duration of the stage (held + GIL wait + free) equals the measured one
    (:data:`CALIBRATION_ROUNDS` rounds); the what-if keeps those scales.

    Returns fps (done frames per second), end-to-end p50/p90/p99 (ms), frames done and dropped,
    ``gil`` (whether it was modelled) and ``gil_busy`` (share of the modelled span the GIL was
    held).
    """
    speedup = _checked(run, speedup)
    return _simulate(run, *_fitted(run, seed, gil), speedup, seed)[0]


def _checked(run: PipelineRun, speedup: Mapping[str, float] | None) -> dict:
    speedup = dict(speedup or {})
    names = run.stage_names
    for name, k in speedup.items():
        if name not in names:
            raise InvalidArgument(f"no stage {name!r} in this run; stages: {names}")
        if not (isinstance(k, (int, float)) and np.isfinite(k) and k > 0):
            raise InvalidArgument(f"speedup of {name!r} must be a finite number > 0, got {k!r}")
    return speedup


def _fitted(run: PipelineRun, seed: int, gil: bool) -> tuple:
    """(stage times, calibrated free-part scales, whether the GIL is modelled)."""
    gil = bool(gil)
    if gil and not has_cpu_times(run):
        raise InvalidArgument("gil=True needs the CPU time of every stage execution (column "
                              "cpu_ns), which this run did not record (recorded before it "
                              "existed, or an execution failed)")
    times = _stage_times(run, gil)
    scales = calibrate(run, times, seed) if gil else [1.0] * len(times)
    return times, scales, gil


def calibrate(run: PipelineRun, times: list[dict], seed: int = 0) -> list[float]:
    """Per stage, the factor on its measured GIL-free parts that makes the model's mean
    duration of the stage (held + GIL wait + free) equal the measured mean, on the run as
    measured: fixed-point rounds, each setting the free part to what is left of the measured
    one after the GIL waits of the previous round's model."""
    scales = [1.0] * len(times)
    for _ in range(CALIBRATION_ROUNDS):
        _, waits = _simulate(run, times, scales, True, {}, seed)
        new = []
        for t, w, old in zip(times, waits, scales):
            steady = ~t["warm"] if (~t["warm"]).any() else np.ones(len(t["warm"]), bool)
            free = float(np.mean(t["free"][steady]))
            new.append(min(1.0, max(0.0, (free - w) / free)) if free > 0 else 1.0)
        # damped (the waits move with the scales); none left is none
        scales = [0.5 * (a + b) if b > 0 else 0.0 for a, b in zip(scales, new)]
    return scales


def _simulate(run: PipelineRun, times: list[dict], scales: list[float], gil_on: bool,
              speedup: Mapping[str, float], seed: int) -> tuple[dict, list[float]]:
    """The model itself: the result of :func:`simulate` and each stage's mean GIL wait per
    execution (seconds)."""
    rng = np.random.default_rng(seed)
    samplers = []
    for t, scale in zip(times, scales):
        k = speedup.get(t["name"], 1.0)
        samplers.append(_Sampler(t["sizes"], t["held"] / k, t["free"] * scale / k, rng,
                                 t["warm"], gpu=t["gpu"]))
    stages = run.meta["stages"]
    read, procs = samplers[0], samplers[1:]
    S = len(procs)
    workers = [int(s["workers"]) for s in stages[1:]]
    batch = [int(s.get("batch") or 1) for s in stages[1:]]
    wait = [float(s.get("batch_wait_ms") or 0.0) / 1e3 if s.get("batch") else 0.0
            for s in stages[1:]]
    cap = int(run.meta["queue_size"])
    drop_oldest = run.meta.get("overflow") == "drop_oldest"
    counts = run.frame_outcomes["source"].value_counts()
    streams = [(s.get("fps"), int(counts.get(s["name"], 0))) for s in run.meta["streams"]]

    heap: list = []
    seq = iter(range(1 << 62))
    q = [deque() for _ in range(S)]
    free = list(workers)
    blocked = [deque() for _ in range(S)]
    # a batch a worker holds while it waits (up to the stage's batch wait) for it to fill
    forming: list[dict | None] = [None] * S
    created: list[float] = []
    finish: dict[int, float] = {}
    dropped = [0]
    next_i = [0] * len(streams)

    def push(t: float, kind: str, data) -> None:
        heapq.heappush(heap, (t, next(seq), kind, data))

    lock = Gil(float(run.meta.get("switch_interval_s") or SWITCH_INTERVAL_S), push)
    runs = [0] * (S + 1)  # executions per stage (the read stage first)
    held_total = [0.0]

    def execute(who: int, t: float, part: tuple[float, float], kind: str, data) -> None:
        """An execution of stage ``who`` from ``t``: its held part under the GIL, then its free
        part, then it waits for the GIL again to hand its result over (``hand_over``). A free
        part under :data:`MERGE_S` is run holding the GIL (a thread in pure Python)."""
        held, free_s = part
        runs[who] += 1
        held_total[0] += held
        if free_s < MERGE_S:
            lock.request(t, held + free_s, lambda t2: hand_over(kind, data, t2), who)
        else:
            lock.request(t, held, lambda t2: push(t2 + free_s, "free", (who, kind, data)), who)

    def hand_over(kind: str, data, t: float) -> None:
        if kind == "read":
            j, f = data
            deliver(0, t, "src", j, deque([f]))
        else:
            i, items = data
            deliver(i + 1, t, "stage", i, deque(items))

    def next_read(j: int, t: float) -> None:
        fps, n = streams[j]
        i = next_i[j]
        if i >= n:
            return
        next_i[j] += 1
        due = i / fps if fps else t
        start = max(t, due)
        f = len(created)
        created.append(due if fps else start)
        if start > t:  # a paced stream: its read begins when the frame is due
            push(start, "due", (j, f))
        else:
            execute(0, start, read.draw(1), "read", (j, f))

    def launch(i: int, t: float, items: list) -> None:
        execute(i + 1, t, procs[i].draw(len(items)), "done", (i, items))

    def start_work(i: int, t: float) -> None:
        f = forming[i]
        while f is not None and q[i]:  # the waiting batch takes what arrived
            while q[i] and len(f["items"]) < batch[i]:
                f["items"].append(q[i].popleft())
            if len(f["items"]) == batch[i]:
                forming[i] = None
                launch(i, t, f["items"])
            refill(i, t)  # room in the queue: a blocked stage before it hands over
            f = forming[i]
        if f is not None:
            return
        while free[i] > 0 and q[i]:
            n = min(batch[i], len(q[i]))
            items = [q[i].popleft() for _ in range(n)]
            free[i] -= 1
            if n < batch[i] and wait[i] > 0:  # the runner's worker waits for more frames
                forming[i] = f = {"items": items}
                push(t + wait[i], "deadline", (i, f))
                refill(i, t)
                return
            launch(i, t, items)
            refill(i, t)

    def refill(i: int, t: float) -> None:
        while blocked[i] and len(q[i]) < cap:
            kind, who, items = blocked[i][0]
            while items and len(q[i]) < cap:
                q[i].append(items.popleft())
            if items:
                return
            blocked[i].popleft()
            if kind == "src":
                next_read(who, t)
            else:
                free[who] += 1
                start_work(who, t)

    def deliver(i: int, t: float, kind: str, who: int, items: deque) -> None:
        if i == S:
            for f in items:
                finish[f] = t
            free[who] += 1
            start_work(who, t)
            return
        while items and len(q[i]) < cap:
            q[i].append(items.popleft())
        if items and kind == "src" and drop_oldest:
            while items:
                q[i].popleft()
                dropped[0] += 1
                q[i].append(items.popleft())
        released = not items
        if not released:
            blocked[i].append((kind, who, items))
        elif kind == "src":
            next_read(who, t)
        else:
            free[who] += 1
        start_work(i, t)
        if released and kind == "stage":
            start_work(who, t)

    for j in range(len(streams)):
        next_read(j, 0.0)
    while heap:
        t, _, kind, data = heapq.heappop(heap)
        if kind == "gil":
            lock.event(t, data)
        elif kind == "due":
            execute(0, t, read.draw(1), "read", data)
        elif kind == "free":  # back from the GIL-free part: the GIL again, then hand over
            who, k, d = data
            lock.request(t, 0.0, lambda t2, k=k, d=d: hand_over(k, d, t2), who, inside=True)
        elif kind == "deadline":
            i, f = data
            if forming[i] is f:  # not filled before its wait ran out: run what it holds
                forming[i] = None
                launch(i, t, f["items"])
                start_work(i, t)
    waits = [lock.waited.get(k, 0.0) / runs[k] if runs[k] else 0.0 for k in range(S + 1)]
    if not finish:
        return {"fps": 0.0, "p50_ms": np.nan, "p90_ms": np.nan, "p99_ms": np.nan,
                "frames_done": 0, "dropped": dropped[0], "gil": gil_on,
                "gil_busy": np.nan}, waits
    done = np.array(sorted(finish))
    lat = np.array([finish[f] - created[f] for f in done]) * 1e3
    t_first = min(created)
    t_last = max(finish.values()) + times[0].get("pause", 0.0)
    return {"fps": len(done) / (t_last - t_first), "p50_ms": float(np.percentile(lat, 50)),
            "p90_ms": float(np.percentile(lat, 90)), "p99_ms": float(np.percentile(lat, 99)),
            "frames_done": len(done), "dropped": dropped[0], "gil": gil_on,
            "gil_busy": held_total[0] / (t_last - t_first)}, waits


def what_if(run: PipelineRun, stage: str | Mapping[str, float], speedup: float = 2.0,
            seed: int = 0, gil: bool = False) -> pd.DataFrame:
    """Predicted fps and end-to-end latency if ``stage`` were ``speedup``× faster (or give a
    mapping ``{stage: speedup, ...}``).

    Three rows: ``measured`` (the run), ``model: as measured`` (the model with nothing changed:
    how far the model is from the run) and ``model: <stage> ×k`` (the prediction). Columns fps,
    p50_ms, p90_ms, p99_ms, frames_done, dropped, and ``fps_gain`` (prediction / model as
    measured: the factor to apply to the measured fps). ``gil`` as in :func:`simulate`.
    """
    change = _checked(run, dict(stage) if isinstance(stage, Mapping) else {stage: speedup})
    measured = throughput(run)
    measured["dropped"] = int((run.frame_outcomes["outcome"] == "dropped").sum())
    fitted = _fitted(run, seed, gil)
    base = _simulate(run, *fitted, {}, seed)[0]
    pred = _simulate(run, *fitted, change, seed)[0]
    label = ", ".join(f"{s} ×{k:.3g}" for s, k in change.items())
    table = pd.DataFrame([measured, base, pred],
                         index=["measured", "model: as measured", f"model: {label} faster"])
    table = table[["fps", "p50_ms", "p90_ms", "p99_ms", "frames_done", "dropped"]]
    table["fps_gain"] = table["fps"] / base["fps"] if base["fps"] else np.nan
    table.loc["measured", "fps_gain"] = np.nan
    return table
