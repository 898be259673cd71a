"""hookmagic's native extension (``hookmagic._native``): does it load, and what build is it."""
from __future__ import annotations

import importlib
import importlib.machinery
import os
from typing import Any


def native_report() -> dict[str, Any]:
    """``loads``, the file, its ABI tag, whether it reads this Python's frames (the Python stacks
    of a capture), and ``error`` when it does not load. Importing it loads neither CUPTI nor
    the driver: both are opened only when a capture starts."""
    out: dict[str, Any] = {"loads": False, "path": "", "abi": "", "size_bytes": None,
                           "frames_supported": None, "error": ""}
    try:
        native = importlib.import_module("hookmagic._native")
    except ImportError as exc:
        out["error"] = str(exc)
        return out
    out["loads"] = True
    out["path"] = path = str(getattr(native, "__file__", "") or "")
    name = os.path.basename(path)
    out["abi"] = next((s.strip(".").removesuffix(".so").removesuffix(".pyd")
                       for s in importlib.machinery.EXTENSION_SUFFIXES if s != ".so" and name.endswith(s)),
                      "")
    try:
        out["size_bytes"] = os.path.getsize(path)
    except OSError:
        pass
    frames = getattr(native, "frames_supported", None)
    out["frames_supported"] = bool(frames()) if callable(frames) else None
    return out
