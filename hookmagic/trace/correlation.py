"""The correlation-id join: GPU work and the API call (or launch record) that started it.

CUPTI, Kineto and the trace tables give every kernel, copy and memset the ``correlation`` id
of the runtime/driver call that launched it. :class:`CorrelationIndex` is the one way every
part of hookmagic joins on it (the live decoder, the Kineto importer, the launch-latency
analysis, the timeline and the Chrome exporter): vectorised (a sort and a binary search,
no Python loop per row), and with one rule: ids of 0 or below mean "no call" and never match.
"""
from __future__ import annotations

from typing import Literal

import numpy as np

from hookmagic.common.errors import InvalidArgument

__all__ = ["CorrelationIndex"]


class CorrelationIndex:
    """Rows of one table (the callers) indexed by correlation id, for lookups from another.

    ``CorrelationIndex(correlation, keep="first", by=None, **values)``: ``correlation`` is the
    callers' id column; when an id repeats, ``keep`` picks the first or last row, in the order
    of ``by`` (e.g. start times; default: row order). ``values`` are columns to look up by
    name with :meth:`get`.
    """

    def __init__(self, correlation: np.ndarray, keep: Literal["first", "last"] = "first",
                 by: np.ndarray | None = None, **values: np.ndarray) -> None:
        corr = np.asarray(correlation).astype(np.int64)
        if corr.size and corr[0] > 0 and (np.diff(corr) > 0).all():  # the usual case: no sort
            self.keys, self.rows = corr, np.arange(corr.size)
            self.values = {name: np.asarray(v) for name, v in values.items()}
            return
        rows = np.flatnonzero(corr > 0)
        tie = np.arange(corr.size) if by is None else np.asarray(by).astype(np.int64)
        if keep == "last":
            rows = rows[::-1]
        elif keep != "first":
            raise InvalidArgument(f"keep must be 'first' or 'last', not {keep!r}")
        tie = tie[rows] if keep == "first" else -tie[rows]
        # sort by id, then by the tie key; keep the first row of each id
        order = rows[np.lexsort((tie, corr[rows]))]
        keys = corr[order]
        first = np.r_[True, keys[1:] != keys[:-1]] if keys.size else np.zeros(0, dtype=bool)
        #: the distinct ids, ascending
        self.keys: np.ndarray = keys[first]
        #: for each id in :attr:`keys`, its row in the callers' table
        self.rows: np.ndarray = order[first]
        self.values = {name: np.asarray(v)[self.rows] for name, v in values.items()}

    def __len__(self) -> int:
        return int(self.keys.size)

    def positions(self, correlation: np.ndarray) -> np.ndarray:
        """For each id, its position in :attr:`keys` (and :attr:`rows`), or -1 if not found."""
        query = np.asarray(correlation).astype(np.int64)
        if self.keys.size == 0 or query.size == 0:
            return np.full(query.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.keys, query), 0, self.keys.size - 1)
        return np.where((self.keys[pos] == query) & (query > 0), pos, -1)

    def row_of(self, correlation: np.ndarray) -> np.ndarray:
        """For each id, the row of its caller in the indexed table, or -1 if none."""
        pos = self.positions(correlation)
        if self.rows.size == 0:
            return pos
        return np.where(pos >= 0, self.rows[np.maximum(pos, 0)], -1)

    def get(self, name: str, correlation: np.ndarray, default) -> np.ndarray:
        """Value column ``name`` of each id's caller, ``default`` where there is none."""
        return self.at(name, self.positions(correlation), default)

    def at(self, name: str, pos: np.ndarray, default) -> np.ndarray:
        """Value column ``name`` at positions ``pos`` from :meth:`positions` (looked up once
        for several columns), ``default`` where a position is -1."""
        values = self.values[name]
        out = np.full(pos.shape, default, dtype=values.dtype if values.size else np.int64)
        hit = pos >= 0
        out[hit] = values[pos[hit]]
        return out
