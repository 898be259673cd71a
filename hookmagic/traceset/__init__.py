"""Many traces together (one per rank of a distributed job), queried out of core with DuckDB.

- :class:`TraceSet` (``model.py``): the set, its ``ranks`` table and a DuckDB connection whose
  views are the trace tables with a ``rank`` column.
- ``members.py``: finding and opening the traces (folders, ``.hmtrace`` files, globs) without
  reading their tables; missing and damaged ranks are kept with their reason.

Open a set with :func:`hookmagic.load_many`; the analyses are in :mod:`hookmagic.analysis.ranks`.
"""
from hookmagic.traceset.members import Member, MixedJobsError, TraceSetError
from hookmagic.traceset.model import TraceSet, build_traceset

__all__ = ["TraceSet", "build_traceset", "Member", "TraceSetError", "MixedJobsError"]
