"""The real driver: the simulator's policy objects dispatching real batches on real streams.

:func:`run` replays a workload's arrival times against the wall clock and hands every decision
to the same :class:`~hookmagic.sched.dispatcher.Dispatcher` the simulator uses, in the same
order per step (completions, arrivals, then one offer per free stream in priority order). Each
batch is launched asynchronously on its stream between two CUDA events; completions are found
by polling the end events, and start/end times are the events' GPU times mapped onto the host
clock: through one reference event taken before serving, then corrected for the two clocks'
different rates by a second one taken after (``CudaBackend.clock_fit``; H100: the
GPU's event clock ran 15-20 ppm slow, so uncorrected times drifted ~60 µs early over a 3 s run
and every latency measured that much short). The result has exactly the simulator's columns.

What is real here: arrival times are the schedule (a request "arrives" at ``t0 + arrival_s``
whether or not the loop was looking), so any lag of this Python loop shows up as queueing time,
as it would in a server. Compute times are the GPU's own (CUDA events), including any gap
the GPU spent waiting for the host to launch kernels.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from hookmagic.common.errors import InvalidArgument, Unavailable

from .dispatcher import Dispatcher
from .host_speed import METER_BIN_S, METER_EVERY_S, meter_pass, pass_bins
from .models import ModelSpec
from .names import unknown_model
from .policies import Policy
from .result import RunResult, assemble, with_derived
from .workloads import Workload, make_workload

__all__ = ["run"]

_INF = float("inf")


def _engines(engines: Any) -> list[Any]:
    if isinstance(engines, Mapping):
        return list(engines.values())
    if not isinstance(engines, (list, tuple)):
        return [engines]
    return list(engines)


def run(engines: Sequence[Any] | Mapping[str, Any], workload: Workload | Sequence,
        policy: Policy | None = None, *, duration_s: float | None = None, seed: int = 0,
        backend: Any = None, lead_s: float = 0.05, drain_s: float = 10.0,
        measure_repeats: int = 15, metrics: Any = None) -> RunResult:
    """Serve ``workload`` with ``policy`` on real engines; same records as :func:`simulate`.

    Parameters
    ----------
    engines : engines (``TorchEngine``, ``CupyPipeline``, ... from :mod:`.engines`), one per
        model name the workload uses. An engine without a ``spec`` is measured first (latency
        per batch size, CUDA events) so that policies needing latencies (EDF early drop) have them.
    workload : a :class:`Workload`, or sources plus ``duration_s`` and ``seed``.
    policy : the :class:`Policy` (the very object you simulate with).
    backend : a ``CudaBackend`` (default when a GPU is present) or the synthetic
        ``ThreadBackend``; with neither GPU nor backend, raises ``RuntimeError`` saying why.
    metrics : a :class:`hookmagic.common.prometheus.InferenceMetrics` (or anything with
        ``observe_batch(model, seconds, size)``): told every finished batch, for Prometheus.
    lead_s : time between setting up and the first arrival.
    drain_s : after the last arrival, how long to keep serving what is queued before stopping
        (requests still queued then keep status "pending").

    Returns a :class:`RunResult` (``.requests``, ``.batches``, ``.metrics()``); ``meta`` names
    the GPU, driver and libraries and the clock correction (``clock_drift_ppm``,
    ``clock_corrected``), and ``batches`` also holds, on the host clock, ``loop_s`` (the loop
    pass that launched the batch began), ``decide_s`` (the dispatcher had chosen it) and
    ``dispatch_s`` (the launch call returned), beside the GPU's ``start_s``/``end_s``: the
    launch gap after the previous batch's end splits into noticing (``loop_s``), deciding
    (``decide_s``) and recording the start (``start_s``); ``host_cpu`` is the CPU the driver's
    thread launched it from (-1 where the system cannot say). ``meta["host_meter"]``: the
    host's speed on the driver's thread through the run, a fixed unit of interpreter work timed
    about once a ms (medians per 50 ms, ``host_speed.pass_bins``); ``meta["backend_meter"]``
    the same for a fixed piece of the backend's own host work (``CudaBackend.meter_pass``: an
    event record and query on a stream of its own), None for backends without one
    (``host_speed.speed_windows`` makes simulator ``host_windows`` of either).
    """
    policy = policy or Policy()
    setup = _setup(_engines(engines), workload, policy, duration_s, seed, backend)
    specs = _measure(setup, policy, measure_repeats)
    # The one host thread stalls now and then (H100 runs: 1-3 % of launch calls
    # took 0.5-3.8 ms instead of ~0.1 ms, leaving streams idle with work queued). Many were
    # first launches of fresh CUDA graphs (engines now launch each once at setup); Python's
    # cyclic garbage collector is another possible source, an artefact of driving the GPU
    # from Python that a C++ server does not have: paused while serving (reference counting
    # still frees everything), after one collection beforehand.
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        served = _serve(setup, policy, specs, lead_s, drain_s, metrics)
    finally:
        if was_enabled:
            gc.enable()
    return _result(setup, policy, specs, served)


def _cpu_reader():
    """A function giving the CPU the calling thread runs on (glibc's ``sched_getcpu``, a vDSO
    read of tens of ns), or -1 where there is none: the driver stamps each batch with it, as
    its host speed differs between CPUs (H100 machine: two speeds ~2x apart)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        getcpu = libc.sched_getcpu
        getcpu.restype, getcpu.argtypes = ctypes.c_int, []
        getcpu()
        return getcpu
    except (OSError, AttributeError):
        return lambda: -1


