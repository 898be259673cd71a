"""The :class:`Trace`: one capture as plain tables, whatever its source.

A Trace holds one DataFrame per table of :mod:`hookmagic.trace.schema` (``kernels``, ``memcpy``,
``memset``, ``memory``, ``sync``, ``api``, ``ranges``, ``stacks``, ``allocator_events``,
``samples``, ``counters``) and a ``meta`` dict. Every source (live CUPTI capture, recordings, imports) fills the same tables, so every
analysis and view works on all of them.

``meta`` keys (all optional except ``format_version`` and ``status``):

- ``format_version`` (int, 1): version of this layout, for files written by :meth:`Trace.save`.
- ``hookmagic_version`` (str): the hookmagic that produced the trace.
- ``source`` (str): ``"cupti"`` for a live capture, ``"recording"``, ``"import:kineto"``, ...
- ``status`` (str): ``"complete"``, ``"partial"`` (the cell raised or was interrupted, or
  records were dropped) or ``"unavailable"`` (nothing captured).
- ``reason`` (str): why the trace is unavailable or partial, in words a user can act on.
- ``label`` (str): a name for the capture (``%%cudahook --label``), shown in summaries and diffs.
- ``host``, ``pid``, ``python`` (str, int, str): where it was captured.
- ``started_at`` (str): ISO-8601 UTC wall-clock time of the start.
- ``start_ns``, ``end_ns`` (int): start and end of the capture on the tables' clock.
- ``wall_s`` (float): wall time of the capture in seconds.
- ``devices`` (list of dict): one per GPU: ``index, name, uuid, total_memory, multiprocessors,
  compute_capability`` ([major, minor]) and the occupancy limits ``max_threads_per_sm,
  max_blocks_per_sm, max_regs_per_sm, max_regs_per_block, max_smem_per_sm, max_smem_per_block,
  warp_size, reg_alloc_unit``. Any of these may be missing.
- ``driver_version`` (str), ``cuda_driver_version`` (int), ``cupti_version`` (int),
  ``cupti_path`` (str): the software that captured it.
- ``options`` (dict): the capture options (``kernels, memory, stacks, api, nvml, ...``).
- ``overhead`` (dict): cost of the capture itself: the seconds it added around the cell,
  ``start_s`` before it and ``finish_s`` after it; parts of those, ``subscribe_s, callbacks_s,
  enable_s`` (in start), ``stop_s`` with its ``flush_s, detach_s``, ``module_names_s``,
  ``take_s``, ``build_s`` (the kernels table; a live capture builds the others when they are
  first read), ``decode_s`` (partly on CUPTI's thread); and the counts ``callbacks,
  stacks_sampled``. Per-launch cost inside the cell is not in it (see
  benchmarks/results/overhead-*.md).
- ``dropped`` (dict of counts): records lost, e.g. ``{"activity_records": 12}``.
- ``counters`` (dict): for a capture with hardware counters (the ``counters`` table):
  ``metrics``, ``replay`` ("kernel"), ``passes``, ``kernels`` (ranges counted), ``dropped``
  (launches beyond the budget), ``unmatched`` (ranges with no launch in ``kernels``),
  ``replay_wall_s`` and ``evaluate_s`` (see :mod:`hookmagic.cupti.counters`).
- ``pm_sampling`` (dict): for a capture with PM sampling (the ``pm_samples`` table):
  ``metrics``, ``left_out`` (default quantities the GPU could not sample in one pass),
  ``interval_us`` asked, ``samples``, ``median_interval_us`` measured, ``first_ns``/``last_ns``,
  ``cupti_start_ns``/``cupti_stop_ns`` (CUPTI's clock when sampling started/stopped),
  ``overflow``, ``image_full``, ``decodes``, ``decode_s``, ``stop_s``, ``error`` (see
  :mod:`hookmagic.cupti.pm_sampling`).
- ``recorded_on`` (str): for recordings, the GPU, driver and date they were measured on, e.g.
  ``"NVIDIA H100 80GB HBM3, driver 580.159.04, YYYY-MM-DD"``.
- ``description`` (str): for recordings, the workload recorded.
- ``converted_from`` (str): set on a trace read from an older file format
  (``"hookmagic-allocator-recording"``: see :mod:`hookmagic.trace.legacy`).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import pandas as pd

from hookmagic.common.accessors import accepts_methods
from hookmagic.common.errors import BadNumbers, InvalidArgument, MissingAttribute
from hookmagic.trace import schema
from hookmagic.trace.graphs import graph_launches

FORMAT_VERSION = 1


def hookmagic_version() -> str:
    """The installed hookmagic version, or ``"0+unknown"`` when running from a bare checkout."""
    from hookmagic.common.version import __version__
    return str(__version__)


@accepts_methods("Trace")
class Trace:
    """One GPU capture: a DataFrame per table (see :mod:`hookmagic.trace.schema`) plus ``meta``.

    ``Trace(tables, meta)`` conforms every table to the schema; tables not given are empty.
    Display it in a notebook for a summary; ``.summary()``, ``.flame()``, ``.timeline()``,
    ``.memory_map()``, ``.diagnose()`` and ``.diff(other)`` look closer; ``.save(path)`` keeps
    it (``hookmagic.load(path)`` reads it back) and ``.to_chrome_trace(path)`` opens it in
    Perfetto or chrome://tracing. The meta keys are listed in :mod:`hookmagic.trace.model`.

    ``.save`` is attached by :mod:`hookmagic.trace.io` (which imports this module), the
    analysis and view methods by :mod:`hookmagic.facades` (this module imports nothing above
    the data model).
    """

    kernels: pd.DataFrame
    memcpy: pd.DataFrame
    memset: pd.DataFrame
    memory: pd.DataFrame
    sync: pd.DataFrame
    api: pd.DataFrame
    ranges: pd.DataFrame
    stacks: pd.DataFrame
    allocator_events: pd.DataFrame
    samples: pd.DataFrame
    counters: pd.DataFrame
    pm_samples: pd.DataFrame
    meta: dict[str, Any]

    def __init__(self, tables: Mapping[str, pd.DataFrame] | None = None,
                 meta: Mapping[str, Any] | None = None) -> None:
        self._fill(tables or {}, meta or {})
        # measured times and sizes are never negative: summed, such rows would shrink totals
        given = {name: self.__dict__[name] for name in schema.TABLE_NAMES if name in self.__dict__}
        problems = schema.number_problems(given, intervals=False)
        if problems:
            raise BadNumbers(f"impossible numbers in the trace's tables: {'; '.join(problems)} "
                             "(measured times and sizes are never negative)")

    @classmethod
    def empty(cls, reason: str, **meta: Any) -> "Trace":
        """A trace of a capture that recorded nothing, saying ``reason`` (status "unavailable")."""
        return cls(None, {**meta, "status": "unavailable", "reason": str(reason)})

    def _fill(self, tables: Mapping[str, pd.DataFrame | Callable[[], Any]] | None,
              meta: Mapping[str, Any] | None) -> None:
        """Replace every table and the meta in place (the capture fills the Trace it handed out).

        A table may be given as a function of no arguments returning its columns (a
        DataFrame, a mapping of arrays, or None for no rows): it is called, and its result
        conformed to the schema, when the table is first read.

        Raises InvalidArgument (a ValueError) for a table name the schema does not know: a typo there would
        otherwise silently drop data.
        """
        tables = dict(tables or {})
        unknown = sorted(set(tables) - set(schema.TABLE_NAMES))
        if unknown:
            raise InvalidArgument(f"unknown trace table(s) {unknown}; expected some of "
                                  f"{list(schema.TABLE_NAMES)}")
        deferred: dict[str, Callable[[], Any]] = {}
        for name in schema.TABLE_NAMES:
            frame = tables.get(name)
            if frame is None or callable(frame):
                self.__dict__.pop(name, None)  # made on first access (see __getattr__)
                if frame is not None:
                    deferred[name] = frame
            else:
                setattr(self, name, schema.conform(name, frame))
        self.__dict__["_deferred"] = deferred
        full = {"format_version": FORMAT_VERSION, "hookmagic_version": hookmagic_version(),
                "status": "complete"}
        full.update(meta or {})
        self.meta = full

    def __getattr__(self, name: str) -> Any:
        # Only reached for a table not set: a deferred one is built, an empty one made, when
        # first asked for, so a capture (most of whose tables stay empty, or are never read)
        # does not pay for building them all.
        if name in schema.TABLES:
            build = self.__dict__.get("_deferred", {}).pop(name, None)
            columns = build() if build is not None else None
            frame = (schema.conform(name, columns) if columns is not None
                     else schema.empty_table(name))
            setattr(self, name, frame)
            return frame
        raise MissingAttribute(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- data access ----------------------------------------------------------------------
    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """All tables by name, in schema order (the DataFrames themselves, not copies)."""
        return {name: getattr(self, name) for name in schema.TABLE_NAMES}

    @property
    def status(self) -> str:
        """``"complete"``, ``"partial"`` or ``"unavailable"``."""
        return str(self.meta.get("status", "complete"))

    def kernel_counters(self) -> pd.DataFrame:
        """The hardware counters as one row per kernel launch and one column per metric.

        Columns ``correlation_id`` and ``kernel``, then the metrics in the order they were
        asked for; rows in launch order. Built from the long ``counters`` table (empty, with
        those two columns only, for a capture without counters)."""
        return wide_counters(self.counters)

    def stack_frames(self, stack_id: int) -> list[tuple[str, str, int]]:
        """The Python stack ``stack_id`` as ``(filename, function, line)``, outermost first.

        Empty for -1 (no stack taken) or an id not in the ``stacks`` table.
        """
        stacks = self.stacks
        rows = stacks[stacks["stack_id"] == int(stack_id)].sort_values("depth", kind="stable")
        return [(str(f), str(fn), int(ln)) for f, fn, ln in
                zip(rows["filename"], rows["function"], rows["line"])]

    def graphs(self) -> pd.DataFrame:
        """CUDA-graph launches, one row each (``kind`` "launch"), each followed by the kernels,
        copies and memsets it ran (one row per node run): timing, node counts and the line
        that launched the graph or captured each node. Columns: see
        :func:`hookmagic.trace.graphs.graph_launches`. Empty when no graph was launched."""
        return graph_launches({name: getattr(self, name)
                               for name in ("kernels", "memcpy", "memset", "stacks")})

    def __repr__(self) -> str:
        label = self.meta.get("label")
        head = f"<hookmagic.Trace{f' {label!r}' if label else ''} {self.status}"
        if self.status == "unavailable":
            return f"{head}: {self.meta.get('reason', 'nothing captured')}>"
        counts = (f"{len(self.kernels):,} kernels, {len(self.memcpy):,} copies, "
                  f"{len(self.memset):,} memsets, {len(self.memory):,} memory events")
        wall = self.meta.get("wall_s")
        over = f" over {float(wall):.3g} s" if isinstance(wall, (int, float)) else ""
        warns = self.meta.get("warnings")
        warn = (f"; warning: {'; '.join(str(w) for w in warns)}"
                if isinstance(warns, list) and warns else "")
        return f"{head}: {counts}{over}{warn}>"


def wide_counters(long: pd.DataFrame) -> pd.DataFrame:
    """Pivot a ``counters`` table (long: correlation_id, kernel, metric, value) to one row per
    launch and one column per metric. A (launch, metric) pair given twice keeps its last value;
    a metric missing for a launch is NaN."""
    keys = ["correlation_id", "kernel"]
    if not len(long):
        return pd.DataFrame({"correlation_id": pd.Series(dtype="int64"),
                             "kernel": pd.Series(dtype="str")})
    metrics = list(dict.fromkeys(long["metric"].astype(str)))
    launches = list(dict.fromkeys(zip(long["correlation_id"].tolist(), long["kernel"].astype(str))))
    wide = long.pivot_table(index=keys, columns="metric", values="value", aggfunc="last",
                            sort=False)
    wide = wide.reindex(index=pd.MultiIndex.from_tuples(launches, names=keys), columns=metrics)
    wide.columns.name = None
    return wide.reset_index()
