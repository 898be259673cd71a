"""What every allocator model shares: byte counters, peaks and an allocator-event log.

Models speak the allocator-event vocabulary (``allocator_events`` in
:mod:`hookmagic.trace.schema`), so a replayed what-if run can be drawn and measured exactly like
a captured one.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import pandas as pd

from hookmagic.common.errors import HookmagicError
from hookmagic.trace import schema

#: Where model address spaces start; far from real device pointers so the two never mix.
MODEL_VA_BASE = 0x7F00_0000_0000


class OutOfMemory(HookmagicError, RuntimeError):
    """The model could not satisfy a request within its ``capacity``."""


class InvalidFree(HookmagicError, KeyError):
    """A model was asked to free an address it did not hand out, or one already freed."""


class ModelBase(ABC):
    """Byte accounting and event logging for allocator models.

    Subclasses call :meth:`_emit` for every allocator action; the counters follow from the
    actions, so the log and the numbers can never disagree.
    """

    name = "model"

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.now = 0                      # replay clock, set by the replayer before each call
        self.current_stack = -1           # stack id of the request being replayed
        self.reserved = 0
        self.allocated = 0
        self.requested = 0
        self.peak_reserved = 0
        self.peak_allocated = 0
        self.peak_requested = 0
        self.device_allocs = 0            # cudaMalloc / cuMemMap calls: each costs milliseconds
        self.ooms = 0
        self._log: list[tuple] = []

    # -- accounting -----------------------------------------------------------------------
    def _emit(self, action: str, address: int, size: int, requested: int, segment: int,
              stream: int, pool: str) -> None:
        if action in ("segment_alloc", "segment_map"):
            self.reserved += size
            self.device_allocs += 1
            if self.reserved > self.peak_reserved:
                self.peak_reserved = self.reserved
        elif action in ("segment_free", "segment_unmap"):
            self.reserved -= size
        elif action == "alloc":
            self.allocated += size
            self.requested += requested
            if self.allocated > self.peak_allocated:
                self.peak_allocated = self.allocated
            if self.requested > self.peak_requested:
                self.peak_requested = self.requested
        elif action == "free_completed":
            self.allocated -= size
            self.requested -= requested
        elif action == "oom":
            self.ooms += 1
        stack = self.current_stack if action in ("alloc", "free_requested", "free_completed",
                                                 "oom") else -1
        self._log.append((self.now, action, address, size, requested, segment, stream, pool,
                          stack))

    def fits(self, extra: int) -> bool:
        """Whether the device still has ``extra`` bytes for this model (None: unlimited)."""
        return self.capacity is None or self.reserved + extra <= self.capacity

    def events(self) -> pd.DataFrame:
        """Everything the model did, as an allocator-event table (``source`` = "model")."""
        if not self._log:
            return schema.empty_table("allocator_events")
        cols = ["time_ns", "action", "address", "size", "requested_size", "segment", "stream",
                "pool", "stack_id"]
        frame = pd.DataFrame.from_records(self._log, columns=cols)
        frame["source"] = "model"
        frame["device"] = 0
        return schema.conform("allocator_events", frame)

    # -- the interface the replayer drives ------------------------------------------------
    @abstractmethod
    def malloc(self, size: int, stream: int = 0) -> int:
        """Hand out a block for ``size`` requested bytes; return its address."""

    @abstractmethod
    def free(self, address: int) -> None:
        """Return the block at ``address``."""

    def empty_cache(self) -> None:
        """Give cached free memory back to the device (models without a cache: nothing)."""
