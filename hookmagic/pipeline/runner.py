"""Running a frame pipeline: stages on worker threads, bounded queues between them, and a record
of every frame at every stage.

``Pipeline([Stage("preprocess", prep), Stage("infer", model, batch=8, device="cuda")]).run(src)``
reads the source on one thread per stream (its reads are the first stage, ``decode``/``read``),
hands frames through bounded FIFO queues (back-pressure, or drop-oldest at the source queue),
runs each stage's ``fn`` on ``workers`` threads inside a ``hookmagic.range`` named after the
stage while a capture records ranges (so ``%%cudahook`` around a run groups each stage's
kernels; outside a capture no range is opened, it would record nothing), and times GPU stages
with CUDA events on each worker's own stream. The result is a :class:`PipelineRun`. The stage
workers are threads the pipeline keeps across its runs (:mod:`hookmagic.pipeline.workers`), with
their CUDA streams and the libraries' per-thread handles; the source is read by a new thread per
stream each run.

What instrumentation costs per stage execution: host timestamps and one row appended to the
thread's own list (always); with ``instrument=True``, the thread's CPU time (two
``time.thread_time_ns`` reads, 0.1–0.5 µs each: what the model's GIL takes as the execution's
held part) and, for GPU stages, two ``cuEventRecord`` calls that keep the GIL, on events the
worker reuses, read once after the run, around every execution that starts at least
:data:`~hookmagic.pipeline.cuda_events.INTERVAL_S` after the worker's previous timed one
(:mod:`hookmagic.pipeline.cuda_events`); a range only under a capture. A GPU stage waits for
its stream after ``fn`` with or without instrumentation. See lab/pipeline/pipeline_instrument.py.

On an exception from a stage (with ``on_error="stop"``) or a KeyboardInterrupt the run stops:
threads get :data:`LEAVE_S` to leave (a worker still inside its stage's ``fn`` then is left
behind and listed in ``meta["stuck_workers"]``, as it is when ``seconds`` ran out and in-flight
frames did not finish within :data:`DRAIN_S`), the partial run is kept as ``Pipeline.last_run`` (and on the exception
as ``err.pipeline_run``), and the error is re-raised once.
"""
from __future__ import annotations

import collections
import itertools
import math
import queue
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from hookmagic.common.accessors import checked_calls
from hookmagic.common.errors import InvalidArgument, Unavailable
from hookmagic.pipeline import cuda_events
from hookmagic.pipeline.run import PipelineRun
from hookmagic.pipeline.sources import Captured, Lost, Source, as_source
from hookmagic.pipeline.workers import Workers

_END = object()  # end-of-stream marker, one per worker of the receiving stage
_POLL_S = 0.05   # how often blocked threads look at the stop flag
#: the most worker threads one stage may ask for, and one pipeline in all (checked before any
#: thread starts: a thread per worker, and no machine this runs on has use for more)
MAX_WORKERS = 256
MAX_THREADS = 1024
#: the most streams a source may have (each is read by its own thread)
MAX_STREAMS = 1024
#: the deepest a queue between stages may be (frames held in memory)
MAX_QUEUE = 100_000
#: the most frames one batch may hold
MAX_BATCH = 1 << 16
#: how long in-flight frames may take to finish after ``seconds`` ran out, and how long threads
#: get to leave after a stop, before the run returns without them (their workers reported stuck)
DRAIN_S = 1.0
LEAVE_S = 0.5


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class Stage:
    """One step of a pipeline.

    ``fn`` takes one frame and returns the frame for the next stage; with ``batch=N`` it takes a
    list of up to N frames and returns a sequence of as many results (a list, or a tensor whose
    first dimension is the batch). Returning None drops the frame (recorded, not an error).
    ``workers`` threads run the stage. ``device="cuda"`` runs ``fn`` on the worker's own CUDA
    stream and times it with CUDA events. ``batch_wait_ms`` waits that long for a batch to fill
    (0: take what is queued: batches are partial whenever fewer frames wait).
    """

    name: str
    fn: Callable[[Any], Any]
    workers: int = 1
    batch: int | None = None
    device: str = "cpu"
    batch_wait_ms: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgument(f"a stage needs a non-empty name, got {self.name!r}")
        if not callable(self.fn):
            raise InvalidArgument(f"stage {self.name!r}: fn is not callable")
        if not _is_int(self.workers) or not 1 <= self.workers <= MAX_WORKERS:
            raise InvalidArgument(f"stage {self.name!r}: workers must be an int in 1..{MAX_WORKERS}"
                                  f", got {self.workers!r}")
        if self.batch is not None and (not _is_int(self.batch)
                                       or not 1 <= self.batch <= MAX_BATCH):
            raise InvalidArgument(f"stage {self.name!r}: batch must be None or an int in "
                                  f"1..{MAX_BATCH}, got {self.batch!r}")
        if self.device not in ("cpu", "cuda"):
            raise InvalidArgument(f"stage {self.name!r}: device must be 'cpu' or 'cuda'")
        if not _is_number(self.batch_wait_ms) or self.batch_wait_ms < 0:
            raise InvalidArgument(f"stage {self.name!r}: batch_wait_ms must be a finite number "
                                  f">= 0, got {self.batch_wait_ms!r}")
        if self.device == "cuda":
            _require_cuda(self.name)


