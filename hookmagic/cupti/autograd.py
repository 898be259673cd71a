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
from typing import Any, Callable

_NAMES = ("backward", "grad")


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
            with hm_range("backward"):
                native.set_fallback(1)  # the caller's stack, without this frame
                try:
                    return original(*args, **kwargs)
                finally:
                    native.clear_fallback()
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
