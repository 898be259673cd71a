"""Analyses across the ranks of a :class:`~hookmagic.traceset.TraceSet` (pure: no drawing).

Every kernel-level question is one DuckDB query over the set's Parquet files (out of core);
only per-rank or per-collective results come back as DataFrames.

How ranks are compared
----------------------
- **Collectives are matched across ranks by order.** NCCL requires every rank to issue the
  collectives of a communicator in the same order, so the k-th all-reduce of rank 0 and the
  k-th all-reduce of rank 1 are one collective (matched per kind: ``(collective, seq)``).
  Captures must cover the same steps on every rank (the automatic capture does).
- **Arrival** at a collective is its kernel's start: the kernel starts when the rank's stream
  reaches it and then waits inside for the peers. The rank that arrives last is the
  straggler of that collective; its **lateness** is its arrival minus the median arrival of
  the other ranks. Waiting inside a collective is the kernel's time beyond the shortest
  kernel of that collective (the last to arrive hardly waits).
- **Why late**: between the end of the previous collective (where the ranks were together)
  and its arrival, each rank's GPU either computed or sat idle (waiting for its host:
  data loading, Python, a sleep). The straggler's extra time is put down to whichever of the
  two grew more than on the median other rank: ``"compute"`` or ``"host"``.
- **One clock.** Ranks on one host share CUPTI's clock. Across hosts, offsets are estimated
  from the ends of matched collectives (a collective ends on all ranks within a few
  microseconds of each other): the median difference per host, with 1.4826 x the median
  absolute deviation as its error. A host with no collective in common, or whose estimate is
  worse than ``max_error_ns``, raises a :class:`ClockSkewWarning` with its estimate.
- **Steps** come from each trace's ``meta["steps"]`` (host-clock boundaries of the
  optimizer steps an automatic capture records). A collective belongs to the step in which
  its kernel started on the earliest-assigned rank: the GPU runs behind its host, so a
  later step is never the right answer when an earlier rank says otherwise.

Maps and reduces
----------------
Each analysis is a map that reads only its own ranks' files (:func:`per_rank_map`,
:func:`collective_map`, and for the stragglers' causes :func:`window_compute`) and a reduce
over the maps' small rows that does everything across ranks (:func:`overlap_from`,
:func:`clock_from`, :func:`collectives_from`, :func:`skew_from`, :func:`stragglers_from`,
:func:`headline`). The functions taking a set run both in this process; :mod:`hookmagic.ray`
runs the maps in Ray tasks where the files are and the same reduces on the driver.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from hookmagic.analysis.nccl import COLLECTIVE_SQL, NCCL_PREFIX
from hookmagic.common.errors import InvalidArgument
from hookmagic.common.results import Headline
from hookmagic.common.intervals import merge_intervals

if TYPE_CHECKING:  # pragma: no cover
    from hookmagic.traceset.model import TraceSet

NCCL = "regexp_matches(name, '^nccl')"

#: the second map of :func:`stragglers`: windows in, ``rank, inst, compute_ns`` out
WindowWork = Callable[[pd.DataFrame], pd.DataFrame]


class ClockSkewWarning(UserWarning):
    """Ranks' clocks could not be aligned well; the message gives the estimate and its error."""


# -- clocks ----------------------------------------------------------------------------------
#: a host's clock estimate with a larger error than this (ns) raises a ClockSkewWarning
DEFAULT_MAX_CLOCK_ERROR_NS = 100_000


def clock_alignment(ts: "TraceSet", *,
                    max_error_ns: int = DEFAULT_MAX_CLOCK_ERROR_NS) -> pd.DataFrame:
    """Offset of each rank's clock from the reference rank's (the lowest rank with data).

    Columns: ``rank, host, offset_ns`` (subtract it from the rank's times), ``error_ns``
    (NaN where no estimate), ``collectives`` (used), ``method``. Cached in ``ts.cache``.
    """
    _check_max_error(max_error_ns)
    key = ("clock", max_error_ns)
    if key in ts.cache:
        return ts.cache[key]
    ranks = ts.ranks
    ranks = ranks[ranks["rank"].isin(ts.data_ranks)]
    # every rank's collectives are read only when there is more than one clock to align
    raw = _raw_collectives(ts) if ranks["host"].nunique() > 1 else None
    out = clock_from(ranks, raw, max_error_ns=max_error_ns)
    ts.cache[key] = out
    return out


def _check_max_error(max_error_ns: Any) -> None:
    if isinstance(max_error_ns, bool) or not isinstance(max_error_ns, (int, float)) \
            or not max_error_ns >= 0 or max_error_ns == float("inf"):
        raise InvalidArgument(f"max_error_ns={max_error_ns!r}: give a finite number of "
                              "nanoseconds, 0 or more")


