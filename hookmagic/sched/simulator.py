"""Discrete-event simulation of a policy over a workload: :func:`simulate`.

The general engine runs any :class:`~hookmagic.sched.policies.Policy` through the shared
:class:`~hookmagic.sched.dispatcher.Dispatcher`. Requests are records in arrays, not objects
with processes: arrivals are merged in from the sorted arrival array (in bulk while every stream
is busy) and only batch completions and batching timers are events.

Decision epochs (both engines, and the fast path in :mod:`.fast`, follow exactly this):
at time ``t`` — finish every batch ending at or before ``t``; admit every request arriving at or
before ``t``; offer each free stream, in stream-priority order, a batch. The next epoch is the
next completion, or, while some stream is free, the next arrival or batching timer.

A batch's service time is the model's table latency at its size times a random multiplier of
mean 1 drawn per request (``ModelSpec.service_cv``) and taken from the batch's first request,
so results do not depend on event order and the engines agree request for request. A batch
whose stream last ran another model also pays that model's ``switch_ms`` (cold caches, another
CUDA graph); one whose model has a ``launch_ms`` starts that long after the decision (the
driver's host time to notice, choose and launch), keeping its stream meanwhile.

Streams share one GPU: while ``k`` other streams compute, a batch of model ``m`` progresses at
``1 / slowdown_m(k)`` of its own speed (``ModelSpec.share_slowdown``; specs without one use
``1 + interference * k``), or more the bigger those others' batches (``share_by_size``:
see :meth:`ModelSpec.shared_slowdown`). Its end moves whenever another batch starts
or ends, so the slowdown follows how long batches really overlap, not only what ran when it
started. Only GPU work shares: a batch still in its launch neither slows the others nor is
slowed. With every ``f_m`` zero, streams are independent servers.
"""
from __future__ import annotations

import math
import time
from bisect import bisect_right
from typing import Literal, Mapping, Sequence

import numpy as np

from hookmagic.common import checks
from hookmagic.common.errors import InvalidArgument

from .dispatcher import Dispatcher
from .host_speed import check_windows
from .models import MAX_SHARE, ModelSpec
from .policies import Policy
from .result import SimResult, assemble
from .workloads import Workload, make_workload

__all__ = ["simulate", "simulate_raw", "service_multipliers", "host_jitter", "share_slowdowns"]

_INF = float("inf")


def _as_specs(models: Sequence[ModelSpec] | Mapping[str, ModelSpec] | ModelSpec) -> list[ModelSpec]:
    if isinstance(models, ModelSpec):
        return [models]
    if isinstance(models, Mapping):
        specs = list(models.values())
    else:
        specs = list(models)
    if not specs:
        raise InvalidArgument("simulate needs at least one ModelSpec (models is empty)")
    if not all(isinstance(s, ModelSpec) for s in specs):
        raise InvalidArgument("models must be ModelSpec objects (or a name -> ModelSpec mapping)")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise InvalidArgument(f"two ModelSpecs share a name: {names}")
    return specs

#: the simulation engines ``simulate(engine=...)`` accepts
ENGINES = ("auto", "general", "fast")


def service_multipliers(specs: Sequence[ModelSpec], model_idx: np.ndarray, seed: int) -> np.ndarray:
    """Per-request service-time multipliers: gamma of mean 1 and each model's ``service_cv``."""
    mult = np.ones(len(model_idx))
    # A stream of its own, so that changing the service spread never moves the arrivals.
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E4D1CE]))
    for k, spec in enumerate(specs):
        cv = float(spec.service_cv)
        if cv <= 0:
            continue
        sel = np.flatnonzero(model_idx == k)
        shape = 1.0 / (cv * cv)
        mult[sel] = rng.gamma(shape, 1.0 / shape, len(sel))
    return mult


def host_jitter(specs: Sequence[ModelSpec], model_idx: np.ndarray, seed: int
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-request deviations (seconds) of the launch and host times from their means, drawn
    from each model's ``launch_jitter_ms`` / ``host_jitter_ms`` (one equally likely index per
    request, from a random stream of its own: the arrivals and service spread do not move);
    None when no model has any. A batch uses its first request's values."""
    if not any(s.launch_jitter_ms or s.host_jitter_ms for s in specs):
        return None
    n = len(model_idx)
    lj, hj = np.zeros(n), np.zeros(n)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x1A0C4]))
    u = rng.random(n)
    for k, spec in enumerate(specs):
        table_l, table_h = spec.launch_jitter_ms, spec.host_jitter_ms
        size = max(len(table_l), len(table_h))
        if not size:
            continue
        sel = np.flatnonzero(model_idx == k)
        idx = np.minimum((u[sel] * size).astype(np.int64), size - 1)
        if table_l:
            lj[sel] = np.asarray(table_l)[idx] / 1e3
        if table_h:
            hj[sel] = np.asarray(table_h)[idx] / 1e3
    return lj, hj


