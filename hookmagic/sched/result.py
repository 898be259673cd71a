"""Results of a simulation or a real run: one row per request, one row per batch.

:class:`SimResult` (from :func:`hookmagic.sched.simulate`) and :class:`RunResult` (from
:func:`hookmagic.sched.run`) share every column, so every metric and view works on both.
``summary()`` gives the headline numbers, ``metrics()`` the analysis table, and the chart
methods (``gantt()``, ``latency_cdf()``, ``batch_histogram()``, ``queue_chart()``,
``slo_chart()``) the figures. :meth:`Result.save` writes one file (``.hmsched``: a zip of two
Parquet tables and a JSON manifest); :func:`load_result` and ``hookmagic.load`` open it.
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from hookmagic.common.accessors import checked_calls
from hookmagic.common.errors import InputFileError, InvalidArgument
from hookmagic.common.results import SAVED_KIND_KEY, Headline

from .dispatcher import DONE, STATUS_NAMES

__all__ = ["Result", "SimResult", "RunResult", "assemble", "load_result", "sniff", "KIND",
           "SUFFIX"]

#: what a saved result's manifest records under ``hookmagic_kind``
KIND = "sched_result"
#: the file suffix :meth:`Result.save` gives a saved result
SUFFIX = ".hmsched"
#: the layout of a saved result (its manifest's ``format``)
FORMAT = 1
#: request columns a saved result holds; the others are recomputed from them on load
STORED_REQUEST_COLUMNS = ("model", "priority", "camera", "source", "arrival_s", "deadline_s",
                          "slo_ms", "status", "batch", "drop_s")
#: request columns computed from the stored ones and the batches (:func:`with_derived`)
DERIVED_REQUEST_COLUMNS = ("id", "start_s", "end_s", "queue_ms", "compute_ms", "latency_ms",
                           "met_slo", "batch_size", "stream")
#: batch columns every result has (the driver adds its host stamps: ``dispatch_s``, ...)
BATCH_COLUMNS = ("batch", "model", "stream", "start_s", "end_s", "size")
#: the order of a result's request columns
REQUEST_ORDER = ("id", "model", "priority", "camera", "source", "arrival_s", "deadline_s",
                 "slo_ms", "status", "start_s", "end_s", "queue_ms", "compute_ms", "latency_ms",
                 "met_slo", "batch", "batch_size", "stream", "drop_s")


@checked_calls
class Result:
    """Per-request and per-batch records of one scheduling run.

    Attributes
    ----------
    requests : one row per request — ``arrival_s``, ``start_s`` (its batch's start),
        ``end_s``, ``queue_ms`` / ``compute_ms`` / ``latency_ms``, ``status`` (done,
        rejected, timeout, late, stale), ``met_slo``, ``batch``, ``batch_size``, ``stream``,
        plus the workload's ``model``, ``priority``, ``camera``, ``source``, ``slo_ms``.
    batches : one row per batch — ``batch`` (its id), ``model``, ``stream``, ``start_s``,
        ``end_s``, ``size``, ``compute_ms``.
    meta : what produced it (mode "sim" or "real", engine, policy, seed, duration_s, device...).
    """

    mode = "result"

    def __init__(self, requests: pd.DataFrame, batches: pd.DataFrame,
                 meta: dict[str, Any] | None = None) -> None:
        self.requests = requests
        self.batches = batches
        self.meta = dict(meta or {})
        self.meta.setdefault("mode", self.mode)

    def __repr__(self) -> str:
        r = self.requests
        done = int((r["status"] == "done").sum())
        return (f"{type(self).__name__}({len(r)} requests, {done} served, "
                f"{len(self.batches)} batches, {self.meta.get('duration_s', '?')} s)")

    @property
    def duration_s(self) -> float:
        """The window throughput is measured over (the workload's duration)."""
        d = self.meta.get("duration_s")
        if d:
            return float(d)
        return float(self.requests["arrival_s"].max()) if len(self.requests) else 0.0

    # -- analyses --------------------------------------------------------------------------
    def metrics(self, by: str | Sequence[str] | None = "model", warmup_s: float = 0.0) -> pd.DataFrame:
        """Throughput, goodput, SLO attainment, latency percentiles (total, queue, compute),
        batch sizes and drops; one row per group of ``by`` (None: one row for everything).
        Requests arriving in the first ``warmup_s`` seconds are left out."""
        from .metrics import summary
        return summary(self.requests, by=self._by(by), duration_s=self.duration_s,
                       warmup_s=_warmup(warmup_s))

    def _by(self, by: Any) -> Any:
        """``by`` checked against the request table's columns (None: no grouping)."""
        groups = [by] if isinstance(by, str) else list(by) if by is not None else []
        unknown = [g for g in groups if g not in self.requests.columns]
        if unknown:
            raise InvalidArgument(f"by={by!r}: no column {unknown[0]!r} to group by; the request "
                                  f"table has {', '.join(map(str, self.requests.columns))}")
        return by

    def summary(self, warmup_s: float = 0.0) -> Headline:
        """The headline numbers over every request (``metrics(by=None)``, with units):
        requests offered and served, drops, throughput and goodput, SLO attainment, p50/p99
        latency, mean batch size, streams and batches. ``.to_frame()`` gives them as a table."""
        m = self.metrics(by=None, warmup_s=warmup_s)
        row = m.iloc[0] if len(m) else pd.Series(dtype=float)

        def num(name: str, kind: type = float) -> Any:
            v = row.get(name, np.nan)
            return kind(v) if kind is int and pd.notna(v) else float(v)

        values = {"requests": num("offered", int), "served": num("served", int),
                  "dropped": sum(num(d, int) for d in ("rejected", "timeout", "late", "stale"))
                  if len(m) else 0,
                  "throughput": num("throughput_rps"), "goodput": num("goodput_rps"),
                  "slo_attainment": num("slo_pct"), "p50_latency": num("p50_ms"),
                  "p99_latency": num("p99_ms"), "batch_mean": num("batch_mean"),
                  "batches": int(len(self.batches)),
                  "streams": int(self.batches["stream"].nunique()) if len(self.batches) else 0,
                  "duration": self.duration_s}
        units = {"requests": "requests", "served": "requests", "dropped": "requests",
                 "throughput": "requests/s", "goodput": "requests/s", "slo_attainment": "%",
                 "p50_latency": "ms", "p99_latency": "ms", "batch_mean": "requests",
                 "batches": "batches", "streams": "streams", "duration": "s"}
        what = {"sim": "Simulated run", "real": "Real run"}.get(self.meta.get("mode"), "Run")
        notes = []
        if self.meta.get("gpu"):
            notes.append(f"on {self.meta['gpu']}")
        if warmup_s:
            notes.append(f"requests arriving in the first {warmup_s:g} s left out")
        models = sorted({str(m) for m in self.requests["model"].unique()}) if len(self.requests) else []
        return Headline(f"{what}: {len(models)} model(s), {self.duration_s:g} s", values, units,
                        notes)

    # -- charts ----------------------------------------------------------------------------
    def gantt(self, t0: float | None = None, span_s: float = 0.25):
        """Batches per stream over ``span_s`` seconds from ``t0`` (default: the middle)."""
        from hookmagic.common.checks import number
        from hookmagic.views.sched import gantt_figure
        span_s = number("span_s", span_s, positive=True)
        t0 = None if t0 is None else number("t0", t0)
        return gantt_figure(self.batches, t0=t0, span_s=span_s)

    def latency_cdf(self, by: str = "model", warmup_s: float = 0.0):
        """Latency CDF per ``by`` group of the served requests."""
        from hookmagic.views.sched import latency_cdf_figure

        from .metrics import latency_cdf
        r = self.requests
        by = self._by(by)
        return latency_cdf_figure(latency_cdf(r[r["arrival_s"] >= _warmup(warmup_s)], by=by), by=by)

    def batch_histogram(self):
        """Which batch sizes were formed, per model."""
        from hookmagic.views.sched import batch_histogram_figure

        from .metrics import batch_histogram
        return batch_histogram_figure(batch_histogram(self.batches))

    def queue_chart(self):
        """Requests waiting over time per model."""
        from hookmagic.views.sched import queue_depth_figure

        from .metrics import queue_depth
        return queue_depth_figure(queue_depth(self.requests))

    def slo_chart(self, warmup_s: float = 0.0):
        """p99 latency per model against each model's SLO."""
        from hookmagic.views.sched import p99_vs_slo_figure
        return p99_vs_slo_figure(self.metrics(warmup_s=warmup_s))

    # -- files -----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the result to one file at ``path`` (``.hmsched`` appended when it has another
        suffix): a zip of ``requests.parquet`` (the columns that are not recomputed on load),
        ``batches.parquet`` and ``manifest.json`` (``hookmagic_kind`` "sched_result", the
        meta). Returns the path; :func:`load_result` or ``hookmagic.load`` opens it."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from hookmagic.common import files
        path = Path(path)
        if path.suffix != SUFFIX:
            path = path.with_name(path.name + SUFFIX)
        files.check_output_path(path, "scheduler result")
        ids = self.batches["batch"].to_numpy()
        if len(np.unique(ids)) != len(ids):
            raise InvalidArgument("the result's batches repeat a batch id; each request names its "
                                  "batch by id, so ids must be unique to save it")
        keep = [c for c in self.requests.columns if c not in DERIVED_REQUEST_COLUMNS]
        bat = [c for c in self.batches.columns if c != "compute_ms"]
        manifest = {"format": FORMAT, SAVED_KIND_KEY: KIND, "meta": self.meta}

        def write(fh) -> None:
            with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
                for name, frame in (("requests", self.requests[keep]), ("batches", self.batches[bat])):
                    buf = io.BytesIO()
                    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf,
                                   compression="zstd")
                    zf.writestr(f"{name}.parquet", buf.getvalue())
                zf.writestr("manifest.json", json.dumps(manifest, default=str))

        files.atomic_write(path, write, "the scheduler result")
        return path