def clock_from(ranks: pd.DataFrame, raw: pd.DataFrame | None, *,
               max_error_ns: int = DEFAULT_MAX_CLOCK_ERROR_NS) -> pd.DataFrame:
    """The reduce of :func:`clock_alignment`: from the rows (``rank, host``) of the ranks with
    data and every rank's collectives on its own clock (:func:`collective_map`'s
    ``collectives``; read only when the ranks are on more than one host)."""
    hosts = ranks.set_index("rank")["host"]
    out = pd.DataFrame({"rank": ranks["rank"].to_numpy(), "host": ranks["host"].to_numpy(),
                        "offset_ns": 0, "error_ns": 0.0, "collectives": 0,
                        "method": "one host: CUPTI's clock is shared"})
    if hosts.nunique() > 1:
        ref_rank = int(ranks["rank"].min())
        ref_host = hosts[ref_rank]
        ref = raw[raw["rank"] == ref_rank].set_index(["collective", "seq"])["end_ns"]
        # one join of every rank's collectives with the reference rank's, one median per host
        joined = raw.join(ref.rename("ref_end"), on=["collective", "seq"], how="inner")
        joined["host"] = joined["rank"].map(hosts)
        joined["diff"] = (joined["end_ns"] - joined["ref_end"]).astype(np.float64)
        joined = joined[joined["host"] != ref_host]
        offset = joined.groupby("host")["diff"].median().astype("float64")
        joined["dev"] = (joined["diff"] - joined["host"].map(offset).astype("float64")).abs()
        error = (1.4826 * joined.groupby("host")["dev"].median()).astype("float64")
        used = joined.groupby("host").size().astype("int64")
        host = out["host"].astype(object)
        is_ref = (host == ref_host).to_numpy()
        known = host.isin(list(offset.index)).to_numpy() & ~is_ref
        lost = ~known & ~is_ref
        off = host.map(offset.to_dict()).astype("float64").to_numpy()
        err = host.map(error.to_dict()).astype("float64").to_numpy()
        n = host.map(used.to_dict()).astype("float64").to_numpy()
        out["offset_ns"] = np.where(known, np.nan_to_num(np.round(off)), 0).astype("int64")
        out["error_ns"] = np.where(known, err, np.where(lost, np.nan, 0.0))
        out["collectives"] = np.where(known, np.nan_to_num(n), 0).astype("int64")
        out["method"] = np.where(is_ref, "reference host",
                                 np.where(known, "ends of collectives", "none"))
        for host, group in out[lost].groupby("host"):
            warnings.warn(ClockSkewWarning(
                f"clock of host {host!r} (ranks {group['rank'].tolist()}) cannot be "
                "aligned: no collective in common with the reference rank; its times "
                "stay on its own clock"), stacklevel=3)
        for host in error.index[error > max_error_ns]:
            warnings.warn(ClockSkewWarning(
                f"clock of host {host!r} aligned to {offset[host] / 1e6:+.3f} ms with an error "
                f"of about {error[host] / 1e3:.0f} us (more than {max_error_ns / 1e3:.0f} us): "
                "cross-host timings are uncertain by that much"), stacklevel=3)
    out["offset_ns"] = out["offset_ns"].astype("int64")
    return out


def _offsets(ts: "TraceSet") -> pd.Series:
    return offsets_from(clock_alignment(ts))


def offsets_from(clock: pd.DataFrame) -> pd.Series:
    """``rank -> offset_ns`` from a :func:`clock_alignment` table."""
    return clock.set_index("rank")["offset_ns"]


# -- collectives -----------------------------------------------------------------------------
def _raw_collectives(ts: "TraceSet") -> pd.DataFrame:
    if "raw_collectives" not in ts.cache:
        ts.cache["raw_collectives"] = ts.sql(f"""
            WITH c AS (SELECT rank, start_ns, end_ns, duration_ns, stream, name,
                              {COLLECTIVE_SQL} AS collective
                       FROM kernels WHERE {NCCL})
            SELECT c.rank, c.collective,
                   row_number() OVER (PARTITION BY c.rank, c.collective
                                      ORDER BY c.start_ns, c.end_ns) - 1 AS seq,
                   coalesce(s.step, -1) AS step, c.start_ns, c.end_ns, c.duration_ns,
                   c.stream, c.name
            FROM c LEFT JOIN steps s
              ON s.rank = c.rank AND c.start_ns >= s.start_ns AND c.start_ns < s.end_ns
            ORDER BY c.rank, c.start_ns""")
    return ts.cache["raw_collectives"]


def collectives(ts: "TraceSet") -> pd.DataFrame:
    """Every NCCL kernel of every rank, matched across ranks by ``(collective, seq)``.

    Columns: ``rank, collective, seq, step, start_ns, end_ns, duration_ns`` (times aligned to
    the reference rank's clock), ``wait_ns`` (time beyond the shortest kernel of the same
    collective: waiting for peers), ``stream, name``.
    """
    if "collectives" in ts.cache:
        return ts.cache["collectives"]
    out = collectives_from(_raw_collectives(ts), _offsets(ts))
    ts.cache["collectives"] = out
    return out


def collectives_from(raw: pd.DataFrame, offsets: pd.Series) -> pd.DataFrame:
    """The reduce of :func:`collectives`: every rank's collectives on its own clock
    (:func:`collective_map`) moved to the reference clock by ``offsets`` (``rank ->
    offset_ns``), each matched collective given its earliest step and each kernel its wait."""
    coll = raw.copy()
    shift = coll["rank"].map(offsets).fillna(0).astype("int64")
    coll["start_ns"] -= shift
    coll["end_ns"] -= shift
    key = ["collective", "seq"]
    known = coll["step"].where(coll["step"] >= 0)
    coll["step"] = known.groupby([coll[k] for k in key]).transform("min").fillna(-1) \
        .astype("int64")
    coll["wait_ns"] = coll["duration_ns"] - coll.groupby(key)["duration_ns"].transform("min")
    return coll[["rank", "collective", "seq", "step", "start_ns", "end_ns", "duration_ns",
                 "wait_ns", "stream", "name"]]