def _require_cuda(stage: str) -> None:
    """Refuse a GPU stage on a machine where PyTorch sees no CUDA device."""
    try:
        import torch
        ok = torch.cuda.is_available()
    except ImportError:
        ok = False
    if not ok:
        raise Unavailable(f"stage {stage!r} asks for device='cuda', but PyTorch sees no CUDA "
                          "device here")


class _Frame:
    __slots__ = ("fid", "payload")

    def __init__(self, fid: int, payload: Any) -> None:
        self.fid = fid
        self.payload = payload


class _Recorder:
    """What the threads record, built into tables once at the end.

    Each thread appends its event rows (one per frame per stage) to its *own* list, so the hot
    path takes no lock; GPU stages keep, per batch, the index of its first row and the CUDA-event
    pair around it. The pairs are turned into times after the run; past
    :data:`~hookmagic.pipeline.cuda_events.PENDING_MAX` pending pairs a worker reads its two
    oldest after each execution (complete: no wait), so a long run holds a bounded number of
    events without pausing a worker for a whole chunk."""

    def __init__(self) -> None:
        # per thread: its rows, its GPU batches waiting to be resolved (first row index, rows,
        # event pair) and those resolved (first row index, rows, start ns, end ns)
        self.threads: list[tuple[list[tuple], collections.deque, list[tuple]]] = []
        self.frames: list[list] = []    # fid -> [source, index, created_ns, outcome, reason, error, stage]
        self.owners: dict[int, Any] = {}  # id(pending list) -> the EventPairs its pairs come from
        self.lock = threading.Lock()
        self.batch_ids = itertools.count()

    def thread_lists(self) -> tuple[list[tuple], collections.deque, list[tuple]]:
        """A new thread's own (rows, pending GPU batches, resolved GPU batches) lists."""
        lists: tuple[list[tuple], collections.deque, list[tuple]] = ([], collections.deque(), [])
        with self.lock:
            self.threads.append(lists)
        return lists

    def new_frame(self, source: str, index: int, created_ns: int) -> int:
        with self.lock:
            self.frames.append([source, index, created_ns, "in_flight", "", "", ""])
            return len(self.frames) - 1

    def finish(self, fid: int, outcome: str, reason: str = "", error: str = "",
               stage: str = "") -> None:
        row = self.frames[fid]
        if row[3] == "in_flight":
            row[3], row[4], row[5], row[6] = outcome, reason, error, stage