class SimResult(Result):
    """Result of :func:`hookmagic.sched.simulate`."""
    mode = "sim"


class RunResult(Result):
    """Result of :func:`hookmagic.sched.run` on real engines."""
    mode = "real"


def load_result(path: str | os.PathLike) -> Result:
    """Open a result saved by :meth:`Result.save`: a :class:`SimResult` or :class:`RunResult`
    as its meta says, every derived column recomputed. Raises :class:`InputFileError` for a
    file that is not one (missing tables or columns, a batch id a request names but no batch
    has), within the budgets every loader keeps (``docs/limits.md``)."""
    from hookmagic.common import files
    path = Path(path)
    what = f"scheduler result {str(path)!r}"
    raw = files.read_input(path, what)
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            manifest = files.parse_json(files.read_zip_member(zf, "manifest.json", what),
                                        f"{what} (manifest)")
            if not isinstance(manifest, dict) or manifest.get(SAVED_KIND_KEY) != KIND:
                raise InputFileError(f"{what} is not a saved scheduler result (its manifest "
                                     f"does not say {SAVED_KIND_KEY} {KIND!r})")
            if manifest.get("format") != FORMAT:
                raise InputFileError(f"{what}: layout {manifest.get('format')!r}, this version "
                                     f"reads {FORMAT}")
            spent = 0
            tables = {}
            for name in ("requests", "batches"):
                data = files.read_zip_member(zf, f"{name}.parquet", what, spent)
                spent += len(data)
                tables[name] = files.read_parquet(data, f"{what} ({name})").to_pandas()
    except zipfile.BadZipFile as err:
        raise InputFileError(f"{what} is not a saved scheduler result ({err})") from None
    except KeyError as err:
        raise InputFileError(f"{what} lacks {err}") from None
    meta = manifest.get("meta")
    if not isinstance(meta, dict):
        raise InputFileError(f"{what}: the manifest's meta is not an object")
    req, bat = tables["requests"], tables["batches"]
    for name, frame, cols in (("requests", req, STORED_REQUEST_COLUMNS),
                              ("batches", bat, BATCH_COLUMNS)):
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise InputFileError(f"{what}: the {name} table lacks columns {missing}")
    _check_numbers(what, req, bat)
    status = req["status"].astype(str)
    unknown = sorted(set(status) - set(STATUS_NAMES))
    if unknown:
        raise InputFileError(f"{what}: unknown request status {unknown[:3]}")
    req["status"] = pd.Categorical(status, categories=list(STATUS_NAMES))
    try:
        req, bat = with_derived(req, bat)
    except InvalidArgument as err:
        raise InputFileError(f"{what}: {err}") from None
    cls = RunResult if meta.get("mode") == "real" else SimResult
    return cls(req, bat, meta)