def capture_starts(ts: "TraceSet") -> pd.Series:
    """Each rank's capture start on its own clock (``rank -> ns``): the start of its first
    captured step when steps are known, else ``meta["start_ns"]`` of a live CUPTI capture
    (taken on the kernels' clock); ranks whose start is not known are left out."""
    if "capture_starts" in ts.cache:
        return ts.cache["capture_starts"]
    steps = ts.steps_frame()
    out = steps.groupby("rank")["start_ns"].min() if len(steps) else pd.Series(dtype="int64")
    for m in ts.members:
        if m.has_data and m.rank not in out.index and m.meta.get("source") == "cupti":
            start = m.meta.get("start_ns")
            if isinstance(start, int) and not isinstance(start, bool) and start > 0:
                out.loc[m.rank] = start
    out = out.astype("int64")
    ts.cache["capture_starts"] = out
    return out


@dataclass
class CollectiveRows:
    """What :func:`collective_map` gives for some ranks (small rows, no kernel-level data):
    ``collectives``, every NCCL kernel of each rank on its own clock with its own step
    (``rank, collective, seq, step, start_ns, end_ns, duration_ns, stream, name``), and
    ``starts``, each rank's capture start (:func:`capture_starts`)."""

    collectives: pd.DataFrame
    starts: pd.Series


def collective_map(ts: "TraceSet") -> CollectiveRows:
    """The per-rank map that the clock, collectives, skew and stragglers reduce from. Each
    rank's rows come from its own files and meta alone, so a set of some of the ranks gives
    exactly those ranks' rows (what a Ray worker computes where the files are)."""
    return CollectiveRows(_raw_collectives(ts), capture_starts(ts))


def _capture_delay(starts: pd.Series, offsets: pd.Series, coll: pd.DataFrame) -> pd.Series:
    """For each rank's first collective of the capture: how much later (aligned clock) its
    capture began than the earliest rank's; 0 for every other row, and everywhere when a
    rank's start is not known. Nothing came before a first collective but the capture's own
    start, so a rank that began capturing later must not be reported as late by that much.
    ``starts``: :func:`capture_starts`; ``offsets``: ``rank -> offset_ns``."""
    zero = pd.Series(0, index=coll.index, dtype="int64")
    if coll.empty or not set(coll["rank"]).issubset(starts.index):
        return zero
    aligned = starts - offsets.reindex(starts.index).fillna(0).astype("int64")
    delay = aligned - aligned.min()
    first = coll["start_ns"] == coll.groupby("rank")["start_ns"].transform("min")
    return zero.where(~first, coll["rank"].map(delay)).astype("int64")


_SKEW_COLUMNS = ["collective", "seq", "step", "ranks", "first_start_ns", "median_start_ns",
                 "last_rank", "lateness_ns", "capture_start_ns", "transfer_ns", "max_wait_ns"]


def collective_skew(ts: "TraceSet") -> pd.DataFrame:
    """One row per collective (matched across ranks): who arrived last and how late.

    Columns: ``collective, seq, step, ranks`` (how many ranks ran it), ``first_start_ns``,
    ``median_start_ns``, ``last_rank``, ``lateness_ns`` (last arrival minus the median
    arrival of the others; at each rank's first collective, arrivals are counted from the
    rank's own capture start), ``capture_start_ns`` (there: how much later the last rank began
    capturing than the others; 0 elsewhere), ``transfer_ns`` (the shortest kernel: the
    collective's own time), ``max_wait_ns``; ordered by when the collective started.
    """
    if "skew" in ts.cache:
        return ts.cache["skew"]
    out = skew_from(collectives(ts), capture_starts(ts), _offsets(ts))
    ts.cache["skew"] = out
    return out


def skew_from(coll: pd.DataFrame, starts: pd.Series, offsets: pd.Series) -> pd.DataFrame:
    """The reduce of :func:`collective_skew`: from the matched collectives
    (:func:`collectives_from`), each rank's capture start on its own clock
    (:func:`capture_starts`) and the clock offsets (``rank -> offset_ns``)."""
    if coll.empty:
        return pd.DataFrame(columns=_SKEW_COLUMNS)
    key = ["collective", "seq"]
    delay = _capture_delay(starts, offsets, coll)
    c = coll.assign(capture_delay=delay, arrive_ns=coll["start_ns"] - delay)
    c = c.sort_values(key + ["arrive_ns", "rank"], kind="stable").reset_index(drop=True)
    g = c.groupby(key, sort=False)
    out = g.agg(step=("step", "first"), ranks=("rank", "size"),
                first_start_ns=("start_ns", "min"), median_start_ns=("start_ns", "median"),
                last_rank=("rank", "last"), last_start=("arrive_ns", "last"),
                last_delay=("capture_delay", "last"), mean_delay=("capture_delay", "mean"),
                transfer_ns=("duration_ns", "min"), max_wait_ns=("wait_ns", "max"))
    # median arrival of the others: the median of each group's sorted starts without its last
    pos = g.cumcount().to_numpy()
    m = c.groupby(key, sort=False)["rank"].transform("size").to_numpy() - 1  # others
    lo, hi = (m - 1) // 2, m // 2
    arrive = c["arrive_ns"].to_numpy(dtype=np.float64)
    pick = pd.DataFrame({"collective": c["collective"], "seq": c["seq"],
                         "v": np.where(pos == lo, arrive, 0) + np.where(pos == hi, arrive, 0),
                         "w": (pos == lo).astype(int) + (pos == hi).astype(int)})
    pick = pick[(m > 0) & (pick["w"] > 0)].groupby(key, sort=False)[["v", "w"]].sum()
    others = (pick["v"] / pick["w"]).reindex(out.index)
    out["lateness_ns"] = (out["last_start"] - others).fillna(0).round().astype("int64")
    # how much later than the others the last rank's capture began (first collectives only)
    n = out["ranks"].where(out["ranks"] > 1)
    others_delay = (out["mean_delay"] * out["ranks"] - out["last_delay"]) / (n - 1)
    out["capture_start_ns"] = (out["last_delay"] - others_delay).fillna(0).round() \
        .astype("int64")
    out["median_start_ns"] = out["median_start_ns"].round().astype("int64")
    out = out.reset_index()[_SKEW_COLUMNS]
    return out.sort_values("median_start_ns", kind="stable").reset_index(drop=True)


