"""Front door for many ranks: :func:`load_many`, and the methods of a TraceSet.

``hookmagic.load_many(dir)`` opens every rank's trace written by ``hookmagic.capture(dir=...)``
or ``HOOKMAGIC_CAPTURE_DIR``; the :class:`~hookmagic.traceset.TraceSet` it returns answers:

- ``summary()``: the set's headline (:class:`~hookmagic.common.results.Headline`: ranks,
  problems, steps, the rank most often last, ...; ``.to_frame()`` for a table);
- ``per_rank()``: one row per rank (GPU time, compute vs communication, overlap, waiting
  inside collectives, how often it was last);
- ``stragglers()``: per step, the rank that arrived last at a collective, by how much, and
  whether its GPU was computing or waiting for its host;
- ``collectives()`` / ``skew()``: every NCCL kernel matched across ranks;
- ``overlap()``: communication/computation overlap per rank;
- ``clock()``: how the ranks' clocks were aligned, with the error of the estimate;
- ``vs_median()``: GPU time per kernel name of each rank against the median rank;
- ``timeline()``, ``straggler_chart()``, ``vs_median_heatmap()``: Plotly figures;
- ``save(path)``: one folder that ``hookmagic.load(path)`` opens again as a TraceSet;
- ``sql(query)``: anything else, in DuckDB over the ``kernels``, ``memcpy``, ... views.

This module only wires the data (:mod:`hookmagic.traceset`), the analyses
(:mod:`hookmagic.analysis.ranks`) and the views (:mod:`hookmagic.views.ranks`) together; the
methods are registered on TraceSet from here (:mod:`hookmagic.common.accessors`), each
importing its analysis or view when called.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Iterable

from hookmagic.common.accessors import call_with, register_method

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from hookmagic.common.results import Headline
    from hookmagic.traceset.model import TraceSet

__all__ = ["load_many"]


def load_many(paths: str | os.PathLike | Iterable[str | os.PathLike], *, job: str | None = None,
              capture: int | None = None, memory_limit: str = "3GB",
              threads: int | None = None) -> "TraceSet":
    """Open many traces (one per rank) as one :class:`~hookmagic.traceset.TraceSet`.

    ``paths``: the folder ``capture(dir=...)`` wrote (its ``rank=<N>`` folders), a glob such as
    ``"runs/*.hmtrace"``, or a list of trace folders and ``.hmtrace`` files. Traces of
    different jobs raise :class:`~hookmagic.traceset.MixedJobsError` (it lists them) unless
    ``job`` picks one. Missing, damaged or unavailable ranks are kept with their reason (see
    ``.problems``; one warning lists them) and the others are analysed. ``capture`` picks a
    rank's N-th capture when it wrote several. Queries run in DuckDB within ``memory_limit``.
    """
    from hookmagic.traceset.model import build_traceset

    return build_traceset(paths, job=job, capture=capture, memory_limit=memory_limit,
                          threads=threads)


@register_method("TraceSet")
def summary(self: "TraceSet") -> "Headline":
    """The set's headline: ranks (with data, with problems), steps, the rank most often last
    and its median lateness; ``.to_frame()`` gives it as a table."""
    from hookmagic.analysis.ranks import describe
    return describe(self)


@register_method("TraceSet")
def per_rank(self: "TraceSet") -> "pd.DataFrame":
    """One row per rank: GPU time, compute/communication, overlap, waits, times last."""
    from hookmagic.analysis.ranks import rank_summary
    return rank_summary(self)


@register_method("TraceSet")
def stragglers(self: "TraceSet") -> "pd.DataFrame":
    """Per step, the rank that arrived last at a collective, by how much, and why."""
    from hookmagic.analysis.ranks import stragglers as analyse
    return analyse(self)


@register_method("TraceSet")
def collectives(self: "TraceSet") -> "pd.DataFrame":
    """Every NCCL kernel of every rank, matched across ranks, on one clock, with its wait."""
    from hookmagic.analysis.ranks import collectives as analyse
    return analyse(self)


@register_method("TraceSet")
def skew(self: "TraceSet") -> "pd.DataFrame":
    """One row per collective: who arrived last and how late."""
    from hookmagic.analysis.ranks import collective_skew
    return collective_skew(self)


@register_method("TraceSet")
def overlap(self: "TraceSet") -> "pd.DataFrame":
    """Communication/computation overlap per rank."""
    from hookmagic.analysis.ranks import overlap as analyse
    return analyse(self)


@register_method("TraceSet")
def clock(self: "TraceSet", *, max_error_ns: int | None = None) -> "pd.DataFrame":
    """How each rank's clock was aligned to the reference rank's, and the estimate's error;
    ``max_error_ns`` is the largest error accepted (default:
    ``hookmagic.analysis.ranks.DEFAULT_MAX_CLOCK_ERROR_NS``)."""
    from hookmagic.analysis.ranks import DEFAULT_MAX_CLOCK_ERROR_NS, clock_alignment
    if max_error_ns is None:
        max_error_ns = DEFAULT_MAX_CLOCK_ERROR_NS
    return clock_alignment(self, max_error_ns=max_error_ns)


@register_method("TraceSet")
def vs_median(self: "TraceSet", *, top: int = 20) -> "pd.DataFrame":
    """GPU time per kernel name of each rank against the median rank's."""
    from hookmagic.analysis.ranks import vs_median as analyse
    return analyse(self, top=top)


@register_method("TraceSet")
def timeline(self: "TraceSet", **kw: Any) -> Any:
    """Timeline with one row per rank: compute and communication, on one aligned clock."""
    from hookmagic.views.ranks import rank_timeline_figure
    return call_with(rank_timeline_figure, self, **kw)


@register_method("TraceSet")
def straggler_chart(self: "TraceSet", **kw: Any) -> Any:
    """Per step: how late the last rank arrived at a collective, coloured by rank."""
    from hookmagic.views.ranks import straggler_chart as draw
    return call_with(draw, self, **kw)


@register_method("TraceSet")
def vs_median_heatmap(self: "TraceSet", **kw: Any) -> Any:
    """Heat map: each rank's GPU time per kernel against the median rank."""
    from hookmagic.views.ranks import vs_median_heatmap as draw
    return call_with(draw, self, **kw)