def _warmup(warmup_s: Any) -> float:
    """``warmup_s`` as a finite number of seconds, not negative."""
    from hookmagic.common.checks import number
    return number("warmup_s", warmup_s, non_negative=True)


def _check_numbers(what: str, req: pd.DataFrame, bat: pd.DataFrame) -> None:
    """Refuse stored times that no run could have produced (summed or averaged, they would
    pass for real results): arrivals finite and not negative, deadlines and SLOs numbers
    (an SLO may be infinite: none), drop times finite where set, batches finite that end no
    earlier than they start, with at least one request."""
    from hookmagic.common.errors import BadNumbers

    def numbers(frame: pd.DataFrame, col: str) -> np.ndarray:
        if not pd.api.types.is_numeric_dtype(frame[col]) or pd.api.types.is_bool_dtype(frame[col]):
            raise InputFileError(f"{what}: column {col!r} holds {frame[col].dtype}, not numbers")
        return frame[col].to_numpy(np.float64)

    problems = []
    arrival = numbers(req, "arrival_s")
    if not (np.isfinite(arrival) & (arrival >= 0)).all():
        problems.append("request arrivals that are not finite non-negative seconds")
    for col in ("deadline_s", "slo_ms"):
        if np.isnan(numbers(req, col)).any():
            problems.append(f"NaN in {col}")
    if (numbers(req, "slo_ms") <= 0).any():
        problems.append("SLOs of zero or less")
    drop = numbers(req, "drop_s")
    if (np.isinf(drop) | (drop < 0)).any():
        problems.append("drop times that are not finite non-negative seconds")
    start, end = numbers(bat, "start_s"), numbers(bat, "end_s")
    if not (np.isfinite(start) & np.isfinite(end)).all():
        problems.append("batch times that are not finite")
    elif (end < start).any():
        problems.append(f"{int((end < start).sum())} batch(es) that end before they start")
    if (numbers(bat, "size") < 1).any():
        problems.append("batches of no request")
    if problems:
        raise BadNumbers(f"{what} is damaged: {'; '.join(problems)}")


