"""Reading files of the retired allocator-recording format as a :class:`~hookmagic.trace.Trace`.

Before the ``allocator_events`` table was part of the Trace, allocator recordings were saved by
``hookmagic.memory.recording.save_recording`` (now removed) as a ZIP of ``meta.json`` (``{"format":
"hookmagic-allocator-recording", "meta": {...}}``), ``allocator_events.parquet`` and, optionally,
``stacks.parquet``. ``hookmagic.load(path)`` still opens such files: this module converts them to
a Trace holding those two tables. Nothing writes this format any more; save with ``Trace.save``.

The old meta's keys are kept; ``recorded_on`` (GPU, driver and date, the key every recording
carries) and ``description`` (the workload) are filled from them where they are present.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pandas as pd

from hookmagic.trace.model import Trace

#: the ``format`` of the retired files' meta.json
FORMAT = "hookmagic-allocator-recording"
_TABLES = ("allocator_events", "stacks")


def is_allocator_recording(zf: zipfile.ZipFile) -> bool:
    """Whether the open ZIP ``zf`` is a file of the retired allocator-recording format."""
    try:
        head = json.loads(zf.read("meta.json"))
    except (KeyError, ValueError, zipfile.BadZipFile, OSError, EOFError):
        return False
    return isinstance(head, dict) and head.get("format") == FORMAT


def read_allocator_recording(zf: zipfile.ZipFile, path: str | Path) -> Trace:
    """The Trace of an allocator recording (see :func:`is_allocator_recording`).

    A damaged file raises :class:`~hookmagic.trace.io.TraceFileError`.
    """
    from hookmagic.trace.io import TraceFileError

    head = json.loads(zf.read("meta.json"))
    names = set(zf.namelist())
    tables: dict[str, pd.DataFrame] = {}
    for name in _TABLES:
        entry = f"{name}.parquet"
        if entry not in names:
            if name == "allocator_events":
                raise TraceFileError(f"{str(path)!r} is damaged: this allocator recording has no "
                                     f"{entry}")
            continue
        try:
            tables[name] = pd.read_parquet(io.BytesIO(zf.read(entry)))
        except Exception as err:  # pyarrow raises several kinds for a damaged table
            raise TraceFileError(f"{str(path)!r} is damaged: {entry} could not be read "
                                 f"({err})") from None
    return Trace(tables, converted_meta(head.get("meta") or {}))


def converted_meta(old: dict[str, Any]) -> dict[str, Any]:
    """The Trace meta of an old recording's meta (its keys kept, Trace keys added)."""
    meta: dict[str, Any] = {**old, "source": "recording", "converted_from": FORMAT}
    if "recorded_on" not in meta and old.get("gpu"):
        driver = f", driver {old['driver']}" if old.get("driver") else ""
        date = f", {old['date']}" if old.get("date") else ""
        meta["recorded_on"] = f"{old['gpu']}{driver}{date}"
    if "description" not in meta and old.get("workload"):
        meta["description"] = str(old["workload"])
    return meta