def simulate(models: Sequence[ModelSpec] | Mapping[str, ModelSpec] | ModelSpec,
             workload: Workload | Sequence, policy: Policy | None = None, *,
             duration_s: float | None = None, seed: int = 0,
             engine: Literal["auto", "general", "fast"] = "auto",
             interference: float = 0.0,
             host_windows: np.ndarray | Sequence[Sequence[float]] | None = None,
             decide_with: Sequence[ModelSpec] | Mapping[str, ModelSpec] | None = None) -> SimResult:
    """Simulate ``policy`` serving ``workload`` on ``models``; deterministic for a given ``seed``.

    Parameters
    ----------
    models : the :class:`ModelSpec` of every model the workload uses (list or name mapping).
    workload : a :class:`Workload`, or a list of sources (then ``duration_s`` is required and
        ``seed`` draws the arrivals).
    policy : a :class:`Policy` (default: FIFO, no batching, one stream).
    seed : seeds the arrivals (when sources are given) and the service-time spread.
    engine : "general" (any policy), "fast" (compiled path: fifo/priority order, dynamic
        batching, plain streams; raises if the policy needs more) or "auto" (fast when it can).
    interference : ``share_slowdown`` for specs that do not set their own (0: independent streams).
    host_windows : ``(start_s, end_s, factor)`` rows: periods in which the driver's host work
        took ``factor`` times as long as in the specs (over 1 slower, under 1 faster; read
        off a real run's launch calls by :func:`~hookmagic.sched.calibrate.speed_from_calls`,
        or a meter's by :func:`~hookmagic.sched.host_speed.speed_windows`); every launch and
        host time falling
        in one stretches or shrinks, and a batch's GPU time changes by its model's
        ``call_share`` of the change in its launch call. None: the specs' speed throughout.
    decide_with : the specs the dispatcher decides from where they differ from how long
        batches really take (``models``): EDF's early drop and queue timeouts weigh a
        request's deadline against its model's latency at batch 1 from these, as the real
        driver's dispatcher does from its engines' specs. Same model names. None: ``models``.

    Returns a :class:`SimResult`: ``.requests`` (one row per request), ``.batches``,
    ``.metrics()``.
    """
    specs = _as_specs(models)
    policy = policy or Policy()
    checks.choice("engine", engine, ENGINES)
    interference = checks.number("interference", interference, non_negative=True)
    if not isinstance(policy, Policy):
        raise InvalidArgument(f"policy must be a Policy, not {type(policy).__name__}")
    if not isinstance(workload, Workload):
        if duration_s is None:
            raise InvalidArgument("pass duration_s with a list of sources")
        workload = make_workload(list(workload), duration_s, seed)
    names = [s.name for s in specs]
    arrays = workload.arrays(names)
    mult = service_multipliers(specs, arrays["model"], seed)
    jit = host_jitter(specs, arrays["model"], seed)
    if jit is not None:
        arrays = dict(arrays, launch_jitter=jit[0], host_jitter=jit[1])

    t0 = time.perf_counter()
    windows = check_windows(host_windows)
    decide = None
    if decide_with is not None:
        decide = _as_specs(decide_with)
        if [s.name for s in decide] != names:
            raise InvalidArgument(f"decide_with must name the same models in the same order as "
                                  f"models: {[s.name for s in decide]} vs {names}")
    raw, used = simulate_raw(specs, arrays, mult, policy, engine, interference, windows, decide)
    wall = time.perf_counter() - t0
    req, bat = assemble(workload.requests, names, *raw)
    meta = {"engine": used, "seed": seed, "duration_s": workload.duration_s,
            "policy": repr(policy), "interference": interference,
            "host_windows": len(windows),
            "models": [s.name for s in specs], "sim_wall_s": wall,
            "requests_per_s": len(req) / wall if wall > 0 else float("nan")}
    return SimResult(req, bat, meta)


def share_slowdowns(specs: Sequence[ModelSpec], streams: int,
                    interference: float = 0.0) -> list[list[float]]:
    """Per model, its slowdown with ``k`` other streams computing, for ``k`` in ``0..streams-1``."""
    if not np.isfinite(interference) or interference < 0:
        raise InvalidArgument(f"interference must be finite and >= 0, got {interference}")
    return [[s.slowdown(k, interference) for k in range(max(1, streams))] for s in specs]


