"""Traces: the one data model every capture, recording and import becomes.

- :class:`Trace` (``model.py``): tables of kernels, copies, memsets, memory events, syncs, API
  calls, ranges, stacks, allocator events and NVML samples, plus ``meta``; columns (and the
  allowed allocator actions, checked by ``schema.validate``) in ``schema.py``.
- :func:`save_trace` / :func:`load_trace` (``io.py``): one data-only file (ZIP of Parquet);
  allocator recordings of the retired format load through ``legacy.py``.
- the correlation-id join of GPU work and the API calls that launched it (``correlation.py``).

This package is the data floor: it imports :mod:`hookmagic.common` and nothing else of
hookmagic. Readers of other formats live in :mod:`hookmagic.importers`, writers in
:mod:`hookmagic.exporters`; ``hookmagic.load`` (:mod:`hookmagic.facades`) opens either kind.
"""
from hookmagic.trace import schema
from hookmagic.trace.io import TraceFileError, load_trace, save_trace
from hookmagic.trace.model import Trace

__all__ = ["Trace", "TraceFileError", "load_trace", "save_trace", "schema"]