def with_derived(requests: pd.DataFrame, batches: pd.DataFrame, copy: bool = True
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The request and batch tables with the derived columns computed from the stored ones:
    per request its batch's start, end, size and stream, and ``id``, ``queue_ms``,
    ``compute_ms``, ``latency_ms``, ``met_slo``; per batch ``compute_ms`` (``copy=False``:
    the given frames are extended in place). Raises InvalidArgument when a request names a
    batch that is not there."""
    req = requests.copy() if copy else requests
    bat = batches.copy() if copy else batches
    n = len(req)
    batch = req["batch"].to_numpy(np.int64)
    served = batch >= 0
    ids = bat["batch"].to_numpy(np.int64)
    if len(ids) and ids[0] == 0 and ids[-1] == len(ids) - 1 and (np.diff(ids) == 1).all():
        row = batch[served]  # ids are the row numbers (every engine's tables)
        if len(row) and row.max() >= len(ids):
            row = np.where(row < len(ids), row, -1)
    else:
        row = pd.Index(ids).get_indexer(batch[served])
    if (row < 0).any():
        raise InvalidArgument(f"{int((row < 0).sum())} request(s) name a batch the batch table "
                              "does not have")
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    size = np.zeros(n, dtype=np.int64)
    stream = np.full(n, -1, dtype=np.int64)
    start[served] = bat["start_s"].to_numpy(float)[row]
    end[served] = bat["end_s"].to_numpy(float)[row]
    size[served] = bat["size"].to_numpy(np.int64)[row]
    stream[served] = bat["stream"].to_numpy(np.int64)[row]
    arrival = req["arrival_s"].to_numpy(float)
    req["id"] = np.arange(n, dtype=np.int64)
    req["start_s"] = start
    req["end_s"] = end
    req["queue_ms"] = (start - arrival) * 1e3
    req["compute_ms"] = (end - start) * 1e3
    req["latency_ms"] = (end - arrival) * 1e3
    req["met_slo"] = served & (end <= req["deadline_s"].to_numpy(float))
    req["batch_size"] = size
    req["stream"] = stream
    order = [c for c in REQUEST_ORDER if c in req.columns]
    req = req[order + [c for c in req.columns if c not in order]]
    bat["compute_ms"] = (bat["end_s"] - bat["start_s"]) * 1e3
    return req, bat


def _labels(col: pd.Series):
    """A label column as plain values: what ``col.to_numpy()`` gives, without the detour
    through Python objects when ``col`` is categorical over pandas strings."""
    dtype = col.dtype
    if isinstance(dtype, pd.CategoricalDtype) and dtype.categories.dtype == _inferred_str():
        return dtype.categories.array.take(col.cat.codes.to_numpy(), allow_fill=True)
    return col.to_numpy()


def _inferred_str():
    """The dtype pandas infers for a column of Python strings (object before pandas 3)."""
    global _STR
    if _STR is None:
        _STR = pd.Series(np.array(["x"], dtype=object)).dtype
    return _STR


_STR = None


def assemble(workload_requests: pd.DataFrame, model_names: Sequence[str], status: np.ndarray,
             drop_s: np.ndarray, b_model: np.ndarray, b_stream: np.ndarray,
             b_start: np.ndarray, b_end: np.ndarray, b_size: np.ndarray,
             served_ids: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build the request and batch tables from an engine's raw arrays.

    ``served_ids`` lists the ids of every served request, batch after batch (``b_size[k]``
    ids for batch ``k``). Both engines and the real driver call this, so their tables match.
    """
    n = len(workload_requests)
    nb = len(b_size)
    b_size = np.asarray(b_size, dtype=np.int64)
    served_ids = np.asarray(served_ids, dtype=np.int64)
    batch = np.full(n, -1, dtype=np.int64)
    batch[served_ids] = np.repeat(np.arange(nb, dtype=np.int64), b_size)
    status = np.asarray(status, dtype=np.int8).copy()
    status[served_ids] = DONE
    w = workload_requests
    req = pd.DataFrame({
        "model": _labels(w["model"]),
        "priority": w["priority"].to_numpy(np.int64),
        "camera": w["camera"].to_numpy(np.int64),
        "source": _labels(w["source"]),
        "arrival_s": w["arrival_s"].to_numpy(float),
        "deadline_s": w["deadline_s"].to_numpy(float),
        "slo_ms": w["slo_ms"].to_numpy(float),
        "status": pd.Categorical.from_codes(status, categories=list(STATUS_NAMES)),
        "batch": batch,
        # dropped requests leave the queue at drop_s: kept for queue-depth accounting
        "drop_s": np.asarray(drop_s, dtype=float),
    })
    names = np.asarray(list(model_names), dtype=object)
    bat = pd.DataFrame({
        "batch": np.arange(nb, dtype=np.int64),
        "model": names[np.asarray(b_model, dtype=np.int64)] if nb else np.empty(0, dtype=object),
        "stream": np.asarray(b_stream, dtype=np.int64),
        "start_s": np.asarray(b_start, dtype=float),
        "end_s": np.asarray(b_end, dtype=float),
        "size": b_size,
    })
    return with_derived(req, bat, copy=False)


def sniff(path: Path) -> bool:
    """True when ``path`` is a result saved by :meth:`Result.save` (a zip whose manifest says
    ``hookmagic_kind`` "sched_result"; never raises): what ``hookmagic.load`` asks before
    opening it with :func:`load_result`."""
    try:
        path = Path(path)
        if not path.is_file() or not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo("manifest.json")
            if info.file_size > 1 << 20:
                return False
            manifest = json.loads(zf.read(info))
            return isinstance(manifest, dict) and manifest.get(SAVED_KIND_KEY) == KIND
    except Exception:  # a sniff answers "not mine" for anything it cannot read
        return False


#: the loader ``hookmagic.load`` calls for a file :func:`sniff` recognises
load_saved = load_result
