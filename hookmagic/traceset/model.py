"""The :class:`TraceSet`: the traces of every rank of a job, queried together with DuckDB.

Tables are never loaded whole into Python. Each table of every rank is a Parquet file, and
DuckDB (embedded, in this process) scans them when a question is asked, within a memory limit
(3 GB by default), spilling to disk beyond it. The views in the set's DuckDB connection are the
trace tables of :mod:`hookmagic.trace.schema` with one more column, ``rank``:

- ``kernels``, ``memcpy``, ``memset``, ``memory``, ``sync``, ``api``, ``ranges``, ``stacks``,
  ``allocator_events``, ``samples``: every rank's rows;
- ``ranks``: one row per rank (:attr:`TraceSet.ranks`, without the nested meta);
- ``steps``: ``rank, step, start_ns, end_ns`` from each trace's ``meta["steps"]`` (the step
  boundaries an automatic capture records), empty when no trace has them.

Trace folders (``rank=<N>``) are read in place; ``.hmtrace`` files are unpacked once into the
set's cache folder (their Parquet entries are stored, so this is a copy). Times stay on each
rank's own clock; the analyses (:mod:`hookmagic.analysis.ranks`) align them.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import stat
import tempfile
import warnings
import weakref
import zipfile
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hookmagic.common import files
from hookmagic.common.accessors import accepts_methods
from hookmagic.common.devices import gpu_identity
from hookmagic.common.errors import InputFileError, InvalidArgument, LimitExceeded
from hookmagic.common.optional import require
from hookmagic.trace import schema
from hookmagic.trace.model import Trace
from hookmagic.traceset.members import (Member, MixedJobsError, TraceSetError,
                                        TraceSetQueryError, describe_jobs, expand, missing_member,
                                        open_member)

#: DuckDB's memory limit for a set's queries unless ``memory_limit=`` says otherwise
DEFAULT_MEMORY_LIMIT = "3GB"


@accepts_methods("TraceSet")
class TraceSet:
    """Traces of many ranks (or many runs), analysed together out of core.

    Make one with :func:`hookmagic.load_many`. ``ranks`` lists every rank with its status;
    ``sql(query)`` answers any question over the ``kernels``, ``memcpy``, ... views (each with
    a ``rank`` column); ``trace(rank)`` loads one rank as a :class:`~hookmagic.Trace`.
    The analyses (``summary()``, ``collectives()``, ``stragglers()``, ``overlap()``,
    ``clock()``, ``vs_median()``, ``per_rank()``) and views (``timeline()``,
    ``straggler_chart()``) are attached by :mod:`hookmagic.multirank`.
    """

    def __init__(self, members: list[Member], *, job_id: str = "",
                 memory_limit: str = DEFAULT_MEMORY_LIMIT, threads: int | None = None) -> None:
        self.members = sorted(members, key=lambda m: m.rank)
        self.job_id = job_id
        self.memory_limit = memory_limit
        self.threads = threads
        self.cache: dict[str, Any] = {}   # analyses keep results they reuse here
        #: copies of a rank found under other paths, left out: ``(rank, path, kept path)``
        self.duplicates: list[tuple[int, str, str]] = []
        self._con = None
        self._stage = ""
        self._files: dict[str, dict[int, str]] | None = None
        self._holder: dict[str, Any] = {"con": None}
        self._finalizer: Any = None

    # -- what is in the set ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.members)

    @property
    def data_ranks(self) -> list[int]:
        """Ranks whose trace has data (complete or partial), in order."""
        return [m.rank for m in self.members if m.has_data]

    @property
    def world_size(self) -> int:
        sizes = [_int(m.identity.get("world_size"), 0) for m in self.members if m.identity]
        return max(sizes + [len(self.members)])

    @property
    def ranks(self) -> pd.DataFrame:
        """One row per rank: status, reason, host, device, GPU UUID, rows, capture span, path."""
        rows = []
        for m in self.members:
            ident = m.identity
            device = _int(ident.get("device"), -1)
            rows.append({
                "rank": m.rank, "status": m.status, "reason": m.reason,
                "host": str(ident.get("host", m.meta.get("host", ""))),
                "local_rank": _int(ident.get("local_rank"), -1),
                "world_size": _int(ident.get("world_size"), 0),
                "device": device,
                "gpu_uuid": str(ident.get("gpu_uuid", "")) or _gpu_identity(m.meta, device),
                "gpu": _gpu_name(m.meta, device),
                "job_id": str(ident.get("job_id", "")),
                "launcher": str(ident.get("launcher", "")),
                "kernels": _int((m.tables.get("kernels") or {}).get("rows")
                                if isinstance(m.tables.get("kernels"), dict) else 0, 0),
                "start_ns": _int(m.meta.get("start_ns"), 0),
                "end_ns": _int(m.meta.get("end_ns"), 0),
                "wall_s": _float(m.meta.get("wall_s")),
                "path": m.path,
            })
        return pd.DataFrame(rows, columns=["rank", "status", "reason", "host", "local_rank",
                                           "world_size", "device", "gpu_uuid", "gpu", "job_id",
                                           "launcher", "kernels", "start_ns", "end_ns",
                                           "wall_s", "path"])

    @property
    def problems(self) -> pd.DataFrame:
        """The ranks that cannot be analysed (missing, damaged, unavailable) and why."""
        r = self.ranks
        return r[~r["status"].isin(["complete", "partial"])][["rank", "status", "reason", "path"]]

    def member(self, rank: int) -> Member:
        for m in self.members:
            if m.rank == rank:
                return m
        raise TraceSetError(f"rank {rank} is not in this set (ranks: "
                            f"{[m.rank for m in self.members]})")

    def meta(self, rank: int) -> dict[str, Any]:
        """The ``meta`` of rank ``rank``'s trace."""
        return self.member(rank).meta

    def trace(self, rank: int) -> Trace:
        """Rank ``rank`` as a full :class:`~hookmagic.Trace` (every table in memory)."""
        from hookmagic.trace.folder import load_trace_folder
        from hookmagic.trace.io import load_trace

        m = self.member(rank)
        if not m.layout:
            raise TraceSetError(f"rank {rank} has no trace: {m.reason}")
        return load_trace_folder(m.path) if m.layout == "folder" else load_trace(m.path)

    # -- DuckDB --------------------------------------------------------------------------------
    @property
    def con(self):
        """The set's DuckDB connection, with the views described in this module."""
        if self._con is None:
            self.table_files()
            self._open()
        return self._con

    def sql(self, query: str, params: Any = None) -> pd.DataFrame:
        """Run ``query`` over the set's views; the result as a DataFrame. A query DuckDB
        refuses raises :class:`TraceSetQueryError`; running out of the set's ``memory_limit``
        raises :class:`~hookmagic.common.errors.LimitExceeded` naming it."""
        duckdb = require("duckdb", extra="ranks")
        con = self.con
        try:
            return con.execute(query, params).df() if params is not None \
                else con.execute(query).df()
        except duckdb.OutOfMemoryException as err:
            raise LimitExceeded(f"the query needs more memory than the set's memory_limit "
                                f"{self.memory_limit!r} (or this machine) allows: "
                                f"{_first_line(err)}; open the set with a larger memory_limit=") from None
        except duckdb.Error as err:
            raise TraceSetQueryError(f"DuckDB refused the query: {_first_line(err)}") from None

    def close(self) -> None:
        """Close the connection and remove the cache folder (also done when the set is freed)."""
        if self._finalizer is not None:
            self._finalizer()
        self._con, self._files, self._stage = None, None, ""

    def __enter__(self) -> "TraceSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _open(self) -> None:
        duckdb = require("duckdb", extra="ranks")
        files = self.table_files()
        # settings go in as configuration values, never pasted into SQL text
        config = {"memory_limit": _memory_limit(self.memory_limit),
                  "temp_directory": os.path.join(self._stage, "spill")}
        if self.threads:
            config["threads"] = int(self.threads)
        con = duckdb.connect(config=config)
        self._holder["con"] = con
        con.execute("SET enable_progress_bar = false")
        for name in schema.TABLE_NAMES:
            if files.get(name):
                # only this table's non-empty files are under stage/<table>/; a temporary folder
                # whose path holds glob characters is named file by file instead
                pattern = os.path.join(self._stage, name, "rank=*", "data.parquet")
                if any(ch in self._stage for ch in "*?[]{}"):
                    source = "[" + ", ".join(f"'{_sql_str(p)}'" for p in files[name].values()) + "]"
                else:
                    source = f"'{_sql_str(pattern)}'"
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet({source}, "
                            "hive_partitioning=true, hive_types={'rank': BIGINT}, "
                            "union_by_name=true)")
            else:
                empty = pa.Table.from_pandas(schema.empty_table(name), preserve_index=False)
                empty = empty.append_column("rank", pa.array([], pa.int64()))
                con.register(f"_empty_{name}", empty)
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM _empty_{name}")
        ranks = self.ranks  # noqa: F841 (read by DuckDB below)
        con.execute("CREATE TABLE ranks AS SELECT * FROM ranks")
        steps = self.steps_frame()  # noqa: F841 (read by DuckDB below)
        con.execute("CREATE TABLE steps AS SELECT * FROM steps")
        self._con = con

    # -- the ranks' files ----------------------------------------------------------------------
    def table_files(self) -> dict[str, dict[int, str]]:
        """``{table: {rank: Parquet path}}`` for every non-empty table of every rank with data,
        staged once (links to a folder's files, a ``.hmtrace`` file's entries unpacked). A rank
        whose files cannot be read (corrupt Parquet, a kernels table without the columns the
        analyses need) is marked damaged here, with one warning; the others are analysed."""
        if self._files is not None:
            return self._files
        stage = tempfile.mkdtemp(prefix="hookmagic-traceset-")
        self._stage = stage
        self._holder = {"con": None}
        self._finalizer = weakref.finalize(self, _cleanup, self._holder, stage)
        out: dict[str, dict[int, str]] = {name: {} for name in schema.TABLE_NAMES}
        damaged = []
        for m in self.members:
            if not m.has_data:
                continue
            try:
                staged = _stage_member(m, Path(stage))
            except (InputFileError, OSError, KeyError, zipfile.BadZipFile,
                    pa.ArrowException) as err:
                m.status, m.reason = "damaged", f"its tables cannot be read ({err})"
                damaged.append(m)
                for name in schema.TABLE_NAMES:   # nothing of it stays in the views
                    shutil.rmtree(Path(stage) / name / f"rank={m.rank}", ignore_errors=True)
                continue
            for name, path in staged.items():
                out[name][m.rank] = path
        self._files = out
        if damaged:
            listing = _listing([f"rank {m.rank}: {m.reason}" for m in damaged])
            warnings.warn(f"hookmagic.load_many: {len(damaged)} rank(s) marked damaged (the "
                          f"others are analysed; TraceSet.problems lists them): {listing}",
                          stacklevel=3)
        return out

    def read_table(self, rank: int, table: str, columns: list[str]) -> pa.Table:
        """Columns of one rank's table, read from that rank's own file only (an empty table
        with those columns when the rank has none)."""
        path = self.table_files()[table].get(int(rank))
        if path is None:
            return pa.Table.from_pandas(schema.empty_table(table)[columns],
                                        preserve_index=False)
        return pq.read_table(path, columns=columns)

    def steps_frame(self) -> pd.DataFrame:
        """``rank, step, start_ns, end_ns`` from every rank's ``meta["steps"]``."""
        rows = []
        for m in self.members:
            if not m.has_data:
                continue
            for s in m.meta.get("steps") or []:
                if isinstance(s, (list, tuple)) and len(s) >= 3:
                    try:
                        rows.append((m.rank, int(s[0]), int(s[1]), int(s[2])))
                    except (TypeError, ValueError, OverflowError):
                        continue
        return pd.DataFrame(rows, columns=["rank", "step", "start_ns", "end_ns"]).astype("int64")

    # -- saving --------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the set as one folder at ``path``: a ``rank=<N>`` trace folder per rank with
        data and a ``traceset.json`` manifest (``"hookmagic_kind": "traceset"``, the job, every
        rank's status and reason). ``hookmagic.load(path)`` opens it again as a TraceSet."""
        from hookmagic.traceset.saved import save_traceset
        return save_traceset(self, path)

    # -- display -------------------------------------------------------------------------------
    def __repr__(self) -> str:
        statuses = pd.Series([m.status for m in self.members]).value_counts().to_dict()
        parts = ", ".join(f"{n} {s}" for s, n in statuses.items())
        job = f" job {self.job_id!r}" if self.job_id else ""
        return f"<hookmagic.TraceSet{job}: {len(self.members)} ranks ({parts})>"

    def _repr_html_(self) -> str:
        # every value here comes from the ranks' files: escaped, never markup
        r = self.ranks[["rank", "status", "host", "gpu", "kernels", "wall_s", "reason"]]
        job = f" job <code>{html.escape(str(self.job_id))}</code>" if self.job_id else ""
        return (f"<p><b>hookmagic.TraceSet</b>{job}"
                f": {len(self.members)} ranks</p>" + r.to_html(index=False, escape=True))


#: DuckDB's memory limit may be from 64 MiB (less cannot run the analyses) to 1 PiB
_MEMORY_LIMITS = (64 << 20, 1 << 50)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


#: the most DuckDB threads a set may ask for (each holds its own buffers)
MAX_THREADS = 256


def _memory_limit(text: Any) -> str:
    """DuckDB's memory limit as ``<number><unit>`` (``"3GB"``, ``"512MiB"``) within
    :data:`_MEMORY_LIMITS`, nothing else: the value goes to DuckDB as a setting."""
    value = str(text).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", value, re.IGNORECASE)
    if not m:
        raise InvalidArgument(f"memory_limit={text!r}: give a size such as '3GB' or '512MiB'")
    size = float(m.group(1)) * _UNITS[m.group(2).lower()]
    low, high = _MEMORY_LIMITS
    if not low <= size <= high:
        raise InvalidArgument(f"memory_limit={text!r}: give a size from 64MiB to 1024TiB")
    return value


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


def _int(value: Any, default: int) -> int:
    """A whole number read from a file's meta, or ``default`` for anything else."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value if -(1 << 62) < value < (1 << 62) else default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 19:
        return int(value)
    return default


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else float("nan")


def _cleanup(holder: dict[str, Any], stage: str) -> None:
    try:
        if holder.get("con") is not None:
            holder["con"].close()
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _sql_str(text: str) -> str:
    return text.replace("'", "''")


def _gpu_identity(meta: dict[str, Any], device: int) -> str:
    """For captures that recorded no UUID in their rank identity: the device's UUID or PCI
    address from ``meta["devices"]``."""
    for d in _devices(meta):
        if _int(d.get("index"), -2) == device:
            return gpu_identity(d)
    return ""


def _devices(meta: dict[str, Any]) -> list[dict[str, Any]]:
    devices = meta.get("devices")
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


def _gpu_name(meta: dict[str, Any], device: int) -> str:
    for d in _devices(meta):
        if _int(d.get("index"), -2) == device or device < 0:
            return str(d.get("name", ""))
    return ""


#: columns a rank's kernels table must have for the analyses to use it
KERNEL_COLUMNS = ("start_ns", "end_ns", "duration_ns", "name")


def _stage_member(m: Member, stage: Path) -> dict[str, str]:
    """``stage/<table>/rank=<N>/data.parquet`` for every non-empty table of ``m``: a link to a
    trace folder's file or the stored entry of a ``.hmtrace`` file. Each file's footer is read
    (a corrupt file fails here, not in every query) and a kernels table must have
    :data:`KERNEL_COLUMNS`. Returns ``{table: path}``."""
    out: dict[str, str] = {}
    for name in schema.TABLE_NAMES:
        info = m.tables.get(name)
        if not info or _rows(info) == 0:
            continue
        folder = stage / name / f"rank={m.rank}"
        folder.mkdir(parents=True)
        target = folder / "data.parquet"
        if m.layout == "folder":
            root = Path(m.path).resolve()
            source = (root / str(info["file"])).resolve()
            if root not in source.parents:  # checked when the member was opened; again here
                raise TraceSetError(f"table {name!r} points outside its folder")
            # a FIFO or a device would block or never end when DuckDB reads it
            kind = os.stat(source).st_mode
            if not stat.S_ISREG(kind):
                raise TraceSetError(f"table {name!r}'s file {str(info['file'])!r} is not a "
                                    "regular file")
            os.symlink(source, target)
        else:
            with zipfile.ZipFile(m.path) as zf:   # within the size budget and the expansion ratio
                target.write_bytes(files.read_zip_member(zf, str(info["file"]),
                                                         f"rank {m.rank}'s trace {m.path!r}"))
        meta = pq.read_metadata(target)
        if name == "kernels":
            _check_kernels(target, meta)
        out[name] = str(target)
    return out


def _check_kernels(path: Path, meta: Any) -> None:
    """A kernels table the analyses can sum: the columns they need, times as integers and no
    negative duration (read from the row groups' statistics, or the column when a file has
    none): summed, a negative time would silently shrink every total."""
    fields = {f.name: f.type for f in meta.schema.to_arrow_schema()}
    lacking = [c for c in KERNEL_COLUMNS if c not in fields]
    if lacking:
        raise TraceSetError(f"its kernels table lacks {', '.join(lacking)}")
    wrong = [c for c in ("start_ns", "end_ns", "duration_ns") if not pa.types.is_integer(fields[c])]
    if wrong:
        raise TraceSetError(f"its kernels table holds {', '.join(f'{c} as {fields[c]}' for c in wrong)}"
                            ", not integer nanoseconds")
    column = [meta.schema.column(i).name for i in range(meta.num_columns)].index("duration_ns")
    lowest = None
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            import pyarrow.compute as pc
            lowest = pc.min(pq.read_table(path, columns=["duration_ns"]).column(0)).as_py()
            break
        lowest = stats.min if lowest is None else min(lowest, stats.min)
    if lowest is not None and lowest < 0:
        raise TraceSetError("its kernels table holds negative durations (measured times are "
                            "never negative)")


def _listing(items: list[str], total: int | None = None, limit: int = 20) -> str:
    """The first ``limit`` of ``items`` (of ``total``, by default all of them) joined for a
    warning, and how many more there are."""
    total = len(items) if total is None else total
    shown = "; ".join(items[:limit])
    return shown if total <= limit else f"{shown}; ... and {total - limit:,} more"


def _rows(info: Any) -> int:
    """A table's row count from its manifest entry (unknown counts as rows present)."""
    rows = info.get("rows") if isinstance(info, dict) else None
    return rows if isinstance(rows, int) and not isinstance(rows, bool) else 1


def build_traceset(paths: str | os.PathLike | Iterable[str | os.PathLike], *,
                   job: str | None = None, capture: int | None = None,
                   memory_limit: str = DEFAULT_MEMORY_LIMIT,
                   threads: int | None = None) -> TraceSet:
    """Open the traces at ``paths`` as one :class:`TraceSet` (what ``hookmagic.load_many`` does).

    ``paths``: a folder of rank folders (``capture(dir=...)``'s output), a glob, or a list of
    trace folders and ``.hmtrace`` files. Traces of different jobs raise
    :class:`MixedJobsError` unless ``job`` picks one. A rank with several captures (folders
    ``rank=N``, ``rank=N.1``, ...) contributes its capture ``capture`` (default: its first).
    Ranks that are missing (below the world size, no trace), damaged or unavailable stay in the
    set with their reason, and one warning lists them; the others are analysed.
    """
    _memory_limit(memory_limit)
    if capture is not None and (isinstance(capture, bool) or not isinstance(capture, int)
                                or capture < 0):
        raise InvalidArgument(f"capture={capture!r}: give the capture's number, 0 or more")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        raise InvalidArgument(f"threads={threads!r}: give a whole number of threads from 1 to "
                              f"{MAX_THREADS}")
    members = [open_member(p, i) for i, p in enumerate(expand(paths))]
    jobs = describe_jobs(members)
    named = {j: n for j, n in jobs.items() if j}
    if job is not None:
        if job not in jobs:
            raise TraceSetError(f"no trace of job {job!r} here; jobs found: {_jobs_text(jobs)}")
        members = [m for m in members
                   if not m.layout or str(m.identity.get("job_id", "")) == job]
    elif len(named) > 1:
        raise MixedJobsError(f"these traces come from {len(jobs)} different jobs "
                             f"({_jobs_text(jobs)}); pass job=<id> to load_many to pick one, "
                             "or give each job's folder on its own")
    job_id = job if job is not None else (next(iter(named)) if named else "")
    # one capture per rank
    by_rank: dict[int, list[Member]] = {}
    for m in members:
        by_rank.setdefault(m.rank, []).append(m)
    chosen: list[Member] = []
    duplicates: list[tuple[int, str, str]] = []
    for rank, group in by_rank.items():
        readable = [m for m in group if m.layout]
        if capture is not None:
            pick = [m for m in readable if m.capture == capture]
        else:
            first = min((m.capture for m in readable), default=0)
            pick = [m for m in readable if m.capture == first]
        if pick:
            chosen.append(pick[0])
            # a copy of this capture under another name is left out, and said so
            duplicates.extend((rank, m.path, pick[0].path) for m in pick[1:])
        else:
            chosen.append(group[0] if not readable else
                          Member(group[0].path, rank, "missing",
                                 f"rank {rank} has no capture {capture}"))
    present = {m.rank for m in chosen}
    # rank and world size were bounded when each member was opened (MAX_RANKS)
    world = max([_int(m.identity.get("world_size"), 0) for m in chosen
                 if m.identity and m.status != "damaged"] +
                [max(present) + 1 if present else 0])
    for rank in range(world):
        if rank not in present:
            chosen.append(missing_member(rank, world))
    ts = TraceSet(chosen, job_id=job_id, memory_limit=memory_limit, threads=threads)
    ts.duplicates = duplicates
    ts.table_files()   # staged now: a rank with unreadable tables is damaged from the start
    if duplicates:
        listing = _listing([f"rank {r} at {p!r} (kept {k!r})" for r, p, k in duplicates])
        warnings.warn(f"hookmagic.load_many: {len(duplicates)} trace(s) repeat a rank's capture "
                      f"already in the set and were left out: {listing}", stacklevel=4)
    bad = ts.problems
    if len(bad):
        listing = _listing([f"rank {r.rank}: {r.status} ({r.reason})"
                            for r in bad.head(20).itertuples()], total=len(bad))
        warnings.warn(f"hookmagic.load_many: {len(bad)} of {len(ts)} ranks cannot be analysed "
                      f"(the others are analysed; TraceSet.problems lists them): {listing}",
                      stacklevel=4)
    return ts


def _jobs_text(jobs: dict[str, int]) -> str:
    return ", ".join(f"{j or '(no job id)'!r}: {n} trace{'s' if n != 1 else ''}"
                     for j, n in jobs.items())