@checked_calls
class Pipeline:
    """Stages joined by bounded queues; :meth:`run` runs frames through them.

    ``queue_size`` bounds every queue (>= 1). ``overflow="block"`` applies back-pressure all the
    way to the source; ``"drop_oldest"`` makes a source that finds its queue full drop the oldest
    queued frame instead (for live cameras). ``on_error="continue"`` records a failing frame and
    goes on; ``"stop"`` stops the run and re-raises. ``instrument=False`` skips the
    ``hookmagic.range`` (opened only while a capture records ranges), the CUDA events and the
    thread CPU times (host timestamps are always taken).

    The stage workers are kept between runs (one run at a time per pipeline); :meth:`close`
    ends them, as collecting the pipeline does.
    """

    def __init__(self, stages: Sequence[Stage], queue_size: int = 8, overflow: str = "block",
                 on_error: str = "continue", instrument: bool = True,
                 name: str = "pipeline") -> None:
        if isinstance(stages, Stage):
            raise InvalidArgument("Pipeline takes a list of stages: Pipeline([Stage(...), ...])")
        try:
            stages = list(stages)
        except TypeError:
            raise InvalidArgument(f"Pipeline takes a list of stages, got "
                                  f"{type(stages).__name__}") from None
        if not stages:
            raise InvalidArgument("a pipeline needs at least one stage")
        if not all(isinstance(s, Stage) for s in stages):
            raise InvalidArgument("stages must be hookmagic.pipeline.Stage objects")
        names = [s.name for s in stages]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidArgument(f"duplicate stage names: {dupes}")
        threads = sum(s.workers for s in stages)
        if threads > MAX_THREADS:
            raise InvalidArgument(f"the stages ask for {threads} worker threads in all, over the "
                                  f"{MAX_THREADS} a pipeline may start")
        if not _is_int(queue_size) or not 1 <= queue_size <= MAX_QUEUE:
            raise InvalidArgument(f"queue_size must be an int in 1..{MAX_QUEUE}, got {queue_size!r}")
        if not isinstance(instrument, bool):
            raise InvalidArgument(f"instrument must be True or False, got {instrument!r}")
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument(f"name must be non-empty text (it labels the run and its "
                                  f"metrics), got {name!r}")
        if overflow not in ("block", "drop_oldest"):
            raise InvalidArgument(f"overflow must be 'block' or 'drop_oldest', got {overflow!r}")
        if on_error not in ("continue", "stop"):
            raise InvalidArgument(f"on_error must be 'continue' or 'stop', got {on_error!r}")
        self.stages = stages
        self.queue_size = queue_size
        self.overflow = overflow
        self.on_error = on_error
        self.instrument = instrument
        self.name = name
        self.last_run: PipelineRun | None = None
        self._workers = Workers()
        self._closer = weakref.finalize(self, self._workers.close)
        self._running = threading.Lock()
        self._ref_event: int | None = None  # the runs' GPU reference event (driver handle)

    def close(self) -> None:
        """End the worker threads this pipeline keeps between runs (a later run starts new
        ones)."""
        self._workers.close()

    def __repr__(self) -> str:
        parts = " → ".join(f"{s.name}" + (f"×{s.workers}" if s.workers > 1 else "")
                           + (f"[b{s.batch}]" if s.batch else "")
                           + ("@cuda" if s.device == "cuda" else "") for s in self.stages)
        return f"Pipeline({parts}, queue_size={self.queue_size}, overflow={self.overflow!r})"

    def run(self, source: Any, frames: int | None = None, seconds: float | None = None,
            observers: Sequence[Any] = ()) -> PipelineRun:
        """Run frames from ``source`` through the stages until it ends, ``frames`` frames were
        read from each stream, or ``seconds`` passed (frames already read are finished).

        ``observers`` get ``on_stage(stage, seconds, n)``, ``on_frame(source, outcome)``,
        ``on_latency(source, seconds)`` (a done frame's end-to-end latency; optional) and
        ``on_queues({stage: depth})`` calls while it runs (the Prometheus exporter is one).
        """
        if frames is not None and (not _is_int(frames) or frames < 1):
            raise InvalidArgument(f"frames must be None or an int >= 1, got {frames!r}")
        if seconds is not None and (not _is_number(seconds) or seconds <= 0):
            raise InvalidArgument(f"seconds must be None or a finite number > 0, got {seconds!r}")
        if isinstance(observers, (str, bytes)) or not isinstance(observers, Sequence):
            raise InvalidArgument(f"observers must be a list of observers, got "
                                  f"{type(observers).__name__}")
        lacking = [o for o in observers if not all(callable(getattr(o, m, None))
                                                   for m in ("on_stage", "on_frame"))]
        if lacking:
            raise InvalidArgument(f"an observer needs on_stage() and on_frame() methods; "
                                  f"{type(lacking[0]).__name__} has not")
        src = as_source(source)
        if len(src.streams) > MAX_STREAMS:
            raise InvalidArgument(f"the source has {len(src.streams)} streams, over the "
                                  f"{MAX_STREAMS} a pipeline reads (a thread each)")
        if src.stage in {s.name for s in self.stages}:
            raise InvalidArgument(f"a stage is named {src.stage!r}, the name of the source's own "
                                  "read stage: rename it")
        if not self._running.acquire(blocking=False):
            raise InvalidArgument(f"pipeline {self.name!r} is already running: a pipeline runs "
                                  "one source at a time (build a second Pipeline to run two)")
        try:
            return _Run(self, src, frames, seconds, list(observers)).execute()
        finally:
            self._running.release()