def simulate_raw(specs: Sequence[ModelSpec], arrays: dict[str, np.ndarray], mult: np.ndarray,
                 policy: Policy, engine: str = "auto", interference: float = 0.0,
                 host_windows: np.ndarray | Sequence[Sequence[float]] | None = None,
                 decide_with: Sequence[ModelSpec] | None = None):
    """Run an engine on prepared arrays; returns (raw arrays for :func:`assemble`, engine used).

    For callers that run many configurations (sweeps) and want no DataFrames per run.
    ``arrays`` may hold ``launch_jitter`` and ``host_jitter`` (seconds per request,
    :func:`host_jitter`); absent, the host times are constant. ``host_windows``,
    ``decide_with`` (ModelSpecs, same names): as :func:`simulate`; the fast path decides from
    no latency (it takes no early drops or timeouts), so only the general engine reads it.
    """
    from . import fast
    checks.choice("engine", engine, ENGINES)
    policy.check_models([s.name for s in specs])
    windows = check_windows(host_windows)
    mult = np.asarray(mult, dtype=float)
    if len(mult) and not (np.isfinite(mult).all() and (mult >= 0).all()):
        # NaN or inf service times would never end: neither engine may see one
        raise InvalidArgument("service-time multipliers must be finite and >= 0 (is a "
                              "ModelSpec.service_cv extreme?); latencies must be finite")
    ok = fast.supports(policy, specs, interference)
    if engine == "fast" and not ok:
        raise InvalidArgument("the fast path handles fifo/priority order, dynamic batching and plain "
                         "streams only; use engine='general'")
    if engine == "fast" or (engine == "auto" and ok):
        return fast.run_fast(specs, arrays, mult, policy, interference, windows), "fast"
    return _run_general(specs, arrays, mult, policy, interference, windows, decide_with), "general"


