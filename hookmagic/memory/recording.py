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
    path = Path(path)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("meta.json", json.dumps({"format": FORMAT, "meta": meta or {}}, indent=1))
        for name, frame in (("allocator_events", events), ("stacks", stacks)):
            if frame is None:
                continue
            buf = io.BytesIO()
            frame.to_parquet(buf, index=False, compression="zstd")
            zf.writestr(f"{name}.parquet", buf.getvalue())
    return str(path)


def load_recording(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Read (events, stacks, meta) written by :func:`save_recording`."""
    with zipfile.ZipFile(Path(path)) as zf:
        head = json.loads(zf.read("meta.json"))
        if head.get("format") != FORMAT:
            raise ValueError(f"{path} is not an allocator recording")
        names = set(zf.namelist())
        events = conform_events(pd.read_parquet(io.BytesIO(zf.read("allocator_events.parquet"))))
        stacks = (pd.read_parquet(io.BytesIO(zf.read("stacks.parquet")))
                  if "stacks.parquet" in names else empty_stacks())
    return events, stacks, head.get("meta", {})
