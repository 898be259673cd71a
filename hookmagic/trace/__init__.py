"""Traces: the one data model every capture, recording and import becomes.

- :class:`Trace` (``model.py``): tables of kernels, copies, memsets, memory events, syncs, API
  calls, ranges, stacks and NVML samples, plus ``meta``; columns in ``schema.py``.
- :func:`save_trace` / :func:`load_trace` (``io.py``): one data-only file (ZIP of Parquet).
- :func:`to_chrome_trace` (``chrome.py``): Perfetto / chrome://tracing JSON.
"""
from hookmagic.trace import schema
from hookmagic.trace.chrome import to_chrome_trace
from hookmagic.trace.io import TraceFileError, load_trace, save_trace
from hookmagic.trace.model import Trace

__all__ = ["Trace", "TraceFileError", "load_trace", "save_trace", "to_chrome_trace", "schema"]
