"""Saving and loading a :class:`~hookmagic.trace.Trace` as one data-only file.

The file is a ZIP container with entries *stored* (not compressed: the Parquet inside is
already zstd-compressed, and stored entries can be read without inflating twice):

- ``meta.json``: ``{"format": "hookmagic.trace", "hookmagic_kind": "trace", "format_version": 1,
  "tables": {name: {"file": "kernels.parquet", "rows": N, "extra_columns": [...]}},
  "meta": {...}}``
- ``<table>.parquet`` for every non-empty table.

No pickle anywhere, so a trace received from someone else is safe to open. Files written by a
newer hookmagic load with a warning: tables and columns this version does not know are left
out, tables the file lacks are empty.
"""
from __future__ import annotations

import io
import json
import os
import warnings
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hookmagic.common import files, limits
from hookmagic.common.accessors import register_method
from hookmagic.common.errors import BadNumbers, HookmagicError, InputFileError, LimitExceeded
from hookmagic.common.progress import progress
from hookmagic.common.results import SAVED_KIND_KEY
from hookmagic.trace import legacy, schema
from hookmagic.trace.model import FORMAT_VERSION, Trace

FORMAT = "hookmagic.trace"
#: what a saved trace records under ``hookmagic_kind`` in its meta.json
KIND = "trace"
META_ENTRY = "meta.json"


class TraceFileError(InputFileError):
    """A file could not be read as a hookmagic trace; the message says why and what to do."""


class TraceNumbersError(TraceFileError, BadNumbers):
    """A trace file holds NaN, infinite or negative times or sizes, or intervals that end
    before they start."""


class UnsavableMeta(HookmagicError, TypeError):
    """A trace's meta holds a value that is not JSON-like, so the trace cannot be saved."""


def save_trace(trace: Trace, path: str | os.PathLike) -> Path:
    """Write ``trace`` to ``path`` (a ZIP of Parquet tables and meta.json); returns the path.

    The write is atomic: a crash midway leaves any earlier file at ``path`` untouched.
    """
    path = files.check_output_path(path, "the trace")
    manifest: dict[str, Any] = {"format": FORMAT, SAVED_KIND_KEY: KIND,
                                "format_version": FORMAT_VERSION, "tables": {}, "meta": _jsonable(trace.meta)}
    entries: list[tuple[str, bytes]] = []
    for name, frame in trace.tables.items():
        if frame.empty:
            continue
        buf = io.BytesIO()
        table = pa.Table.from_pandas(frame, preserve_index=False)
        pq.write_table(table, buf, compression="zstd")
        entry = f"{name}.parquet"
        entries.append((entry, buf.getvalue()))
        manifest["tables"][name] = {
            "file": entry, "rows": len(frame),
            "extra_columns": [c for c in frame.columns if c not in schema.TABLES[name]]}
    meta_bytes = json.dumps(manifest, indent=1, allow_nan=True).encode("utf-8")

    # Written beside the target and renamed over it, so a failed save leaves the old file. Not
    # with mkstemp: its files are private (0600), and a saved trace is meant to be shared.
    # Through a symlink the link's target is replaced; devices and folders are refused; an
    # overwritten file keeps its permissions (hookmagic.common.files.atomic_write).
    def write(fh):
        with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr(META_ENTRY, meta_bytes)
            for entry, data in entries:
                zf.writestr(entry, data)

    files.atomic_write(path, write, "the trace")
    return path


@register_method("Trace")
def save(self: Trace, path: str | os.PathLike) -> Path:
    """Write the trace to one file (ZIP of Parquet tables + meta.json); returns the path.

    Read it back with ``hookmagic.load(path)``. The file holds data only (no pickle), so it
    is safe to share.
    """
    return save_trace(self, path)


