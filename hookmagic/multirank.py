"""Front door for many ranks: :func:`load_many`, and the analyses and views on a TraceSet.

``hookmagic.load_many(dir)`` opens every rank's trace written by ``hookmagic.capture(dir=...)``
or ``HOOKMAGIC_CAPTURE_DIR``; the :class:`~hookmagic.traceset.TraceSet` it returns answers:

- ``summary()``: one row per rank (GPU time, compute vs communication, overlap, waiting
  inside collectives, how often it was last);
- ``stragglers()``: per step, the rank that arrived last at a collective, by how much, and
  whether its GPU was computing or waiting for its host;
- ``collectives()`` / ``skew()``: every NCCL kernel matched across ranks;
- ``overlap()``: communication/computation overlap per rank;
- ``clock()``: how the ranks' clocks were aligned, with the error of the estimate;
- ``vs_median()``: GPU time per kernel name of each rank against the median rank;
- ``timeline()``, ``straggler_figure()``, ``vs_median_figure()``: Plotly figures;
- ``sql(query)``: anything else, in DuckDB over the ``kernels``, ``memcpy``, ... views.

This module only wires the data (:mod:`hookmagic.traceset`), the analyses
(:mod:`hookmagic.analysis.ranks`) and the views (:mod:`hookmagic.views.ranks`) together.
"""
from __future__ import annotations

import os
from typing import Any, Iterable

import pandas as pd

from hookmagic.analysis import ranks as _analysis
from hookmagic.traceset.model import DEFAULT_MEMORY_LIMIT, TraceSet, build_traceset


def load_many(paths: str | os.PathLike | Iterable[str | os.PathLike], *, job: str | None = None,
              capture: int | None = None, memory_limit: str = DEFAULT_MEMORY_LIMIT,
              threads: int | None = None) -> TraceSet:
    """Open many traces (one per rank) as one :class:`~hookmagic.traceset.TraceSet`.

    ``paths``: the folder ``capture(dir=...)`` wrote (its ``rank=<N>`` folders), a glob such as
    ``"runs/*.hmtrace"``, or a list of trace folders and ``.hmtrace`` files. Traces of
    different jobs raise :class:`~hookmagic.traceset.MixedJobsError` (it lists them) unless
    ``job`` picks one. Missing, damaged or unavailable ranks are kept with their reason (see
    ``.problems``; one warning lists them) and the others are analysed. ``capture`` picks a
    rank's N-th capture when it wrote several. Queries run in DuckDB within ``memory_limit``.
    """
    return build_traceset(paths, job=job, capture=capture, memory_limit=memory_limit,
                          threads=threads)


def _summary(self: TraceSet) -> pd.DataFrame:
    """One row per rank: GPU time, compute/communication, overlap, waits, times last."""
    return _analysis.rank_summary(self)


def _timeline(self: TraceSet, **kw: Any) -> Any:
    """Timeline with one row per rank: compute and communication, on one aligned clock."""
    from hookmagic.views.ranks import rank_timeline_figure

    return rank_timeline_figure(self, **kw)


def _straggler_figure(self: TraceSet, **kw: Any) -> Any:
    """Per step: how late the last rank arrived at a collective, coloured by rank."""
    from hookmagic.views.ranks import straggler_figure

    return straggler_figure(self, **kw)


def _vs_median_figure(self: TraceSet, **kw: Any) -> Any:
    """Heat map: each rank's GPU time per kernel against the median rank."""
    from hookmagic.views.ranks import vs_median_figure

    return vs_median_figure(self, **kw)


TraceSet.summary = _summary
TraceSet.stragglers = _analysis.stragglers
TraceSet.collectives = _analysis.collectives
TraceSet.skew = _analysis.collective_skew
TraceSet.overlap = _analysis.overlap
TraceSet.clock = _analysis.clock_alignment
TraceSet.vs_median = _analysis.vs_median
TraceSet.timeline = _timeline
TraceSet.straggler_figure = _straggler_figure
TraceSet.vs_median_figure = _vs_median_figure

__all__ = ["load_many", "TraceSet"]