def _before_collective(raw: pd.DataFrame, starts: pd.Series, skew: pd.DataFrame,
                       insts: np.ndarray, work: WindowWork) -> pd.DataFrame:
    """For the collective instances ``insts`` (rows of ``skew``), per rank: GPU compute and
    idle time between the end of the rank's previous collective and this one's start (each
    rank on its own clock; compute kernels counted by the part inside the window).
    ``raw`` and ``starts`` are :func:`collective_map`'s rows; ``work`` measures the compute
    inside the windows (:func:`window_compute` over the ranks holding them)."""
    cols = ["rank", "inst", "gap_ns", "compute_ns", "idle_ns"]
    order = skew[["collective", "seq"]].reset_index().rename(columns={"index": "inst"})
    c = raw.merge(order, on=["collective", "seq"]).sort_values(["rank", "inst"])
    c["w_start"] = c.groupby("rank")["end_ns"].shift(1)
    # before a rank's first collective: from its capture's start, where that is known
    c["w_start"] = c["w_start"].fillna(c["rank"].map(starts))
    w = c[c["inst"].isin(insts)].dropna(subset=["w_start"])
    w = w[["rank", "inst", "w_start", "start_ns"]].rename(columns={"start_ns": "w_end"})
    w = w.astype("int64")
    w = w[w["w_end"] > w["w_start"]].sort_values(["rank", "w_start"])
    if w.empty:
        return pd.DataFrame(columns=cols)
    w = w.merge(work(w), on=["rank", "inst"], how="left")
    w["compute_ns"] = w["compute_ns"].fillna(0).astype("int64")
    w["gap_ns"] = w["w_end"] - w["w_start"]
    # Overlapping compute kernels can sum past the gap; idle never goes below zero.
    w["compute_ns"] = np.minimum(w["compute_ns"], w["gap_ns"])
    w["idle_ns"] = w["gap_ns"] - w["compute_ns"]
    return w[cols]


def window_compute(ts: "TraceSet", windows: pd.DataFrame) -> pd.DataFrame:
    """The second map of :func:`stragglers`: for each window (``rank, inst, w_start, w_end``,
    each rank's own clock, sorted by rank and start), the time of the compute kernels that
    start inside it, each counted up to the window's end: ``rank, inst, compute_ns`` (windows
    with no compute kernel have no row). Reads only the kernels of the set's own ranks, in
    the per-rank map's batches; each kernel goes to the latest window of its rank starting at
    or before it (a binary search per rank, never rank x windows comparisons)."""
    cols = ["rank", "inst", "compute_ns"]
    w = windows.sort_values(["rank", "w_start"], kind="stable")
    by_rank = {int(k): g for k, g in w.groupby("rank", sort=False)}
    parts = []
    for _, rank, s, e, comm in _kernel_batches(ts):
        keep = ~comm
        rank, s, e = rank[keep], s[keep], e[keep]
        # each batch holds whole ranks, one after the other
        cut = np.flatnonzero(np.diff(rank)) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, rank.size]):
            if lo == hi or int(rank[lo]) not in by_rank:
                continue
            g = by_rank[int(rank[lo])]
            ws, we = g["w_start"].to_numpy(np.int64), g["w_end"].to_numpy(np.int64)
            ks, ke = s[lo:hi], e[lo:hi]
            j = np.searchsorted(ws, ks, side="right") - 1
            ok = j >= 0
            ok[ok] = ks[ok] < we[j[ok]]
            j, ks, ke = j[ok], ks[ok], ke[ok]
            total = np.bincount(j, weights=np.minimum(ke, we[j]) - ks, minlength=ws.size)
            hit = np.bincount(j, minlength=ws.size) > 0
            parts.append(pd.DataFrame({"rank": g["rank"].to_numpy()[hit],
                                       "inst": g["inst"].to_numpy()[hit],
                                       "compute_ns": np.rint(total[hit]).astype(np.int64)}))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    return pd.concat(parts, ignore_index=True)[cols]


_STRAGGLER_COLUMNS = ["step", "collective", "seq", "straggler_rank", "lateness_ns", "cause",
                      "extra_compute_ns", "extra_idle_ns", "others_wait_ns", "capture_start_ns"]


