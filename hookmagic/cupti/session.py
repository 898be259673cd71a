"""``hookmagic.capture()``: CUPTI capture of everything the GPU does inside a ``with`` block."""
from __future__ import annotations

import atexit
import datetime as _dt
import os
import platform
import socket
import sys
import threading
import time
import types
import warnings
from typing import Any

import pandas as pd

from hookmagic.cupti import counters as hw_counters
from hookmagic.cupti import pm_sampling
from hookmagic.cupti import errors, library
from hookmagic.cupti.allocators import AllocatorRecorders, merge_into
from hookmagic.cupti.columns import build_tables_from, table_builders, uncaptured_graph_notes
from hookmagic.cupti.conflicts import cupti_holder, torch_profiler_running
from hookmagic.cupti.nvml_sampler import NvmlSampler
from hookmagic.cupti.options import LITE_OFF, CaptureOptions
from hookmagic.cupti.ranges import RECORDER

_CUPTI_MULTIPLE_SUBSCRIBERS = 39
_CUPTI_INSUFFICIENT_PRIVILEGES = 35
_CUPTI_VIRTUALIZED = (33, 40)
_warned: set[str] = set()
#: ends each reason that lies with the machine (no driver, GPU or CUPTI; no permission)
DOCTOR_HINT = "run `hookmagic doctor` for what this machine lacks"
_CALLER_FRAMES = 8  # frames, from the one holding the `with` up, whose variables name modules
_lock = threading.Lock()  # one capture at a time in a process: CUPTI is process-wide


def _prepare_native() -> tuple[Any, str]:
    """Import the extension and load CUPTI into it; ``(module, "")`` or ``(None, why)``."""
    from hookmagic.cupti import _import_native

    native, why = _import_native()
    if native is None:
        return None, why
    if native.loaded():
        return native, ""
    driver = library.driver_info()
    if driver.error:
        return None, driver.error
    path, why = library.find_cupti(driver.cuda_version)
    if path is None:
        return None, why
    try:
        native.load(path)
    except RuntimeError as exc:
        return None, str(exc)
    return native, ""


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(errors.CaptureUnavailable(f"hookmagic: nothing captured: {reason}"),
                      stacklevel=5)


def _explain(exc: Exception) -> str:
    code = getattr(exc, "code", None)
    if code == _CUPTI_MULTIPLE_SUBSCRIBERS:
        holder = cupti_holder() or _dormant_holder()
        return (f"{holder} holds CUPTI, and this CUPTI allows one user at a time; "
                "stop it (or run the cell outside it) and capture again")
    if code == _CUPTI_INSUFFICIENT_PRIVILEGES:
        return ("the driver does not allow profiling for this user "
                f"(see NVIDIA's ERR_NVGPUCTRPERM notes, or run with profiling permission); {DOCTOR_HINT}")
    if code in _CUPTI_VIRTUALIZED:
        return f"this virtualised GPU does not support CUPTI tracing; {DOCTOR_HINT}"
    if code == 999 or code == 15:
        return f"CUPTI could not start ({exc}); is a GPU visible to this process? {DOCTOR_HINT}"
    return f"CUPTI could not start ({exc})"


def _dormant_holder() -> str:
    if "torch" in sys.modules:
        return "PyTorch's profiler (Kineto keeps CUPTI after its first use in a process)"
    return "another profiling tool"