_host_cpu = _cpu_reader()


@dataclass
class _Setup:
    """What serving needs, checked: the engines by name, the workload, the backend's lanes."""

    engines: list[Any]
    names: list[str]
    workload: Workload
    backend: Any
    lanes: list[Any]


@dataclass
class _Served:
    """What the serving loop recorded: one row per batch, the ids served, the dispatcher."""

    records: list[tuple]      # (model, stream, start_s, end_s, size, dispatch_s, loop_s, decide_s,
                              #  host_cpu)
    served: list[int]
    dispatcher: Dispatcher
    loop_lag: list[float]     # seconds the loop admitted each arrival batch late
    meter_at: list[float] = field(default_factory=list)   # perf_counter of each host meter pass
    meter_s: list[float] = field(default_factory=list)    # its length (host_speed.meter_pass)
    backend_meter_s: list[float] = field(default_factory=list)  # backend.meter_pass, same passes
    t0: float = 0.0           # host perf_counter of run time 0
    clock: dict | None = None  # the backend's clock_fit() after serving (GPU vs host clock)


def _setup(engines: list[Any], workload: Workload | Sequence, policy: Policy,
           duration_s: float | None, seed: int, backend: Any) -> _Setup:
    """Check the arguments, make the workload and the backend (a GPU's unless one is given)."""
    from .engines import CudaBackend, gpu_available
    if not isinstance(workload, Workload):
        if duration_s is None:
            raise InvalidArgument("pass duration_s with a list of sources")
        workload = make_workload(list(workload), duration_s, seed)
    if backend is None:
        ok, why = gpu_available()
        if not ok:
            raise Unavailable(f"no GPU to run on: {why}. "
                               "Use hookmagic.sched.simulate(...) instead.")
        backend = CudaBackend()
    names = [e.name for e in engines]
    policy.check_models(names)  # a misspelt per-model name is an error, before any setup
    missing = set(workload.models) - set(names)
    if missing:
        raise InvalidArgument(f"the workload's {unknown_model(sorted(missing)[0], names)} "
                              "(no engine of that name)")
    return _Setup(engines, names, workload, backend, backend.lanes(policy.streams))


def _measure(setup: _Setup, policy: Policy, repeats: int) -> list[ModelSpec]:
    """Each engine's latency table (measured now for an engine without a ``spec``), after
    which every engine is set up for the largest batch the policy may ask of it."""
    from .engines import measure
    backend, lanes = setup.backend, setup.lanes
    specs: list[ModelSpec] = []
    for e in setup.engines:
        adaptive = policy.adaptive_for(e.name)
        wanted = max(policy.batching_for(e.name).max_batch, adaptive.max_batch if adaptive else 1)
        cap = min(wanted, e.max_batch)
        if getattr(e, "spec", None) is None:
            table = measure(e, backend, range(1, cap + 1), repeats=repeats, lanes=lanes)
            e.spec = ModelSpec.from_sweep(table, name=e.name, max_batch=e.max_batch)
        e.setup(backend, lanes, max_batch=cap)
        specs.append(e.spec)
    backend.synchronize()
    if hasattr(backend, "sync_reference"):
        backend.sync_reference()
    return specs