def _run_general(specs: Sequence[ModelSpec], arrays: dict[str, np.ndarray], mult: np.ndarray,
                 policy: Policy, interference: float, windows: np.ndarray,
                 decide_with: Sequence[ModelSpec] | None = None):
    """The general engine. Returns the raw arrays :func:`assemble` takes; ``windows``: the
    host's slow periods (:func:`~hookmagic.sched.host_speed.check_windows` rows)."""
    from .pacing import paced, stretched  # compiled (numba): imported when a simulation runs
    d = Dispatcher(policy, specs if decide_with is None else decide_with, arrays)
    arr = arrays["arrival"].tolist()
    n = len(arr)
    arr.append(_INF)  # sentinel: arr[p] is defined for p == n and never due
    mult_l = mult.tolist()
    tables = [spec.table_s(max(spec.max_batch, ms.max_batch, ms.cap)).tolist()
              for spec, ms in zip(specs, d.models)]
    switch = [spec.switch_ms / 1e3 for spec in specs]
    launch = [spec.launch_ms / 1e3 for spec in specs]
    host = [spec.host_ms / 1e3 for spec in specs]
    share = [spec.call_share for spec in specs]
    jittered = "launch_jitter" in arrays
    lj_l = arrays["launch_jitter"].tolist() if jittered else None
    hj_l = arrays["host_jitter"].tolist() if jittered else None
    host_free = -_INF  # the driver's host thread is launching a batch until then
    slowed = len(windows) > 0  # host times stretch inside the host's slow periods
    streams = policy.streams
    S = len(streams)
    slow_by_model = share_slowdowns(specs, S, interference)
    by_size = [[spec.by_size(k) for k in range(max(1, S))] for spec in specs]
    sized = S > 1 and any(e > 0.0 for row in by_size for e in row)  # share_by_size in use
    # Overlap-aware sharing only where it can matter: several streams and some slowdown.
    sharing = sized or any(x > 1.0 for row in slow_by_model for x in row)
    s_size = [0.0] * S  # sqrt of the requests in each stream's running batch (share_by_size)
    s_work = [0.0] * S  # alone-seconds of GPU work left as of s_mark (sharing only)
    s_mark = [0.0] * S
    s_slow = [1.0] * S
    s_launch = [False] * S  # still in its host launch (sharing only): s_end is when that ends
    s_rec = [0] * S  # index of the stream's running batch in records (sharing only)
    s_prev = [-1] * S  # the last model each stream ran (switch cost)
    order = sorted(range(S), key=lambda s: (streams[s].priority, s))
    homogeneous = all(st.models is None for st in streams)
    # Only adaptive caps and concurrency limits care about completions.
    notify = bool(policy.limits) or any(ms.aimd is not None for ms in d.models)
    # Few streams: a list of end times scanned with min() beats a heap.
    s_end = [_INF] * S
    s_model = [0] * S
    s_start = [0.0] * S
    idle = S
    records: list[list] = []  # [model, stream, start, end, size]; end moves while shared
    served: list[int] = []
    p = 0
    wake = _INF
    admit = d.admit_range
    next_batch = d.next_batch
    finished = d.finished
    record = records.append
    extend = served.extend
    while True:
        t_done = min(s_end) if S > 1 else s_end[0]
        t = t_done
        if idle:
            if arr[p] < t:
                t = arr[p]
            if wake < t:
                t = wake
        if t == _INF:
            break
        if sharing:  # progress of every computing batch up to t, at the slowdown it had
            for s in range(S):
                if s_end[s] != _INF and not s_launch[s]:
                    s_work[s] -= (t - s_mark[s]) / s_slow[s]
                    s_mark[s] = t
        changed = False
        if t_done <= t:
            for s in range(S):
                if s_end[s] <= t:
                    changed = True
                    if s_launch[s]:  # its launch is over: from now on it computes
                        s_launch[s] = False
                        s_mark[s] = t
                        continue
                    if notify:
                        finished(s_model[s], s_start[s], s_end[s])
                    if sharing:
                        records[s_rec[s]][3] = s_end[s]
                    s_end[s] = _INF
                    idle += 1
        if arr[p] <= t:
            q = p + 1
            if arr[q] <= t:
                q = bisect_right(arr, t, q, n)
            admit(p, q)
            p = q
        wake = _INF
        if idle and t < host_free:
            wake = host_free  # the host is busy launching: offers wait for it
        elif idle:
            for s in order:
                if s_end[s] != _INF:
                    continue
                got = next_batch(t, s)
                if got is None:
                    if d.wake < wake:
                        wake = d.wake
                    if homogeneous:
                        break
                    continue
                m, ids = got
                size = len(ids)
                dur = tables[m][size] * mult_l[ids[0]]
                if s_prev[s] != m:
                    dur += switch[m]
                    s_prev[s] = m
                if not 0.0 <= dur < _INF:  # NaN or inf would never end
                    raise InvalidArgument(f"model {specs[m].name!r}: a batch of {size} has a "
                                          f"service time of {dur} s; latencies must be finite")
                lm, hm = launch[m], host[m]
                if jittered:  # this batch's draw (its first request's), as the fast path
                    lm += lj_l[ids[0]]
                    if lm < 0.0:
                        lm = 0.0
                    hm += hj_l[ids[0]]
                    if hm < lm:
                        hm = lm
                start = stretched(t, lm, windows) if slowed else t + lm
                if slowed:  # the GPU waits through the slower (faster) call
                    dur = paced(dur, share[m], start, hm - lm, windows)
                end = start + dur
                if sharing:
                    s_rec[s] = len(records)
                    s_work[s] = dur
                    s_mark[s] = start
                    if start > t:
                        s_launch[s] = True
                        end = start  # the next event of this stream: its launch ends
                    changed = True
                record([m, s, start, start + dur, size])
                extend(ids)
                s_size[s] = math.sqrt(size)
                s_end[s] = end
                s_model[s] = m
                s_start[s] = start
                idle -= 1
                if hm > 0.0:
                    host_free = stretched(t, hm, windows) if slowed else t + hm
                    if idle:
                        wake = host_free
                    break
                if not idle:
                    break
        if sharing and changed:  # who computes beside whom changed: new slowdowns and ends
            others = -1
            weight = 0.0
            for s in range(S):
                if s_end[s] != _INF and not s_launch[s]:
                    others += 1
                    weight += s_size[s]
            for s in range(S):
                if s_end[s] != _INF and not s_launch[s]:
                    slow = slow_by_model[s_model[s]][others]
                    if sized and others > 0:
                        e = by_size[s_model[s]][others]
                        if e > 0.0:  # as ModelSpec.shared_slowdown
                            c = 1.0 - 1.0 / slow + e * (weight - s_size[s])
                            slow = 1.0 / (1.0 - (c if c < MAX_SHARE else MAX_SHARE))
                    s_slow[s] = slow
                    s_end[s] = t + s_work[s] * s_slow[s]
                    records[s_rec[s]][3] = s_end[s]
    rec = np.array(records, dtype=float).reshape(-1, 5)
    return (d.status, d.drop_s, rec[:, 0].astype(np.int64), rec[:, 1].astype(np.int64),
            rec[:, 2].copy(), rec[:, 3].copy(), rec[:, 4].astype(np.int64),
            np.asarray(served, dtype=np.int64))