def stragglers(ts: "TraceSet") -> pd.DataFrame:
    """Per step (per collective when no steps are known): the rank that arrived last at a
    collective, by how much, and why.

    Columns: ``step, collective, seq`` (the collective of the step where the lateness was
    largest), ``straggler_rank``, ``lateness_ns``, ``cause`` (``"compute"``: its GPU computed
    longer before the collective; ``"host"``: its GPU sat idle longer, waiting for its host;
    ``""`` when the capture's first collective has nothing before it to compare: the ranks'
    capture starts are not known), ``extra_compute_ns``, ``extra_idle_ns`` (the straggler's
    minus the median other rank's), ``others_wait_ns`` (median time the other ranks waited
    inside that collective), ``capture_start_ns`` (first captured step only: how much later
    the straggler's capture began than the others'; that part of its arrival is the tool's,
    so ``lateness_ns`` and the cause are measured from each rank's own capture start). When
    steps are known, collectives outside every captured step are left out.
    """
    if "stragglers" in ts.cache:
        return ts.cache["stragglers"]
    out = stragglers_from(collective_skew(ts), collectives(ts), collective_map(ts),
                          lambda windows: window_compute(ts, windows))
    ts.cache["stragglers"] = out
    return out


def stragglers_from(skew: pd.DataFrame, coll: pd.DataFrame, rows: "CollectiveRows",
                    work: WindowWork) -> pd.DataFrame:
    """The reduce of :func:`stragglers`: from the collectives' skew (:func:`skew_from`), the
    matched collectives (:func:`collectives_from`), every rank's own-clock rows
    (:func:`collective_map`) and ``work``, which measures the compute inside the chosen
    collectives' windows where the ranks' kernels are (:func:`window_compute`)."""
    if skew.empty:
        return pd.DataFrame(columns=_STRAGGLER_COLUMNS)
    has_steps = bool((skew["step"] >= 0).any())
    if has_steps:  # collectives outside every captured step are not a step's
        skew_in = skew[skew["step"] >= 0]
        group = skew_in["step"].to_numpy()
    else:
        skew_in, group = skew, np.arange(len(skew))
    chosen = skew_in.groupby(group, sort=True)["lateness_ns"].idxmax().to_numpy()
    sel = skew.loc[chosen].copy()
    sel["inst"] = chosen
    before = _before_collective(rows.collectives, rows.starts, skew, chosen, work).merge(
        sel[["inst", "last_rank"]], on="inst")
    mine = before[before["rank"] == before["last_rank"]].set_index("inst")
    others = before[before["rank"] != before["last_rank"]].groupby("inst")[
        ["compute_ns", "idle_ns"]].median()
    d_comp = (mine["compute_ns"] - others["compute_ns"]).reindex(chosen)
    d_idle = (mine["idle_ns"] - others["idle_ns"]).reindex(chosen)
    known = d_comp.notna() & d_idle.notna()
    cause = np.where(~known.to_numpy(), "",
                     np.where(d_comp.to_numpy() > d_idle.to_numpy(), "compute", "host"))
    coll = coll[["collective", "seq", "rank", "wait_ns"]]
    waits = coll.merge(sel[["collective", "seq", "last_rank", "inst"]], on=["collective", "seq"])
    waits = waits[waits["rank"] != waits["last_rank"]].groupby("inst")["wait_ns"].median()
    return pd.DataFrame({
        "step": sel["step"].to_numpy() if has_steps else -1,
        "collective": sel["collective"].to_numpy(), "seq": sel["seq"].to_numpy(),
        "straggler_rank": sel["last_rank"].to_numpy(),
        "lateness_ns": sel["lateness_ns"].to_numpy(), "cause": cause,
        "extra_compute_ns": d_comp.fillna(0).round().astype("int64").to_numpy(),
        "extra_idle_ns": d_idle.fillna(0).round().astype("int64").to_numpy(),
        "others_wait_ns": waits.reindex(chosen).to_numpy(dtype=np.float64),
        "capture_start_ns": sel["capture_start_ns"].to_numpy()})


# -- per rank --------------------------------------------------------------------------------
#: kernels read at once by the map over ranks (many small ranks are read together)
BATCH_ROWS = 2_000_000


