"""A :class:`~hookmagic.traceset.TraceSet` saved as one folder, and read back.

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
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from hookmagic.common import files
from hookmagic.common.results import SAVED_KIND_KEY
from hookmagic.trace import schema
from hookmagic.traceset.members import MAX_RANKS, Member, TraceSetError

if TYPE_CHECKING:  # pragma: no cover
    from hookmagic.traceset.model import TraceSet

MANIFEST = "traceset.json"
FORMAT = "hookmagic.traceset"
KIND = "traceset"
FORMAT_VERSION = 1
_STATUSES = ("complete", "partial", "unavailable", "missing", "damaged")


class TraceSetFileError(TraceSetError):
    """A saved TraceSet folder is damaged or not one; the message says what is wrong."""


def save_traceset(ts: "TraceSet", path: str | os.PathLike) -> Path:
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


def load(path: str | os.PathLike) -> "TraceSet":
    """Open a folder written by ``TraceSet.save`` as a :class:`TraceSet` with the same ranks,
    statuses and reasons. Raises :class:`TraceSetFileError` for a damaged manifest."""
    from hookmagic.traceset.model import TraceSet, build_traceset

    path = Path(os.path.expanduser(os.fspath(path)))
    manifest = files.load_json_file(path / MANIFEST, f"the {MANIFEST} of a saved TraceSet",
                                    TraceSetFileError, gzip_ok=False)
    if not isinstance(manifest, dict) or manifest.get(SAVED_KIND_KEY) != KIND \
            or manifest.get("format") != FORMAT or not isinstance(manifest.get("ranks"), list):
        raise TraceSetFileError(f"{str(path)!r} is not a saved TraceSet (its {MANIFEST} lacks "
                                f"format {FORMAT!r} or its rank list)")
    if len(manifest["ranks"]) > MAX_RANKS:
        raise TraceSetFileError(f"{str(path)!r}: its {MANIFEST} lists "
                                f"{len(manifest['ranks'])} ranks, more than {MAX_RANKS}")
    listed: dict[int, dict[str, Any]] = {}
    for entry in manifest["ranks"]:
        rank = entry.get("rank") if isinstance(entry, dict) else None
        status = entry.get("status") if isinstance(entry, dict) else None
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < MAX_RANKS \
                or status not in _STATUSES or rank in listed:
            raise TraceSetFileError(f"{str(path)!r}: its {MANIFEST} holds an impossible rank "
                                    f"entry {str(entry)[:80]!r}")
        listed[rank] = entry
    with_data = [path / f"rank={r}" for r, e in listed.items()
                 if e["status"] in ("complete", "partial")]
    job = manifest.get("job_id")
    job = job if isinstance(job, str) else ""
    members: list[Member] = []
    if with_data:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opened = build_traceset(with_data, job=job or None)
        members = [m for m in opened.members if m.rank in listed and m.layout]
        opened.members = []   # its members now belong to the set made below
    present = {m.rank for m in members}
    for rank, entry in listed.items():
        if rank not in present:
            reason = entry.get("reason")
            status = entry["status"]
            if status in ("complete", "partial"):   # listed with data, its folder unreadable
                status, reason = "damaged", f"its folder rank={rank} is missing or unreadable"
            members.append(Member("", rank, status, str(reason or "")[:2000]))
    import hookmagic.multirank  # noqa: F401  (the TraceSet's methods)

    return TraceSet(members, job_id=job)