class _Run:
    def __init__(self, pipe: Pipeline, src: Source, frames: int | None,
                 seconds: float | None, observers: list[Any]) -> None:
        self.pipe, self.src, self.limit, self.seconds = pipe, src, frames, seconds
        self.observers = observers
        self.rec = _Recorder()
        self.stop = threading.Event()       # stop everything now (error / interrupt)
        self.stop_reading = threading.Event()
        self.queues = [queue.Queue(pipe.queue_size) for _ in pipe.stages]
        self.alive = [s.workers for s in pipe.stages]
        self.sources_alive = len(src.streams)
        self.alive_lock = threading.Lock()
        self.error: BaseException | None = None
        # (stage index, worker) -> the frames it is running its stage's fn on now: what a worker
        # that never returns was holding
        self.busy: dict[tuple[int, int], list[int]] = {}
        self.finished: set[int] = set()     # indices of the threads that have left
        self.finished_cv = threading.Condition()
        self.cuda = any(s.device == "cuda" for s in pipe.stages)
        self.gpu_ref: cuda_events.Reference | None = None
        self.gpu_timing = "none (no GPU stage)" if not self.cuda else (
            "off (instrument=False)" if not pipe.instrument else "CUDA events (driver API)")

    # -- queue helpers -------------------------------------------------------------------
    def _put(self, k: int, item: Any) -> bool:
        q = self.queues[k]
        while not self.stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, k: int) -> Any:
        q = self.queues[k]
        while not self.stop.is_set():
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                continue
        return _END

    def _end_of(self, k: int) -> None:
        """Stage k-1 (or the sources, k=0) finished: tell each worker of stage k."""
        if k < len(self.queues):
            for _ in range(self.pipe.stages[k].workers):
                self._put(k, _END)

    # -- threads -------------------------------------------------------------------------
    def _read(self, stream: Any, sidx: int, t0: float) -> None:
        rec, stage, pipe = self.rec, self.src.stage, self.pipe
        rows, _, _ = rec.thread_lists()
        cpu_on = pipe.instrument  # the CPU clock costs ~0.5 µs a read on some machines
        try:
            it = stream.open()
            i = 0
            while not self.stop.is_set() and not self.stop_reading.is_set():
                if self.limit is not None and i >= self.limit:
                    break
                due = None
                if stream.fps:
                    due_s = t0 + i / stream.fps
                    delay = due_s - time.perf_counter()
                    if delay > 0 and self.stop.wait(delay):
                        break
                    due = int(due_s * 1e9)
                start = time.perf_counter_ns()
                cpu = time.thread_time_ns() if cpu_on else 0
                try:
                    payload = next(it)
                except StopIteration:
                    break
                cpu = time.thread_time_ns() - cpu if cpu_on else -1
                end = time.perf_counter_ns()
                created = due if due is not None and due < start else start
                if isinstance(payload, Lost):   # frames a live stream skipped: counted, not hidden
                    for _ in range(payload.count):
                        fid = rec.new_frame(stream.name, i, payload.captured_ns)
                        rec.finish(fid, "dropped", payload.reason, stage=stage)
                        self._notify_frame(fid)
                        i += 1
                    continue
                if isinstance(payload, Captured):   # a live frame: latency from its capture
                    created, payload = payload.captured_ns, payload.frame
                fid = rec.new_frame(stream.name, i, created)
                item = _Frame(fid, payload)
                if pipe.overflow == "drop_oldest":
                    while True:
                        try:
                            self.queues[0].put_nowait(item)
                            break
                        except queue.Full:
                            try:
                                old = self.queues[0].get_nowait()
                            except queue.Empty:
                                continue
                            if old is _END:  # cannot happen before the sources end
                                continue
                            rec.finish(old.fid, "dropped", "queue full (drop_oldest)",
                                       stage=pipe.stages[0].name)
                            self._notify_frame(old.fid)
                    ok = True
                else:
                    ok = self._put(0, item)
                put = time.perf_counter_ns()
                rows.append((fid, stage, -1, sidx, -1, 1, created, start, end, put, -1, -1, "ok",
                             "", cpu))
                if self.observers:
                    self._notify_stage(stage, (end - start) / 1e9, 1)
                if not ok:
                    rec.finish(fid, "cancelled", "run stopped", stage=stage)
                    break
                i += 1
        except BaseException as err:  # noqa: BLE001 - a source error stops the run
            self._fail(err)
        finally:
            with self.alive_lock:
                self.sources_alive -= 1
                last = self.sources_alive == 0
            if last:
                self._end_of(0)

    def _work(self, k: int, worker: int, state: dict) -> None:
        """Stage k's worker ``worker``, on the thread the pipeline keeps for it (``state`` is
        that thread's own: its CUDA stream and timing events, kept across runs)."""
        st, rec, pipe = self.pipe.stages[k], self.rec, self.pipe
        rows_out, gpu_out, gpu_done = rec.thread_lists()
        cpu_on = pipe.instrument
        append = rows_out.append
        name, fn, batched, observers = st.name, st.fn, bool(st.batch), self.observers
        gpu = st.device == "cuda"
        last = k == len(pipe.stages) - 1
        stream = pairs = record = take = None
        handle = 0
        timed = gpu and self.gpu_ref is not None
        interval = int(cuda_events.INTERVAL_S * 1e9)
        next_timed = 0  # perf_counter_ns from which this worker's next execution is timed
        if gpu:
            import torch
            stream = state.get("stream")
            if stream is None:
                stream = state["stream"] = torch.cuda.Stream()
            # this thread is the pipeline's: its current stream stays the worker's own stream
            # (what `with torch.cuda.stream(...)` around each call would do, without its cost)
            torch.cuda.set_stream(stream)
            handle = stream.cuda_stream
            if timed:
                pairs = state.get("events")
                if pairs is None:
                    cuda_events.bind_context(stream.device.index or 0)
                    pairs = state["events"] = cuda_events.EventPairs()
                record, take = pairs.record, pairs.take
                rec.owners[id(gpu_out)] = pairs  # whose pairs the pending entries are
        rng = recorder = None
        if pipe.instrument:
            # a range per stage execution while a capture records ranges; outside a capture
            # it would record nothing, so none is opened
            from hookmagic.cupti.ranges import RECORDER as recorder
            from hookmagic.cupti.ranges import range as rng
        want = st.batch or 1
        ended = False
        try:
            while not ended and not self.stop.is_set():
                first = self._get(k)
                if first is _END:
                    break
                items = [first]
                if batched:
                    deadline = time.perf_counter() + st.batch_wait_ms / 1e3
                    while len(items) < want:
                        try:
                            left = deadline - time.perf_counter()
                            nxt = (self.queues[k].get(timeout=left) if left > 0
                                   else self.queues[k].get_nowait())
                        except queue.Empty:
                            break
                        if nxt is _END:
                            ended = True
                            break
                        items.append(nxt)
                batch_id = next(rec.batch_ids) if batched else -1
                pair = timed_pair = None
                start = time.perf_counter_ns()
                cpu = time.thread_time_ns() if cpu_on else 0
                status, error, outs = "ok", "", None
                self.busy[(k, worker)] = [it.fid for it in items]
                try:
                    arg = [it.payload for it in items] if batched else first.payload
                    if timed and start >= next_timed:
                        next_timed = start + interval
                        pair = take()
                        record(pair[0], handle)
                    if rng is not None and recorder.active:
                        with rng(name):
                            out = fn(arg)
                    else:
                        out = fn(arg)
                    if pair is not None:
                        record(pair[1], handle)
                    # the thread's CPU time in fn, before the wait for the stream (which
                    # releases the GIL and may spin): the execution's GIL-held part
                    cpu = time.thread_time_ns() - cpu if cpu_on else -1
                    if gpu:
                        stream.synchronize()  # the end event is complete with it
                        timed_pair = pair
                    outs = self._split(st, out, len(items)) if batched else [out]
                except Exception as err:  # noqa: BLE001 - recorded per frame
                    status, error, outs = "failed", f"{type(err).__name__}: {err}", None
                    cpu = -1
                    if pipe.on_error == "stop":
                        self._fail(err)
                end = time.perf_counter_ns()
                del self.busy[(k, worker)]
                n = len(items)
                if observers:
                    self._notify_stage(name, (end - start) / 1e9, n)
                if timed_pair is not None:
                    gpu_out.append((len(rows_out), n, timed_pair))
                    if len(gpu_out) >= cuda_events.PENDING_MAX:
                        cuda_events.resolve(self.gpu_ref, pairs, gpu_out, gpu_done, 2)
                elif pair is not None:  # fn failed between the two records: reuse the pair
                    pairs.give(pair)
                for j, it in enumerate(items):
                    res = outs[j] if outs is not None else None
                    it.payload = res
                    put = end
                    if status == "failed":
                        s = status
                        rec.finish(it.fid, "failed", "exception", error, name)
                        if observers:
                            self._notify_frame(it.fid)
                    elif res is None:
                        s = "none"
                        rec.finish(it.fid, "dropped", f"{name} returned None", stage=name)
                        if observers:
                            self._notify_frame(it.fid)
                    else:
                        s = status
                        if last:
                            rec.finish(it.fid, "done", stage=name)
                            if observers:
                                self._notify_frame(it.fid)
                        else:
                            if not self._put(k + 1, it):
                                rec.finish(it.fid, "cancelled", "run stopped", stage=name)
                            put = time.perf_counter_ns()
                    append((it.fid, name, k, worker, batch_id, n, 0, start, end, put, -1, -1, s,
                            error, cpu))
        except BaseException as err:  # noqa: BLE001 - e.g. KeyboardInterrupt in a stage
            self._fail(err)
        finally:
            with self.alive_lock:
                self.alive[k] -= 1
                last_worker = self.alive[k] == 0
            if last_worker:
                self._end_of(k + 1)

    @staticmethod
    def _split(st: Stage, out: Any, n: int) -> list[Any] | None:
        if not st.batch:
            return [out]
        if out is None:
            return [None] * n
        try:
            m = len(out)
        except TypeError:
            m = -1
        if m != n:
            raise InvalidArgument(f"batch stage {st.name!r} returned {m if m >= 0 else 'a non-sequence'}"
                                  f" outputs for {n} frames")
        return [out[j] for j in range(n)]

    def _fail(self, err: BaseException) -> None:
        with self.alive_lock:
            if self.error is None:
                self.error = err
        self.stop.set()

    # -- observers -----------------------------------------------------------------------
    def _notify_stage(self, stage: str, seconds: float, n: int) -> None:
        for ob in self.observers:
            ob.on_stage(stage, seconds, n)

    def _notify_frame(self, fid: int) -> None:
        if self.observers:
            row = self.rec.frames[fid]
            # end to end: from when the frame was captured (or due) to its result, host clock
            latency = (time.perf_counter_ns() - row[2]) / 1e9 if row[3] == "done" else None
            for ob in self.observers:
                ob.on_frame(row[0], row[3])
                if latency is not None and hasattr(ob, "on_latency"):
                    ob.on_latency(row[0], latency)

    # -- the run -------------------------------------------------------------------------
    def execute(self) -> PipelineRun:
        pipe = self.pipe
        if pipe.instrument:  # the first range loads the native module: not inside the run
            from hookmagic.cupti.ranges import range as rng
            with rng("hookmagic-pipeline-warmup"):
                pass
        if self.cuda:
            import torch
            torch.cuda.synchronize()
            if pipe.instrument:
                try:
                    cuda_events.bind_context(torch.cuda.current_device())
                    if pipe._ref_event is None:
                        pipe._ref_event = cuda_events.new_event()
                    self.gpu_ref = cuda_events.Reference(pipe._ref_event)
                except Unavailable as err:  # no driver library to time with: run untimed
                    self.gpu_timing = f"off ({err})"
        keys = self._worker_keys()
        t0 = time.perf_counter()
        started_ns = time.perf_counter_ns()
        wall_start = time.time()
        readers = [self._thread(len(keys) + sidx, f"hookmagic-read-{stream.name}",
                                self._read, (stream, sidx, t0))
                   for sidx, stream in enumerate(self.src.streams)]
        everyone = len(keys) + len(readers)
        submitted: set[int] = set()
        cv = self.finished_cv
        interrupted: BaseException | None = None
        try:
            for i, (k, w) in enumerate(keys):
                pipe._workers.submit((k, w), f"hookmagic-{pipe.stages[k].name}-{w}",
                                     self._task(i, k, w))
                submitted.add(i)
            for t in readers:
                t.start()
            while True:
                # a Condition, not Thread.join: a KeyboardInterrupt inside join(timeout) can
                # mark a still-running thread as stopped (CPython 3.11), hiding a stuck worker
                with cv:
                    if len(self.finished) == everyone:
                        break
                    cv.wait(0.02)
                if self.seconds is not None and time.perf_counter() - t0 >= self.seconds:
                    self.stop_reading.set()
                    if time.perf_counter() - t0 >= self.seconds + DRAIN_S:
                        break  # frames still in flight are cancelled below
                if self.observers:
                    depth = {st.name: self.queues[k].qsize() for k, st in enumerate(pipe.stages)}
                    for ob in self.observers:
                        ob.on_queues(depth)
        except BaseException as err:  # KeyboardInterrupt in the caller's thread
            interrupted = err
            self.stop.set()
        finally:
            # a worker inside a stage's fn sees the stop only when fn returns: wait a moment,
            # then leave without the ones that do not (daemon threads; reported as stuck)
            self.stop.set()
            with cv:
                # workers and readers an interrupt kept from starting will not leave: they
                # never came
                self.finished.update(i for i in range(len(keys)) if i not in submitted)
                self.finished.update(len(keys) + j for j, t in enumerate(readers)
                                     if t.ident is None)
                cv.wait_for(lambda: len(self.finished) == everyone, timeout=LEAVE_S)
        stuck = [key for i, key in enumerate(keys) if i not in self.finished]
        for key in stuck:  # the next run gets a new thread in its place
            pipe._workers.abandon(key)
        run = self._result(started_ns, wall_start, stuck)
        pipe.last_run = run
        err = interrupted or self.error
        if err is not None:
            try:
                err.pipeline_run = run  # type: ignore[attr-defined]
            except AttributeError:
                pass
            raise err
        return run

    def _thread(self, i: int, name: str, target: Callable[..., None],
                args: tuple) -> threading.Thread:
        """Thread ``i`` of the run, which adds ``i`` to :attr:`finished` when it leaves."""
        def main() -> None:
            try:
                target(*args)
            finally:
                with self.finished_cv:
                    self.finished.add(i)
                    self.finished_cv.notify_all()
        return threading.Thread(target=main, name=name, daemon=True)

    def _task(self, i: int, k: int, w: int) -> Callable[[dict], None]:
        """Worker ``w`` of stage ``k`` as a task for its kept thread; adds ``i`` to
        :attr:`finished` when it returns."""
        def task(state: dict) -> None:
            try:
                self._work(k, w, state)
            finally:
                with self.finished_cv:
                    self.finished.add(i)
                    self.finished_cv.notify_all()
        return task

    def _worker_keys(self) -> list[tuple[int, int]]:
        """(stage index, worker) of each worker thread, in the order :meth:`execute` starts them."""
        return [(k, w) for k, st in enumerate(self.pipe.stages) for w in range(st.workers)]

    def _result(self, started_ns: int, wall_start: float,
                stuck: list[tuple[int, int]]) -> PipelineRun:
        import numpy as np
        import pandas as pd

        rec, pipe = self.rec, self.pipe
        stuck_meta = []
        for k, w in stuck:
            name = pipe.stages[k].name
            held = list(self.busy.get((k, w), []))
            stuck_meta.append({"stage": name, "worker": w, "frames": held})
            for fid in held:
                rec.finish(fid, "cancelled", f"stage {name!r} did not return (worker stuck)",
                           stage=name)
        for fid, row in enumerate(rec.frames):
            if row[3] == "in_flight":
                row[3], row[4] = "cancelled", "run stopped"
        names = ["frame", "stage", "stage_index", "worker", "batch", "batch_size", "enqueue_ns",
                 "start_ns", "end_ns", "put_ns", "gpu_start_ns", "gpu_end_ns", "status", "error",
                 "cpu_ns"]
        # column by column (pandas' row-wise constructor costs ~5 µs per row)
        if self.gpu_ref is not None and any(pending for _, pending, _ in rec.threads):
            # every pending pair's end event is complete: its worker waited for its stream
            for _, pending, done in rec.threads:
                if pending and id(pending) in rec.owners:
                    cuda_events.resolve(self.gpu_ref, rec.owners[id(pending)], pending, done)
        rows: list[tuple] = []
        gpu: list[tuple] = []
        for trows, _, tdone in list(rec.threads):
            offset = len(rows)
            rows.extend(trows[:])  # a stuck worker's list: what it had recorded by now
            gpu.extend((offset + first, n, a, b) for first, n, a, b in tdone)
        # column by column (pandas' row-wise constructor costs ~5 µs per row)
        columns = list(zip(*rows)) if rows else [()] * len(names)
        events = pd.DataFrame({
            n: (np.fromiter(c, dtype=np.int64, count=len(c)) if n not in ("stage", "status", "error")
                else pd.array(c, dtype=object)) for n, c in zip(names, columns)})
        for n in ("stage", "status", "error"):
            events[n] = events[n].astype(str)
        if gpu:
            gs, ge = events["gpu_start_ns"].to_numpy().copy(), events["gpu_end_ns"].to_numpy().copy()
            for first, n, a, b in gpu:
                gs[first:first + n], ge[first:first + n] = a, b
            events["gpu_start_ns"], events["gpu_end_ns"] = gs, ge
        fnames = ["source", "index", "created_ns", "outcome", "reason", "error", "stage"]
        fcols = list(zip(*rec.frames)) if rec.frames else [()] * len(fnames)
        frames = pd.DataFrame({
            n: (np.fromiter(c, dtype=np.int64, count=len(c)) if n in ("index", "created_ns")
                else pd.Series(list(c), dtype=object).astype(str)) for n, c in zip(fnames, fcols)})
        frames.insert(0, "frame", range(len(frames)))
        # the time a frame entered each stage's queue: its previous stage's put time
        events = events.sort_values(["frame", "start_ns"], kind="stable").reset_index(drop=True)
        prev_put = events.groupby("frame")["put_ns"].shift(1)
        has_prev = prev_put.notna()
        events.loc[has_prev, "enqueue_ns"] = prev_put[has_prev].astype("int64")
        events["stage_index"] = events["stage_index"] + 1  # the read stage is 0
        meta = {
            "pipeline": pipe.name,
            "stages": [{"name": self.src.stage, "workers": len(self.src.streams), "batch": None,
                        "device": "cpu", "kind": "source"}]
                      + [{"name": s.name, "workers": s.workers, "batch": s.batch,
                          "batch_wait_ms": s.batch_wait_ms, "device": s.device, "kind": "stage"}
                         for s in pipe.stages],
            "queue_size": pipe.queue_size, "overflow": pipe.overflow,
            "on_error": pipe.on_error, "instrument": pipe.instrument,
            "source": self.src.description,
            "streams": [{"name": s.name, "fps": s.fps} for s in self.src.streams],
            "source_meta": self.src.meta,
            "stuck_workers": stuck_meta,
            "started_ns": started_ns, "started_at": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_start)),
            "clock": "time.perf_counter_ns (host); GPU times from CUDA events on each worker's "
                     "stream, placed on the host clock by one reference event",
            "gpu_timing": self.gpu_timing,
            # the interpreter's GIL switch interval: how long a thread may hold the GIL
            # against a waiting one (what the model's GIL replays)
            "switch_interval_s": sys.getswitchinterval(),
        }
        return PipelineRun(events, frames, meta)