def _kernel_batches(ts: "TraceSet"):
    """The kernels of every rank with data, in batches of whole ranks (about
    :data:`BATCH_ROWS` rows each): ``(ranks, rank, start_ns, end_ns, comm)`` arrays, each batch
    read from those ranks' own files in one pass."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    files = ts.table_files()["kernels"]
    sizes = {m.rank: _manifest_rows(m) for m in ts.members}
    # kernel names read as the files keep them, dictionary-encoded: the NCCL test then runs
    # once per distinct name, not once per kernel
    want = pa.schema([("start_ns", pa.int64()), ("end_ns", pa.int64()),
                      ("name", pa.dictionary(pa.int32(), pa.string())), ("rank", pa.int64())])
    fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns={"name"}))
    batch: list[int] = []
    rows = 0
    ranks = [r for r in ts.data_ranks if r in files]
    for i, rank in enumerate(ranks):
        batch.append(rank)
        rows += sizes.get(rank, 1)
        if rows < BATCH_ROWS and i + 1 < len(ranks):
            continue
        base = os.path.dirname(os.path.dirname(files[batch[0]]))
        data = ds.dataset([files[r] for r in batch], schema=want, format=fmt,
                          partitioning=ds.partitioning(pa.schema([("rank", pa.int64())]),
                                                       flavor="hive"),
                          partition_base_dir=base).to_table()
        yield (np.asarray(batch, dtype=np.int64), data["rank"].to_numpy(),
               data["start_ns"].to_numpy(), data["end_ns"].to_numpy(),
               _nccl_flags(data["name"]))
        batch, rows = [], 0


def _nccl_flags(names: Any) -> np.ndarray:
    """Whether each kernel name (a chunked dictionary array) is an NCCL kernel's, tested once
    per distinct name of each chunk; a missing name is not."""
    import pyarrow.compute as pc

    prefix = NCCL_PREFIX.lstrip("^")
    parts = []
    for chunk in names.chunks:
        hit = pc.fill_null(pc.starts_with(chunk.dictionary, prefix), False)
        hit = np.append(hit.to_numpy(zero_copy_only=False).astype(bool), False)
        idx = chunk.indices.fill_null(len(hit) - 1).to_numpy()   # null: the appended False
        parts.append(hit[idx])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _manifest_rows(m: Any) -> int:
    info = m.tables.get("kernels")
    rows = info.get("rows") if isinstance(info, dict) else None
    return rows if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 0 else 1


def _in_rank_start_order(rank: np.ndarray, s: np.ndarray) -> bool:
    """Whether the rows are sorted by rank, then start."""
    if rank.size < 2:
        return True
    dr = np.diff(rank)
    return bool((dr >= 0).all() and (np.diff(s)[dr == 0] >= 0).all())


def _segmented_unions(ranks: np.ndarray, rank: np.ndarray, s: np.ndarray, e: np.ndarray,
                      gap: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merged ``[start, end)`` intervals of each rank separately, for many ranks at once:
    ``(rank, start, end)`` of the merged intervals. ``gap`` (per rank, in ``ranks`` order)
    closes gaps up to that length."""
    if s.size == 0:
        empty = np.empty(0, np.int64)
        return empty, empty, empty
    e = np.maximum(e, s)
    if gap is not None:
        e = e + gap[np.searchsorted(ranks, rank)]
    if _in_rank_start_order(rank, s):   # kernels are saved in start order: no sort needed
        r = rank
    else:
        order = np.lexsort((s, rank))
        r, s, e = rank[order], s[order], e[order]
    new_rank = np.empty(r.size, dtype=bool)
    new_rank[0] = True
    new_rank[1:] = r[1:] != r[:-1]
    # the running furthest end, restarted at each rank: shift each rank's ends above every
    # end of the ranks before it, so one running maximum serves all of them
    lift = np.cumsum(new_rank) - 1
    width = np.int64(max(1, int(e.max()) - int(s.min()) + 1)) if s.size else np.int64(1)
    if lift[-1] and width > np.iinfo(np.int64).max // (lift[-1] + 2):
        # spans too wide to lift: rank by rank
        parts = [merge_intervals(s[r == k], e[r == k]) for k in np.unique(r)]
        starts = np.concatenate([p[0] for p in parts])
        ends = np.concatenate([p[1] for p in parts])
        owner = np.concatenate([np.full(p[0].size, k) for p, k in zip(parts, np.unique(r))])
        return owner.astype(np.int64), starts, ends
    low = np.minimum.reduceat(s, np.flatnonzero(new_rank))[lift]
    reach = np.maximum.accumulate((e - low) + lift * width) - lift * width + low
    begins = new_rank.copy()
    begins[1:] |= s[1:] > reach[:-1]
    first = np.flatnonzero(begins)
    last = np.r_[first[1:] - 1, s.size - 1]
    return r[first], s[first], reach[last]


def _per_rank(ts: "TraceSet") -> pd.DataFrame:
    """The map over ranks, one read of each rank's kernel times (many ranks per read):
    ``rank, kernels, first_ns, last_ns, compute_ns, comm_ns, busy_ns`` (unions of kernel
    intervals, each rank on its own clock). Cached; every per-rank analysis reduces from it."""
    if "per_rank" in ts.cache:
        return ts.cache["per_rank"]
    parts = []
    for ranks, rank, s, e, comm in _kernel_batches(ts):
        idx = np.searchsorted(ranks, rank)
        n = np.bincount(idx, minlength=ranks.size)
        first = np.full(ranks.size, np.iinfo(np.int64).max)
        last = np.full(ranks.size, np.iinfo(np.int64).min)
        np.minimum.at(first, idx, s)
        np.maximum.at(last, idx, e)
        out = {"rank": ranks, "kernels": n, "first_ns": np.where(n > 0, first, 0),
               "last_ns": np.where(n > 0, last, 0)}
        for col, mask in (("compute_ns", ~comm), ("comm_ns", comm), ("busy_ns", None)):
            sel = slice(None) if mask is None else mask
            owner, ms, me = _segmented_unions(ranks, rank[sel], s[sel], e[sel])
            out[col] = np.bincount(np.searchsorted(ranks, owner), weights=me - ms,
                                   minlength=ranks.size).astype(np.int64)
        parts.append(pd.DataFrame(out))
    cols = ["rank", "kernels", "first_ns", "last_ns", "compute_ns", "comm_ns", "busy_ns"]
    have = pd.concat(parts, ignore_index=True) if parts else \
        pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    # ranks with data but no kernels table rows (typed: a set with no data has no rows)
    out = pd.DataFrame({"rank": pd.Series(ts.data_ranks, dtype="int64")}).merge(
        have, on="rank", how="left")
    out = out.fillna(0)[cols].astype("int64")
    ts.cache["per_rank"] = out
    return out


