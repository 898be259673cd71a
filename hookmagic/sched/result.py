"""Results of a simulation or a real run: one row per request, one row per batch.

:class:`SimResult` (from :func:`hookmagic.sched.simulate`) and :class:`RunResult` (from
:func:`hookmagic.sched.run`) share every column, so every metric and view works on both.
Save and load with :meth:`Result.save` / :func:`load_result` (Parquet; metadata as JSON).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .dispatcher import DONE, STATUS_NAMES

__all__ = ["Result", "SimResult", "RunResult", "assemble", "load_result"]



class Result:
    """Per-request and per-batch records of one scheduling run.

    Attributes
    ----------
    requests : one row per request — ``arrival_s``, ``start_s`` (its batch's start),
        ``end_s``, ``queue_ms`` / ``compute_ms`` / ``latency_ms``, ``status`` (done,
        rejected, timeout, late, stale), ``met_slo``, ``batch``, ``batch_size``, ``stream``,
        plus the workload's ``model``, ``priority``, ``camera``, ``source``, ``slo_ms``.
    batches : one row per batch — ``model``, ``stream``, ``start_s``, ``end_s``, ``size``.
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

    def metrics(self, by: str | Sequence[str] | None = "model", warmup_s: float = 0.0) -> pd.DataFrame:
        """Throughput, goodput, SLO attainment, latency percentiles (total, queue, compute),
        batch sizes and drops; one row per group of ``by`` (None: one row for everything).
        Requests arriving in the first ``warmup_s`` seconds are left out."""
        from .metrics import summary
        return summary(self.requests, by=by, duration_s=self.duration_s, warmup_s=warmup_s)

    def save(self, prefix: str | Path) -> tuple[Path, Path]:
        """Write ``<prefix>.requests.parquet`` and ``<prefix>.batches.parquet``."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        prefix = Path(prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, frame in (("requests", self.requests), ("batches", self.batches)):
            table = pa.Table.from_pandas(frame, preserve_index=False)
            md = dict(table.schema.metadata or {})
            md[b"hookmagic.sched"] = json.dumps(self.meta, default=str).encode()
            path = prefix.with_name(prefix.name + f".{name}.parquet")
            from hookmagic.common import files
            table = table.replace_schema_metadata(md)
            files.atomic_write(path, lambda fh, t=table: pq.write_table(t, fh), "the result")
            paths.append(path)
        return paths[0], paths[1]


class SimResult(Result):
    """Result of :func:`hookmagic.sched.simulate`."""
    mode = "sim"


class RunResult(Result):
    """Result of :func:`hookmagic.sched.run` on real engines."""
    mode = "real"


def load_result(prefix: str | Path) -> Result:
    """Load a result written by :meth:`Result.save` (a SimResult or RunResult per its meta)."""
    from hookmagic.common import files
    prefix = Path(prefix)
    # bounded like every loader (docs/limits.md): rows and decoded bytes checked first
    req_path = prefix.with_name(prefix.name + ".requests.parquet")
    bat_path = prefix.with_name(prefix.name + ".batches.parquet")
    t_req = files.read_parquet(req_path, f"scheduler result {str(req_path)!r}")
    t_bat = files.read_parquet(bat_path, f"scheduler result {str(bat_path)!r}")
    meta = files.parse_json((t_req.schema.metadata or {}).get(b"hookmagic.sched", b"{}"),
                            f"scheduler result {str(req_path)!r} (metadata)")
    if not isinstance(meta, dict):
        meta = {}
    cls = RunResult if meta.get("mode") == "real" else SimResult
    return cls(t_req.to_pandas(), t_bat.to_pandas(), meta)


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
    batch_of = np.repeat(np.arange(nb, dtype=np.int64), b_size)
    batch = np.full(n, -1, dtype=np.int64)
    batch[served_ids] = batch_of
    status = np.asarray(status, dtype=np.int8).copy()
    status[served_ids] = DONE
    served = batch >= 0
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    start[served] = np.asarray(b_start, dtype=float)[batch[served]]
    end[served] = np.asarray(b_end, dtype=float)[batch[served]]
    size = np.zeros(n, dtype=np.int64)
    size[served] = b_size[batch[served]]
    stream = np.full(n, -1, dtype=np.int64)
    stream[served] = np.asarray(b_stream, dtype=np.int64)[batch[served]]
    w = workload_requests
    arrival = w["arrival_s"].to_numpy(float)
    deadline = w["deadline_s"].to_numpy(float)
    latency = (end - arrival) * 1e3
    req = pd.DataFrame({
        "id": np.arange(n, dtype=np.int64),
        "model": _labels(w["model"]),
        "priority": w["priority"].to_numpy(np.int64),
        "camera": w["camera"].to_numpy(np.int64),
        "source": _labels(w["source"]),
        "arrival_s": arrival,
        "deadline_s": deadline,
        "slo_ms": w["slo_ms"].to_numpy(float),
        "status": pd.Categorical.from_codes(status, categories=list(STATUS_NAMES)),
        "start_s": start,
        "end_s": end,
        "queue_ms": (start - arrival) * 1e3,
        "compute_ms": (end - start) * 1e3,
        "latency_ms": latency,
        "met_slo": served & (end <= deadline),
        "batch": batch,
        "batch_size": size,
        "stream": stream,
    })
    # Dropped requests leave the queue at drop_s; keep that time for queue-depth accounting.
    req["drop_s"] = np.asarray(drop_s, dtype=float)
    names = np.asarray(list(model_names), dtype=object)
    bat = pd.DataFrame({
        "batch": np.arange(nb, dtype=np.int64),
        "model": names[np.asarray(b_model, dtype=np.int64)] if nb else np.empty(0, dtype=object),
        "stream": np.asarray(b_stream, dtype=np.int64),
        "start_s": np.asarray(b_start, dtype=float),
        "end_s": np.asarray(b_end, dtype=float),
        "size": b_size,
    })
    bat["compute_ms"] = (bat["end_s"] - bat["start_s"]) * 1e3
    return req, bat


REQUESTS_SUFFIX = ".requests.parquet"


def sniff(path: Path) -> bool:
    """True when ``path`` is the requests table of a result saved by :meth:`Result.save`
    (``<prefix>.requests.parquet`` with the scheduler's metadata; never raises)."""
    try:
        if not (path.is_file() and path.name.endswith(REQUESTS_SUFFIX)):
            return False
        import pyarrow.parquet as pq
        return b"hookmagic.sched" in (pq.read_schema(path).metadata or {})
    except Exception:  # a sniff answers "not mine" for anything it cannot read
        return False


def load_saved(path: str | Path) -> Result:
    """A result from its saved requests table's path (what ``hookmagic.load`` opens); the
    batches table beside it is read too. :func:`load_result` takes the prefix instead."""
    path = Path(path)
    return load_result(path.with_name(path.name.removesuffix(REQUESTS_SUFFIX)))
