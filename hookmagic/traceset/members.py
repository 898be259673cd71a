"""Finding the traces of a set: folders, files and globs, each opened only as far as its manifest.

A *member* is one rank's trace (or the note that a rank's trace is missing or damaged). Nothing
here reads a table: tables are read by DuckDB when a question is asked.
"""
from __future__ import annotations

import glob as _glob
from collections import abc
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from hookmagic.common.errors import InputFileError, InvalidArgument
from hookmagic.trace.folder import is_trace_folder, read_folder_manifest
from hookmagic.trace.io import TraceFileError, _read_manifest

_RANK_NAME = re.compile(r"^rank=(\d+)(?:\.(\d+))?$")
_TEMP_NAME = re.compile(r"^\.rank=(\d+)(?:\.\d+)?\..*\.tmp$")


class TraceSetError(InputFileError):
    """A set of traces could not be opened as asked; the message says why and what to do."""


class TraceSetQueryError(TraceSetError, InvalidArgument):
    """DuckDB refused a query over the set (a syntax error, an unknown table or column)."""


class MixedJobsError(TraceSetError):
    """The traces come from different jobs; pass ``job=`` to pick one (the message lists them)."""


@dataclass
class Member:
    """One rank's trace in a set, or the record that it is missing or damaged.

    ``status`` is the trace's own (``"complete"``, ``"partial"``, ``"unavailable"``) or
    ``"missing"`` / ``"damaged"``; ``reason`` says why in words; ``layout`` is ``"folder"``,
    ``"file"`` (a ``.hmtrace`` ZIP) or ``""`` when there is nothing to read.
    """

    path: str
    rank: int
    status: str
    reason: str = ""
    layout: str = ""
    capture: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def has_data(self) -> bool:
        return self.layout != "" and self.status in ("complete", "partial")

    @property
    def identity(self) -> dict[str, Any]:
        """``meta["rank"]`` (rank, world size, host, device, GPU UUID, job id, ...)."""
        rank = self.meta.get("rank")
        return rank if isinstance(rank, dict) else {}


def missing_member(rank: int, world: int) -> Member:
    """The record of a rank below the world size that left no trace."""
    return Member("", rank, "missing", f"no trace for rank {rank} (world size {world}): the "
                  "rank did not write one, or stopped before it could")