def overlap(ts: "TraceSet") -> pd.DataFrame:
    """Communication/computation overlap per rank (the metrics Holistic Trace Analysis
    popularised), from kernel time only.

    Columns: ``rank, compute_ns`` (time any non-NCCL kernel ran), ``comm_ns`` (time any NCCL
    kernel ran), ``overlap_ns`` (both at once), ``overlap_pct`` (of ``comm_ns``),
    ``exposed_comm_ns`` (communication nothing hid), ``busy_ns`` (either). Computed one rank
    at a time, so memory holds one rank's kernel times at most.
    """
    if "overlap" in ts.cache:
        return ts.cache["overlap"]
    out = overlap_from(_per_rank(ts))
    ts.cache["overlap"] = out
    return out


def overlap_from(per: pd.DataFrame) -> pd.DataFrame:
    """The reduce of :func:`overlap`: its columns from the per-rank map's rows (whichever
    engine made them: this process or Ray workers)."""
    out = per[["rank", "compute_ns", "comm_ns", "busy_ns"]].copy()
    out["overlap_ns"] = out["compute_ns"] + out["comm_ns"] - out["busy_ns"]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["overlap_pct"] = np.where(out["comm_ns"] > 0,
                                      100.0 * out["overlap_ns"] / out["comm_ns"], np.nan)
    out["exposed_comm_ns"] = out["comm_ns"] - out["overlap_ns"]
    return out[["rank", "compute_ns", "comm_ns", "overlap_ns", "overlap_pct",
                "exposed_comm_ns", "busy_ns"]].sort_values("rank").reset_index(drop=True)


def per_rank_map(ts: "TraceSet") -> pd.DataFrame:
    """The per-rank map's rows (``rank, kernels, first_ns, last_ns, compute_ns, comm_ns,
    busy_ns``): what a Ray worker computes for the ranks whose files it holds."""
    return _per_rank(ts)


def rank_summary(ts: "TraceSet") -> pd.DataFrame:
    """One row per rank: status, host, GPU, kernels, GPU time, compute/communication split,
    overlap, time waiting inside collectives, and how often it was the straggler.

    Columns: ``rank, status, host, gpu, kernels, span_ns`` (first kernel start to last kernel
    end), ``busy_ns, compute_ns, comm_ns, overlap_pct, wait_ns, times_last, median_lateness_ns``.
    """
    return rank_summary_from(ts.ranks, _per_rank(ts), collectives(ts), stragglers(ts))


def rank_summary_from(ranks: pd.DataFrame, per: pd.DataFrame, coll: pd.DataFrame,
                      st: pd.DataFrame) -> pd.DataFrame:
    """The reduce of :func:`rank_summary`: from the set's ranks table, the per-rank map's rows
    (:func:`per_rank_map`), the matched collectives and the stragglers (whichever engine made
    them: this process or Ray workers)."""
    ranks = ranks[["rank", "status", "host", "gpu"]]
    counts = pd.DataFrame({"rank": per["rank"], "kernels": per["kernels"],
                           "span_ns": per["last_ns"] - per["first_ns"]})
    ov = overlap_from(per)[["rank", "busy_ns", "compute_ns", "comm_ns", "overlap_pct"]]
    wait = coll.groupby("rank")["wait_ns"].sum().rename("wait_ns")
    last = st.groupby("straggler_rank").agg(times_last=("step", "size"),
                                            median_lateness_ns=("lateness_ns", "median"))
    out = (ranks.merge(counts, on="rank", how="left").merge(ov, on="rank", how="left")
           .merge(wait, left_on="rank", right_index=True, how="left")
           .merge(last, left_on="rank", right_index=True, how="left"))
    for col in ("kernels", "span_ns", "busy_ns", "compute_ns", "comm_ns", "wait_ns",
                "times_last"):
        has = out["status"].isin(["complete", "partial"])
        out[col] = out[col].where(~has, out[col].fillna(0))
    return out


def vs_median(ts: "TraceSet", *, top: int = 20) -> pd.DataFrame:
    """Each rank's GPU time per kernel name against the median rank's (a flame-graph diff
    reduced to its leaves), for the ``top`` names that differ most.

    Long form: ``name, rank, time_ns, median_ns, delta_ns`` (rank minus median), ``delta_pct``.
    """
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise InvalidArgument(f"top={top!r}: give a whole number of kernel names, 1 or more")
    per = ts.sql("""
        WITH t AS (SELECT name, rank, sum(duration_ns) AS time_ns FROM kernels GROUP BY ALL),
             names AS (SELECT name FROM t GROUP BY name ORDER BY sum(time_ns) DESC LIMIT 500)
        SELECT t.* FROM t JOIN names USING (name)""")
    if per.empty:
        return pd.DataFrame(columns=["name", "rank", "time_ns", "median_ns", "delta_ns",
                                     "delta_pct"])
    wide = per.pivot_table(index="name", columns="rank", values="time_ns", fill_value=0)
    for r in ts.data_ranks:
        if r not in wide.columns:
            wide[r] = 0
    median = wide.median(axis=1)
    delta = wide.sub(median, axis=0)
    names = delta.abs().max(axis=1).sort_values(ascending=False).index[:top]
    long = (wide.loc[names].stack().rename("time_ns").reset_index()
            .merge(median.rename("median_ns"), left_on="name", right_index=True))
    long["delta_ns"] = long["time_ns"] - long["median_ns"]
    with np.errstate(invalid="ignore", divide="ignore"):
        long["delta_pct"] = np.where(long["median_ns"] > 0,
                                     100.0 * long["delta_ns"] / long["median_ns"], np.nan)
    return long[["name", "rank", "time_ns", "median_ns", "delta_ns", "delta_pct"]]


