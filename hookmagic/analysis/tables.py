"""Table access shared by every analysis and view: a trace's table (or an empty one), the rows
on chosen devices and streams, and the name of a capture.

Pure helpers over the trace's DataFrames; they import only the data model's schema.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from hookmagic.trace.schema import empty_table

__all__ = ["table", "as_set", "event_mask", "root_label"]


def table(trace: Any, name: str) -> pd.DataFrame:
    """Table ``name`` of ``trace``, or an empty schema table when the trace lacks it."""
    frame = getattr(trace, name, None)
    if frame is None:
        return empty_table(name)
    return frame


def as_set(value: int | Iterable[int] | None) -> list[int] | None:
    """``device=``/``stream=`` arguments as a list of ints (None stays None: no filter)."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return [int(value)]
    return [int(v) for v in value]


def event_mask(frame: pd.DataFrame, device: int | Iterable[int] | None = None,
               stream: int | Iterable[int] | None = None) -> np.ndarray:
    """Boolean mask of the rows of ``frame`` on ``device`` and ``stream`` (None: all)."""
    mask = np.ones(len(frame), dtype=bool)
    devices, streams = as_set(device), as_set(stream)
    if devices is not None and "device" in frame:
        mask &= np.isin(frame["device"].to_numpy(), devices)
    if streams is not None and "stream" in frame:
        mask &= np.isin(frame["stream"].to_numpy(), streams)
    return mask


def root_label(trace: Any) -> str:
    """The name of the tree's root: the capture's label, else ``"capture"``."""
    meta = getattr(trace, "meta", None) or {}
    return str(meta.get("label") or "capture")
