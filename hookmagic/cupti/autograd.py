"""Backward kernels attributed to the code that called ``backward()``.

PyTorch runs backward on its autograd engine threads, which have no Python frames, so a launch
callback there finds no stack. While a capture runs, ``torch.autograd.backward`` and
``torch.autograd.grad`` (which ``Tensor.backward`` calls) are wrapped: each call opens a
``hookmagic.range("backward")`` and tells the native session to attribute launches from
threads without Python frames to the caller's stack and that range, until it returns. Nothing
is wrapped if torch is not already imported (a capture never imports it), and the originals are
put back when the capture ends. Process-wide: with two threads in backward at once, the later
caller's attribution applies to both.
"""
from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable

_NAMES = ("backward", "grad")

# "backward of <module>" ranges open on engine threads: thread id -> (range id, label, start).
_open: dict[int, tuple[int, str, int]] = {}
_open_lock = threading.Lock()
_backward_range = [-1]  # the innermost "backward" range of the current backward() call


def enter_module_backward(native: Any, label: str) -> None:
    """On an engine thread, as the backward of the module ``label`` begins (a hook on its
    output's node): close this thread's previous module range, open one for ``label``."""
    from hookmagic.cupti.ranges import RECORDER, RangeRecord

    thread = threading.get_native_id()
    now = native.timestamp()
    range_id = next(RECORDER.ids)
    with _open_lock:
        previous = _open.pop(thread, None)
        _open[thread] = (range_id, label, now)
    native.set_backward_range(range_id)
    if previous is not None:
        _record(RECORDER, RangeRecord, previous, now, thread)


def _record(recorder: Any, record_type: Any, entry: tuple[int, str, int], end: int,
            thread: int) -> None:
    range_id, label, start = entry
    if recorder.active:
        with recorder.lock:
            recorder.records.append(record_type(range_id, f"backward of {label}", start, end,
                                                thread, 1, _backward_range[0], "module_backward"))


def _close_module_ranges(native: Any) -> None:
    from hookmagic.cupti.ranges import RECORDER, RangeRecord

    now = native.timestamp()
    with _open_lock:
        entries = list(_open.items())
        _open.clear()
    for thread, entry in entries:
        _record(RECORDER, RangeRecord, entry, now, thread)


def install(native: Any) -> Callable[[], None] | None:
    """Wrap torch.autograd's entry points for one capture; returns the undo, or None."""
    torch = sys.modules.get("torch")
    autograd = getattr(torch, "autograd", None) if torch is not None else None
    if autograd is None or not all(callable(getattr(autograd, n, None)) for n in _NAMES):
        return None
    from hookmagic.cupti.ranges import range as hm_range

    originals = {name: getattr(autograd, name) for name in _NAMES}

    def wrap(name: str, original: Callable) -> Callable:
        @functools.wraps(original)
        def attributed(*args: Any, **kwargs: Any) -> Any:
            with hm_range("backward") as outer:
                native.set_fallback(1)  # the caller's stack, without this frame
                _backward_range[0] = outer._id
                try:
                    return original(*args, **kwargs)
                finally:
                    native.clear_fallback()
                    _close_module_ranges(native)
        attributed.__hookmagic_original__ = original  # type: ignore[attr-defined]
        return attributed

    for name, original in originals.items():
        setattr(autograd, name, wrap(name, original))

    def uninstall() -> None:
        for name, original in originals.items():
            current = getattr(autograd, name, None)
            if getattr(current, "__hookmagic_original__", None) is original:
                setattr(autograd, name, original)
        native.clear_fallback()

    return uninstall
