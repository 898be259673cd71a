"""Captures on the workers of a Ray job, gathered into the driver (the notebook) as a TraceSet.

On a GPU worker (an actor method, a task, a Ray Serve replica, a Ray Train worker)::

    import hookmagic.ray

    @ray.remote(num_gpus=1)
    class Trainer:
        def step(self):
            with hookmagic.ray.capture("train"):      # a hookmagic.capture, sent to the driver
                ...

and on the driver::

    traces = hookmagic.ray.gather("train")           # a TraceSet: one member per capture
    traces.stragglers(); traces.timeline()

How it travels: a small detached actor, ``hookmagic-collector`` in namespace ``hookmagic``
(zero CPUs), keeps what workers send. Entering a capture registers it there (so the driver
knows it began), leaving it sends the finished trace (the single-file form, Parquet inside)
through Ray's object store. Ranks are numbered in the order captures begin, unless Ray Train
gives the worker a world rank. :func:`gather` waits for the captures that began, up to
``timeout_s``; a capture whose actor died (checked by pinging it) or that did not finish in
time is a *missing* member with its reason, and the others are analysed.
:func:`send` sends a trace obtained any other way (``hookmagic.load``, a recording). Without a
GPU, captures are "unavailable" and say why, and the plumbing works the same.

Traces already written to files (a folder of rank folders, a glob, a list) are analysed where
they are by :func:`summary`, :func:`stragglers`, :func:`skew`, :func:`per_rank` and
:func:`overlap`: Ray tasks run the per-rank
maps of :mod:`hookmagic.analysis.ranks` over a share of the paths each, and the driver reduces
their small rows with the same functions as ``hookmagic.load_many(paths)``, so both give equal
tables.
"""
from __future__ import annotations

import itertools
import os
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from hookmagic.common.errors import HookmagicError, InvalidArgument, Unavailable

COLLECTOR_NAME = "hookmagic-collector"
NAMESPACE = "hookmagic"
_counter = itertools.count()


class RayUnavailable(Unavailable):
    """Ray is not installed or not initialised here."""


class GatherError(HookmagicError, RuntimeError):
    """Nothing could be gathered (no capture began in that session)."""


def _ray() -> Any:
    from hookmagic.common.optional import require

    ray = require("ray", extra="ray")
    if not ray.is_initialized():
        raise RayUnavailable("Ray is not initialised in this process: call ray.init() first "
                             "(on workers Ray does it)")
    return ray


class _Collector:
    """The collector actor: per session, per capture key, what the driver will gather."""

    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, dict[str, Any]]] = {}

    def begin(self, session: str, key: str, info: dict[str, Any], rank: int | None,
              actor: Any = None) -> int:
        _check_rank(rank)
        entries = self.sessions.setdefault(session, {})
        if rank is None:
            rank = len(entries)
        entries[key] = {"info": info, "rank": rank, "state": "running", "data": None,
                        "actor": actor, "error": ""}
        return rank

    def put(self, session: str, key: str, data: bytes, rank: int | None = None) -> int:
        _check_rank(rank)   # refused before anything is stored
        entries = self.sessions.setdefault(session, {})
        entry = entries.get(key)
        if entry is None:
            entry = entries[key] = {"info": {}, "rank": len(entries) if rank is None else rank,
                                    "actor": None, "error": ""}
        entry.update(state="done", data=data)
        return entry["rank"]

    def status(self, session: str) -> dict[str, dict[str, Any]]:
        return {k: {"rank": e["rank"], "state": e["state"], "info": e["info"],
                    "actor": e["actor"]}
                for k, e in self.sessions.get(session, {}).items()}

    def take(self, session: str, keys: list[str]) -> dict[str, bytes]:
        entries = self.sessions.get(session, {})
        return {k: entries[k]["data"] for k in keys if k in entries and entries[k]["data"]}

    def clear(self, session: str) -> None:
        self.sessions.pop(session, None)


def collector(create: bool = True) -> Any:
    """The collector actor's handle (created, detached, on first use when ``create``)."""
    ray = _ray()
    if not create:
        try:
            return ray.get_actor(COLLECTOR_NAME, namespace=NAMESPACE)
        except ValueError:
            return None
    return ray.remote(_Collector).options(
        name=COLLECTOR_NAME, namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
        num_cpus=0, max_restarts=0).remote()


def _worker_info() -> dict[str, Any]:
    from hookmagic.distributed.identity import rank_identity

    return rank_identity().as_meta()


