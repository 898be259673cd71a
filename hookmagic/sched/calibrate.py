"""Calibrate the simulator on real driver runs: what a batch really costs under the driver.

The simulator's model of one batch (:mod:`.simulator`): the driver decides, spends ``launch_ms``
before the batch starts on the GPU and ``host_ms`` before its one host thread can launch
another; the GPU part takes ``latency_ms`` at that size (plus ``switch_ms`` after another
model), and while ``k`` other streams' GPU parts run it progresses at ``1 / (1 + a_k)`` of its
speed (``share_slowdown = (a_1, a_2)``), slower still the bigger those other batches are
(``share_by_size = (e_1, e_2)``: the share of time it stands still grows by ``e_k`` times the
sum of the square roots of their sizes). This module measures exactly those numbers on runs of
its own and fits them — never on the workloads later compared:

1. :func:`calibration_workloads` — the runs: per model one stream with no batching delay at a
   rate where batch sizes vary over 1..max (``alone:<model>``); every model on one stream in
   bursts, so that each follows itself and the others (``switch``); every model on 2 and on 3
   streams, loaded so that one, two or three compute at different times (``share2``,
   ``share3``, and ``share3b`` more lightly loaded).
2. :func:`run_calibration` — drive them on real engines (:func:`hookmagic.sched.run`).
3. :func:`fit` — the parameters per model; :func:`specs_from_fit` — the simulator's specs.

Because :func:`fit` reads only the result tables, it also recovers the parameters of a
simulated "driver" (the tests do exactly that) and can be redone on stored runs.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument

from .models import ModelSpec
from .policies import Batching, Policy
from .workloads import Bursty, Poisson, Workload, make_workload

__all__ = ["after_previous", "overlap_by_count", "overlap_and_weight", "calibration_workloads",
           "run_calibration",
           "host_times_in", "refine_host", "launch_by_streams", "launch_for_streams",
           "host_jitter_of", "call_share_of", "probe_workload", "refine_from_probe",
           "speed_from_calls",
           "fit", "fit_sharing", "specs_from_fit", "self_check"]


#: a launch call that held the driver's host thread longer than this is a stall (seconds)
STALL_S = 5e-4
#: ready batches after the same model and after another, each, that identify a switch cost
MIN_SWITCH_BATCHES = 8


def after_previous(res: Any) -> pd.DataFrame:
    """Every batch of ``res`` with what came before it on its stream.

    Adds ``prev`` (the model of the previous batch on the stream, None for the first),
    ``prev_end`` (its end, s), ``ready`` (this batch's first request arrived before then, so with
    no batching delay it was ready the moment the stream freed) and ``dur`` (start to end, s).
    """
    first_arrival = res.requests.groupby("batch")["arrival_s"].min()
    rows = []
    for _, b in res.batches.groupby("stream"):
        b = b.sort_values("start_s").reset_index(drop=True)
        prev_end = b["end_s"].shift().to_numpy()
        rows.append(b.assign(prev=b["model"].astype(str).shift().to_numpy(), prev_end=prev_end,
                             ready=first_arrival.loc[b["batch"]].to_numpy() < prev_end,
                             dur=(b["end_s"] - b["start_s"]).to_numpy()))
    out = pd.concat(rows, ignore_index=True)
    out["model"] = out["model"].astype(str)
    return out


def overlap_by_count(batches: pd.DataFrame, most: int = 2) -> np.ndarray:
    """Per batch (in ``batches``' order): seconds it ran beside exactly ``k`` other batches,
    ``k = 1..most`` (more than ``most`` others count as ``most``); shape ``(n, most)``."""
    return overlap_and_weight(batches, most)[0]


def overlap_and_weight(batches: pd.DataFrame, most: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Per batch (in ``batches``' order), for ``k = 1..most`` other batches running beside it
    (more than ``most`` count as ``most``): the seconds it ran so, and the integral over that
    time of the other batches' weight, the square root of their size (``share_by_size``);
    two arrays ``(n, most)``."""
    start = batches["start_s"].to_numpy(dtype=float)
    end = batches["end_s"].to_numpy(dtype=float)
    size = (np.sqrt(batches["size"].to_numpy(dtype=float)) if "size" in batches.columns
            else np.ones(len(start)))
    events = sorted([(t, 1, i) for i, t in enumerate(start)]
                    + [(t, -1, i) for i, t in enumerate(end)])
    running: set[int] = set()
    last = None
    ov = np.zeros((len(start), most + 1))
    items = np.zeros((len(start), most + 1))
    for t, kind, i in events:
        if last is not None and len(running) > 1:
            k = min(len(running) - 1, most)
            dt = t - last
            total = sum(size[j] for j in running)
            for j in running:
                ov[j, k] += dt
                items[j, k] += dt * (total - size[j])
        last = t
        if kind == 1:
            running.add(i)
        else:
            running.discard(i)
    return ov[:, 1:], items[:, 1:]


def _mixed_rate(spec: ModelSpec, load: float) -> float:
    """Requests per second at which one stream of ``spec`` is ``load`` busy at batch 4: with no
    batching delay the batches formed vary in size (about Poisson(4 * load))."""
    return load * 4.0 / (float(spec.latency(4)) / 1e3)


def calibration_workloads(idle: Mapping[str, ModelSpec], max_batch: int,
                          streams: Sequence[int] = (2, 3), seed: int = 90
                          ) -> dict[str, tuple[Workload, Policy]]:
    """The calibration runs as ``{name: (workload, policy)}`` (see the module docstring);
    ``idle`` gives each model's rough latency table (an idle-GPU measurement) for the rates."""
    out: dict[str, tuple[Workload, Policy]] = {}
    batching = Batching(max_batch, 0.0)
    for name, spec in idle.items():
        wl = make_workload([Poisson(name, _mixed_rate(spec, 1.0), slo_ms=1e6)], 0.8, seed=seed)
        out[f"alone:{name}"] = (wl, Policy(batching=batching))
    m = len(idle)
    # per model, bursts of ~30 ms that overload the stream (1.3 of it) every ~180 ms over a
    # light background: within a burst a model follows itself, where bursts meet and out of
    # the background it follows another, so that its switch cost is read against its own
    # same-size batches of the same run (23-156 same-model and 69-271 switched ready batches
    # per model with 5 models in 1 s). A plain Poisson mix leaves almost every batch after
    # another model and the switch cost unidentified.
    srcs = [Bursty(n, rate_on=_mixed_rate(s, 1.3), rate_off=_mixed_rate(s, 0.05), on_s=0.03,
                   off_s=0.15, slo_ms=1e6) for n, s in idle.items()]
    out["switch"] = (make_workload(srcs, 1.0, seed=seed + 8), Policy(batching=batching))
    if m > 1:
        for k in sorted(streams, reverse=True):  # most streams first: engines set up once
            # streams busy on average, in alone-time: 1.5 of 2, 2.25 of 3; with three or more
            # streams also a lighter run (1.5 of 3), where one, two and three compute in turn
            loads = [("", 0.75 * k)] + ([("b", 1.5)] if k >= 3 else [])
            for suffix, load in loads:
                srcs = [Poisson(n, _mixed_rate(s, load) / m, slo_ms=1e6) for n, s in idle.items()]
                out[f"share{k}{suffix}"] = (make_workload(srcs, 1.2, seed=seed + 6 + k + len(suffix)),
                                            Policy(streams=k, batching=batching))
    return out


def run_calibration(engines: Mapping[str, Any], idle: Mapping[str, ModelSpec], max_batch: int,
                    make_backend: Callable[[], Any], run: Callable | None = None,
                    drain_s: float = 0.2) -> dict[str, Any]:
    """Drive every calibration workload on the real ``engines`` (name -> engine); returns
    ``{name: RunResult}``. ``run`` defaults to :func:`hookmagic.sched.driver.run`."""
    if run is None:
        from .driver import run
    out = {}
    for key, (wl, pol) in calibration_workloads(idle, max_batch).items():
        if key.startswith("alone:"):
            use = [engines[key.split(":", 1)[1]]]
        else:
            use = list(engines.values())
        out[key] = run(use, wl, pol, backend=make_backend(), drain_s=drain_s)
    return out


def _switch_cost(extra: np.ndarray, switched: np.ndarray, size: np.ndarray
                 ) -> tuple[float, int, int]:
    """One model's switch cost from its ready batches of one run: per batch size seen both
    after itself and after another model, the difference of the mean ``extra`` (ms), weighted
    by ``n_switched * n_same / (n_switched + n_same)``; and the batches those sizes hold, same
    and switched. ``(nan, 0, 0)`` where no size was seen both ways."""
    num = den = 0.0
    n_same = n_sw = 0
    for z in np.unique(size):
        at = size == z
        a, b = extra[at & switched], extra[at & ~switched]
        if len(a) and len(b):
            w = len(a) * len(b) / (len(a) + len(b))
            num += w * (float(a.mean()) - float(b.mean()))
            den += w
            n_sw, n_same = n_sw + len(a), n_same + len(b)
    return (num / den if den else float("nan")), n_same, n_sw


def fit(runs: Mapping[str, Any], idle: Mapping[str, ModelSpec], max_batch: int) -> dict[str, dict]:
    """Fit the simulator's per-model parameters on the calibration runs (nothing else).

    Per model, from ``alone:<model>`` (all but the stream's first, cold, batch, and the batches
    whose launch call held the host over :data:`STALL_S`: such a batch's GPU time includes the
    GPU waiting for the rest of its launch, up to +6 % on a size): ``service_ms``
    (mean GPU time per batch size, start to end; sizes seen fewer than 8 times take the idle table plus the mean offset of the sizes
    seen), ``service_cv`` (median std/mean over sizes), ``launch_ms`` (mean time from the
    previous batch's end to this one's start, over batches that were ready then) and
    ``host_ms`` (the same to the launch call's return, ``dispatch_s``; ``launch_ms`` where the
    run has no ``dispatch_s``). From ``switch``: ``switch_ms``, the mean extra cost (gap and GPU
    time) of a ready batch after another model beyond launch + service, less the same after
    the same model in that run at the same batch size (0, ``switch_identified`` False, with
    fewer than :data:`MIN_SWITCH_BATCHES` of either). From ``share<S>``: per batch, its GPU
    time beyond service and switch cost and beyond ``call_share`` of its launch call's excess
    over the alone runs' (:func:`fit_sharing`'s ``calls``), regressed without intercept on the
    time it ran beside exactly one and exactly two other batches and on the size of those
    batches (:func:`fit_sharing`; batches whose launch call stalled the host over
    :data:`STALL_S` left out); ``a_k = c_k / (1 - c_k)`` (``c`` clipped to [0, 0.9], ``a``
    made non-decreasing). That is the simulator's own model of sharing, so a run of the
    simulator is fitted back to its parameters. Also how the launch and host times vary from
    batch to batch (:func:`host_jitter_of`: ``launch_jitter_ms``, ``host_jitter_ms``).

    Returns ``{model: {"service_ms": [...], "service_cv", "launch_ms", "host_ms", "switch_ms",
    "share_slowdown": [a1, a2], "call_share", ...counts}}``; ``call_share`` (one for every
    model, :func:`call_share_of` over the ``alone`` runs).
    """
    out: dict[str, dict] = {}
    sizes = np.arange(1, max_batch + 1)
    for name, spec in idle.items():
        b = after_previous(runs[f"alone:{name}"])
        b = b[b["prev"] == name]  # the stream's first batch is a cold start (a switch)
        if "dispatch_s" in b.columns:
            # a launch call that held the host over STALL_S left the GPU waiting inside the
            # batch: host time, not the model's
            b = b[(b["dispatch_s"] - b["start_s"]) <= STALL_S]
        per = b.groupby("size")["dur"].agg(["mean", "std", "count"])
        seen = per[per["count"] >= 8]
        table = np.asarray(spec.latency(sizes), dtype=float)  # ms
        offset = (float(np.mean([1e3 * seen.loc[z, "mean"] - table[z - 1] for z in seen.index]))
                  if len(seen) else 0.0)
        service = [1e3 * float(seen.loc[z, "mean"]) if z in seen.index else float(table[z - 1]) + offset
                   for z in sizes]
        cv = float((seen["std"] / seen["mean"]).median()) if len(seen) else float(spec.service_cv)
        r = b[b["ready"]]
        launch = 1e3 * float((r["start_s"] - r["prev_end"]).mean()) if len(r) else 0.0
        host = (1e3 * float((r["dispatch_s"] - r["prev_end"]).mean())
                if len(r) and "dispatch_s" in r.columns else launch)
        out[name] = {"service_ms": service, "service_cv": 0.0 if np.isnan(cv) else cv,
                     "launch_ms": max(0.0, launch), "host_ms": max(0.0, launch, host),
                     "batches_alone": int(len(b)), "ready_alone": int(len(r))}
        out[name].update(host_jitter_of(runs[f"alone:{name}"], max_batch))

    def service_of(rows: pd.DataFrame) -> np.ndarray:
        return np.array([out[m]["service_ms"][int(z) - 1] for m, z in zip(rows["model"], rows["size"])])

    b = after_previous(runs["switch"])
    r = b[b["ready"]]
    extra = 1e3 * ((r["start_s"] - r["prev_end"]).to_numpy() + r["dur"].to_numpy())
    extra = extra - np.array([out[m]["launch_ms"] for m in r["model"]]) - service_of(r)
    other = (r["prev"] != r["model"]).to_numpy()
    size = r["size"].to_numpy()
    for name in idle:
        mine = (r["model"] == name).to_numpy()
        cost, n_same, n_sw = _switch_cost(extra[mine], other[mine], size[mine])
        # Against same-model batches of the same run and the same size: the host's speed, and
        # the table's error at a size, cancel. Without enough of both the cost is not
        # identified and none is simulated. Read against the alone runs instead, the host's
        # drift since them is taken for a switch cost (0-60 us, other in every process); read
        # across sizes, the smaller switched batches' table error is (+15-24 us); real
        # scenarios on H100 and H200 show none (-2..+5 us).
        known = n_same >= MIN_SWITCH_BATCHES and n_sw >= MIN_SWITCH_BATCHES
        out[name]["switch_ms"] = max(0.0, cost) if known else 0.0
        out[name]["switch_identified"] = bool(known)
        out[name]["switches_seen"] = int(n_sw)
        out[name]["same_seen"] = int(n_same)
        same = extra[mine & ~other]
        # kept for the record: the same model's extra cost among several models (not simulated)
        out[name]["same_model_extra_ms"] = float(same.mean()) if len(same) else None

    share, used = call_share_of([runs[f"alone:{name}"] for name in idle])
    for name in idle:
        out[name]["call_share"], out[name]["call_share_batches"] = share, used
    # the GPU time a batch spent waiting through a launch call longer (shorter) than the
    # alone runs' is the host's, not sharing's: the simulator adds it back (call_share)
    calls = {n: (out[n]["host_ms"] - out[n]["launch_ms"], share) for n in idle}
    shared = fit_sharing([res for key, res in runs.items() if key.startswith("share")],
                         {n: (out[n]["service_ms"], out[n]["switch_ms"]) for n in idle},
                         calls=calls)
    extra = launch_by_streams(runs, max_batch)
    for name in idle:
        out[name].update(shared[name])
        out[name]["launch_streams_ms"] = extra.get(name, [0.0])
    return out


#: launch calls that spread less than this (rms, s) show no share to read
MIN_CALL_SPREAD_S = 1e-6


def call_share_of(results: Sequence[Any], min_batches: int = 50) -> tuple[float, int]:
    """How much of its launch call a batch's GPU time holds (``ModelSpec.call_share``), from
    real runs of the driver (the calibration's ``alone`` runs): over batches after one of the
    same model, with no other batch beside them and no stall (launch call up to
    :data:`STALL_S`), the slope of GPU time on launch call (``dispatch_s - start_s``) within
    each (model, batch size), pooled, clipped to 0..1. The host's own drift gives the calls
    their spread (H100: 22-106 µs). Returns (share, batches used); 0 where fewer
    than ``min_batches`` or the calls spread under :data:`MIN_CALL_SPREAD_S` (runs without
    ``dispatch_s``: simulated ones)."""
    xs, ys = [], []
    for res in results:
        b = after_previous(res)
        if "dispatch_s" not in b.columns or len(b) == 0:
            continue
        call = (b["dispatch_s"] - b["start_s"]).to_numpy()
        ok = ((b["prev"] == b["model"]).to_numpy() & (call <= STALL_S)
              & (overlap_by_count(b, 2).sum(axis=1) <= 0))
        g = pd.DataFrame({"key": b["model"].astype(str) + ":" + b["size"].astype(str),
                          "x": call, "y": b["dur"].to_numpy()})[ok]
        if len(g):
            xs.append(g["x"] - g.groupby("key")["x"].transform("mean"))
            ys.append(g["y"] - g.groupby("key")["y"].transform("mean"))
    if not xs:
        return 0.0, 0
    x, y = pd.concat(xs).to_numpy(), pd.concat(ys).to_numpy()
    spread = float(np.dot(x, x))
    if len(x) < min_batches or spread <= len(x) * MIN_CALL_SPREAD_S ** 2:
        return 0.0, int(len(x))
    return float(np.clip(np.dot(x, y) / spread, 0.0, 1.0)), int(len(x))


#: equally likely values kept of the launch / host time distribution (quantiles at (k + ½) / N)
JITTER_POINTS = 64


def host_jitter_of(res: Any, max_batch: int, points: int = JITTER_POINTS) -> dict[str, list[float]]:
    """How the driver's launch and host times varied over one model's ``alone`` calibration
    run: ``{"launch_jitter_ms": [...], "host_jitter_ms": [...]}``, ``points`` quantiles (at
    ``(k + 1/2) / points``) of the launch gap and of the host time (previous end to the launch
    call's return) of its clean batches (:func:`host_times_in`), stalled ones included (they
    are how the host behaves), each less their mean (so the draws keep the calibrated mean):
    ``ModelSpec.launch_jitter_ms``.
    A batch of the simulator then draws one index for both (a slow pass is slow for both).
    Empty lists without ``dispatch_s`` or with fewer than ``points`` clean batches."""
    if "dispatch_s" not in res.batches.columns:
        return {"launch_jitter_ms": [], "host_jitter_ms": []}
    t = host_times_in(res, Policy(batching=Batching(max_batch, 0.0)))
    c = t[t["clean"]]
    if len(c) < points:
        return {"launch_jitter_ms": [], "host_jitter_ms": []}
    q = (np.arange(points) + 0.5) / points
    gap = c["gap_ms"].to_numpy()
    host = (c["gap_ms"] + c["call_ms"]).to_numpy()
    qg, qh = np.quantile(gap, q), np.quantile(host, q)
    return {"launch_jitter_ms": [float(v) for v in qg - qg.mean()],
            "host_jitter_ms": [float(v) for v in qh - qh.mean()]}


def launch_by_streams(runs: Mapping[str, Any], max_batch: int) -> dict[str, list[float]]:
    """How much longer the driver takes to launch a waiting batch with ``S`` streams than with
    one: ``{model: [0, d_2, d_3, ...]}`` (ms), per model the median launch gap of its clean
    batches (:func:`host_times_in`) in the ``share<S>`` calibration runs less that in its
    ``alone`` run, and then one value for all, the median over models with at least 20 clean
    batches (the loop's pass sets it, not the model). The driver's one loop polls every stream's end event and offers every free stream
    a batch in each pass, so it notices an end later the more streams it watches: on an H100
    19.3-19.8 µs alone, 26.0-26.1 on two streams, 27.0-29.7 on three, and the scenarios with
    two and three streams pay the same. ``[0]`` without ``dispatch_s`` or share runs; a count
    never calibrated continues the last step (see :func:`launch_for_streams`). Medians: a shift
    between distributions with rare long tails (the host's hiccups); a difference of means fits
    them slightly worse."""
    pol = Policy(batching=Batching(max_batch, 0.0))
    alone: dict[str, np.ndarray] = {}
    by_s: dict[int, list[pd.DataFrame]] = {}
    for key, res in runs.items():
        if "dispatch_s" not in res.batches.columns:
            return {}
        if key.startswith("alone:"):
            t = host_times_in(res, pol)
            alone[key.split(":", 1)[1]] = t.loc[t["clean"], "gap_ms"].to_numpy()
        elif key.startswith("share"):
            digits = "".join(ch for ch in key[5:] if ch.isdigit())
            t = host_times_in(res, pol)
            by_s.setdefault(int(digits), []).append(t[t["clean"]])
    if not alone or not by_s:
        return {}
    out: dict[str, list[float]] = {m: [0.0] for m in alone}
    for S in range(2, max(by_s) + 1):
        if S not in by_s:  # not calibrated: as the next fewer streams
            for m in out:
                out[m].append(out[m][-1])
            continue
        t = pd.concat(by_s[S], ignore_index=True)
        d = {}
        for m, base in alone.items():
            g = t.loc[t["model"] == m, "gap_ms"].to_numpy()
            if len(g) >= 20 and len(base):
                d[m] = float(np.median(g)) - float(np.median(base))
        # the loop's pass, not the model, sets it: one value, the median over models
        pooled = max(0.0, float(np.median(list(d.values())))) if d else 0.0
        for m in out:
            out[m].append(pooled)
    return out


def launch_for_streams(extra: Sequence[float], streams: int) -> float:
    """``launch_by_streams``' extra launch time (ms) for ``streams`` streams; beyond the last
    calibrated count its last step continues (0 for one stream or an empty list)."""
    extra = list(extra or [0.0])
    if streams <= 1:
        return 0.0
    if streams <= len(extra):
        return float(extra[streams - 1])
    step = extra[-1] - extra[-2] if len(extra) >= 2 else 0.0
    return float(extra[-1] + step * (streams - len(extra)))


def fit_sharing(results: Sequence[Any], costs: Mapping[str, Any],
                calls: Mapping[str, tuple[float, float]] | None = None) -> dict[str, dict]:
    """Sharing slowdowns per model from any runs with several streams (calibration runs, or a
    real run of your own traffic, to refine a spec).

    ``costs``: per model ``(service_ms by size 1.., switch_ms)`` or a :class:`ModelSpec`
    (its ``latency`` and ``switch_ms``). Per batch, its GPU time beyond service and switch
    cost is regressed without intercept on the time it ran beside exactly one and exactly two
    other batches and on the integral of those others' weight, the square root of
    their size (:func:`overlap_and_weight`): ``extra = ov1 c1 + ov2 c2 + w1 e1 + w2 e2``, the
    simulator's own model (``ModelSpec.share_by_size``); ``a_k = c_k / (1 - c_k)`` (``c`` clipped to
    [0, 0.9]; ``a`` non-decreasing; a model never seen beside two others gets ``a2 = a1``,
    ``e2 = e1``; a negative ``e_k``, or sizes that never vary so that ``w_k`` is a multiple of
    ``ov_k``, leave the size term out). Batches whose launch call held the host over
    :data:`STALL_S` are left out (they took longer for that, not for sharing) but still count
    as neighbours. ``calls`` (per model: the launch call in ms its ``costs`` were measured at,
    and its ``call_share``): each batch's GPU time is first taken back to that call, less
    ``call_share`` times its own launch call's difference from it (runs with ``dispatch_s``),
    so that the host's speed during these runs is not read as sharing. :func:`fit` passes them:
    on H100/H200 calibration runs the fitted a1 of resnet18 spreads 0.068-0.179 over nine
    processes without them, 0.100-0.173 with. Returns ``{model:
    {"share_slowdown": [a1, a2], "share_by_size": [e1, e2] (or [] when left out),
    "overlap_ms": [ov1, ov2]}}`` (empty lists where a model never ran beside another).
    """
    def cost(m: str, size: int, switched: bool) -> float:
        c = costs[m]
        if isinstance(c, ModelSpec):
            return float(c.latency(size)) + (c.switch_ms if switched else 0.0)
        table, switch = c
        return float(table[size - 1]) + (switch if switched else 0.0)

    xs, ys, ms = [], [], []
    for res in results:
        b = after_previous(res).sort_values("start_s").reset_index(drop=True)
        # a stream's first batch pays the switch too, as in the simulator
        base = np.array([cost(m, int(z), p != m) for m, z, p in zip(b["model"], b["size"], b["prev"])])
        y = 1e3 * b["dur"].to_numpy() - base
        call_s = ((b["dispatch_s"] - b["start_s"]).to_numpy() if "dispatch_s" in b.columns
                  else None)  # the launch call (real runs only)
        if calls is not None and call_s is not None:
            # a model without a call given is taken as it ran (share 0)
            model = b["model"].astype(str)
            ref = model.map({m: c[0] for m, c in calls.items()}).fillna(0.0).to_numpy(dtype=float)
            sh = model.map({m: c[1] for m, c in calls.items()}).fillna(0.0).to_numpy(dtype=float)
            y = y - sh * (1e3 * call_s - ref)
        ov, it = overlap_and_weight(b, 2)  # over every batch, stalled or not
        x = 1e3 * np.hstack([ov, it])
        keep = call_s <= STALL_S if call_s is not None else np.ones(len(b), dtype=bool)
        ys.append(y[keep])
        xs.append(x[keep])
        ms.append(b["model"].to_numpy()[keep])
    out = {name: {"share_slowdown": [], "share_by_size": [], "overlap_ms": [0.0, 0.0]}
           for name in costs}
    if not xs:
        return out
    x, y, mm = np.concatenate(xs), np.concatenate(ys), np.concatenate(ms)
    for name in costs:
        sel = mm == name
        xm, ym = x[sel], y[sel]
        seen = xm[:, :2].sum(axis=0) > 0
        if not seen.any():
            continue
        cols = [k for k in range(2) if seen[k]]
        coef = np.zeros(4)
        cols += [2 + k for k in range(2) if seen[k]]
        while True:
            xa = xm[:, cols]
            norm = np.linalg.norm(xa, axis=0)
            if len(cols) > len([k for k in cols if k < 2]) and (
                    np.linalg.matrix_rank(xa / np.where(norm > 0, norm, 1.0), tol=1e-9) < len(cols)):
                cols = [k for k in cols if k < 2]  # sizes never vary: the count alone
                continue
            coef[:] = 0.0
            coef[cols] = np.linalg.lstsq(xa, ym, rcond=None)[0]
            neg = [k for k in cols if k >= 2 and coef[k] < 0]
            if not neg:
                break
            cols = [k for k in cols if k not in neg]
        c, e = coef[:2], np.where(coef[2:] > 1e-9, coef[2:], 0.0)  # round-off is no term
        if not seen.all():  # never seen beside two: as beside one
            c[~seen] = c[seen][-1]
            e[~seen] = e[seen][-1]
        c = np.clip(c, 0.0, 0.9)  # 0.9: a tenfold slowdown; beyond it the fit is noise
        a = np.maximum.accumulate(c / (1.0 - c))  # more sharers never help
        out[name] = {"share_slowdown": [float(v) for v in a],
                     "share_by_size": [float(v) for v in e] if (e > 0).any() else [],
                     "overlap_ms": [float(v) for v in xm[:, :2].sum(axis=0)]}
    return out


def specs_from_fit(params: Mapping[str, dict], idle: Mapping[str, ModelSpec],
                   streams: int = 1, jitter: bool = False) -> list[ModelSpec]:
    """The simulator's :class:`ModelSpec` per model: ``idle``'s spec with the fitted GPU time
    table, spread, launch and host times, switch cost and sharing slowdowns, for a policy
    with ``streams`` streams: the launch time grows by ``launch_streams_ms`` where the fit has
    it (both engines then see the same launch time). The host time does not (beyond the
    launch time): the longer pass delays noticing an end, but one pass notices every stream
    that ended, so a second free stream waits only for the first one's launch call."""
    specs = []
    for name, spec in idle.items():
        c = params[name]
        more = launch_for_streams(c.get("launch_streams_ms", [0.0]), streams)
        specs.append(spec.with_(batch_sizes=tuple(range(1, len(c["service_ms"]) + 1)),
                                latency_ms=tuple(c["service_ms"]), service_cv=c["service_cv"],
                                launch_ms=c["launch_ms"] + more,
                                host_ms=max(c["host_ms"], c["launch_ms"] + more),
                                launch_jitter_ms=tuple(c.get("launch_jitter_ms", ())) if jitter else (),
                                host_jitter_ms=tuple(c.get("host_jitter_ms", ())) if jitter else (),
                                switch_ms=c["switch_ms"],
                                share_slowdown=tuple(c["share_slowdown"]),
                                share_by_size=tuple(c.get("share_by_size", ())),
                                call_share=float(c.get("call_share", 0.0))))
    return specs


def self_check(runs: Mapping[str, Any], specs: Sequence[ModelSpec] | Callable[[int], Sequence[ModelSpec]],
               idle: Mapping[str, ModelSpec], max_batch: int, seed: int = 90) -> pd.DataFrame:
    """The fitted simulator replaying the calibration runs it was fitted on (in-sample: a
    model that cannot reproduce its own calibration will not reproduce anything else).
    ``specs``: the specs, or a function of the number of streams giving them (as
    ``lambda s: specs_from_fit(fit, idle, s)``).

    One row per run and model: mean GPU time per batch, p50 and p99 latency, real vs simulated.
    """
    from .simulator import simulate
    loads = calibration_workloads(idle, max_batch, seed=seed)
    rows = []
    for key, res in runs.items():
        if key not in loads:
            continue
        wl, pol = loads[key]
        use = specs(len(pol.streams)) if callable(specs) else specs
        sim = simulate(list(use), wl, pol, seed=1)
        for side, r in (("real", res), ("sim", sim)):
            req, bat = r.requests, r.batches
            dur = (bat["end_s"] - bat["start_s"]).groupby(bat["model"].astype(str)).mean() * 1e3
            lat = req.groupby(req["model"].astype(str))["latency_ms"]
            for m in dur.index:
                rows.append({"run": key, "model": m, "side": side, "gpu_ms": float(dur[m]),
                             "p50_ms": float(lat.median()[m]), "p99_ms": float(lat.quantile(0.99)[m])})
    t = pd.DataFrame(rows)
    if t.empty:
        return t
    w = t.pivot_table(index=["run", "model"], columns="side", values=["gpu_ms", "p50_ms", "p99_ms"])
    w.columns = [f"{a}_{b}" for a, b in w.columns]
    for q in ("gpu_ms", "p50_ms", "p99_ms"):
        w[f"{q[:-3]}_err_pct"] = 100 * (w[f"{q}_sim"] / w[f"{q}_real"] - 1)
    return w.reset_index()


def host_times_in(res: Any, policy: Policy, history: pd.DataFrame | None = None) -> pd.DataFrame:
    """The driver's host times as one run paid them, per batch that shows them cleanly.

    A batch counts where it could have started the moment its stream freed (its last request
    had arrived if it was full, or its oldest had waited the batching delay, before the previous
    batch on the stream ended) and the host launched nothing else meanwhile: then ``gap_ms``
    (previous end to its start: noticing, deciding, recording; the simulator's ``launch_ms``)
    is the driver's alone. ``call_ms`` (start to the launch call's return; with
    ``gap_ms`` the simulator's ``host_ms``) is kept for every batch. Returns one row per batch
    with ``model``, ``start_s``, ``clean``, ``gap_ms``, ``call_ms``, in the order of
    ``history`` (:func:`after_previous` of ``res``; made here when not given); needs
    ``dispatch_s`` (real runs).
    """
    b = after_previous(res) if history is None else history
    req = res.requests
    served = req[req["batch"] >= 0].groupby("batch")["arrival_s"]
    first = served.min().reindex(b["batch"]).to_numpy()
    last = served.max().reindex(b["batch"]).to_numpy()
    bat = [policy.batching_for(m) for m in b["model"]]
    delay = np.array([x.max_delay_ms / 1e3 for x in bat])
    cap = np.array([x.max_batch for x in bat])
    ready = np.minimum(first + delay, np.where(b["size"].to_numpy() >= cap, last, np.inf))
    disp = np.sort(b["dispatch_s"].to_numpy())
    prev_end = b["prev_end"].to_numpy()
    others = (np.searchsorted(disp, b["start_s"].to_numpy())
              - np.searchsorted(disp, np.nan_to_num(prev_end, nan=np.inf)))
    clean = (ready <= prev_end) & (others <= 0)
    return pd.DataFrame({"model": b["model"].to_numpy(), "start_s": b["start_s"].to_numpy(),
                         "clean": clean,
                         "gap_ms": 1e3 * (b["start_s"].to_numpy() - prev_end),
                         "call_ms": 1e3 * (b["dispatch_s"] - b["start_s"]).to_numpy()})


def refine_host(specs: Sequence[ModelSpec], res: Any, policy: Policy,
                min_batches: int = 8, since_s: float = 0.0, times: pd.DataFrame | None = None
                ) -> tuple[list[ModelSpec], dict[str, Any]]:
    """``specs`` with launch and host times taken from a real run of the driver itself: NOT a
    prediction of that run (a diagnostic of how much of an error is the host's speed).

    Per model, ``launch_ms`` = the median clean launch gap in ``res`` (:func:`host_times_in`);
    a model with fewer than ``min_batches`` clean batches keeps its calibrated value times the
    run's median ratio of clean gap to calibrated launch (the host's speed in that run).
    ``host_ms`` = that ``launch_ms`` plus the launch call: the run's median per model where its
    times were corrected for clock drift (``meta["clock_corrected"]``), else the calibrated
    one (``host_ms - launch_ms``: an uncorrected run's calls drift by ~20 µs per second).
    GPU times change only by the model's ``call_share`` of the change in its launch call;
    everything else (switch, sharing) stays as calibrated. Batches that started
    before ``since_s`` (run time) are not used. ``times``: :func:`host_times_in` of ``res``
    where the caller has it already. Returns the specs and
    ``{"host_speed": ratio, "clean": clean batches, "models": {name: launch_ms}}``.
    """
    t = host_times_in(res, policy) if times is None else times
    t = t[t["start_s"].to_numpy() >= since_s]
    cal = {s.name: s for s in specs}
    c = t[t["clean"] & t["model"].isin(list(cal))]
    base = np.array([cal[m].launch_ms for m in c["model"]])
    ok = base > 0
    ratio = float(np.median(c["gap_ms"].to_numpy()[ok] / base[ok])) if ok.any() else 1.0
    corrected = bool(res.meta.get("clock_corrected", False))
    out, used = [], {}
    for s in specs:
        mine = c[c["model"] == s.name]["gap_ms"]
        launch = float(mine.median()) if len(mine) >= min_batches else s.launch_ms * ratio
        calls = t[t["model"] == s.name]["call_ms"]
        call = (float(calls.median()) if corrected and len(calls) >= min_batches
                else s.host_ms - s.launch_ms)
        launch, call = max(0.0, launch), max(0.0, call)
        # the GPU waits through its share of the call: a longer call, a longer batch
        shift = s.call_share * (call - (s.host_ms - s.launch_ms))
        out.append(s.with_(launch_ms=launch, host_ms=launch + call,
                           latency_ms=tuple(max(1e-6, x + shift) for x in s.latency_ms)))
        used[s.name] = launch
    return out, {"host_speed": ratio, "clean": int(len(c)), "models": used}


#: the bins (s) in which :func:`speed_from_calls` reads the host's speed: about one machine-wide
#: stall (16-24 ms on an H100), 5-50 launches
SPEED_BIN_S = 0.02


def speed_from_calls(res: Any, specs: Sequence[ModelSpec], width_s: float = SPEED_BIN_S,
                     least: float = 0.25, most: float = 20.0) -> np.ndarray:
    """The host's speed through a real run of the driver, as ``simulate(host_windows=...)``
    rows ``(start_s, end_s, factor)``: per ``width_s`` of run time, how long the launch calls
    (``dispatch_s - start_s``) of the batches that started in it took, over how long the same
    calls take in ``specs`` (each model's ``host_ms - launch_ms``: the probe's, after
    :func:`refine_from_probe`), held within ``least``..``most``. Bins without a batch, and
    models whose specs have no call, give no row. A launch call is a fixed piece of host work
    per model (a CUDA graph's launch and an event record) whatever the scheduler decided, so
    its length measures the host's speed for that work; on an H100 it moves 0.6-1.8x the
    probe's within 3 s runs, with the launch gap alongside and neither a canary's nor the
    driver's own interpreter speed following (``lab/sched/README.md``).
    Sums, not medians: a stall of a few launches slows the bin as much as the work it held."""
    b = res.batches
    if "dispatch_s" not in b.columns:
        raise InvalidArgument("the host's speed is read off a run of the real driver (its batches "
                              "carry dispatch_s); this one has none")
    call_ms = {s.name: s.host_ms - s.launch_ms for s in specs}
    ref = b["model"].astype(str).map(call_ms).fillna(0.0).to_numpy(dtype=float) / 1e3
    ok = ref > 0
    if not ok.any():
        return np.zeros((0, 3))
    took = (b["dispatch_s"] - b["start_s"]).to_numpy()[ok]
    k = np.floor(b["start_s"].to_numpy()[ok] / width_s).astype(np.int64)
    sums = pd.DataFrame({"k": k, "took": took, "ref": ref[ok]}).groupby("k").sum()
    factor = (sums["took"] / sums["ref"]).to_numpy()
    rows = [(i * width_s, (i + 1) * width_s, float(np.clip(f, least, most)))
            for i, f in zip(sums.index, factor) if np.isfinite(f) and f > 0]
    return np.array(rows, dtype=float).reshape(-1, 3)


#: seconds of arrivals in a probe run (:func:`probe_workload`)
PROBE_S = 1.0
#: the probe's traffic is drawn with the scenario's seed plus this (other arrivals, same kind)
PROBE_SEED_OFFSET = 1000
#: the probe's batches that start earlier than this (s) are not used: start-up, not steady work
PROBE_SKIP_S = 0.3


def probe_workload(workload: Workload, seconds: float = PROBE_S) -> Workload:
    """The traffic of a probe run for ``workload``: its sources drawn again with another seed
    (``workload.seed + PROBE_SEED_OFFSET``) over ``seconds``: traffic of the same kind (models,
    rates, cameras, bursts, priorities), none of the same arrivals."""
    if not workload.sources:
        raise InvalidArgument("a probe needs the workload's sources (make_workload keeps them)")
    return make_workload(list(workload.sources), seconds,
                         seed=int(workload.seed or 0) + PROBE_SEED_OFFSET)


def refine_from_probe(specs: Sequence[ModelSpec], probe: Any, policy: Policy,
                      min_batches: int = 20, since_s: float = PROBE_SKIP_S
                      ) -> tuple[list[ModelSpec], dict[str, Any]]:
    """``specs`` adjusted to how fast the driver's host and the GPU are right now, measured by
    a short real run of the same policy on traffic of the same kind (:func:`probe_workload`)
    just before the run to predict: still a prediction (none of the predicted arrivals is used).

    Why: one process's host speed drifts between its calibration and a scenario tens of seconds
    later (H100/H200: clean launch gaps 0.7-2.8x the calibrated ones), the calibration
    measures the launch gap under FIFO on one queue while EDF with camera round robin decides
    more slowly (16.5-26.8 µs against 11.3-15.3), and a model of many small kernels computes
    more slowly while the host launches slowly (the GPU waits for the rest of the graph's
    launch: on an H200, mobilenet_v3_large 1,061 µs per batch of 8 in a slow-host calibration,
    1,028 µs in the scenario after it).

    From the probe's batches that started after ``since_s`` (its first moments pay start-up):

    - launch and host times as :func:`refine_host` reads them off a run (per model the median
      clean launch gap and launch call; a model with few clean batches: its calibrated times
      scaled by the pooled ratio);
    - ``gpu_scale`` per model: GPU time (less ``switch_ms`` after another model) over the spec's
      table, over its clean batches (:func:`host_times_in`, launch call under
      :data:`STALL_S`) that ran with no other batch beside them; with fewer than
      ``min_batches`` of those the table stays (1.0). Batches alone after an idle GPU are not
      used: in the three-stream runs they were 2-4 % slower than in busy periods.

    Switch costs and sharing stay as calibrated. Returns the specs and ``{"host_ratio",
    "clean", "models": {name: {"gpu_scale", "batches"}}}``; a probe that served nothing leaves
    the specs as they are. Raises ``InvalidArgument`` for a run without the real driver's host
    stamps (``dispatch_s``: a simulated run is no probe).
    """
    if "dispatch_s" not in probe.batches.columns:
        raise InvalidArgument("a probe is a run of the real driver (its batches carry dispatch_s); "
                              "this one has none")
    if len(probe.batches) == 0:
        return list(specs), {"host_ratio": 1.0, "clean": 0,
                             "models": {s.name: {"gpu_scale": 1.0, "batches": 0} for s in specs}}
    b = after_previous(probe)
    t = host_times_in(probe, policy, history=b)  # the rows of b, in its order
    specs, host = refine_host(specs, probe, policy, since_s=since_s, times=t)
    ok = (t["clean"].to_numpy() & (t["call_ms"].to_numpy() <= STALL_S * 1e3)
          & (t["start_s"].to_numpy() >= since_s) & (overlap_by_count(b, 2).sum(axis=1) <= 0))
    lone = b[ok]
    out, used = [], {}
    for s in specs:
        g = lone[lone["model"] == s.name]
        scale = 1.0
        if len(g) >= min_batches:
            spent = 1e3 * g["dur"].to_numpy() - s.switch_ms * (g["prev"] != s.name).to_numpy()
            scale = float(spent.sum() / np.sum(s.latency(g["size"].to_numpy())))
        out.append(s.with_(latency_ms=tuple(x * scale for x in s.latency_ms)))
        used[s.name] = {"gpu_scale": scale, "batches": int(len(g))}
    return out, {"host_ratio": host["host_speed"], "clean": host["clean"], "models": used}