def load_trace(path: str | os.PathLike) -> Trace:
    """Read a trace written by :func:`save_trace` (``Trace.save`` or ``%%cudahook --save``).

    Allocator recordings of the retired format (:mod:`hookmagic.trace.legacy`) load too.

    Raises :class:`TraceFileError` when the file is missing, is not a hookmagic trace, or is
    damaged.
    """
    path = Path(os.path.expanduser(os.fspath(path)))
    if not os.path.lexists(path):
        raise TraceFileError(f"no trace file at {str(path)!r}: check the path "
                             "(traces are written by Trace.save() or %%cudahook --save PATH)")
    fh = files.open_input(path, "trace file", TraceFileError)  # refuses folders, FIFOs, devices
    try:
        zf = zipfile.ZipFile(fh, "r")
    except zipfile.BadZipFile:
        hint = (" hookmagic.load() opens files written by Trace.save() or %%cudahook --save, "
                "and torch.profiler (Kineto) trace JSON.")
        fh.seek(0)
        head = fh.read(64)
        fh.close()
        if head[:2] == b"PK":
            raise TraceFileError(f"{str(path)!r} is damaged (a ZIP container that cannot be "
                                 "read, perhaps truncated by an interrupted copy); save or "
                                 "copy the trace again") from None
        head = head.lstrip()
        if head[:1] in (b"{", b"[") or head[:2] == b"\x1f\x8b":
            hint = (" It looks like JSON (perhaps a Chrome/Kineto trace): open it with "
                    "hookmagic.load(), which imports Kineto JSON.")
        raise TraceFileError(f"{str(path)!r} is not a hookmagic trace file (not a ZIP "
                             f"container).{hint}") from None
    except BaseException:
        fh.close()
        raise
    with fh, zf:
        _check_members(zf, path)
        if legacy.is_allocator_recording(zf, path):  # the retired allocator-recording format
            tables, meta = legacy.read_allocator_recording(zf, path, TraceFileError)
        else:
            tables, meta = _read_tables(zf, path)
    if "allocator_events" in tables:
        tables["allocator_events"] = _known_actions(tables["allocator_events"], path)
    return trace_from_file(tables, meta, path)


def trace_from_file(tables: dict[str, Any], meta: dict[str, Any], path: Path) -> Trace:
    """The Trace of tables and meta read from ``path``; impossible numbers and tables that do
    not fit the schema raise :class:`TraceNumbersError` / :class:`TraceFileError`."""
    refuse_bad_numbers(tables, str(path))
    try:
        return Trace(tables, meta)
    except BadNumbers as err:
        raise TraceNumbersError(f"{str(path)!r}: {err}") from None
    except (ValueError, TypeError, OverflowError) as err:   # e.g. text in a time column
        raise TraceFileError(f"{str(path)!r} is damaged: a table does not fit the trace "
                             f"schema ({err}); save the trace again from its source") from None