def _trace_bytes(trace: Any) -> bytes:
    from hookmagic.trace.io import save_trace

    with tempfile.TemporaryDirectory(prefix="hookmagic-ray-") as tmp:
        path = Path(tmp) / "trace.hmtrace"
        save_trace(trace, path)
        return path.read_bytes()


def send(trace: Any, session: str = "default", *, rank: int | None = None,
         timeout_s: float = 60.0) -> int:
    """Send a finished :class:`~hookmagic.Trace` to the driver's session; returns its rank.

    ``rank`` and ``timeout_s`` are checked before anything is stored."""
    rank = _check_rank(rank)
    timeout_s = _check_timeout(timeout_s)
    _check_session(session)
    from hookmagic.trace.model import Trace
    if not isinstance(trace, Trace):
        raise InvalidArgument(f"send takes a hookmagic Trace, not {type(trace).__name__}")
    ray = _ray()
    info = _worker_info()
    meta_rank = dict(trace.meta.get("rank") or {})
    for k, v in info.items():
        meta_rank.setdefault(k, v)
    if rank is not None:
        meta_rank["rank"] = rank
    trace.meta["rank"] = meta_rank
    key = f"sent:{info.get('ray_worker_id', '')}:{os.getpid()}:{next(_counter)}"
    return int(ray.get(collector().put.remote(session, key, _trace_bytes(trace),
                                              meta_rank.get("rank") if rank is not None
                                              else None), timeout=timeout_s))


class capture:  # noqa: N801 - used as `with hookmagic.ray.capture(): ...`
    """A :func:`hookmagic.capture` on a Ray worker whose trace goes to the driver.

    ``session`` names the group of captures :func:`gather` collects; ``rank`` fixes this
    worker's rank (default: Ray Train's world rank if any, else the order captures began).
    Other keyword arguments go to :func:`hookmagic.capture`. The ``with`` block yields the
    :class:`~hookmagic.Trace`, filled when it ends, as ``hookmagic.capture`` does.
    """

    def __init__(self, session: str = "default", *, rank: int | None = None,
                 timeout_s: float = 60.0, **capture_kw: Any) -> None:
        _check_session(session)
        self.session, self.rank = session, _check_rank(rank)
        self.timeout_s = _check_timeout(timeout_s)
        self.capture_kw = capture_kw
        self._cap: Any = None

    def __enter__(self) -> Any:
        from hookmagic.cupti.session import capture as local_capture

        ray = _ray()
        info = _worker_info()
        rank = self.rank
        if rank is None and info.get("ray_train"):
            rank = int(info["rank"])
        try:
            actor = ray.get_runtime_context().current_actor
        except Exception:  # a task, not an actor
            actor = None
        self._key = f"{info.get('ray_worker_id', '')}:{os.getpid()}:{next(_counter)}"
        self._info = info
        self._collector = collector()
        self.rank = int(ray.get(self._collector.begin.remote(self.session, self._key, info,
                                                             rank, actor),
                                timeout=self.timeout_s))
        import sys

        # Stacks start below the frame holding the `with` (as for hookmagic.capture).
        self._cap = local_capture(_boundary_frame=sys._getframe(2), **self.capture_kw)
        return self._cap.__enter__()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        ray = _ray()
        self._cap.__exit__(exc_type, exc, tb)
        trace = self._cap.trace
        ident = dict(self._info, rank=self.rank, capture=0)
        from hookmagic.distributed.identity import RankIdentity, fill_device

        probe = RankIdentity(local_rank=0)
        fill_device(probe, trace.meta, trace.kernels["device"].to_numpy())
        ident.update(device=probe.device, gpu_uuid=probe.gpu_uuid)
        trace.meta["rank"] = ident
        try:
            ray.get(self._collector.put.remote(self.session, self._key, _trace_bytes(trace)),
                    timeout=self.timeout_s)
        except Exception as err:  # never hide the worker's own exception behind ours
            warnings.warn(f"hookmagic.ray: the trace could not be sent to the driver "
                          f"({type(err).__name__}: {err})", stacklevel=2)
        return False


