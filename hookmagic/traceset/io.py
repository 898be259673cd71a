"""Reading a saved :class:`~hookmagic.traceset.TraceSet` back: :func:`sniff` and :func:`load`,
what ``hookmagic.load(path)`` asks first. The folder's layout is in
:mod:`hookmagic.traceset.saved`, which writes it."""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hookmagic.common import files
from hookmagic.common.results import SAVED_KIND_KEY
from hookmagic.traceset.members import MAX_RANKS, Member
from hookmagic.traceset.saved import (FORMAT, KIND, MANIFEST, STATUSES, TraceSetFileError,
                                      sniff)

if TYPE_CHECKING:  # pragma: no cover
    from hookmagic.traceset.model import TraceSet

__all__ = ["sniff", "load", "TraceSetFileError"]


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
                or status not in STATUSES or rank in listed:
            raise TraceSetFileError(f"{str(path)!r}: its {MANIFEST} holds an impossible rank "
                                    f"entry {str(entry)[:80]!r}")
        listed[rank] = entry
    # a rank's folder is the saved set's own: a link (or a path) leading out of the set is
    # never followed; that rank reads as damaged below
    root = path.resolve()
    with_data = [path / f"rank={r}" for r, e in listed.items()
                 if e["status"] in ("complete", "partial")
                 and not (path / f"rank={r}").is_symlink()
                 and (path / f"rank={r}").resolve().parent == root]
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
    return TraceSet(members, job_id=job)
