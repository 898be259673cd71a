"""A :class:`~hookmagic.trace.Trace` as a folder of Parquet files, readable by DuckDB as it is.

The single-file form (``.hmtrace``, :mod:`hookmagic.trace.io`) is a ZIP container: engines
such as DuckDB cannot read the Parquet inside it without unpacking. A *trace folder* holds
the same data as plain files:

- ``meta.json``: the same manifest as the single file (``{"format": "hookmagic.trace",
  "format_version": 1, "layout": "folder", "tables": {...}, "meta": {...}}``).
- ``<table>.parquet`` for **every** table of the schema, empty ones included, so that a glob
  such as ``run/rank=*/kernels.parquet`` always finds one file per rank with the same columns.

A distributed capture (``hookmagic.capture(dir=...)`` or ``HOOKMAGIC_CAPTURE_DIR``) writes one
folder per rank, named ``rank=<N>`` (``rank=<N>.<K>`` for a rank's K-th capture).
``hookmagic.load(folder)`` opens one; ``hookmagic.load_many(dir)`` opens them together.
Writing is atomic: a folder is written under a temporary name and renamed into place, so a
rank that dies mid-write leaves no half folder under the final name.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from hookmagic.common import files
from hookmagic.common.results import SAVED_KIND_KEY
from hookmagic.trace import schema
from hookmagic.trace.io import (FORMAT, KIND, META_ENTRY, TraceFileError, _jsonable,
                                trace_from_file)
from hookmagic.trace.model import FORMAT_VERSION, Trace

LAYOUT = "folder"


def save_trace_folder(trace: Trace, path: str | os.PathLike) -> str:
    """Write ``trace`` as a folder (``meta.json`` + one Parquet file per table); returns its path.

    An existing folder at ``path`` that holds a trace is replaced; any other existing path is
    refused (nothing is deleted that hookmagic did not write).
    """
    path = Path(os.path.expanduser(os.fspath(path)))
    if path.exists() and not is_trace_folder(path):
        raise TraceFileError(f"{str(path)!r} exists and is not a trace folder; "
                             "choose another path")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    manifest: dict[str, Any] = {"format": FORMAT, SAVED_KIND_KEY: KIND,
                                "format_version": FORMAT_VERSION, "layout": LAYOUT, "tables": {}, "meta": _jsonable(trace.meta)}
    try:
        tmp.mkdir()
        for name, frame in trace.tables.items():
            entry = f"{name}.parquet"
            table = pa.Table.from_pandas(frame, preserve_index=False)
            pq.write_table(table, tmp / entry, compression="zstd")
            manifest["tables"][name] = {
                "file": entry, "rows": len(frame),
                "extra_columns": [c for c in frame.columns if c not in schema.TABLES[name]]}
        # meta.json last: a folder with a manifest is a finished one.
        (tmp / META_ENTRY).write_text(json.dumps(manifest, indent=1, allow_nan=True),
                                      encoding="utf-8")
        files.replace_folder(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(path)


def is_trace_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder holding a trace manifest (``meta.json``)."""
    path = Path(os.fspath(path))
    return path.is_dir() and (path / META_ENTRY).is_file()


def read_folder_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of the trace folder ``path``, checked; raises :class:`TraceFileError`."""
    path = Path(os.path.expanduser(os.fspath(path)))
    meta_file = path / META_ENTRY
    if not meta_file.is_file():
        raise TraceFileError(f"{str(path)!r} is a folder but not a trace folder (it has no "
                             f"{META_ENTRY}); a rank that stopped before its capture was "
                             "saved leaves none")
    if meta_file.is_symlink() and path.resolve() != meta_file.resolve().parent:
        # a link to another folder's manifest would put that trace's meta in this one
        raise TraceFileError(f"{str(path)!r}: its {META_ENTRY} is a link to a file outside the "
                             "folder; refused")
    # bounded: a hostile meta.json cannot exhaust memory or the parser
    manifest = files.load_json_file(meta_file, f"the {META_ENTRY} of trace folder",
                                    TraceFileError, gzip_ok=False)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise TraceFileError(f"{str(path)!r} is not a hookmagic trace folder (its "
                             f"{META_ENTRY} does not say format {FORMAT!r})")
    if not isinstance(manifest.get("tables"), dict) or not isinstance(manifest.get("meta"), dict):
        raise TraceFileError(f"{str(path)!r} is damaged: {META_ENTRY} lacks its table list "
                             "or meta")
    version = manifest.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        warnings.warn(f"{path.name} was written by a newer hookmagic (trace format {version}, "
                      f"this version reads {FORMAT_VERSION}); reading what this version "
                      "understands", stacklevel=3)
    return manifest


def folder_table_files(path: str | os.PathLike) -> dict[str, Path]:
    """``{table: parquet path}`` for the tables of trace folder ``path`` that this version knows."""
    path = Path(os.path.expanduser(os.fspath(path)))
    manifest = read_folder_manifest(path)
    out = {}
    for name, info in manifest["tables"].items():
        if name in schema.TABLES and isinstance(info, dict) and "file" in info:
            out[name] = path / str(info["file"])
    return out


def load_trace_folder(path: str | os.PathLike) -> Trace:
    """Read a trace folder written by :func:`save_trace_folder` into a :class:`Trace`."""
    path = Path(os.path.expanduser(os.fspath(path)))
    manifest = read_folder_manifest(path)
    tables = {}
    for name, info in manifest["tables"].items():
        if name not in schema.TABLES:
            warnings.warn(f"{path.name}: table {name!r} is unknown to this hookmagic "
                          "(folder from a newer version?); it was left out", stacklevel=2)
            continue
        try:
            file, rows = path / str(info["file"]), int(info["rows"])
            extras = set(info.get("extra_columns", []))
            if file.resolve().parent != path.resolve():
                raise TraceFileError(f"its file {info['file']!r} is outside the folder")
            table = files.read_parquet(file, f"table {name!r} of {str(path)!r}",
                                       TraceFileError)
        except (KeyError, TypeError, ValueError, pa.ArrowException, OSError) as err:
            raise TraceFileError(f"{str(path)!r} is damaged: table {name!r} could not be "
                                 f"read ({err})") from None
        if table.num_rows != rows:
            raise TraceFileError(f"{str(path)!r} is damaged: table {name!r} has "
                                 f"{table.num_rows} rows, its manifest says {rows}")
        newer = [c for c in table.column_names
                 if c not in schema.TABLES[name] and c not in extras]
        if newer:
            table = table.drop_columns(newer)
        tables[name] = table.to_pandas()
    from hookmagic.trace.io import refuse_bad_numbers   # as a .hmtrace file is held to them
    refuse_bad_numbers(tables, str(path))
    return trace_from_file(tables, manifest["meta"], path)