def gather(session: str = "default", *, dir: str | os.PathLike | None = None,  # noqa: A002
           timeout_s: float = 60.0, clear: bool = True) -> Any:
    """On the driver: the traces of ``session`` as a :class:`~hookmagic.traceset.TraceSet`.

    Waits up to ``timeout_s`` for captures that began but have not been sent. A capture whose
    actor died, or that is still running when the time is up, becomes a *missing* member with
    that reason (one warning lists them). The traces are written to ``dir`` (default: a new
    temporary folder) as ``rank=<N>.hmtrace``; ``clear`` forgets them in the collector after.
    """
    _check_session(session)
    timeout_s = _check_timeout(timeout_s)
    if dir is not None:
        target = Path(os.path.expanduser(os.fspath(dir)))
        if target.exists() and not target.is_dir():
            raise InvalidArgument(f"gather(dir={os.fspath(dir)!r}): that path exists and is "
                                  "not a folder")
    ray = _ray()
    coll = collector(create=False)
    if coll is None:
        raise GatherError(f"no hookmagic.ray capture has begun (no collector actor "
                          f"{COLLECTOR_NAME!r} in namespace {NAMESPACE!r})")
    deadline = time.monotonic() + timeout_s
    dead: dict[str, str] = {}
    while True:
        status = ray.get(coll.status.remote(session), timeout=max(timeout_s, 10))
        if not status:
            raise GatherError(f"no capture has begun in session {session!r}")
        running = {k: e for k, e in status.items() if e["state"] == "running" and k not in dead}
        for key, entry in running.items():
            why = _actor_dead(ray, entry.get("actor"))
            if why:
                dead[key] = why
        if all(k in dead for k in running) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    done = [k for k, e in status.items() if e["state"] == "done"]
    out = Path(os.path.expanduser(os.fspath(dir))) if dir is not None else \
        Path(tempfile.mkdtemp(prefix=f"hookmagic-ray-{session}-"))
    targets = {key: out / f"rank={_check_rank(int(status[key]['rank']))}.hmtrace" for key in done}
    taken = sorted(p.name for p in targets.values() if os.path.lexists(p))
    if taken:   # a file of the user's is never replaced; the traces stay with the collector
        raise InvalidArgument(f"gather(dir={str(out)!r}): the folder already holds "
                              f"{', '.join(taken[:5])}; pass an empty or new folder")
    blobs = ray.get(coll.take.remote(session, done), timeout=max(timeout_s, 10))
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for key, path in targets.items():
        with open(path, "xb") as fh:   # exclusive: a file appearing meanwhile is not replaced
            fh.write(blobs[key])
        files.append(path)
    from hookmagic.traceset.members import Member
    from hookmagic.traceset.model import TraceSet, build_traceset

    missing = []
    for key, entry in status.items():
        if entry["state"] == "done":
            continue
        info = entry["info"]
        where = (f"Ray worker {str(info.get('ray_worker_id', ''))[:12]} (pid "
                 f"{info.get('pid', '?')}) on {info.get('host', '?')}")
        reason = (f"{where} died during its capture ({dead[key]})" if key in dead else
                  f"{where} had not finished its capture after {timeout_s:g} s")
        missing.append(Member("", int(entry["rank"]), "missing", reason,
                              meta={"rank": dict(info, rank=int(entry["rank"]))}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        members = build_traceset(files).members if files else []
    members = [m for m in members if m.layout] + missing
    world = max([m.rank for m in members] + [-1]) + 1
    for m in members:
        if m.meta.get("rank") is not None:
            m.meta["rank"]["world_size"] = world
    jobs = {str(m.identity.get("job_id", "")) for m in members if m.layout}
    ts = TraceSet(members, job_id=next(iter(jobs)) if len(jobs) == 1 else "")
    _warn_problems(ts, "hookmagic.ray.gather", "captures", stacklevel=3)
    if clear:
        ray.get(coll.clear.remote(session), timeout=max(timeout_s, 10))
    import hookmagic.multirank  # noqa: F401  (the TraceSet's methods)

    return ts


def _check_rank(rank: Any) -> int | None:
    """A rank given by the caller: None or a whole number in ``[0, MAX_RANKS)`` (it names a
    file on the driver, so nothing else may pass)."""
    from hookmagic.traceset.members import MAX_RANKS

    if rank is None:
        return None
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < MAX_RANKS:
        raise InvalidArgument(f"rank={rank!r}: give a whole number from 0 to {MAX_RANKS - 1}")
    return rank


def _check_timeout(timeout_s: Any) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not 0 < timeout_s < 7 * 86400:
        raise InvalidArgument(f"timeout_s={timeout_s!r}: give a number of seconds above 0 "
                              "(and below a week)")
    return float(timeout_s)


def _check_session(session: Any) -> None:
    # the name is part of the temporary folder gather() makes: letters, digits, '_', '-', '.'
    if not isinstance(session, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,200}", session) \
            or session in (".", ".."):
        raise InvalidArgument(f"session={str(session)[:40]!r}: give a name of 1 to 200 letters, "
                              "digits, '_', '-' or '.'")


def _actor_dead(ray: Any, actor: Any) -> str:
    """A reason if ``actor`` is dead, "" if alive or unknown (a task has no actor to ask)."""
    if actor is None:
        return ""
    ref = actor.__ray_ready__.remote()
    ready, _ = ray.wait([ref], timeout=0.5)
    if not ready:
        return ""  # busy (still capturing) or slow: alive as far as we know
    try:
        ray.get(ref, timeout=1)
        return ""
    except Exception as err:
        return f"{type(err).__name__}"


def shutdown_collector() -> None:
    """Stop the collector actor (it is detached: it outlives the driver otherwise)."""
    ray = _ray()
    coll = collector(create=False)
    if coll is not None:
        ray.kill(coll)


# -- the analyses where the files are ----------------------------------------------------------
class AnalysisTimeout(HookmagicError, TimeoutError):
    """The Ray tasks of an analysis did not all finish within its ``timeout_s``."""


def overlap(paths: Any, *, ranks_per_task: int = 64, timeout_s: float = 600.0) -> Any:
    """``TraceSet.overlap()`` computed on the Ray cluster: the traces at ``paths`` (a folder of
    rank folders, a glob or a list, as :func:`hookmagic.load_many` takes them) are split into
    tasks of ``ranks_per_task`` paths, each task runs the per-rank map where it is scheduled
    (the files must be readable there), and the driver combines the rows with the same reduce
    as the local engine, so both give equal tables. Ranks that cannot be analysed are listed
    in one warning; the others are analysed."""
    from hookmagic.analysis.ranks import overlap_from

    run = _OnRay("overlap", paths, "per_rank", ranks_per_task, timeout_s)
    return overlap_from(run.owned(run.parts))


def stragglers(paths: Any, *, ranks_per_task: int = 64, timeout_s: float = 600.0) -> Any:
    """``TraceSet.stragglers()`` computed on the Ray cluster, with the same arguments as
    :func:`overlap`. The tasks read each rank's collectives and capture start where the files
    are; the driver aligns the clocks, matches the collectives and picks each step's
    straggler with the local engine's reduces; a second round of tasks measures the compute
    before each chosen collective on the ranks that hold it. Equal to the local table."""
    return _stragglers(_OnRay("stragglers", paths, "collectives", ranks_per_task, timeout_s))


def summary(paths: Any, *, ranks_per_task: int = 64, timeout_s: float = 600.0) -> Any:
    """``TraceSet.summary()`` computed on the Ray cluster (a
    :class:`~hookmagic.common.results.Headline`; ``.to_frame()`` for a table), with the same
    arguments as :func:`overlap`: the set's ranks as ``load_many`` would count them, and its
    stragglers as :func:`stragglers` finds them."""
    from hookmagic.analysis.ranks import headline

    run = _OnRay("summary", paths, "collectives", ranks_per_task, timeout_s)
    return headline(run.members, _stragglers(run))


def skew(paths: Any, *, ranks_per_task: int = 64, timeout_s: float = 600.0) -> Any:
    """``TraceSet.skew()`` computed on the Ray cluster, with the same arguments as
    :func:`overlap`: one row per collective matched across ranks, who arrived last and how
    late. Equal to the local table."""
    run = _OnRay("skew", paths, "collectives", ranks_per_task, timeout_s)
    return _collective_reduce(run, run.parts)[2]


def per_rank(paths: Any, *, ranks_per_task: int = 64, timeout_s: float = 600.0) -> Any:
    """``TraceSet.per_rank()`` computed on the Ray cluster, with the same arguments as
    :func:`overlap`: one row per rank (status, host, GPU, kernels, GPU time, compute and
    communication, overlap, waits, times last). Each task runs both per-rank maps over its
    ranks in one pass; equal to the local table."""
    from hookmagic.analysis import ranks as analysis

    run = _OnRay("per_rank", paths, "both", ranks_per_task, timeout_s)
    per = run.owned([p["per_rank"] for p in run.parts])
    coll, rows, sk = _collective_reduce(run, [p["collectives"] for p in run.parts])
    st = analysis.stragglers_from(sk, coll, rows, run.window_compute)
    return analysis.rank_summary_from(run.members.ranks, per, coll, st)


def _collective_reduce(run: "_OnRay", parts: list[Any]) -> tuple[Any, Any, Any]:
    """On the driver, over the tasks' collective maps (``parts``): the matched collectives on
    one clock, the rows they came from, and the skew per collective (the local engine's
    reduces)."""
    from hookmagic.analysis import ranks as analysis

    rows = analysis.CollectiveRows(run.owned([p.collectives for p in parts]),
                                   run.owned([p.starts for p in parts]))
    ts = run.members
    data = ts.ranks[ts.ranks["rank"].isin(ts.data_ranks)]
    offsets = analysis.offsets_from(analysis.clock_from(data, rows.collectives))
    coll = analysis.collectives_from(rows.collectives, offsets)
    return coll, rows, analysis.skew_from(coll, rows.starts, offsets)


def _stragglers(run: "_OnRay") -> Any:
    """The stragglers reduce on the driver, over the rows of ``run``'s collective map."""
    from hookmagic.analysis import ranks as analysis

    coll, rows, sk = _collective_reduce(run, run.parts)
    return analysis.stragglers_from(sk, coll, rows, run.window_compute)


def _on_worker(paths: list[str], what: str, windows: Any = None) -> Any:
    """On a Ray worker: the traces at ``paths`` (files this worker can read) opened as a set,
    and one map of :mod:`hookmagic.analysis.ranks` run over it, the function the local engine
    runs: ``"per_rank"`` (``per_rank_map``), ``"collectives"`` (``collective_map``) or
    ``"windows"`` (``window_compute`` over ``windows``), or ``"both"`` (the first two, as a dict
    of their rows). All but the last come back with the set's members (after its files were
    read: a rank whose tables cannot be read is damaged) and the copies of a rank it left out."""
    from hookmagic.analysis import ranks as analysis
    from hookmagic.traceset.model import build_traceset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the driver warns once, for the whole set
        ts = build_traceset(paths)
        try:
            if what == "windows":
                return analysis.window_compute(ts, windows)
            if what == "both":
                rows = {"per_rank": analysis.per_rank_map(ts),
                        "collectives": analysis.collective_map(ts)}
            else:
                rows = analysis.per_rank_map(ts) if what == "per_rank" \
                    else analysis.collective_map(ts)
            return {"members": ts.members, "duplicates": ts.duplicates, "rows": rows}
        finally:
            ts.close()


class _OnRay:
    """One analysis of the traces at ``paths`` on the Ray cluster: the paths (as
    :func:`hookmagic.load_many` finds them) split into tasks of ``ranks_per_task``, each
    running the map ``what`` where Ray schedules it; the ranks merged on the driver as
    ``load_many`` would (``members``: a set of members only, whose files the driver never
    reads); one warning naming the ranks not analysed; every wait within ``timeout_s``."""

    def __init__(self, caller: str, paths: Any, what: str, ranks_per_task: Any,
                 timeout_s: Any) -> None:
        from hookmagic.traceset.members import expand

        self.timeout_s = _check_timeout(timeout_s)
        if isinstance(ranks_per_task, bool) or not isinstance(ranks_per_task, int) \
                or ranks_per_task < 1:
            raise InvalidArgument(f"ranks_per_task={ranks_per_task!r}: give a whole number, 1 "
                                  "or more")
        self.ray = _ray()
        self.deadline = time.monotonic() + self.timeout_s
        self.caller = caller
        found = [str(p) for p in expand(paths)]
        self.chunks = [found[i:i + ranks_per_task] for i in range(0, len(found), ranks_per_task)]
        parts = self._run([(chunk, what) for chunk in self.chunks])
        self.members, self.owner = _merge_members(parts)
        self.parts = [p["rows"] for p in parts]
        _warn_problems(self.members, f"hookmagic.ray.{caller}", "ranks", stacklevel=4)

    def _run(self, calls: list[tuple]) -> list[Any]:
        task = self.ray.remote(num_cpus=1)(_on_worker)
        refs = [task.remote(*args) for args in calls]
        try:
            return self.ray.get(refs, timeout=max(self.deadline - time.monotonic(), 0.0))
        except self.ray.exceptions.GetTimeoutError:
            for ref in refs:   # nothing is left running on the cluster for an answer nobody reads
                try:
                    self.ray.cancel(ref)
                except Exception:  # already finished or gone
                    pass
            raise AnalysisTimeout(f"hookmagic.ray.{self.caller}: the Ray tasks did not finish "
                                  f"within timeout_s={self.timeout_s:g} s") from None

    def owned(self, parts: list[Any]) -> Any:
        """Each rank's rows (a ``rank`` column, or a Series indexed by rank) from the task that
        read the capture the set kept (a task that read another copy of the rank gives none),
        in rank order."""
        import pandas as pd

        keep = []
        for i, part in enumerate(parts):
            ranks = part["rank"] if isinstance(part, pd.DataFrame) else part.index.to_series()
            keep.append(part[(ranks.map(self.owner) == i).to_numpy()])
        if isinstance(parts[0], pd.Series):
            return pd.concat(keep).sort_index(kind="stable")
        return pd.concat(keep, ignore_index=True).sort_values("rank", kind="stable") \
            .reset_index(drop=True)

    def window_compute(self, windows: Any) -> Any:
        """The second map of the stragglers: each task that holds some of the windows' ranks
        measures the compute in their windows."""
        import pandas as pd

        owner = windows["rank"].map(self.owner)
        calls = [(chunk, "windows", windows[(owner == i).to_numpy()])
                 for i, chunk in enumerate(self.chunks) if (owner == i).any()]
        return pd.concat(self._run(calls), ignore_index=True)


def _merge_members(parts: list[dict[str, Any]]) -> tuple[Any, dict[int, int]]:
    """The tasks' members merged as ``load_many`` merges the members of one set: one capture
    per rank (the lowest capture number; another copy of it is a duplicate, left out), a
    *missing* member for each rank below the world size that no task found, and traces of
    more than one job refused. Returns the set (members only) and ``rank -> task`` that holds
    each kept capture."""
    from hookmagic.traceset.members import (Member, MixedJobsError, describe_jobs,
                                            missing_member)
    from hookmagic.traceset.model import TraceSet

    groups: dict[int, list[tuple[int, Member]]] = {}
    copies: dict[tuple[int, int], list[str]] = {}   # (task, rank) -> copies the task left out
    for i, part in enumerate(parts):
        for rank, path, _ in part["duplicates"]:
            copies.setdefault((i, rank), []).append(path)
        for m in part["members"]:
            if m.status == "missing" and not m.path:
                continue   # a task's note for a rank outside its share of the paths
            groups.setdefault(m.rank, []).append((i, m))
    jobs = describe_jobs([m for group in groups.values() for _, m in group])
    named = [j for j in jobs if j]
    if len(named) > 1:
        raise MixedJobsError(f"these traces come from {len(jobs)} different jobs "
                             f"({', '.join(repr(j or '(no job id)') for j in jobs)}); give "
                             "each job's folder on its own")
    chosen, owner = [], {}
    duplicates: list[tuple[int, str, str]] = []
    for rank, group in groups.items():
        readable = [(i, m) for i, m in group if m.layout]
        if readable:
            first = min(m.capture for _, m in readable)
            pick = [(i, m) for i, m in readable if m.capture == first]
            kept = pick[0][1]
            # every other copy of the kept capture, whichever task met it, is a duplicate
            for i, m in pick:
                others = ([m.path] if m is not kept else []) + copies.get((i, rank), [])
                duplicates.extend((rank, path, kept.path) for path in others)
        else:
            pick = group
        owner[rank] = pick[0][0]
        chosen.append(pick[0][1])
    sizes = TraceSet(chosen).ranks["world_size"]
    world = max([int(sizes.max()) if len(sizes) else 0] +
                [max(owner) + 1 if owner else 0])
    for rank in range(world):
        if rank not in owner:
            chosen.append(missing_member(rank, world))
    ts = TraceSet(chosen, job_id=named[0] if named else "")
    ts.duplicates = duplicates
    return ts, owner


def _warn_problems(ts: Any, who: str, noun: str, stacklevel: int) -> None:
    """One warning listing the members of ``ts`` that cannot be analysed (the first 20)."""
    bad = ts.problems
    if len(bad):
        listing = "; ".join(f"rank {r.rank}: {r.status} ({r.reason})"
                            for r in bad.head(20).itertuples())
        more = f"; ... and {len(bad) - 20:,} more" if len(bad) > 20 else ""
        warnings.warn(f"{who}: {len(bad)} of {len(ts)} {noun} cannot be analysed (the others "
                      f"are analysed): {listing}{more}", stacklevel=stacklevel)