def _serve(setup: _Setup, policy: Policy, specs: list[ModelSpec], lead_s: float,
           drain_s: float, metrics: Any = None) -> _Served:
    """The control loop: replay arrivals against the wall clock, launch what the dispatcher
    offers, poll completions; then wait for what still runs and close the backend."""
    backend, lanes, names, workload = setup.backend, setup.lanes, setup.names, setup.workload
    by_name = {e.name: e for e in setup.engines}
    arrays = workload.arrays(names)
    d = Dispatcher(policy, specs, arrays)
    arr = arrays["arrival"].tolist()
    n = len(arr)
    S = len(lanes)
    order = sorted(range(S), key=lambda s: (policy.streams[s].priority, s))
    homogeneous = all(st.models is None for st in policy.streams)
    inflight: list[Any] = [None] * S
    out = _Served([], [], d, [])
    p = 0
    stop_at = workload.duration_s + drain_s
    t0 = time.perf_counter() + lead_s
    yield_gil = getattr(backend, "kind", "") == "threads"
    meter_due = -_INF
    backend_meter = getattr(backend, "meter_pass", None)  # CUDA host work (CudaBackend)

    out.t0 = t0

    def record(s: int, job: tuple) -> tuple[float, float]:
        handle, m, ids, disp, loop_s, decide_s, cpu = job
        start, end = handle.times()
        out.records.append((m, s, start - t0, end - t0, len(ids), disp, loop_s, decide_s, cpu))
        out.served.extend(ids)
        if metrics is not None:
            metrics.observe_batch(names[m], end - start, len(ids))
        return start - t0, end - t0

    while True:
        now = time.perf_counter() - t0
        # 1. completions
        for s in range(S):
            job = inflight[s]
            if job is not None and job[0].done():
                d.finished(job[1], *record(s, job))
                inflight[s] = None
        # 2. arrivals that are due
        if p < n and arr[p] <= now:
            q = bisect_right(arr, now, p)
            out.loop_lag.append(now - arr[p])
            d.admit_range(p, q)
            p = q
        # 3. one offer per free stream
        wake = _INF
        for s in order:
            if inflight[s] is not None:
                continue
            got = d.next_batch(now, s)
            if got is None:
                wake = min(wake, d.wake)
                if homogeneous:
                    break
                continue
            m, ids = got
            eng = by_name[names[m]]
            size = len(ids)
            decide = time.perf_counter() - t0
            # bind now: a thread lane runs the launch later, after these names have moved on
            handle = backend.submit(lanes[s], lambda e=eng, b=size, k=s: e.launch(b, k))
            inflight[s] = (handle, m, ids, time.perf_counter() - t0, now, decide, _host_cpu())
        busy = any(j is not None for j in inflight)
        if p >= n and not busy and (d.queued == 0 or wake == _INF):
            break
        if now > stop_at:
            break
        # the host's speed on this thread, about once a ms (~1-3 µs: host_speed.meter_pass)
        if now >= meter_due:
            out.meter_at.append(t0 + now)
            out.meter_s.append(meter_pass())
            if backend_meter is not None:
                out.backend_meter_s.append(backend_meter())
            meter_due = now + METER_EVERY_S
        # wait for the next due arrival or timer; poll while batches run
        nxt = min(arr[p] if p < n else _INF, wake)
        gap = nxt - (time.perf_counter() - t0)
        if busy:
            gap = min(gap, 2e-4)
        if gap > 1.5e-3:
            time.sleep(gap - 1e-3)  # sleep overshoots; spin the last millisecond
        elif yield_gil:
            time.sleep(0)  # let worker-thread lanes take the GIL while we spin
    # leave nothing running behind the result
    for s in range(S):
        job = inflight[s]
        if job is not None:
            while not job[0].done():
                time.sleep(1e-4)
            record(s, job)
    backend.synchronize()
    if hasattr(backend, "clock_fit"):
        out.clock = backend.clock_fit()
    if hasattr(backend, "close"):
        backend.close()
    return out


