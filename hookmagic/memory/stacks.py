"""Interning Python stacks into the ``stacks`` table (stack_id, depth, filename, function, line)."""
from __future__ import annotations

import sys
from collections.abc import Iterable

import pandas as pd

from hookmagic.trace import schema


class StackInterner:
    """Gives each distinct stack one id; ``frames`` are (filename, function, line), outermost
    first (depth 0)."""

    def __init__(self, first_id: int = 0) -> None:
        self._ids: dict[tuple, int] = {}
        self._next = first_id

    def intern(self, frames: Iterable[tuple[str, str, int]]) -> int:
        key = tuple(frames)
        if not key:
            return -1
        sid = self._ids.get(key)
        if sid is None:
            sid = self._ids[key] = self._next
            self._next += 1
        return sid

    def table(self) -> pd.DataFrame:
        rows = [(sid, depth, f, fn, int(line))
                for key, sid in self._ids.items() for depth, (f, fn, line) in enumerate(key)]
        if not rows:
            return schema.empty_table("stacks")
        return schema.conform("stacks", pd.DataFrame(rows, columns=list(schema.TABLES["stacks"])))


def python_frames(skip: int = 1, limit: int = 64) -> list[tuple[str, str, int]]:
    """The calling thread's Python stack, outermost first, without this helper's frames."""
    f = sys._getframe(skip + 1)
    out = []
    while f is not None and len(out) < limit:
        code = f.f_code
        out.append((code.co_filename, code.co_name, f.f_lineno))
        f = f.f_back
    out.reverse()
    return out
