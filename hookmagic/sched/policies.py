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
        if self.max_batch < 1 or self.max_delay_ms < 0:
            raise ValueError("max_batch must be >= 1 and max_delay_ms >= 0")
        object.__setattr__(self, "preferred",
                           tuple(sorted({int(p) for p in self.preferred if 0 < p <= self.max_batch})))


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
        if self.action not in ("reject", "delay"):
            raise ValueError("action must be 'reject' or 'delay'")


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


@dataclass(frozen=True)
class Limit:
    """At most ``max_concurrent`` batches of ``models`` in flight at once, across all streams."""
    models: tuple[str, ...]
    max_concurrent: int = 1


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
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}")
        if isinstance(self.streams, int):
            if self.streams < 1:
                raise ValueError("need at least one stream")
            object.__setattr__(self, "streams", tuple(Stream() for _ in range(self.streams)))
        else:
            object.__setattr__(self, "streams", tuple(self.streams))
        object.__setattr__(self, "limits", tuple(self.limits))

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