def _read_tables(zf: zipfile.ZipFile, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tables and meta of a trace file (its manifest says which tables it holds)."""
    manifest = _read_manifest(zf, path)
    tables = {}
    spent = [zf.getinfo(META_ENTRY).file_size]
    items = manifest["tables"].items()
    for name, info in progress(items, desc=f"loading {path.name}", total=len(items), unit="table"):
        if name not in schema.TABLES:
            warnings.warn(f"{path.name}: table {name!r} is unknown to this hookmagic "
                          "(file from a newer version?); it was left out", stacklevel=3)
            continue
        tables[name] = _read_table(zf, path, name, info, spent)
    return tables, manifest["meta"]


def refuse_bad_numbers(tables: dict[str, Any], where: str) -> None:
    """Raise :class:`TraceNumbersError` when trace tables read from ``where`` hold impossible
    numbers (see :func:`hookmagic.trace.schema.number_problems`): summed, they would silently
    shrink totals."""
    problems = schema.number_problems(tables)
    if problems:
        raise TraceNumbersError(f"{where!r} is damaged: {'; '.join(problems)} (measured times "
                                "and sizes are never negative)")


def _check_members(zf: zipfile.ZipFile, path: Path) -> None:
    """The container's declared sizes, before any member is read: within the bytes budget."""
    infos = zf.infolist()
    if len(infos) > 4 * len(schema.TABLES) + 16:
        raise TraceFileError(f"{str(path)!r} is not a hookmagic trace: its ZIP holds "
                             f"{len(infos):,} entries (a trace has one per table)")
    limits.check(limits.MAX_BYTES, sum(i.file_size for i in infos),
                 f"trace file {str(path)!r} (sum of its members' declared sizes)")
    for info in infos:   # a bomb is refused here, before any member is inflated
        files.check_ratio(info.file_size, info.compress_size,
                          f"trace file {str(path)!r} (member {info.filename!r})", declared=True)


def _known_actions(events: Any, path: Path) -> Any:
    """Allocator events whose action this hookmagic knows; the others (a file from a newer
    version) are left out with a warning, as unknown tables and columns are."""
    if "action" not in events.columns:
        raise TraceFileError(f"{str(path)!r} is damaged: its allocator_events table has no "
                             "action column; save the trace again from its source")
    known = events["action"].isin(schema.ALLOCATOR_ACTIONS).to_numpy()
    if known.all():
        return events
    unknown = sorted(set(events.loc[~known, "action"].astype(str)))
    warnings.warn(f"{path.name}: allocator action(s) {unknown} are unknown to this hookmagic "
                  f"(file from a newer version?); {int((~known).sum())} such row(s) were left "
                  "out", stacklevel=3)
    return events.loc[known].reset_index(drop=True)


def _read_manifest(zf: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    try:
        raw = files.read_zip_member(zf, META_ENTRY, f"trace file {str(path)!r}")
    except LimitExceeded:
        raise
    except KeyError:
        raise TraceFileError(f"{str(path)!r} is a ZIP file but not a hookmagic trace "
                             f"(it has no {META_ENTRY})") from None
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise TraceFileError(f"{str(path)!r} is damaged ({err}); save the trace again "
                             "from its source") from None
    try:
        manifest = files.parse_json(raw, f"{META_ENTRY} of {str(path)!r}", TraceFileError)
    except LimitExceeded:
        raise
    except TraceFileError as err:
        raise TraceFileError(f"{str(path)!r} is damaged: {err}; save the trace again from "
                             "its source") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise TraceFileError(f"{str(path)!r} is not a hookmagic trace (its {META_ENTRY} does "
                             f"not say format {FORMAT!r})")
    version = manifest.get("format_version")
    if not isinstance(version, int):
        raise TraceFileError(f"{str(path)!r} is damaged: no format_version in {META_ENTRY}")
    if version > FORMAT_VERSION:
        warnings.warn(f"{path.name} was written by a newer hookmagic (trace format {version}, "
                      f"this version reads {FORMAT_VERSION}); reading what this version "
                      "understands. Upgrade hookmagic to see everything.", stacklevel=3)
    if not isinstance(manifest.get("tables"), dict) or not isinstance(manifest.get("meta"), dict):
        raise TraceFileError(f"{str(path)!r} is damaged: {META_ENTRY} lacks its table list "
                             "or meta")
    return manifest


#: how Arrow says the process ran out of memory or threads (not that the file is damaged)
_RESOURCES = re.compile(r"out of memory|Resource temporarily unavailable|Cannot allocate memory|"
                        r"Failed to launch worker thread", re.IGNORECASE)


def _out_of_memory(path: Path, name: str, err: BaseException) -> LimitExceeded:
    return LimitExceeded(f"table {name!r} of trace file {str(path)!r} needs more memory than this "
                         f"process can have ({type(err).__name__}: {err}); HOOKMAGIC_MAX_ROWS and "
                         "HOOKMAGIC_MAX_BYTES set lower budgets (docs/limits.md)")


def _read_table(zf: zipfile.ZipFile, path: Path, name: str, info: Any, spent: list[int]):
    what = f"table {name!r} of trace file {str(path)!r}"
    try:
        entry, rows = info["file"], int(info["rows"])
        extras = set(info.get("extra_columns", []))
        limits.check(limits.MAX_ROWS, rows, what)
        data = files.read_zip_member(zf, entry, f"trace file {str(path)!r}", spent[0])
        spent[0] += len(data)
        pf = pq.ParquetFile(pa.BufferReader(data))
        limits.check(limits.MAX_ROWS, pf.metadata.num_rows, what)
        if pf.metadata.num_rows != rows:
            raise TraceFileError(f"{str(path)!r} is damaged: table {name!r} has "
                                 f"{pf.metadata.num_rows} rows, its manifest says {rows}")
        decoded = sum(pf.metadata.row_group(i).total_byte_size
                      for i in range(pf.metadata.num_row_groups))
        limits.check(limits.MAX_BYTES, spent[0] + decoded, f"{what} (decoded)")
        table = pf.read()
    except (LimitExceeded, TraceFileError):
        raise
    except (MemoryError, pa.ArrowMemoryError) as err:
        raise _out_of_memory(path, name, err) from None
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise TraceFileError(f"{str(path)!r} is damaged: table {name!r} is missing or "
                             f"unreadable ({err}); save the trace again from its source") from None
    except (pa.ArrowException, zipfile.BadZipFile, OSError, EOFError, zlib.error,
            NotImplementedError, RuntimeError) as err:
        if _RESOURCES.search(str(err)):   # the process ran short, the file may be fine
            raise _out_of_memory(path, name, err) from None
        raise TraceFileError(f"{str(path)!r} is damaged: table {name!r} could not be read "
                             f"({err}); save the trace again from its source") from None
    if table.num_rows != rows:
        raise TraceFileError(f"{str(path)!r} is damaged: table {name!r} has {table.num_rows} "
                             f"rows, its manifest says {rows}")
    known = schema.TABLES[name]
    # Columns outside the schema that the writer did not list as its own extras come from a
    # newer schema: leave them out rather than carry half-understood data.
    newer = [c for c in table.column_names if c not in known and c not in extras]
    if newer:
        warnings.warn(f"{path.name}: column(s) {newer} of table {name!r} are unknown to this "
                      "hookmagic (file from a newer version?); they were left out", stacklevel=3)
        table = table.drop_columns(newer)
    return table.to_pandas()


def _jsonable(value: Any) -> Any:
    """Meta as plain JSON types; numpy scalars and arrays (common in capture code) converted."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise UnsavableMeta(f"trace meta value {value!r} ({type(value).__name__}) cannot be saved; "
                        "meta must hold JSON-like values")