def _result(setup: _Setup, policy: Policy, specs: list[ModelSpec], out: _Served) -> RunResult:
    """The records as the simulator's tables, with the run's meta (backend, GPU, specs)."""
    workload, names, d = setup.workload, setup.names, out.dispatcher
    rec = np.array(out.records, dtype=float).reshape(-1, 9)
    start, end = rec[:, 2], rec[:, 3]
    clock = {"clock_corrected": False}
    if out.clock is not None:
        clock = {"clock_drift_ppm": 1e6 * out.clock["drift"],
                 "clock_drift_uncertainty_ppm": 1e6 * out.clock["uncertainty"],
                 "clock_span_s": out.clock["span_s"],
                 "clock_corrected": usable_drift(out.clock)}
        if clock["clock_corrected"]:
            ref = out.clock["ref_host"] - out.t0
            start = clock_corrected(start, ref, out.clock["drift"])
            end = clock_corrected(end, ref, out.clock["drift"])
    req, bat = assemble(workload.requests, names, d.status, d.drop_s,
                        rec[:, 0].astype(np.int64), rec[:, 1].astype(np.int64), start,
                        end, rec[:, 4].astype(np.int64),
                        np.asarray(out.served, dtype=np.int64))
    bat["dispatch_s"] = rec[:, 5]  # host clock: the launch call returned
    bat["loop_s"] = rec[:, 6]      # host clock: the loop pass that launched it began
    bat["decide_s"] = rec[:, 7]    # host clock: the dispatcher had chosen it (submit next)
    bat["host_cpu"] = rec[:, 8].astype(np.int64)  # the CPU the driver launched it from (-1: unknown)
    lag = out.loop_lag
    meta = {"duration_s": workload.duration_s, "policy": repr(policy), "models": names,
            "host_t0": out.t0,  # time.perf_counter() of run time 0 (HostCanary.windows)
            "seed": workload.seed, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "arrival_lag_p99_ms": float(np.percentile(lag, 99) * 1e3) if lag else 0.0,
            # the host's speed on the driver's thread through the run (host_speed.speed_windows)
            "host_meter": pass_bins(np.array(out.meter_at), np.array(out.meter_s), out.t0,
                                    METER_BIN_S),
            "backend_meter": (pass_bins(np.array(out.meter_at), np.array(out.backend_meter_s),
                                        out.t0, METER_BIN_S) if out.backend_meter_s else None),
            "specs": {s.name: {"batch_sizes": list(s.batch_sizes), "latency_ms": list(s.latency_ms),
                               "service_cv": s.service_cv, "switch_ms": s.switch_ms,
                               "launch_ms": s.launch_ms, "host_ms": s.host_ms,
                               "share_slowdown": list(s.share_slowdown)} for s in specs}}
    meta.update(clock)
    meta.update(setup.backend.describe())
    return RunResult(req, bat, meta)


#: largest clock drift believed (ppm): beyond it the fit is wrong (a clock jump), not drift
MAX_DRIFT_PPM = 500.0


def usable_drift(fit: Mapping[str, float]) -> bool:
    """Whether a ``clock_fit()`` is good enough to correct times with: a span of at least
    0.2 s, a drift under :data:`MAX_DRIFT_PPM` and an uncertainty under a third of that."""
    return bool(fit["span_s"] >= 0.2 and abs(fit["drift"]) * 1e6 <= MAX_DRIFT_PPM
                and fit["uncertainty"] * 1e6 <= MAX_DRIFT_PPM / 3)


def with_clock_corrected(res: RunResult, ref_s: float, drift: float) -> RunResult:
    """A copy of a real run whose GPU times (``start_s``/``end_s`` of batches and requests)
    are put on the host clock with :func:`clock_corrected`, and everything derived from them
    (queue, compute and total latency, SLO met) recomputed; for runs whose driver did not
    correct its times (``meta["clock_corrected"]`` absent), given a drift estimated some
    other way. Host stamps (``dispatch_s``, ...) are on the host clock already."""
    bat = res.batches.copy()
    for col in ("start_s", "end_s"):
        bat[col] = clock_corrected(bat[col].to_numpy(float), ref_s, drift)
    req, bat = with_derived(res.requests, bat)
    meta = dict(res.meta, clock_drift_ppm=1e6 * drift, clock_corrected="afterwards")
    return RunResult(req, bat, meta)


def clock_corrected(t: np.ndarray, ref_s: float, drift: float) -> np.ndarray:
    """GPU event times ``t`` (seconds, mapped onto the host clock through one reference event
    taken at ``ref_s``, same origin as ``t``) on the host clock, given the clocks' relative
    ``drift`` (host seconds per GPU second minus 1; ``CudaBackend.clock_fit``)."""
    t = np.asarray(t, dtype=float)
    return t + drift * (t - ref_s)