class capture:  # noqa: N801 - used as `with hookmagic.capture() as trace:`
    """Capture what the GPU does inside a ``with`` block; yields a :class:`~hookmagic.Trace`.

    The Trace is empty inside the block and filled when it ends: kernels, copies, memsets,
    synchronisation, device allocations and frees (plus virtual-memory map/unmap), the Python
    stack that launched each, ``hookmagic.range`` and NVTX ranges, and NVML samples.

    Parameters
    ----------
    options:
        A :class:`~hookmagic.cupti.options.CaptureOptions`, or its fields as keyword arguments
        (``kernels``, ``memory``, ``stacks``, ``api``, ``nvml``, ``nvtx``,
        ``allocator_history``, ``detach``, ``callbacks``, ``lite``, ``nvml_interval_s``,
        ``max_stack_depth``, ``buffer_mb``, ``max_buffers``, ``max_table_mb``); its docstring
        holds the defaults and ranges. A wrong type or range raises
        :class:`~hookmagic.cupti.errors.CaptureOptionError` at once. ``lite=True`` is the
        cheapest capture: kernels, copies, memsets and memory as CUPTI activity records only
        (no stacks, threads, ranges, synchronisation or NVML samples).
    schedule:
        ``hookmagic.schedule(wait=, warmup=, active=, repeat=)`` for long loops, as
        torch.profiler's: the ``with`` then yields a
        :class:`~hookmagic.cupti.schedule.ScheduledCapture`; call its ``.step()`` once per
        iteration, and its ``.traces`` holds one Trace per active window (warm-up steps are
        recorded and left out; CUPTI is detached during ``wait`` steps). See
        :mod:`hookmagic.cupti.schedule`.
    on_trace_ready:
        With ``schedule``: called with each window's Trace as it finishes (it is then not kept
        in ``.traces``), e.g. to save it.
    label:
        A name for the capture, shown in views.
    dir:
        Also write the finished trace as a trace folder ``dir/rank=<N>`` (this process's rank in
        a torchrun, SLURM, MPI or Ray job, 0 otherwise; see :mod:`hookmagic.distributed`), with
        rank, world size, host, GPU and job id in ``meta["rank"]``; its path is then in
        ``meta["saved_to"]``. ``hookmagic.load_many(dir)`` reads every rank together.

    ``counters``: hardware counters per kernel launch (True: the default set, or a list of
    Nsight Compute metric names), in the Trace's ``counters`` table and
    ``trace.kernel_counters()``; each kernel is replayed once per pass of the set (see
    :mod:`hookmagic.cupti.counters`), and ``meta["counters"]`` holds the passes and wall time.
    An unknown metric raises :class:`~hookmagic.cupti.counters.UnknownCounter`; counters this
    machine cannot collect (admin-only profiling, another profiler) raise
    :class:`~hookmagic.cupti.counters.CountersUnavailable` when the ``with`` starts.

    ``pm_sampling``: GPU-wide metrics (SM, DRAM, tensor pipe activity by default) sampled every
    ``pm_interval_us`` µs of GPU time, in the Trace's ``pm_samples`` table and as a lane under
    the timeline; nothing is replayed (see :mod:`hookmagic.cupti.pm_sampling`). True, a number
    of µs, or a list of metric names; refused beside ``counters``, with the same errors.

    ``allocator_history`` is off by default: PyTorch's history recording more than doubled the
    time of an allocating inference loop on the GPU machine (ResNet-50: 4.0x in
    benchmarks/bench_overhead.py while it was on by default). ``detach`` (default True)
    finalizes CUPTI when the capture ends, so the program runs at full speed again: on the GPU
    machine, CUPTI left initialised with every activity and callback disabled still made a
    launch-bound loop 1.48x slower afterwards, against 1.03x after a finalized capture
    (benchmarks/results/overhead_probe_tiny_kernels_20000.md, "lingering" rows). The price is
    paid by the next capture, which re-attaches CUPTI (~10-14 ms). ``detach=False`` suits a
    burst of captures.

    Without a GPU, driver or CUPTI, or while another tool holds CUPTI, the block still runs;
    the Trace says why nothing was captured (``trace.meta["reason"]``) and a
    :class:`CaptureUnavailable` warning is issued once per reason.
    """

    def __init__(self, options: CaptureOptions | None = None, *, label: str | None = None,
                 dir: str | os.PathLike | None = None,  # noqa: A002
                 schedule: Any = None, on_trace_ready: Any = None,
                 _boundary_frame: Any = None, _namespaces: Any = None,
                 **option_fields: Any) -> None:
        from hookmagic.trace import Trace

        if options is None:
            options = CaptureOptions.from_kwargs(**option_fields)
        elif option_fields:
            base = options.as_dict()
            if option_fields.get("lite") is True:  # lite turns these off: not a contradiction
                base = {k: v for k, v in base.items() if k not in LITE_OFF}
            options = CaptureOptions.from_kwargs(**{**base, **option_fields})
        if schedule is not None:
            from hookmagic.cupti.schedule import Schedule

            if not isinstance(schedule, Schedule):
                raise errors.ScheduleError("schedule= takes hookmagic.schedule(wait=, "
                                           f"warmup=, active=, repeat=), not {schedule!r}")
            if dir is not None:
                raise errors.ScheduleError("schedule= and dir= cannot be combined: write "
                                           "each window from on_trace_ready instead")
        elif on_trace_ready is not None:
            raise errors.ScheduleError("on_trace_ready= needs schedule=")
        self.schedule = schedule
        self._on_trace_ready = on_trace_ready
        self._scheduled = None
        self.capture_options: CaptureOptions = options
        self.options = options.as_dict()  # as saved in meta["options"]
        self.label = label
        self.trace = Trace()
        self._boundary = _boundary_frame
        # Where module names are looked up at the end (hookmagic.cupti.modules): mappings
        # (the notebook's namespace), or a frame whose locals and globals are read then; by
        # default the frame holding the `with`.
        self._namespaces = _namespaces
        self._dir = dir
        self._native = None
        self._reason = ""
        self._held = False

    # -- entering ---------------------------------------------------------------------------
    def __enter__(self):
        if self.schedule is not None:
            return self._enter_scheduled()
        if self._namespaces is None:
            self._namespaces = sys._getframe(1)  # the frame holding the `with`
        t0 = time.perf_counter()
        try:
            self._start()
        except hw_counters.COUNTER_ERRORS:
            # counters were asked for and cannot be had: say so rather than run uncounted
            self._stop_quietly()
            if self._held:
                self._held = False
                _lock.release()
            raise
        except Exception as exc:  # never let the capture stop the user's code from running
            self._stop_quietly()
            self._reason = f"hookmagic could not start the capture ({type(exc).__name__}: {exc})"
        self._start_s = time.perf_counter() - t0
        self._t_wall = time.time()
        self._t0 = time.perf_counter()
        return self.trace

    def _start(self) -> None:
        if not _lock.acquire(blocking=False):
            self._reason = "another hookmagic capture is already running in this process"
            return
        self._held = True
        if torch_profiler_running():
            self._reason = ("torch.profiler is running in this process and holds CUPTI; "
                            "capture outside its `with` block")
            return
        native, why = _prepare_native()
        if native is None:
            self._reason = f"{why}; {DOCTOR_HINT}"
            return
        o = self.capture_options
        boundary = self._boundary if self._boundary is not None else _caller_parent_frame()
        if o.nvtx and not os.environ.get("NVTX_INJECTION64_PATH"):
            os.environ["NVTX_INJECTION64_PATH"] = native.cupti_path()
        if not o.lite:  # a lite capture records no ranges
            RECORDER.start()
        from hookmagic.cupti import modules

        # Module frames: read by the stack walk itself, nothing per module call (no hooks).
        probe = modules.module_probe() if o.stacks and o.module_names else None
        native.set_module_probe(*(probe or (None, 0, [])))
        holder = cupti_holder()
        try:
            # Only a dormant holder may share: an active tool (nsys, a sanitizer) owns the
            # activity buffers too, and taking them would break it.
            started = native.start(o.to_native(native, activities_without_callbacks=holder is None),
                                   boundary)
        except native.CaptureError as exc:
            RECORDER.stop()
            self._reason = _explain(exc)
            return
        self._callbacks_active = bool(started["callbacks"])
        self._frames_supported = bool(getattr(native, "frames_supported", lambda: True)())
        self._warnings = not_recorded_notes(
            o, refused=bool(started.get("subscribe_error", 0)), holder=_dormant_holder(),
            frames_supported=self._frames_supported, python=platform.python_version())
        self._native = native
        self._hw_trace = bool(started.get("hw_trace", False))
        self._autograd_undo = None
        if o.stacks and self._callbacks_active:
            from hookmagic.cupti import autograd

            self._autograd_undo = autograd.install(native, label_nodes=o.module_names,
                                                   namespaces=self._namespace_mappings)
        self._start_ns = native.timestamp()
        self._allocators = None
        if o.memory and o.allocator_history:
            self._allocators = AllocatorRecorders(native.timestamp, o.stacks)
        self._devices = native.device_properties()
        self._sampler = None
        if o.nvml:
            self._sampler = NvmlSampler(native, o.nvml_interval_s, self._devices)
            self._sampler.start()
            if self._sampler.error:
                self._warnings.append(f"No GPU samples: {self._sampler.error}.")
        self._counting = None
        if o.counters:  # last: nothing the capture itself launches is counted
            self._counting = hw_counters.start(native, o.counters)
        self._pm = None
        if o.pm_sampling is not None:
            self._pm = pm_sampling.start(native, o.pm_sampling, o.pm_interval_us)

    def _enter_scheduled(self):
        from hookmagic.cupti.schedule import ScheduledCapture

        # stacks start at the code holding the `with` (frames: this, __enter__, the
        # `with`'s frame, its caller)
        boundary = self._boundary
        if boundary is None:
            try:
                boundary = sys._getframe(3)
            except ValueError:  # the `with` is at a script's top level
                boundary = None
        namespaces = self._namespaces if self._namespaces is not None else sys._getframe(2)
        label = self.label or "schedule"

        def open_window(number: int) -> capture:
            return capture(self.capture_options, label=f"{label} window {number}",
                           _boundary_frame=boundary, _namespaces=namespaces)

        self._scheduled = ScheduledCapture(self.schedule, open_window, self._on_trace_ready)
        self._scheduled._start()
        return self._scheduled

    def step(self) -> None:
        """With ``schedule=``: the end of one loop iteration (as the ``with``'s value's
        ``.step()``)."""
        if self._scheduled is None:
            raise errors.ScheduleError("step() needs hookmagic.capture(schedule=...) and its "
                                       "`with` block")
        self._scheduled.step()

    @property
    def traces(self) -> list:
        """With ``schedule=``: one Trace per finished active window."""
        return self._scheduled.traces if self._scheduled is not None else [self.trace]

    # -- leaving ----------------------------------------------------------------------------
    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._scheduled is not None:
            self._scheduled._finish(exc_type, exc, tb)
            return False
        wall_s = time.perf_counter() - self._t0
        try:
            self._finish(exc_type, wall_s)
        except Exception as failure:  # report, but never hide the user's own exception
            self._stop_quietly()
            self._fill_unavailable(f"hookmagic failed while finishing the capture "
                                   f"({type(failure).__name__}: {failure})")
        finally:
            self._namespaces = None  # no frame kept alive by a finished capture
            if self._held:
                self._held = False
                _lock.release()
        if self._dir is not None:
            self._save_rank()
        return False

    def _save_rank(self) -> None:
        """Write the trace under ``dir`` (never raises: a failed write is a warning)."""
        from hookmagic.distributed.output import save_rank_trace

        try:
            self.trace.meta["saved_to"] = save_rank_trace(self.trace, self._dir)
        except Exception as exc:
            warnings.warn(f"hookmagic: the capture could not be written under {self._dir!r} "
                          f"({type(exc).__name__}: {exc})", stacklevel=3)

    def _finish(self, exc_type, wall_s: float) -> None:
        native = self._native
        if native is None:
            self._fill_unavailable(self._reason or "the capture did not start")
            return
        t0 = time.perf_counter()
        end_ns = native.timestamp()
        # The sampler reads CUPTI's clock: it stops before CUPTI is detached.
        samples = self._sampler.stop() if self._sampler else {}
        pm_rows = None
        if getattr(self, "_pm", None) is not None:  # CUPTI's clock and profiler: before detach
            t_pm = time.perf_counter()
            pm_rows = pm_sampling.stop(native)
            pm_stop_s = time.perf_counter() - t_pm
        counted = None
        if getattr(self, "_counting", None) is not None:
            t_count = time.perf_counter()
            counted = hw_counters.stop(native)
            counted["stop_s"] = time.perf_counter() - t_count
        self._undo_autograd()
        native.stop()
        stop_s = time.perf_counter() - t0
        allocator_parts = self._allocators.stop() if self._allocators else []
        ranges = pd.DataFrame([r.__dict__ for r in RECORDER.stop()])
        t3 = time.perf_counter()
        from hookmagic.cupti.modules import (combo_labels, has_backward_ranges,
                                             module_stacks, named_module_kernels)

        combos = native.module_combos()  # modules the stack walks saw, named before take()
        if len(combos["module"]):
            try:
                native.set_module_labels(combo_labels(combos, self._take_namespaces()))
            except Exception:  # names are a nicety: unnamed module frames keep their class
                pass
        module_names_s = time.perf_counter() - t3
        t1 = time.perf_counter()
        raw = native.take()
        take_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        builders = table_builders(raw, native.enum_names(), ranges, samples,
                                  native.callback_name)
        modules_named = bool(len(combos["module"]))
        if allocator_parts or counted is not None or has_backward_ranges(ranges):
            # these rewrite the tables (stacks renumbered, kernel times replaced, backward
            # frames added): every table is built now
            tables: dict[str, Any] = build_tables_from(builders)
            merge_into(tables, allocator_parts)
            if counted is not None:
                tables["counters"], unmatched = hw_counters.counters_table(
                    counted, tables.get("kernels"))
                tables["kernels"] = hw_counters.replayed_kernel_times(
                    tables.get("kernels"), tables["counters"], self._start_ns)
            t4 = time.perf_counter()
            # backward frames; kernels naming a module
            module_kernels = module_stacks(tables, modules_named=modules_named)
        else:
            # The kernels table now (nearly every reader starts there); the others when the
            # Trace is first asked for them.
            tables = dict(builders)
            tables["kernels"] = build_tables_from({"kernels": builders["kernels"]}).get("kernels")
            t4 = time.perf_counter()
            module_kernels = (named_module_kernels(tables["kernels"], raw["stacks"])
                              if modules_named else 0)
        if pm_rows is not None:
            tables["pm_samples"] = pm_sampling.samples_table(
                pm_rows, int(pm_rows.get("device", 0)), self._pm["interval_us"])
        build_s = time.perf_counter() - t2
        module_names_s += time.perf_counter() - t4  # naming before take() + backward frames
        counters = raw["counters"]
        status = "complete"
        reason = ""
        if exc_type is not None:
            status = "partial"
            reason = f"the code under capture raised {exc_type.__name__}"
        meta = self._meta(native, end_ns, wall_s)
        meta.update(status=status, reason=reason)
        meta["overhead"] = {"start_s": self._start_s, "stop_s": stop_s,
                            "decode_s": counters["decode_s"], "take_s": take_s,
                            "build_s": build_s, "module_names_s": module_names_s,
                            "callbacks": counters["callbacks"],
                            **{k: counters[k] for k in ("subscribe_s", "callbacks_s", "enable_s",
                                                        "flush_s", "detach_s")},
                            "stacks_sampled": counters["stacks_sampled"]}
        meta["dropped"] = {"activity_records": counters["dropped_cupti"],
                           "over_memory_limit": counters["dropped_limit"],
                           "buffers_refused": counters["buffers_refused"],
                           # exceptions caught where CUPTI calls in: that buffer's records or
                           # that callback's row were lost, the process kept running
                           "native_faults": int(sum(counters.get(k, 0) for k in (
                               "faults_buffer_requested", "faults_buffer_completed",
                               "faults_api_callback")))}
        meta["records"] = int(counters["records"])
        meta["detached"] = bool(counters["detached"])
        # launches from threads without Python frames attributed to the caller of backward()
        meta["backward_attributed"] = int(counters.get("fallback_launches", 0))
        meta["module_kernels"] = int(module_kernels)  # kernels whose stack names its modules
        stacks_wanted = self.capture_options.stacks and self._frames_supported
        meta["warnings"] = list(self._warnings) + missing_stack_notes(
            tables.get("kernels"), stacks_wanted, self._callbacks_active)
        if stacks_wanted and self._callbacks_active:
            meta["warnings"] += uncaptured_graph_notes(tables.get("kernels"))
        meta["kernel_timestamps"] = "hardware events" if self._hw_trace else "instrumentation"
        if counted is not None:
            if self._counting["replay"] == "kernel":
                meta["kernel_timestamps"] = hw_counters.REPLAY_TIMESTAMPS
            meta["counters"] = {"metrics": self._counting["metrics"],
                                "replay": self._counting["replay"],
                                "skipped": int(counted.get("skipped", 0)),
                                "skip_reason": str(counted.get("first_error", "")),
                                "passes": self._counting["passes"],
                                "kernels": int(counted["ranges"]),
                                "dropped": int(counted["dropped"]), "unmatched": unmatched,
                                "replay_wall_s": wall_s, "evaluate_s": counted["stop_s"]}
        if pm_rows is not None:
            meta["pm_sampling"] = pm_sampling.meta_of(self._pm, pm_rows, pm_stop_s)
            if meta["pm_sampling"]["error"]:
                meta["warnings"].append(f"PM sampling stopped early: {meta['pm_sampling']['error']}.")
            if meta["pm_sampling"]["overflow"]:
                meta["warnings"].append("PM sampling's hardware buffer overflowed: samples were "
                                        "lost (a longer pm_interval_us keeps up).")
        # everything after the cell: the parts above and what lies between them
        meta["overhead"]["finish_s"] = time.perf_counter() - t0
        self.trace._fill(tables, meta)
        self._native = None

    def _meta(self, native, end_ns: int, wall_s: float) -> dict:
        from hookmagic.common.version import __version__

        driver = library.driver_info()
        return {
            "format_version": 1, "hookmagic_version": __version__, "source": "cupti",
            "label": self.label or "", "host": socket.gethostname(), "pid": os.getpid(),
            "python": platform.python_version(),
            "started_at": _dt.datetime.fromtimestamp(self._t_wall, _dt.timezone.utc).isoformat(),
            "start_ns": int(self._start_ns), "end_ns": int(end_ns), "wall_s": wall_s,
            "devices": [dict(d, compute_capability=list(d["compute_capability"]),
                             pci=list(d["pci"])) for d in self._devices],
            "driver_version": driver.driver_version, "cuda_driver_version": driver.cuda_version,
            "cupti_version": int(native.cupti_version()),
            "cupti_path": native.cupti_path(),
            "options": dict(self.options),
        }

    def _namespace_mappings(self) -> list:
        """The mappings module names are looked up in: the given ones (a notebook's namespace),
        or the locals of the frame holding the ``with`` and of its callers (up to
        ``_CALLER_FRAMES`` frames), then their globals."""
        where = self._namespaces
        if where is None:
            return []
        if not isinstance(where, types.FrameType):
            return list(where)
        local_maps, global_maps, seen = [], [], set()
        frame = where
        for _ in range(_CALLER_FRAMES):
            if frame is None:
                break
            local_maps.append(frame.f_locals)
            if id(frame.f_globals) not in seen:
                seen.add(id(frame.f_globals))
                global_maps.append(frame.f_globals)
            frame = frame.f_back
        return local_maps + global_maps

    def _take_namespaces(self) -> list:
        """:meth:`_namespace_mappings`, then the frame reference is dropped."""
        mappings = self._namespace_mappings()
        self._namespaces = None
        return mappings

    def _fill_unavailable(self, reason: str) -> None:
        from hookmagic.trace import Trace

        empty = Trace.empty(reason)
        empty.meta["label"] = self.label or ""
        empty.meta["options"] = dict(self.options)  # what was asked for, captured or not
        self.trace._fill({}, empty.meta)
        _warn_once(reason)

    def _undo_autograd(self) -> None:
        undo = getattr(self, "_autograd_undo", None)
        self._autograd_undo = None
        if undo is not None:
            undo()

    def _stop_quietly(self) -> None:
        try:
            self._undo_autograd()
        except Exception:
            pass
        native, self._native = self._native, None
        RECORDER.stop()
        if native is not None:
            try:
                if native.counters_running():
                    native.counters_stop()
            except Exception:
                pass
            try:
                if native.pm_running():
                    native.pm_stop()
            except Exception:
                pass
            try:
                native.stop()
                native.take()
            except Exception:
                pass
        allocators = getattr(self, "_allocators", None)
        if allocators is not None:
            try:
                allocators.stop()
            except Exception:
                pass
        sampler = getattr(self, "_sampler", None)
        if sampler is not None:
            try:
                sampler.stop()
            except Exception:
                pass


