"""The front door's one-line delegations: ``hookmagic.load`` and the convenience methods of the
data model (``trace.summary()``, ``trace.flame()``, ``profile.compare(other)``, ...).

The data model (:mod:`hookmagic.trace`, :mod:`hookmagic.layers.model`, the ``Summary`` of
:mod:`hookmagic.analysis.summary`) imports nothing above it; the methods users call on it are
registered here, from above, with :func:`hookmagic.common.accessors.register_method` (as pandas
registers ``DataFrame.plot``). Each method imports its analysis or view only when called, so
``import hookmagic`` stays cheap. The names are fixed public API: keep them.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hookmagic.common.accessors import call_with, register_method

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd
    import plotly.graph_objects as go

    from hookmagic.analysis.summary import Summary
    from hookmagic.layers.model import LayerProfile
    from hookmagic.trace.model import Trace

__all__ = ["load"]


# -- files --------------------------------------------------------------------------------------

def load(path: str | os.PathLike) -> Any:
    """Open anything hookmagic saved, or a trace another tool wrote, recognised by content.

    - a saved trace (``Trace.save``, ``%%cudahook --save``) or a rank's trace folder: a
      :class:`~hookmagic.Trace`;
    - Chrome/Kineto trace JSON (``torch.profiler``'s ``.json`` / ``.json.gz``): a ``Trace``;
    - a saved set of ranks (``TraceSet.save``): a :class:`~hookmagic.traceset.TraceSet`;
    - a saved layer profile (``LayerProfile.save``): a ``LayerProfile``;
    - a saved scheduler result (``Result.save``; its ``<prefix>.requests.parquet``): a
      ``SimResult`` or ``RunResult``;
    - a saved frame-pipeline run (``PipelineRun.save``): a ``PipelineRun``;
    - the name of a bundled recording (``hookmagic.recordings.available()``): its ``Trace``.

    Raises an :class:`~hookmagic.common.errors.InputFileError` (a ``HookmagicError``) for a
    missing, damaged or foreign file, saying why, and
    :class:`~hookmagic.common.errors.LimitExceeded` when a file within the budgets still needs
    more memory than the process can have.
    """
    try:
        return _load(path)
    except MemoryError:
        from hookmagic.common.errors import LimitExceeded
        raise LimitExceeded(f"{os.fspath(path)!r} needs more memory than this process can have; "
                            "HOOKMAGIC_MAX_ROWS and HOOKMAGIC_MAX_BYTES set lower budgets "
                            "(docs/limits.md)") from None


def _load(path: str | os.PathLike) -> Any:
    import importlib

    from hookmagic.common.errors import InvalidArgument
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(f"hookmagic.load takes a path or a recording's name, not "
                              f"{type(path).__name__}")

    from hookmagic.common.files import open_input
    from hookmagic.trace.io import TraceFileError, load_trace
    from hookmagic.trace.model import Trace

    path = Path(os.path.expanduser(os.fspath(path)))
    if not os.path.lexists(path):
        from hookmagic import recordings
        if path.name == os.fspath(path) and path.name in recordings.available():
            return recordings.load(path.name)
        return load_trace(path)   # its error names the missing file
    # Each kind's module says whether a path holds its kind (a cheap look at the content);
    # the first that claims it loads it.
    for module, sniff, loader in _KINDS:
        mod = importlib.import_module(module)
        if getattr(mod, sniff)(path):
            return getattr(mod, loader)(path)
    if path.is_dir() and (path / "meta.json").is_file():
        # a trace folder (one rank of capture(dir=...)); hookmagic.load_many opens many
        from hookmagic.trace.folder import load_trace_folder
        return load_trace_folder(path)
    # folders, FIFOs and devices are refused here, before anything blocks
    with open_input(path, "trace file", TraceFileError) as fh:
        head = fh.read(64)
        fh.seek(0)
        is_zip = zipfile.is_zipfile(fh)
    if not is_zip and (head[:2] == b"\x1f\x8b" or head.lstrip()[:1] in (b"{", b"[")):
        from hookmagic.importers.kineto import read_kineto
        tables, meta = read_kineto(path)
        return Trace(tables, meta)
    return load_trace(path)


# (module, sniff function, load function) for every saved kind other than Trace; each sniff
# takes a Path that exists and returns True only for its own kind, without raising.
_KINDS = (
    ("hookmagic.traceset.io", "sniff", "load"),
    ("hookmagic.layers.model", "sniff", "load_profile"),
    ("hookmagic.sched.result", "sniff", "load_saved"),
    ("hookmagic.pipeline.run", "sniff", "load_run"),
)


# -- Trace --------------------------------------------------------------------------------------

@register_method("Trace")
def to_chrome_trace(self: "Trace", path: str | os.PathLike) -> str:
    """Write Chrome/Perfetto trace JSON (``.json`` or ``.json.gz``); returns the path.

    Open it at https://ui.perfetto.dev or chrome://tracing; the fields follow PyTorch's
    Kineto traces, so tools that read those (e.g. Holistic Trace Analysis) read it too.
    """
    from hookmagic.exporters.chrome import to_chrome_trace as export
    return export(self, path)


@register_method("Trace")
def summary(self: "Trace", top: int = 10) -> "Summary":
    """Headline numbers: GPU busy/idle time, top ``top`` kernels, copies, peak memory, overhead."""
    from hookmagic.analysis.summary import summarize
    from hookmagic.common.checks import integer
    return summarize(self, top=integer("top", top, minimum=1))


@register_method("Trace")
def flame(self: "Trace", **kw: Any) -> "go.Figure":
    """Flame graph of GPU time by the Python stack that launched it (a Plotly figure)."""
    from hookmagic.views.flame import flame_figure
    return call_with(flame_figure, self, **kw)


@register_method("Trace")
def timeline(self: "Trace", **kw: Any) -> "go.Figure":
    """Timeline of kernels, copies and API calls per stream (a Plotly figure)."""
    from hookmagic.views.timeline import timeline_figure
    return call_with(timeline_figure, self, **kw)


@register_method("Trace")
def diagnose(self: "Trace") -> "pd.DataFrame":
    """Findings about this trace (idle gaps, tiny kernels, syncs, ...) with advice, one row
    each (see :func:`hookmagic.analysis.diagnose.diagnose` for the columns)."""
    from hookmagic.analysis.diagnose import diagnose as find
    return find(self)


@register_method("Trace")
def counter_table(self: "Trace") -> "pd.DataFrame":
    """The hardware counters of a capture with ``counters=``, one row per kernel launch in
    readable units (SM and DRAM % of peak, GB moved, occupancy, hit rates, tensor pipe, FLOPs,
    intensity, achieved TFLOP/s and GB/s) with the bound each launch hits and why (see
    :func:`hookmagic.analysis.counters.kernel_counters`); empty without counters."""
    from hookmagic.analysis.counters import trace_counters
    return trace_counters(self)


@register_method("Trace")
def roofline(self: "Trace", **kw: Any) -> "go.Figure":
    """Roofline of the captured kernels (a Plotly figure): each kernel at its measured arithmetic
    intensity and FLOP/s when the trace has hardware counters, else at its declared work
    (``meta["work"]``); the title says which. ``peaks=`` a GPU name or a peaks mapping
    (default: the trace's GPU), ``title=``."""
    from hookmagic.views.roofline import trace_roofline
    return call_with(trace_roofline, self, **kw)


@register_method("Trace")
def diff(self: "Trace", other: "Trace", **kw: Any) -> "go.Figure":
    """Differential flame graph of GPU time: this trace against ``other``."""
    from hookmagic.views.flame import diff_figure
    _same_kind(other, type(self), "diff")
    return call_with(diff_figure, self, other, **kw)


@register_method("Trace")
def memory_map(self: "Trace", **kw: Any) -> "go.Figure":
    """Map of device allocations over address and time (a Plotly figure)."""
    from hookmagic.views.memory_map import memory_map_figure
    return call_with(memory_map_figure, self, **kw)


@register_method("Trace")
def fragmentation(self: "Trace") -> "pd.DataFrame":
    """Fragmentation of device memory over the capture (a DataFrame)."""
    from hookmagic.analysis.fragmentation import fragmentation_over_time
    return fragmentation_over_time(self)


@register_method("Trace")
def lines(self: "Trace", func_or_file: Any = None, *, device: Any = None, stream: Any = None,
          user_only: bool = False) -> Any:
    """GPU time by source line.

    ``trace.lines()``: a DataFrame, one row per (file, line, function) on the kernels' Python
    stacks, the user's own lines first: ``gpu_ns``/``launches`` count the kernels each line
    launched (its innermost frame outside installed packages, the standard library and
    hookmagic; sums to the attributed GPU time), ``inclusive_ns`` the kernels launched anywhere
    under it. See :func:`hookmagic.analysis.lines.line_table`.

    ``trace.lines(func_or_file)``: that function's (or file's functions') source with the GPU
    time beside each line, as ``%lprun`` shows CPU time: HTML in a notebook, text elsewhere.
    ``func_or_file`` is a function or method, a name (``"Model.forward"``, ``"forward"``) or a
    file (``"train.py"``). Source text comes from the trace (``meta["sources"]``, stored in
    recordings), else from the file on disk, else it says "source unavailable".
    """
    from hookmagic.analysis.lines import function_blocks, line_table, resolve_focus

    read = _source_reader(self)
    if func_or_file is None:
        return line_table(self, device=device, stream=stream, user_only=user_only, sources=read)
    from hookmagic.views.lines import lines_view

    focus = resolve_focus(func_or_file)
    blocks = function_blocks(self, focus, sources=read, device=device, stream=stream)
    table = line_table(self, focus, device=device, stream=stream, user_only=user_only,
                       sources=read)
    hint = None
    if not blocks:
        everything = line_table(self, device=device, stream=stream, user_only=True)
        hint = list(dict.fromkeys(everything.sort_values("inclusive_ns", ascending=False)
                                  ["function"]))[:5]
    return lines_view(blocks, focus.text, table=table, label=str(self.meta.get("label") or ""),
                      hint=hint)


@register_method("Trace")
def store_sources(self: "Trace", include_library: bool = False) -> "Trace":
    """Keep the source text of the files on this trace's stacks in ``meta["sources"]``, so
    ``trace.lines(...)`` shows it wherever the saved trace is opened; returns the trace.

    Only your own files (not installed packages or the standard library) unless
    ``include_library``; at most 2 MiB of text. Saved traces hold it as plain text: store
    sources only in traces you mean to share with their code.
    """
    from hookmagic.common.sources import snapshot_sources

    stored = dict(self.meta.get("sources") or {})
    stored.update(snapshot_sources(self.stacks["filename"], include_library=include_library))
    self.meta["sources"] = stored
    return self


def _source_reader(trace: "Trace") -> Any:
    """filename -> (lines, origin) for the lines view: the trace's stored sources, else the
    file on disk (origin "disk-changed" when it was modified after the capture started)."""
    from datetime import datetime

    from hookmagic.common.sources import source_lines

    stored = trace.meta.get("sources") if isinstance(trace.meta.get("sources"), dict) else None
    try:
        started = datetime.fromisoformat(str(trace.meta["started_at"]).replace("Z", "+00:00"))
        started_s = started.timestamp()
    except (KeyError, ValueError, TypeError):
        started_s = None
    cache: dict[str, tuple[list[str], str]] = {}

    def read(filename: str) -> tuple[list[str], str]:
        if filename not in cache:
            text, origin = source_lines(filename, stored)
            if origin == "disk" and started_s is not None:
                try:
                    if os.path.getmtime(filename) > started_s:
                        origin = "disk-changed"
                except OSError:
                    pass   # a notebook cell: in the running kernel's line cache only
            cache[filename] = (text, origin)
        return cache[filename]
    return read


@register_method("Trace", "_repr_mimebundle_")
def _trace_mimebundle(self: "Trace", include: Any = None, exclude: Any = None) -> dict[str, str]:
    return summary(self)._repr_mimebundle_(include=include, exclude=exclude)


# -- Summary (display) --------------------------------------------------------------------------

@register_method("Summary", "_repr_mimebundle_")
def _summary_mimebundle(self: "Summary", include: Any = None, exclude: Any = None
                        ) -> dict[str, str]:
    from hookmagic.views.summary import summary_bundle
    return summary_bundle(self)


@register_method("Summary", "__repr__")
def _summary_repr(self: "Summary") -> str:
    from hookmagic.views.summary import summary_text
    return summary_text(self)


# -- LayerProfile -------------------------------------------------------------------------------

@register_method("LayerProfile")
def compare(self: "LayerProfile", other: "LayerProfile", **kwargs: Any) -> "pd.DataFrame":
    """Pair this engine's layers with ``other``'s and give the speedup of each pair.

    See :func:`hookmagic.layers.compare.compare_layers` for the columns and options.
    """
    from hookmagic.layers.compare import compare_layers
    _same_kind(other, type(self), "compare")
    return call_with(compare_layers, self, other, **kwargs)


def _same_kind(other: Any, kind: type, method: str) -> None:
    """``other`` must be of the kind ``method`` compares with (another Trace, LayerProfile)."""
    if not isinstance(other, kind):
        from hookmagic.common.errors import InvalidArgument
        raise InvalidArgument(f"{method} compares with another {kind.__name__}, not "
                              f"{type(other).__name__}")
