"""Writing a :class:`~hookmagic.traceset.TraceSet` as one folder (``TraceSet.save``), and
telling such a folder from anything else (:func:`sniff`); :mod:`hookmagic.traceset.io` reads it
back.

``TraceSet.save(path)`` writes::

    path/traceset.json      {"format": "hookmagic.traceset", "hookmagic_kind": "traceset",
                             "format_version": 1, "job_id": ..., "ranks": [{"rank", "status",
                             "reason"}, ...]}
    path/rank=<N>/          one trace folder per rank with data (hookmagic.trace.folder)

Ranks without data (missing, damaged, unavailable) are kept in ``traceset.json`` with their
reason, so the set reads back with the same ranks. :func:`sniff` tells such a folder from
anything else; :func:`load` opens it (what ``hookmagic.load(path)`` does for this kind). Rank
folders are found by the ranks the manifest lists, never by a path it names.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from hookmagic.common.results import SAVED_KIND_KEY
from hookmagic.trace import schema
from hookmagic.traceset.members import Member, TraceSetError

MANIFEST = "traceset.json"
FORMAT = "hookmagic.traceset"
KIND = "traceset"
FORMAT_VERSION = 1
STATUSES = ("complete", "partial", "unavailable", "missing", "damaged")


class TraceSetFileError(TraceSetError):
    """A saved TraceSet folder is damaged or not one; the message says what is wrong."""


def save_traceset(ts: Any, path: str | os.PathLike) -> Path:
    """Write ``ts`` as one folder at ``path`` (see the module); returns the folder's path.

    An existing saved set at ``path`` is replaced; any other existing path is refused. The
    folder is written under a temporary name and renamed into place."""
    path = Path(os.path.expanduser(os.fspath(path)))
    if path.exists() and not sniff(path):
        raise TraceSetFileError(f"{str(path)!r} exists and is not a saved TraceSet; "
                                "choose another path")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    staged = ts.table_files()
    try:
        tmp.mkdir()
        ranks = []
        for m in ts.members:
            ranks.append({"rank": m.rank, "status": m.status, "reason": m.reason})
            if m.has_data:
                _write_rank(m, {t: staged[t].get(m.rank) for t in schema.TABLE_NAMES},
                            tmp / f"rank={m.rank}")
        manifest = {"format": FORMAT, SAVED_KIND_KEY: KIND, "format_version": FORMAT_VERSION,
                    "job_id": ts.job_id, "ranks": ranks}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        if path.exists():
            old = path.with_name(f".{path.name}.{secrets.token_hex(6)}.old")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _write_rank(m: Member, tables: dict[str, str | None], folder: Path) -> None:
    """One rank's trace folder: its staged Parquet files copied, empty tables written."""
    from hookmagic.trace.io import FORMAT as TRACE_FORMAT
    from hookmagic.trace.model import FORMAT_VERSION as TRACE_VERSION

    folder.mkdir()
    entries = {}
    for name, source in tables.items():
        target = folder / f"{name}.parquet"
        if source is not None:
            shutil.copyfile(source, target)
            rows = pq.read_metadata(target).num_rows
            names = pq.read_schema(target).names
        else:
            empty = pa.Table.from_pandas(schema.empty_table(name), preserve_index=False)
            pq.write_table(empty, target)
            rows, names = 0, empty.column_names
        entries[name] = {"file": target.name, "rows": rows,
                         "extra_columns": [c for c in names if c not in schema.TABLES[name]]}
    manifest = {"format": TRACE_FORMAT, "format_version": TRACE_VERSION, "layout": "folder",
                "tables": entries, "meta": m.meta}
    (folder / "meta.json").write_text(json.dumps(manifest, indent=1, allow_nan=True),
                                      encoding="utf-8")


def sniff(path: Path) -> bool:
    """True when ``path`` is a folder a TraceSet was saved in (looks at its manifest only;
    never raises)."""
    try:
        path = Path(path)
        manifest = path / MANIFEST
        if not path.is_dir() or not manifest.is_file() or manifest.stat().st_size > 1 << 26:
            return False
        with open(manifest, "rb") as fh:
            head = fh.read(4096)
        return FORMAT.encode() in head and f'"{SAVED_KIND_KEY}"'.encode() in head
    except (OSError, ValueError):
        return False