def not_recorded_notes(options: CaptureOptions, *, refused: bool, holder: str,
                       frames_supported: bool, python: str) -> list[str]:
    """One line for each kind of thing a capture could not record: shown
    by the printed summary and the report, and kept in ``meta["warnings"]``.

    ``refused``: CUPTI refused our callback subscription (``holder`` keeps it, e.g. PyTorch's
    profiler after its first use); ``frames_supported``: the native build reads this
    Python's frames (CPython 3.10-3.13)."""
    notes = []
    if options.lite:
        notes.append("Lite capture: Python stacks, threads, ranges, synchronisation and GPU "
                     "samples were not recorded (kernels, copies, memsets and memory only).")
        if refused and options.memory:
            notes.append(f"Virtual-memory map/unmap was not recorded: {holder} holds CUPTI's "
                         "callback API. Restart the kernel to get it back.")
        return notes
    if refused:
        notes.append(
            "Python stacks, threads, ranges and virtual-memory map/unmap were not recorded: "
            f"{holder} holds CUPTI's callback API; kernels, copies and "
            "allocations were still captured. Restart the kernel to get them back.")
    elif not options.callbacks:
        notes.append("Python stacks, threads, ranges and virtual-memory map/unmap were not "
                     "recorded: the capture ran with callbacks=False.")
    elif options.stacks and not frames_supported:
        notes.append(f"Python stacks were not recorded: this build reads the frames of CPython "
                     f"3.10-3.13, not Python {python}; threads and ranges were recorded.")
    return notes


def missing_stack_notes(kernels: pd.DataFrame | None, stacks_wanted: bool,
                        callbacks_active: bool) -> list[str]:
    """One line saying how many kernels carry no Python stack although stacks were asked for
    and the launch callbacks ran (else another note already says why none were recorded)."""
    if not (stacks_wanted and callbacks_active) or kernels is None or not len(kernels):
        return []
    missing = int((kernels["stack_id"].to_numpy() < 0).sum())
    if not missing:
        return []
    return [f"{missing:,} of {len(kernels):,} kernels have no Python stack: they were launched "
            "from threads with no Python frames (autograd's backward engine, library worker "
            "threads) or by a Python this build cannot read frames from."]


@atexit.register
def _stop_at_exit() -> None:
    """A capture still running at interpreter exit (a script that never left its ``with``):
    stop it before Python's state is torn down, so no callback reads that state afterwards."""
    from hookmagic.cupti import native_module

    native = native_module()
    if native is not None and native.running():
        native.stop()


def _caller_parent_frame():
    """The frame above the one holding the ``with`` statement: stacks start at the user's code.

    Frames: this function, ``_start``, ``__enter__``, the ``with`` frame, its caller.
    """
    try:
        return sys._getframe(4)
    except ValueError:
        return None
