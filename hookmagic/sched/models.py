"""Model specifications: how long a batch of each size takes, and how much memory a model holds.

A :class:`ModelSpec` is what the simulator needs to know about a model and what the real driver
measures: latency per batch size (at one precision), the spread of that latency, and the memory
footprint. Build one by hand, from a measured sweep table (:meth:`ModelSpec.from_sweep`), from a
hookmagic ``Trace`` (:meth:`ModelSpec.from_trace`) or from a ``LayerProfile``
(:meth:`ModelSpec.from_layer_profile`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from hookmagic.common import checks
from hookmagic.common.limits import MAX_BATCH_SIZE
from hookmagic.common.errors import InvalidArgument

from .names import unknown_model

__all__ = ["ModelSpec", "specs_from_sweep", "MAX_BATCH"]

#: the largest batch size any scheduler object accepts (engines index latency tables by size)
MAX_BATCH = MAX_BATCH_SIZE


@dataclass(frozen=True)
class ModelSpec:
    """What the scheduler knows about one model.

    Parameters
    ----------
    name : model name; requests refer to it.
    batch_sizes : batch sizes at which latency was measured (ascending).
    latency_ms : median compute latency for each of ``batch_sizes``, milliseconds.
    precision : "fp32", "fp16", "int8", ... (a label; latency tables are per precision).
    memory_bytes : device memory the model holds (weights plus workspace), for sweep limits.
    service_cv : coefficient of variation of a batch's service time around the table value;
        0 means deterministic. The simulator draws a gamma-distributed multiplier of mean 1
        (cv 1 is exponential), so the same spec gives M/D/1, M/M/1 or M/G/1 behaviour.
    max_batch : the largest batch the engine accepts (defaults to the largest measured size).
    switch_ms : extra time a batch takes when the previous batch on its stream was another
        model (colder caches, another CUDA graph), milliseconds. Latency tables are measured
        back to back with the same model, so they do not contain it; a calibration that
        alternates models measures it (``lab/sched/sched_fidelity.py``).
    share_slowdown : how much slower this model computes while other streams' batches run on
        the same GPU. With ``k`` others computing it progresses at ``1 / slowdown(k)`` of its own
        speed. A number ``f`` means ``slowdown(k) = 1 + f * k``; a tuple ``(a1, a2, ...)`` gives
        ``1 + a1`` with one other, ``1 + a2`` with two, ... (GPUs share sublinearly: measure
        each ``k``), the last step continuing beyond. 0 or ``()``: streams are independent.
        Measured per model by the calibration in ``lab/sched/sched_fidelity.py``.
    launch_ms : host time between the decision to run a batch and the batch starting on the GPU
        (the driver noticing the stream is free, choosing, recording the start event),
        milliseconds. The stream is taken meanwhile but the GPU does none of this batch's work,
        so it neither slows nor is slowed by other streams; the batch's ``start_s`` is when it
        ends. ``latency_ms`` is then the GPU part alone (start to end event under the driver).
    host_ms : how long one dispatch of this model keeps the driver's one host thread busy, from
        its decision (launching a CUDA graph, recording events), milliseconds; at least
        ``launch_ms``. No stream is offered a batch until the host is free again, so with
        several streams a freed stream may wait for another stream's launch. 0: never waits.
    share_by_size : how much more the sharing costs the bigger the other streams' running
        batches are, ``(e1, e2, ...)`` for one, two, ... other streams (the last continuing
        beyond). With ``k`` others running batches of ``b_j`` requests, the share of time this
        model does not progress is ``c = (1 - 1 / slowdown(k)) + e_k * sum_j sqrt(b_j)`` (at
        most 0.9), its slowdown ``1 / (1 - c)``: a batch beside a batch of 8 is slowed more than
        beside a batch of 1. ``()``: the slowdown depends on the number of others only. On an
        H100, with the count alone the fitted model is 2.8-3.8 % too fast in
        heavily loaded three-stream calibration runs and 3.8-6.5 % too slow in lightly loaded
        ones; with the others' sizes, within 1 % in both. The square root (sharing grows less
        than in proportion to the neighbours' requests) fitted those runs as well as a linear
        term and without its growing error beside the largest batches
        (``hookmagic.sched.calibrate.fit_sharing``; ``lab/sched/README.md``).
    launch_jitter_ms, host_jitter_ms : how the driver's host times vary from batch to batch:
        equally likely deviations (ms) from ``launch_ms`` and ``host_ms`` (the calibration's
        quantiles less their mean, so the mean stays). Each batch draws one index, from its
        first request (as the service-time spread), and pays ``launch_ms + launch_jitter_ms[k]``
        (at least 0) and ``host_ms + host_jitter_ms[k]`` (at least that launch time): a slow
        loop pass is slow for both. ``()``: constant host times. A host whose launch gap has
        a tail of 0.15-0.3 ms at p99 (on an H100) lengthens the
        queues' tails where a constant mean does not.
    call_share : the share of the launch call (``host_ms - launch_ms``) that the GPU waits
        through inside the batch's GPU time: the stream was free, so the batch's start event
        runs at once while the call is still submitting the CUDA graph's kernels. Where the
        host runs slower or faster than calibrated (``simulate(host_windows=...)``), the batch's
        GPU time changes by this share of the change in its call. 0: GPU time independent of
        the host. On an H100 each extra µs of call added 0.77-0.86 µs to resnet18
        and resnet50 batches (r 0.95-0.99 over 200-1,500 batches a run).

    Latency for a size that was not measured is interpolated linearly between neighbours and
    extrapolated linearly beyond the largest measured size (GPUs scale close to linearly once
    they are full).
    """

    name: str
    batch_sizes: tuple[int, ...]
    latency_ms: tuple[float, ...]
    precision: str = "fp16"
    memory_bytes: int = 0
    service_cv: float = 0.0
    max_batch: int = 0
    switch_ms: float = 0.0
    share_slowdown: float | tuple[float, ...] = ()
    launch_ms: float = 0.0
    host_ms: float = 0.0
    share_by_size: float | tuple[float, ...] = ()
    launch_jitter_ms: tuple[float, ...] = ()
    host_jitter_ms: tuple[float, ...] = ()
    call_share: float = 0.0
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgument(f"ModelSpec name must be a non-empty string, not {self.name!r}")
        try:
            raw_sizes, raw_lat = list(self.batch_sizes), list(self.latency_ms)
        except TypeError:
            raise InvalidArgument("batch_sizes and latency_ms must be sequences of numbers") from None
        if not raw_sizes or len(raw_sizes) != len(raw_lat):
            raise InvalidArgument("batch_sizes and latency_ms must be non-empty and of equal length")
        sizes = tuple(checks.integer(f"{self.name}: batch size", b, minimum=1, maximum=MAX_BATCH)
                      for b in raw_sizes)
        # a NaN latency would hang the general engine and give garbage from the fast path
        lat = tuple(checks.number(f"{self.name}: latency_ms at batch {b}", x, positive=True)
                    for b, x in zip(sizes, raw_lat))
        if len(set(sizes)) != len(sizes):
            raise InvalidArgument(f"{self.name}: batch_sizes {sizes} repeat a size")
        order = np.argsort(sizes, kind="stable")
        sizes = tuple(sizes[i] for i in order)
        lat = tuple(lat[i] for i in order)
        object.__setattr__(self, "batch_sizes", sizes)
        object.__setattr__(self, "latency_ms", lat)
        object.__setattr__(self, "memory_bytes",
                           checks.integer(f"{self.name}: memory_bytes", self.memory_bytes, minimum=0))
        object.__setattr__(self, "service_cv",
                           checks.number(f"{self.name}: service_cv", self.service_cv,
                                         non_negative=True))
        max_batch = checks.integer(f"{self.name}: max_batch", self.max_batch, minimum=0,
                                   maximum=MAX_BATCH)
        object.__setattr__(self, "max_batch", max_batch if max_batch > 0 else sizes[-1])
        share = self.share_slowdown
        share = tuple(float(x) for x in (share if isinstance(share, (tuple, list)) else (share,)))
        by_size = self.share_by_size
        by_size = tuple(float(x) for x in (by_size if isinstance(by_size, (tuple, list))
                                            else (by_size,)))
        for what, values in (("switch_ms", (float(self.switch_ms),)), ("share_slowdown", share),
                             ("share_by_size", by_size),
                             ("launch_ms", (float(self.launch_ms),)),
                             ("host_ms", (float(self.host_ms),)),
                             ("call_share", (float(self.call_share),))):
            if any(not np.isfinite(v) or v < 0 for v in values):
                raise InvalidArgument(f"ModelSpec {self.name!r}: {what} must be finite and >= 0, "
                                      f"got {getattr(self, what)}")
        object.__setattr__(self, "switch_ms", float(self.switch_ms))
        object.__setattr__(self, "launch_ms", float(self.launch_ms))
        object.__setattr__(self, "host_ms", float(self.host_ms))
        if float(self.call_share) > 1.0:
            raise InvalidArgument(f"ModelSpec {self.name!r}: call_share is a share of the launch "
                                  f"call, 0 to 1, got {self.call_share}")
        object.__setattr__(self, "call_share", float(self.call_share))
        object.__setattr__(self, "share_slowdown", share if any(share) else ())
        object.__setattr__(self, "share_by_size", by_size if any(by_size) else ())
        jit = []
        for what in ("launch_jitter_ms", "host_jitter_ms"):
            try:
                values = tuple(float(x) for x in getattr(self, what))
            except TypeError:
                raise InvalidArgument(f"ModelSpec {self.name!r}: {what} must be a sequence of "
                                      "numbers") from None
            if any(not np.isfinite(v) for v in values):
                raise InvalidArgument(f"ModelSpec {self.name!r}: {what} must be finite")
            jit.append(values)
        if jit[0] and jit[1] and len(jit[0]) != len(jit[1]):
            raise InvalidArgument(f"ModelSpec {self.name!r}: launch_jitter_ms and host_jitter_ms "
                                  "must have the same length (one draw sets both)")
        object.__setattr__(self, "launch_jitter_ms", jit[0] if any(jit[0]) else ())
        object.__setattr__(self, "host_jitter_ms", jit[1] if any(jit[1]) else ())

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def constant(cls, name: str, latency_ms: float, **kw: Any) -> "ModelSpec":
        """A model whose batches of any size take ``latency_ms`` (size 1 only, unless ``max_batch``)."""
        return cls(name, (1,), (latency_ms,), **kw)

    @classmethod
    def linear(cls, name: str, base_ms: float, per_item_ms: float, max_batch: int = 32,
               **kw: Any) -> "ModelSpec":
        """Latency ``base_ms + per_item_ms * b``: a fixed launch cost plus per-sample work."""
        max_batch = checks.integer("max_batch", max_batch, minimum=1, maximum=MAX_BATCH)
        base_ms = checks.number("base_ms", base_ms, non_negative=True)
        per_item_ms = checks.number("per_item_ms", per_item_ms, non_negative=True)
        sizes = tuple(range(1, max_batch + 1))
        return cls(name, sizes, tuple(base_ms + per_item_ms * b for b in sizes),
                   max_batch=max_batch, **kw)

    @classmethod
    def from_sweep(cls, table: pd.DataFrame, name: str | None = None,
                   precision: str | None = None, **kw: Any) -> "ModelSpec":
        """Build from a measured sweep table.

        ``table`` has columns ``batch_size`` and ``latency_ms`` (the median per size), and may
        have ``model`` (then ``name`` selects the rows), ``precision`` (then ``precision``
        selects), ``std_ms`` (gives ``service_cv``) and ``memory_bytes``.
        """
        t = table
        if "model" in t.columns:
            names = [str(n) for n in t["model"].unique()]
            if name is None:
                if len(names) != 1:
                    raise InvalidArgument(f"table holds several models {names}; pass name=")
                name = names[0]
            elif name not in names:
                raise InvalidArgument(unknown_model(name, names))
            t = t[t["model"] == name]
        if precision is not None and "precision" in t.columns:
            t = t[t["precision"] == precision]
        elif "precision" in t.columns and t["precision"].nunique() == 1:
            precision = str(t["precision"].iloc[0])
        if t.empty:
            have = sorted({str(p) for p in table.loc[table["model"] == name, "precision"]}
                          if "model" in table.columns and "precision" in table.columns else [])
            raise InvalidArgument(f"no rows for model {name!r} precision {precision!r}"
                                  + (f"; its precisions: {', '.join(have)}" if have else ""))
        t = t.groupby("batch_size", as_index=False).median(numeric_only=True)
        if "service_cv" not in kw and "std_ms" in t.columns:
            # One number for the whole model: the latency-weighted mean spread.
            kw["service_cv"] = float((t["std_ms"] / t["latency_ms"]).median())
        if "memory_bytes" not in kw and "memory_bytes" in t.columns:
            kw["memory_bytes"] = int(t["memory_bytes"].max())
        return cls(name or "model", tuple(t["batch_size"].astype(int)),
                   tuple(t["latency_ms"].astype(float)), precision=precision or "fp16", **kw)

    @classmethod
    def from_trace(cls, traces: "dict[int, Any] | Any", name: str = "model",
                   batch_size: int = 1, **kw: Any) -> "ModelSpec":
        """Build from hookmagic ``Trace`` captures: latency is the summed kernel time.

        Pass one trace (taken at ``batch_size``) or a ``{batch_size: trace}`` mapping. Each
        trace's ``kernels`` table is summed (``duration_ns``); divide by the number of
        iterations yourself if a capture holds several (``meta["iterations"]`` is honoured).
        """
        items = traces.items() if isinstance(traces, dict) else [(batch_size, traces)]
        sizes, lat = [], []
        for b, tr in items:
            kernels = tr.kernels if hasattr(tr, "kernels") else tr["kernels"]
            meta = getattr(tr, "meta", {}) or {}
            iters = max(1, int(meta.get("iterations", 1)))
            sizes.append(int(b))
            lat.append(float(kernels["duration_ns"].sum()) / 1e6 / iters)
        return cls(name, tuple(sizes), tuple(lat), **kw)

    @classmethod
    def from_layer_profile(cls, profiles: "dict[int, Any] | Any", name: str | None = None,
                           batch_size: int = 1, **kw: Any) -> "ModelSpec":
        """Build from ``LayerProfile`` objects (one, or ``{batch_size: profile}``): their ``total_ms``."""
        items = profiles.items() if isinstance(profiles, dict) else [(batch_size, profiles)]
        sizes, lat = [], []
        for b, prof in items:
            total = prof.total_ms() if callable(getattr(prof, "total_ms", None)) else prof.total_ms
            sizes.append(int(b))
            lat.append(float(total))
            if name is None:
                name = str((getattr(prof, "meta", {}) or {}).get("name", "model"))
        return cls(name or "model", tuple(sizes), tuple(lat), **kw)

    # -- queries ----------------------------------------------------------------------------
    def latency(self, batch_size: int | np.ndarray) -> float | np.ndarray:
        """Latency in milliseconds of a batch of ``batch_size`` (interpolated / extrapolated)."""
        b = np.asarray(batch_size, dtype=float)
        xs = np.asarray(self.batch_sizes, dtype=float)
        ys = np.asarray(self.latency_ms, dtype=float)
        out = np.interp(b, xs, ys)
        if len(xs) >= 2:
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            out = np.where(b > xs[-1], ys[-1] + slope * (b - xs[-1]), out)
            # Below the smallest measured size, never claim less than zero work.
            out = np.where(b < xs[0], ys[0], out)
        return float(out) if out.ndim == 0 else out

    def table_s(self, max_batch: int | None = None) -> np.ndarray:
        """Latency in seconds indexed by batch size (index 0 unused), up to ``max_batch``."""
        n = int(max_batch or self.max_batch)
        t = np.zeros(n + 1)
        t[1:] = np.asarray(self.latency(np.arange(1, n + 1)), dtype=float) / 1e3
        return t

    def slowdown(self, others: int, default: float = 0.0) -> float:
        """How many times longer this model computes while ``others`` other streams compute
        (``share_slowdown``; ``default`` stands for it when the spec has none)."""
        a = self.share_slowdown or ((default,) if default else ())
        if others <= 0 or not a:
            return 1.0
        if others <= len(a):
            return 1.0 + a[others - 1]
        step = a[-1] - a[-2] if len(a) >= 2 else a[-1]
        return 1.0 + a[-1] + step * (others - len(a))

    def by_size(self, others: int) -> float:
        """``share_by_size`` with ``others`` other streams computing (0 if none is set)."""
        e = self.share_by_size
        if others <= 0 or not e:
            return 0.0
        return e[min(others, len(e)) - 1]

    def shared_slowdown(self, others: int, sizes: Sequence[int] = (), default: float = 0.0) -> float:
        """The slowdown beside ``others`` other computing batches of ``sizes`` requests (see
        ``share_by_size``); :meth:`slowdown` where no ``share_by_size`` is set."""
        base = self.slowdown(others, default)
        e = self.by_size(others)
        if e <= 0.0:
            return base
        return _shared(base, e, sum(math.sqrt(b) for b in sizes))

    def throughput(self, batch_size: int) -> float:
        """Items per second one stream sustains at ``batch_size``."""
        return batch_size / (self.latency(batch_size) / 1e3)

    def with_(self, **changes: Any) -> "ModelSpec":
        """A copy with some fields changed."""
        return replace(self, **changes)

    def to_frame(self) -> pd.DataFrame:
        """The latency table as a DataFrame (model, precision, batch_size, latency_ms)."""
        return pd.DataFrame({"model": self.name, "precision": self.precision,
                             "batch_size": list(self.batch_sizes),
                             "latency_ms": list(self.latency_ms)})


#: the largest share of time a shared batch may stand still (a tenfold slowdown)
MAX_SHARE = 0.9


def _shared(base: float, e: float, weight: float) -> float:
    """Slowdown from the count-only slowdown ``base``, ``e`` and the others' ``weight``
    (sum of the square roots of their sizes); the engines compute exactly this."""
    c = 1.0 - 1.0 / base + e * weight
    if c > MAX_SHARE:
        c = MAX_SHARE
    return 1.0 / (1.0 - c)


def specs_from_sweep(table: pd.DataFrame, names: Iterable[str] | None = None,
                     **kw: Any) -> list[ModelSpec]:
    """One :class:`ModelSpec` per model in a sweep table (columns model, batch_size, latency_ms)."""
    names = list(names) if names is not None else list(dict.fromkeys(table["model"]))
    return [ModelSpec.from_sweep(table, name=n, **kw) for n in names]
