"""Scheduling policies: plain configuration objects, read by one controller.

A :class:`Policy` bundles every decision the scheduler makes:

- ``order``: which model's batch goes next on a free stream — ``"fifo"`` (oldest request
  first), ``"priority"`` (strict priority across models: the lowest ``priority`` number
  waiting wins, then the oldest) or ``"edf"`` (earliest deadline first, with early drop of
  requests that can no longer meet their deadline when ``drop_late``);
- ``batching``: dynamic batching per model (:class:`Batching`: max batch, max queue delay timed
  from the oldest queued request, preferred sizes);
- ``adaptive``: SLO-aware AIMD batch sizing per model (:class:`AIMD`, as in Clipper);
- ``queue``: queue policy per model and priority level (:class:`QueuePolicy`: max queue size,
  timeout with reject or delay, as in Triton);
- ``fairness``: per-camera round robin inside a model's batch (:class:`CameraFairness`, as
  nvstreammux does over its sources), optionally dropping stale frames;
- ``streams``: CUDA streams / instances (:class:`Stream`), each with a priority and the models
  it may run (Triton instance groups);
- ``limits``: cross-model concurrency limits (:class:`Limit`, like Triton's rate limiter).

These objects hold no state. :class:`hookmagic.sched.dispatcher.Dispatcher` implements them once,
and both the simulator and the real driver call that same controller.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from hookmagic.common import checks
from hookmagic.common.errors import InvalidArgument

from hookmagic.common.limits import MAX_BATCH_SIZE as MAX_BATCH

__all__ = ["Batching", "AIMD", "QueuePolicy", "CameraFairness", "Stream", "Limit", "Policy",
           "ORDERS"]

ORDERS = ("fifo", "priority", "edf")


@dataclass(frozen=True)
class Batching:
    """Dynamic batching for one model.

    A batch is sent when ``max_batch`` requests wait, or when a ``preferred`` size can be formed
    (the largest preferred size available is sent at once), or when the oldest queued request
    has waited ``max_delay_ms`` (then everything waiting, up to ``max_batch``, is sent).
    ``max_delay_ms=0`` sends whatever waits as soon as a stream is free.
    """
    max_batch: int = 1
    max_delay_ms: float = 0.0
    preferred: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_batch",
                           checks.integer("Batching max_batch", self.max_batch, minimum=1,
                                          maximum=MAX_BATCH))
        object.__setattr__(self, "max_delay_ms",
                           checks.number("Batching max_delay_ms", self.max_delay_ms,
                                         non_negative=True))
        try:
            pref = [checks.integer("Batching preferred size", p, minimum=1)
                    for p in self.preferred]
        except TypeError:
            raise InvalidArgument("Batching preferred must be a sequence of batch sizes") from None
        object.__setattr__(self, "preferred",
                           tuple(sorted({p for p in pref if p <= self.max_batch})))


@dataclass(frozen=True)
class AIMD:
    """SLO-aware adaptive batch cap (additive increase, multiplicative decrease).

    After each batch of the model: if its compute time exceeded ``budget * slo`` the cap is
    multiplied by ``backoff``; otherwise it grows by ``step``. The cap never leaves
    ``[1, max_batch]`` and replaces :class:`Batching`'s ``max_batch``. ``slo_ms=None`` takes
    the model's SLO from its first request. Compute time, not end-to-end latency, drives the
    cap (as in Clipper): under overload queueing grows whatever the batch size, and shrinking
    batches then would only lower throughput.
    """
    slo_ms: float | None = None
    budget: float = 0.5
    start: int = 1
    step: int = 1
    backoff: float = 0.5
    max_batch: int = 64

    def __post_init__(self) -> None:
        object.__setattr__(self, "slo_ms", checks.optional_number("AIMD slo_ms", self.slo_ms,
                                                                  positive=True))
        object.__setattr__(self, "budget", checks.number("AIMD budget", self.budget,
                                                         positive=True))
        object.__setattr__(self, "max_batch", checks.integer("AIMD max_batch", self.max_batch,
                                                             minimum=1, maximum=MAX_BATCH))
        object.__setattr__(self, "start", checks.integer("AIMD start", self.start, minimum=1,
                                                         maximum=self.max_batch))
        object.__setattr__(self, "step", checks.integer("AIMD step", self.step, minimum=1))
        backoff = checks.number("AIMD backoff", self.backoff, positive=True, maximum=1.0)
        if backoff >= 1.0:
            raise InvalidArgument(f"AIMD backoff must be < 1 (a decrease), not {backoff}")
        object.__setattr__(self, "backoff", backoff)


@dataclass(frozen=True)
class QueuePolicy:
    """Bounded queues and queue timeouts, per model and priority level (as Triton's).

    ``max_size``: a request arriving at a full level queue is rejected. ``timeout_ms``: a
    request that waited this long is rejected (``action="reject"``) or moved behind every
    request that has not timed out (``action="delay"``).
    """
    max_size: int | None = None
    timeout_ms: float | None = None
    action: Literal["reject", "delay"] = "reject"

    def __post_init__(self) -> None:
        checks.choice("QueuePolicy action", self.action, ("reject", "delay"))
        object.__setattr__(self, "max_size", checks.optional_integer(
            "QueuePolicy max_size", self.max_size, minimum=0))
        object.__setattr__(self, "timeout_ms", checks.optional_number(
            "QueuePolicy timeout_ms", self.timeout_ms, non_negative=True))


@dataclass(frozen=True)
class CameraFairness:
    """Round robin over cameras when forming a batch.

    Each round takes up to ``per_camera`` frames from every camera with frames waiting,
    starting after the camera served last, until the batch is full. ``max_frames``: a camera
    keeps at most this many frames queued; a new frame evicts that camera's oldest (a "stale"
    drop, as live video pipelines do).
    """
    per_camera: int = 1
    max_frames: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_camera", checks.integer(
            "CameraFairness per_camera", self.per_camera, minimum=1))
        object.__setattr__(self, "max_frames", checks.optional_integer(
            "CameraFairness max_frames", self.max_frames, minimum=1))


@dataclass(frozen=True)
class Stream:
    """A CUDA stream (or engine instance): one batch at a time.

    ``priority``: lower is more urgent (CUDA's convention); free streams are offered work in
    priority order, and the real driver creates the stream with this priority. ``models``:
    the models this stream may run (``None``: all).
    """
    priority: int = 0
    models: tuple[str, ...] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "priority", checks.integer("Stream priority", self.priority))
        if self.models is not None:
            object.__setattr__(self, "models", _names("Stream models", self.models))


@dataclass(frozen=True)
class Limit:
    """At most ``max_concurrent`` batches of ``models`` in flight at once, across all streams."""
    models: tuple[str, ...]
    max_concurrent: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", _names("Limit models", self.models))
        object.__setattr__(self, "max_concurrent", checks.integer(
            "Limit max_concurrent", self.max_concurrent, minimum=1))


def _names(what: str, models) -> tuple[str, ...]:
    if isinstance(models, str):
        models = (models,)
    try:
        names = tuple(models)
    except TypeError:
        raise InvalidArgument(f"{what} must be model names, not {models!r}") from None
    if not all(isinstance(m, str) for m in names):
        raise InvalidArgument(f"{what} must be model names (strings), not {names!r}")
    return names


def _per_model(value, name: str, default):
    if isinstance(value, Mapping):
        return value.get(name, value.get("*", default))
    return default if value is None else value


@dataclass(frozen=True)
class Policy:
    """Everything the scheduler decides, for simulation and real runs alike.

    ``batching``, ``adaptive`` and ``queue`` take one object for every model or a mapping from
    model name to object (key ``"*"`` for the rest). ``streams`` is a count or a list of
    :class:`Stream`.
    """
    order: Literal["fifo", "priority", "edf"] = "fifo"
    batching: Batching | Mapping[str, Batching] = field(default_factory=Batching)
    adaptive: AIMD | Mapping[str, AIMD] | None = None
    queue: QueuePolicy | Mapping[str, QueuePolicy] | None = None
    fairness: CameraFairness | None = None
    streams: int | Sequence[Stream] = 1
    limits: Sequence[Limit] = ()
    drop_late: bool = True

    def __post_init__(self) -> None:
        checks.choice("Policy order", self.order, ORDERS)
        if isinstance(self.streams, (int, float)) and not isinstance(self.streams, bool):
            n = checks.integer("Policy streams", self.streams, minimum=1, maximum=1024)
            object.__setattr__(self, "streams", tuple(Stream() for _ in range(n)))
        else:
            try:
                streams = tuple(self.streams)
            except TypeError:
                streams = ()
            if not streams or not all(isinstance(st, Stream) for st in streams):
                raise InvalidArgument("Policy streams must be a count >= 1 or a list of Stream")
            object.__setattr__(self, "streams", streams)
        limits = tuple(self.limits)
        if not all(isinstance(lim, Limit) for lim in limits):
            raise InvalidArgument("Policy limits must be Limit objects")
        object.__setattr__(self, "limits", limits)
        for what, value, kind in (("batching", self.batching, Batching),
                                  ("adaptive", self.adaptive, AIMD),
                                  ("queue", self.queue, QueuePolicy)):
            items = value.values() if isinstance(value, Mapping) else [value]
            for item in items:
                if not (isinstance(item, kind) or (item is None and what != "batching")):
                    raise InvalidArgument(f"Policy {what} must be a {kind.__name__} or a mapping "
                                          f"of model name to {kind.__name__}, not {item!r}")
        if self.fairness is not None and not isinstance(self.fairness, CameraFairness):
            raise InvalidArgument("Policy fairness must be a CameraFairness or None")

    def per_model_names(self) -> set[str]:
        """Model names the per-model settings (batching, adaptive, queue mappings; stream and
        limit model lists) mention, besides ``"*"``."""
        names: set[str] = set()
        for value in (self.batching, self.adaptive, self.queue):
            if isinstance(value, Mapping):
                names |= {str(k) for k in value if k != "*"}
        for st in self.streams:
            names |= set(st.models or ())
        for lim in self.limits:
            names |= set(lim.models)
        return names

    def check_models(self, known) -> None:
        """Raise :class:`InvalidArgument` when a per-model setting names a model that is not
        in ``known`` (a misspelt name would otherwise silently leave that model unbatched)."""
        known = [str(k) for k in known]
        unknown = sorted(self.per_model_names() - set(known))
        if unknown:
            raise InvalidArgument(f"the policy's per-model settings name unknown model(s) "
                                  f"{unknown}; the models are {known}")

    def batching_for(self, model: str) -> Batching:
        """The :class:`Batching` that applies to ``model``."""
        return _per_model(self.batching, model, Batching())

    def adaptive_for(self, model: str) -> AIMD | None:
        """The :class:`AIMD` that applies to ``model`` (or None)."""
        return _per_model(self.adaptive, model, None)

    def queue_for(self, model: str) -> QueuePolicy:
        """The :class:`QueuePolicy` that applies to ``model``."""
        return _per_model(self.queue, model, QueuePolicy())

    def describe(self) -> str:
        """One line saying what this policy does."""
        parts = [self.order, f"{len(self.streams)} stream(s)"]
        if self.adaptive is not None:
            parts.append("AIMD")
        if self.queue is not None:
            parts.append("queue policy")
        if self.fairness is not None:
            parts.append("camera fairness")
        if self.limits:
            parts.append(f"{len(self.limits)} limit(s)")
        return ", ".join(parts)