def expand(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Paths of a directory of rank folders, a glob, one trace, or a list of any of these."""
    if isinstance(paths, (str, os.PathLike)):
        items = [paths]
    elif isinstance(paths, abc.Iterable) and not isinstance(paths, (bytes, abc.Mapping)):
        items = list(paths)
    else:
        raise TraceSetError(f"load_many takes a folder, a glob or a list of traces, not "
                            f"{type(paths).__name__}")
    bad = [item for item in items if not isinstance(item, (str, os.PathLike))]
    if bad:
        raise TraceSetError(f"load_many takes paths; {len(bad)} item(s) are not: "
                            f"{', '.join(repr(b)[:60] for b in bad[:3])}")
    if not items:
        raise TraceSetError("no paths given: pass a folder of rank folders, a glob, or a list of "
                            "trace folders and .hmtrace files")
    out: list[Path] = []
    for item in items:
        text = os.path.expanduser(os.fspath(item))
        if any(ch in text for ch in "*?[") and not os.path.exists(text):
            found = sorted(_glob.glob(text))
            if not found:
                raise TraceSetError(f"no trace matches {text!r}")
            out.extend(Path(p) for p in found)
            continue
        path = Path(text)
        if not path.exists():
            raise TraceSetError(f"no trace or folder at {text!r}")
        if path.is_dir() and not is_trace_folder(path):
            children = sorted(path.iterdir(), key=_sort_key)
            inner = [c for c in children
                     if (c.is_dir() and (_RANK_NAME.match(c.name) or is_trace_folder(c)))
                     or (c.is_file() and c.suffix == ".hmtrace")
                     or _TEMP_NAME.match(c.name)]
            if not inner:
                raise TraceSetError(f"{text!r} holds no traces (expected rank=<N> folders, "
                                    "trace folders or .hmtrace files)")
            out.extend(inner)
        else:
            out.append(path)
    return out


def _sort_key(p: Path) -> tuple:
    m = _RANK_NAME.match(p.name)
    return (0, int(m.group(1)), int(m.group(2) or 0), p.name) if m else (1, 0, 0, p.name)


def open_member(path: Path, position: int) -> Member:
    """Read ``path``'s manifest (never its tables); problems become a damaged member."""
    name_match = _RANK_NAME.match(path.name)
    temp_match = _TEMP_NAME.match(path.name)
    guess = int(name_match.group(1)) if name_match else position
    if temp_match:
        return Member(str(path), int(temp_match.group(1)), "damaged",
                      "the rank stopped while writing its trace (only a temporary folder "
                      "is left)")
    try:
        if path.is_dir():
            manifest = read_folder_manifest(path)
            layout = "folder"
        else:
            manifest = _zip_manifest(path)
            layout = "file"
    except (TraceFileError, OSError) as err:
        return Member(str(path), guess, "damaged", str(err))
    meta = manifest["meta"]
    if meta.get("rank") is not None and not isinstance(meta.get("rank"), dict):
        return Member(str(path), guess, "damaged", f"its rank block is {type(meta['rank']).__name__}"
                      ", not an object of rank, world size, host, ...")
    ident = meta.get("rank") or {}
    try:
        rank = _whole(ident.get("rank", guess), "rank", MAX_RANKS - 1)
        capture = _whole(ident.get("capture", int(name_match.group(2) or 0) if name_match else 0),
                         "capture", 1 << 20)
        if "world_size" in ident:
            _whole(ident["world_size"], "world size", MAX_RANKS, low=1)
        tables = dict(manifest["tables"])
        if layout == "folder":
            root = path.resolve()
            for name, info in tables.items():
                _inside(root, info, name)
    except InvalidRankFile as err:
        return Member(str(path), guess, "damaged", str(err))
    status = str(meta.get("status", "complete"))
    return Member(str(path), rank, status, str(meta.get("reason", "")), layout, capture, meta,
                  tables)


#: the most ranks one set may claim (131,072: beyond the largest jobs that run today); a tiny
#: file saying world_size=10**9 must not make the set build a billion "missing" members
MAX_RANKS = 1 << 17


class InvalidRankFile(TraceFileError):
    """A rank's manifest holds an impossible value or names a file outside its folder."""


def _whole(value: Any, what: str, high: int, low: int = 0) -> int:
    """``value`` as a whole number in [low, high], or :class:`InvalidRankFile`."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidRankFile(f"its {what} is {value!r}, not a whole number")
    try:
        number = int(value)
    except ValueError:
        raise InvalidRankFile(f"its {what} is {value!r}, not a whole number") from None
    if not low <= number <= high:
        raise InvalidRankFile(f"its {what} is {number}, outside {low}..{high}")
    return number


def _inside(root: Path, info: Any, table: str) -> None:
    """A folder's table entry must name a plain file directly inside that folder (``root``,
    resolved): no separator, no ``..``, no absolute path, no symlink leading out."""
    name = info.get("file") if isinstance(info, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidRankFile(f"its manifest gives table {table!r} no file name")
    if "/" in name or "\\" in name or "\0" in name or name in (".", ".."):
        raise InvalidRankFile(f"its manifest points table {table!r} outside the trace folder "
                              f"({name!r}); refused")
    target = root / name
    if target.is_symlink() and root not in target.resolve().parents:
        raise InvalidRankFile(f"its manifest points table {table!r} outside the trace folder "
                              f"({name!r}, a link); refused")


def _zip_manifest(path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as zf:
            return _read_manifest(zf, path)
    except zipfile.BadZipFile:
        raise TraceFileError(f"{str(path)!r} is not a hookmagic trace or is damaged "
                             "(not a readable ZIP container)") from None


def describe_jobs(members: list[Member]) -> dict[str, int]:
    """``{job_id: number of traces}`` over members with a manifest."""
    jobs: dict[str, int] = {}
    for m in members:
        if m.layout:
            job = str(m.identity.get("job_id", ""))
            jobs[job] = jobs.get(job, 0) + 1
    return jobs

