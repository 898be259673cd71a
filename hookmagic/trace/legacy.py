"""Reading files of the retired allocator-recording format as the tables of a Trace.

Before the ``allocator_events`` table was part of the Trace, allocator recordings were saved by
``hookmagic.memory.recording.save_recording`` (now removed) as a ZIP of ``meta.json``
(``{"format": "hookmagic-allocator-recording", "meta": {...}}``), ``allocator_events.parquet``
and, optionally, ``stacks.parquet``. ``hookmagic.load(path)`` still opens such files: this
module reads them, within the same input budgets as any trace file, for
:func:`hookmagic.trace.io.load_trace`. Nothing writes this format any more: save with
``Trace.save``.

The old meta's keys are kept; ``recorded_on`` (GPU, driver and date, the key every recording
carries) and ``description`` (the workload) are filled from them where they are present.
"""
from __future__ import annotations

import zipfile
from typing import Any

from hookmagic.common import files
from hookmagic.common.errors import InputFileError

#: the ``format`` of the retired files' meta.json
FORMAT = "hookmagic-allocator-recording"
_TABLES = ("allocator_events", "stacks")


def is_allocator_recording(zf: zipfile.ZipFile, path: Any = "") -> bool:
    """Whether the open ZIP ``zf`` (the file ``path``) is of the retired allocator-recording
    format; its meta.json is read within the input budgets (``docs/limits.md``)."""
    if "meta.json" not in zf.namelist():
        return False
    try:
        head = files.parse_json(files.read_zip_member(zf, "meta.json", f"{str(path)!r}"),
                                f"{str(path)!r} meta.json")
    except (ValueError, KeyError, zipfile.BadZipFile, OSError, EOFError):
        return False      # not this format; the trace reader says what is wrong with it
    return isinstance(head, dict) and head.get("format") == FORMAT


def read_allocator_recording(zf: zipfile.ZipFile, path: Any,
                             error: type[InputFileError] = InputFileError
                             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tables (``allocator_events``, ``stacks``) and Trace meta of an allocator recording
    (see :func:`is_allocator_recording`), read within the input budgets.

    A damaged file raises ``error`` (the trace reader passes its
    :class:`~hookmagic.trace.io.TraceFileError`).
    """
    what = f"allocator recording {str(path)!r}"
    head = files.parse_json(files.read_zip_member(zf, "meta.json", what), f"{what} meta.json",
                            error)
    names = set(zf.namelist())
    spent = zf.getinfo("meta.json").file_size
    tables: dict[str, Any] = {}
    for name in _TABLES:
        entry = f"{name}.parquet"
        if entry not in names:
            if name == "allocator_events":
                raise error(f"{str(path)!r} is damaged: this allocator recording has no "
                                     f"{entry}")
            continue
        raw = files.read_zip_member(zf, entry, what, spent)
        spent += len(raw)
        tables[name] = files.read_parquet(raw, f"{what} {entry}", error).to_pandas()
    meta = head.get("meta")
    return tables, converted_meta(meta if isinstance(meta, dict) else {})


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
