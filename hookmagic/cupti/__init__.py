"""The live CUPTI capture behind ``hookmagic.capture()`` and ``hookmagic.range()``.

Only this package talks to the native CUPTI session; everything it produces is a
:class:`~hookmagic.trace.Trace`.
"""
from __future__ import annotations

import importlib
from functools import lru_cache
from types import ModuleType

from hookmagic.cupti.errors import CaptureFailed, CaptureUnavailable
from hookmagic.cupti.ranges import range


@lru_cache(maxsize=1)
def _import_native() -> tuple[ModuleType | None, str]:
    try:
        # the compiled extension, by its full name (not through hookmagic/__init__)
        _native = importlib.import_module("hookmagic._native")
    except ImportError as exc:
        return None, (f"hookmagic's native extension is not built ({exc}); "
                      "reinstall with `pip install .` from a source checkout")
    return _native, ""


def native_module() -> ModuleType | None:
    """The native module once CUPTI is loaded in it, else None (never raises)."""
    native, _ = _import_native()
    if native is None or not native.loaded():
        return None
    return native


from hookmagic.cupti.session import capture  # noqa: E402  (needs native_module)
from hookmagic.cupti.schedule import schedule  # noqa: E402

__all__ = ["capture", "schedule", "range", "CaptureUnavailable", "CaptureFailed", "native_module"]