def busy_intervals(ts: "TraceSet", *, max_intervals_per_rank: int = 4000,
                   ranks: Any = None) -> pd.DataFrame:
    """Merged busy intervals per rank and kind (``compute`` / ``comm``), on the aligned clock,
    for a timeline. Gaps shorter than the set's span divided by ``max_intervals_per_rank`` are
    closed, so the result stays small for any trace size; ``ranks`` keeps only those ranks.

    Columns: ``rank, kind, start_ns, end_ns``.
    """
    cols = ["rank", "kind", "start_ns", "end_ns"]
    if isinstance(max_intervals_per_rank, bool) or not isinstance(
            max_intervals_per_rank, (int, np.integer)) or max_intervals_per_rank < 1:
        raise InvalidArgument(f"max_intervals_per_rank={max_intervals_per_rank!r}: give a "
                              "whole number, 1 or more")
    keep = None if ranks is None else set(int(r) for r in ranks)
    per = _per_rank(ts)
    per = per[per["kernels"] > 0]
    if per.empty:
        return pd.DataFrame(columns=cols)
    gap = max(int((per["last_ns"].max() - per["first_ns"].min()) // max_intervals_per_rank), 0)
    off = _offsets(ts)
    parts = []
    for batch, rank, s, e, comm in _kernel_batches(ts):
        if keep is not None:
            sel = np.isin(rank, list(keep))
            rank, s, e, comm = rank[sel], s[sel], e[sel], comm[sel]
        for kind, mask in (("compute", ~comm), ("comm", comm)):
            owner, ms, me = _segmented_unions(batch, rank[mask], s[mask], e[mask],
                                              np.full(batch.size, gap, np.int64))
            shift = pd.Series(owner).map(off).fillna(0).to_numpy(dtype=np.int64)
            parts.append(pd.DataFrame({"rank": owner, "kind": kind, "start_ns": ms - shift,
                                       "end_ns": me - gap - shift}))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)
    return out.sort_values(["rank", "kind", "start_ns"], kind="stable").reset_index(drop=True)


def busy_share(intervals: pd.DataFrame, groups: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Share of each (group of ranks, time bin) during which its ranks' GPUs were busy:
    ``intervals`` from :func:`busy_intervals` (one kind), ``groups`` indexed by rank: the group
    of each rank, ``edges`` the bin edges (ns). Returns ``groups x bins`` in [0, 1], the exact
    integral of the intervals over each bin (no sampling)."""
    n_groups = int(groups.max()) + 1 if groups.size else 0
    out = np.zeros((n_groups, edges.size - 1))
    if intervals.empty:
        return out
    g = groups[intervals["rank"].to_numpy()]
    for k in np.unique(g):
        sel = g == k
        t0 = edges[0]
        s = np.sort(intervals["start_ns"].to_numpy()[sel] - t0).astype(np.float64)
        e = np.sort(intervals["end_ns"].to_numpy()[sel] - t0).astype(np.float64)
        x = (edges - t0).astype(np.float64)
        cs, ce = np.r_[0, np.cumsum(s)], np.r_[0, np.cumsum(e)]
        i, j = np.searchsorted(s, x), np.searchsorted(e, x)
        # covered time up to t: sum over started intervals of (t - s) minus ended ones (t - e)
        cover = (i * x - cs[i]) - (j * x - ce[j])
        out[k] = np.diff(cover)
    size = np.bincount(groups[groups >= 0], minlength=n_groups).astype(np.float64)
    return out / np.diff(edges)[None, :] / np.maximum(size, 1)[:, None]


def describe(ts: "TraceSet") -> Headline:
    """The set's headline: ranks, ranks with data, problems, steps analysed, the rank most
    often last and its median lateness, the duplicates left out (notes say which ranks could
    not be analysed)."""
    return headline(ts, stragglers(ts))


def headline(ts: "TraceSet", st: pd.DataFrame) -> Headline:
    """The reduce of :func:`describe`: from the set's members alone (``ts`` may be a set whose
    files this process cannot read) and its :func:`stragglers` table ``st``."""
    top = st["straggler_rank"].mode() if len(st) else pd.Series(dtype="int64")
    most = int(top.iloc[0]) if len(top) else None
    mine = st[st["straggler_rank"] == most] if most is not None else st.iloc[:0]
    values = {"ranks": len(ts), "with_data": len(ts.data_ranks), "problems": len(ts.problems),
              "steps": int(len(st)),
              "stragglers": int(st["straggler_rank"].nunique()) if len(st) else 0,
              "most_often_last": most if most is not None else "",
              "times_last": int(len(mine)),
              "median_lateness_ms": float(mine["lateness_ns"].median()) / 1e6 if len(mine)
              else float("nan"),
              "duplicates_left_out": len(getattr(ts, "duplicates", []))}
    notes = []
    probs = ts.problems
    if len(probs):
        shown = ", ".join(f"{r.rank} ({r.status})" for r in probs.head(10).itertuples())
        more = f" and {len(probs) - 10} more" if len(probs) > 10 else ""
        notes.append(f"ranks not analysed: {shown}{more} (see .problems)")
    job = f" job {ts.job_id}" if ts.job_id else ""
    return Headline(f"hookmagic.TraceSet{job}", values,
                    units={"median_lateness_ms": "ms", "steps": "steps"}, notes=notes)
