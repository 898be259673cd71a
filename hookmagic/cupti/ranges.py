"""User ranges: ``with hookmagic.range("preprocess"): ...``.

A range is timed on CUPTI's clock and its id is kept on a per-thread stack in the native
session, which the launch callbacks read: every kernel, copy and memset launched inside it
carries its ``range_id`` exactly, on whichever thread it was opened. Outside a capture a range
costs two clock reads and nothing is recorded.
"""
from __future__ import annotations

import functools
import itertools
import threading
from dataclasses import dataclass
from typing import Callable, TypeVar

from hookmagic.common.errors import InvalidArgument

_F = TypeVar("_F", bound=Callable)


@dataclass
class RangeRecord:
    range_id: int
    name: str
    start_ns: int
    end_ns: int
    thread: int
    depth: int
    parent_id: int
    source: str = "hookmagic"  # "module_backward": a "backward of <module/op>" (hookmagic.cupti.autograd)


class _Recorder:
    """Collects finished ranges while a capture is running (process-wide)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = False
        self.records: list[RangeRecord] = []
        self.ids = itertools.count(1)
        self.local = threading.local()

    def start(self) -> None:
        with self.lock:
            self.records = []
            self.active = True

    def stop(self) -> list[RangeRecord]:
        with self.lock:
            self.active = False
            records, self.records = self.records, []
        return records


RECORDER = _Recorder()


def _native():
    from hookmagic.cupti import native_module

    return native_module()


class range:  # noqa: N801 - named like the built-in on purpose: `with hookmagic.range(...)`
    """Mark a region of code; its GPU work is grouped under ``name`` in every view.

    Use as a context manager (``with hookmagic.range("decode"):``) or a decorator
    (``@hookmagic.range("step")``). Ranges nest; each kernel belongs to the innermost range
    open on the thread that launched it.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgument("hookmagic.range needs a non-empty name")
        self.name = name

    def __enter__(self) -> "range":
        native = _native()
        stack = getattr(RECORDER.local, "stack", None)
        if stack is None:
            stack = RECORDER.local.stack = []
        self._id = next(RECORDER.ids)
        self._parent = stack[-1] if stack else -1
        self._depth = len(stack)
        stack.append(self._id)
        self._native = native
        if native is not None:
            native.push_range(self._id)
            self._start = native.timestamp()
        else:
            self._start = 0
        return self

    def __exit__(self, *exc) -> None:
        native = self._native  # pop only what was pushed, even if CUPTI loaded meanwhile
        end = native.timestamp() if native is not None else 0
        if native is not None:
            native.pop_range()
        RECORDER.local.stack.pop()
        if RECORDER.active and native is not None:
            record = RangeRecord(self._id, self.name, self._start, end,
                                 threading.get_native_id(), self._depth, self._parent,
                                 getattr(self, "_source", "hookmagic"))
            with RECORDER.lock:
                RECORDER.records.append(record)

    def __call__(self, function: _F) -> _F:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with range(self.name):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
