"""Allocator recordings on disk: a ZIP of Parquet tables (allocator_events, stacks) and
meta.json — data only, no pickle. Used until the ``allocator_events`` table is part of the
Trace schema; after that ``Trace.save`` carries the same tables."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pandas as pd

from hookmagic.memory.events import conform_events, empty_stacks

FORMAT = "hookmagic-allocator-recording"


def save_recording(path: str | Path, events: pd.DataFrame, stacks: pd.DataFrame | None = None,
                   meta: dict[str, Any] | None = None) -> str:
    """Write events, stacks and meta (GPU, driver, date, workload...) to ``path``."""
    from hookmagic.common import files
    path = Path(path)

    def write(fh) -> None:
        with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("meta.json", json.dumps({"format": FORMAT, "meta": meta or {}}, indent=1))
            for name, frame in (("allocator_events", events), ("stacks", stacks)):
                if frame is None:
                    continue
                buf = io.BytesIO()
                frame.to_parquet(buf, index=False, compression="zstd")
                zf.writestr(f"{name}.parquet", buf.getvalue())

    files.atomic_write(path, write, "the allocator recording")   # atomic, keeps permissions
    return str(path)


def load_recording(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Read (events, stacks, meta) written by :func:`save_recording`.

    Bounded like every loader (``docs/limits.md``); raises
    :class:`~hookmagic.common.errors.InputFileError` for what is not such a recording.
    """
    from hookmagic.common import files
    from hookmagic.common.errors import HookmagicError, InputFileError
    what = f"allocator recording {str(path)!r}"
    with files.open_input(path, "allocator recording") as fh:
        try:
            zf = zipfile.ZipFile(fh)
        except zipfile.BadZipFile:
            raise InputFileError(f"{what} is not a ZIP container") from None
        with zf:
            try:
                head = files.parse_json(files.read_zip_member(zf, "meta.json", what),
                                        f"{what} meta.json")
                if not isinstance(head, dict) or head.get("format") != FORMAT:
                    raise InputFileError(f"{what} is not an allocator recording")
                names = set(zf.namelist())
                spent = zf.getinfo("meta.json").file_size
                raw = files.read_zip_member(zf, "allocator_events.parquet", what, spent)
                events = conform_events(files.read_parquet(raw, what).to_pandas())
                stacks = (files.read_parquet(files.read_zip_member(
                    zf, "stacks.parquet", what, spent + len(raw)), what).to_pandas()
                    if "stacks.parquet" in names else empty_stacks())
            except HookmagicError:
                raise
            except (KeyError, zipfile.BadZipFile, OSError, EOFError, ValueError, TypeError) as exc:
                raise InputFileError(f"{what} is damaged ({exc})") from None
    meta = head.get("meta", {})
    return events, stacks, meta if isinstance(meta, dict) else {}
