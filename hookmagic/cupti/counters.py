"""Per-kernel hardware counters through CUPTI's range profiler: the metric names, the
``counters=`` option, and turning the native rows into the Trace's ``counters`` table.

How they are collected (native/src/counters.cpp): CUPTI's Range Profiler API with **kernel
replay** and **auto ranges** — every kernel launched inside the capture is one range. CUPTI
saves the memory the kernel may touch, runs the kernel once per *pass* of the metric set's
schedule (restoring memory between passes) and keeps one value per metric; the launches are
serialised. So each kernel costs ``passes`` runs plus the save/restore, and concurrent kernels
run one after another while counting: the timeline of a capture with counters is not the
program's normal timeline (durations in the ``kernels`` table are those of a replayed launch;
``gpu__time_duration.sum`` is one pass's). The number of passes of a set is in
``trace.meta["counters"]["passes"]``, with ``replay_wall_s`` (the block's wall time while
counting) and ``evaluate_s`` (stopping and evaluating on the host). On an H200 (driver
580.159.04, CUPTI 13.0) the default set took 12 passes, and a block of 14 launches (GEMMs,
attention, convolution, elementwise) took 9.4 s counted plus 0.6 s to
evaluate: the ``smsp__sass_*`` instruction counters make CUPTI patch each kernel's code.
Metric values are evaluated on the host when the capture ends.

``HOOKMAGIC_COUNTERS_REPLAY=user`` selects the other replay (:data:`REPLAYS`): hookmagic replays
each launch itself from its driver callback — memory saved and restored with CUPTI's checkpoint
API, L2 flushed before every pass, CUPTI's auto range around the replayed kernel alone — and the
program's own launch then runs uncounted, with its normal timestamps. Each pass then starts
from the cache state Nsight Compute's default (``--cache-control all``) gives it. Measured on an
H200 against that default (tests/gpu/test_counters_gpu.py, docs/counters.md): occupancy, L1 hit
rate, tensor pipe and the pipe instruction counts on every launch; DRAM bytes read, DRAM
throughput and duration on launches of 30 µs or more; DRAM bytes written on launches writing
1 MB or more (against ncu's one-pass replay: its multi-pass replay adds ~2.4 MB to every
launch). But the ``smsp__sass_*`` instruction counts read 0, so kernel replay stays the default.
The same block of 14 launches took 2.7-2.9 s counted under user replay, 9.3 s under kernel
replay (12 passes each).

Counted are the kernels of the CUDA context current when the capture starts (the primary
context of device 0 if none is); the i-th range is joined to the i-th launch of the
``kernels`` table in correlation order, which is launch order for launches from one thread
on one device. How the values compare with Nsight Compute's on the same launches is measured
by tests/gpu/test_counters_gpu.py (its docstring says what agrees and what does not).

The names are Nsight Compute's metric names for Hopper (sm_90); the constants below are the one
source for them (views and diagnoses import the constants, never the strings).
"""
from __future__ import annotations

import difflib
import os
import re
from typing import Any

import numpy as np
import pandas as pd

from hookmagic.common.errors import CaptureFailed, InvalidArgument, Unavailable
from hookmagic.cupti.errors import CaptureOptionError

#: Compute (SM) throughput, % of peak over the kernel's elapsed cycles (ncu "Compute (SM) Throughput").
SM_THROUGHPUT_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
#: DRAM throughput, % of peak over the kernel's elapsed cycles (ncu "DRAM Throughput").
DRAM_THROUGHPUT_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
#: Bytes read from / written to device memory (DRAM/HBM).
DRAM_BYTES_READ = "dram__bytes_read.sum"
DRAM_BYTES_WRITE = "dram__bytes_write.sum"
#: Achieved occupancy: active warps as % of the SM's warp slots, averaged over active cycles.
ACHIEVED_OCCUPANCY_PCT = "sm__warps_active.avg.pct_of_peak_sustained_active"
#: L1/TEX and L2 sector hit rates, %.
L1_HIT_RATE_PCT = "l1tex__t_sector_hit_rate.pct"
L2_HIT_RATE_PCT = "lts__t_sector_hit_rate.pct"
#: Tensor-pipe utilisation: % of active cycles the tensor pipe was busy.
TENSOR_PIPE_PCT = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
#: Thread-level FP32 instructions executed (predicated on), as Nsight Compute's roofline counts
#: them: FP32 FLOPs = 2 * FFMA + FADD + FMUL.
FP32_FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
FP32_FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FP32_FMUL = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"
#: The same for FP16 (HFMA2 and friends count once per instruction and thread).
FP16_HFMA = "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum"
FP16_HADD = "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum"
FP16_HMUL = "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum"
#: Warp-level instructions executed on the FMA pipe (FP32 and packed FP16 math, IMAD) and, of
#: those, the FP16 ones: shown as counts, they give no FLOPs by themselves.
FP32_INSTRUCTIONS = "smsp__inst_executed_pipe_fma.sum"
FP16_INSTRUCTIONS = "sm__inst_executed_pipe_fma_type_fp16.sum"
#: Warp-level instructions issued to the tensor pipe (HMMA, HGMMA, IMMA, ...).
TENSOR_INSTRUCTIONS = "sm__inst_executed_pipe_tensor.sum"
#: Tensor-core math operations with FP16 sources (HMMA and HGMMA): FP16 tensor FLOPs, as
#: Nsight Compute's tensor roofline counts them (the name on Hopper; Ampere's splits by
#: destination type).
TENSOR_FP16_OPS = "sm__ops_path_tensor_src_fp16.sum"
#: Kernel duration on the GPU (one replay pass), ns.
DURATION_NS = "gpu__time_duration.sum"

#: The default counter set of ``hookmagic.capture(counters=True)`` and ``%%cudahook --counters``.
DEFAULT_COUNTERS: tuple[str, ...] = (
    SM_THROUGHPUT_PCT, DRAM_THROUGHPUT_PCT, DRAM_BYTES_READ, DRAM_BYTES_WRITE,
    ACHIEVED_OCCUPANCY_PCT, L1_HIT_RATE_PCT, L2_HIT_RATE_PCT, TENSOR_PIPE_PCT,
    FP32_FFMA, FP32_FADD, FP32_FMUL, FP16_HFMA, FP16_HADD, FP16_HMUL,
    FP32_INSTRUCTIONS, FP16_INSTRUCTIONS, TENSOR_INSTRUCTIONS, TENSOR_FP16_OPS, DURATION_NS,
)
#: Named sets for ``counters="<name>"`` and ``%%cudahook --counters <name>``.
COUNTER_SETS: dict[str, tuple[str, ...]] = {"default": DEFAULT_COUNTERS}
#: The most kernel launches one capture counts (the counter image is sized for them up
#: front); later launches are dropped and counted in ``meta["counters"]["dropped"]``.
MAX_KERNELS = 4096
#: The most metrics one capture may ask for.
MAX_METRICS = 256
#: How launches are replayed for their passes: "kernel" (CUPTI's kernel replay: each pass starts
#: from the cache state CUPTI's save/restore leaves) or "user" (hookmagic replays each launch
#: itself, restoring memory with CUPTI's checkpoint API and flushing L2 before every pass, as
#: Nsight Compute does by default). See the module docstring.
REPLAYS = ("kernel", "user")
REPLAY = "kernel"

_METRIC_NAME = re.compile(r"^[A-Za-z0-9_]+(?:__[A-Za-z0-9_]+)(?:\.[A-Za-z0-9_]+)*$")
# CUptiResult codes the messages tell apart
_INSUFFICIENT_PRIVILEGES = 35
_BUSY = (26, 36, 39)  # HARDWARE_BUSY, OLD_PROFILER_API_INITIALIZED, MULTIPLE_SUBSCRIBERS
_NOT_SUPPORTED = (27, 33, 40, 41, 42, 43, 44, 45, 46)
_PROFILER_MISSING = -1


class CounterOptionError(CaptureOptionError):
    """``counters=`` is not True/False, a set's name, or a list of metric names."""


class UnknownCounter(InvalidArgument):
    """A metric name this GPU's profiler does not know (the message lists close matches)."""


class CountersUnavailable(Unavailable):
    """Hardware counters cannot be collected here: profiling restricted to admin users,
    another tool holds the GPU's profiler, or the GPU/driver/CUPTI does not support it."""


class CountersFailed(CaptureFailed):
    """CUPTI's range profiler failed for a reason hookmagic could not name more precisely."""


#: What asking for counters may raise: the cell/``with`` fails rather than run uncounted.
COUNTER_ERRORS = (CounterOptionError, UnknownCounter, CountersUnavailable, CountersFailed)


def resolve(counters: Any) -> tuple[str, ...] | None:
    """The metric names ``counters=`` asks for: None for None/False, :data:`DEFAULT_COUNTERS`
    for True, a named set for its name (``"default"``), else the given names (a list/tuple of
    strings, or one string of comma-separated names), duplicates dropped, order kept.

    Raises :class:`CounterOptionError` for anything else."""
    if counters is None or counters is False:
        return None
    if counters is True:
        return DEFAULT_COUNTERS
    if isinstance(counters, str):
        if counters.strip() in COUNTER_SETS:
            return COUNTER_SETS[counters.strip()]
    elif not isinstance(counters, (list, tuple)):
        raise CounterOptionError(f"counters= takes True, a set name ({', '.join(COUNTER_SETS)}) "
                                 f"or a list of metric names, not {type(counters).__name__}")
    out: list[str] = []
    for name in metric_names(counters, "counters", CounterOptionError, MAX_METRICS):
        if name in COUNTER_SETS:
            candidates = COUNTER_SETS[name]
        elif _METRIC_NAME.match(name):
            candidates = (name,)
        else:
            raise CounterOptionError(
                f"counters=: {name[:80]!r} is not a metric name (Nsight Compute's form, "
                "e.g. dram__bytes_read.sum)")
        out.extend(c for c in candidates if c not in out)
    return tuple(out)


def metric_names(value: str | list | tuple, option: str, error: type[Exception],
                 limit: int) -> list[str]:
    """The names in ``value`` (a list/tuple of strings, or one string of comma-separated names),
    stripped, for the option ``option``; raises ``error`` for none, more than ``limit``, or a
    name that is not a string."""
    names = ([part for part in value.split(",") if part.strip()] if isinstance(value, str)
             else list(value))
    if not names:
        raise error(f"{option}= got an empty list of metric names")
    if len(names) > limit:
        raise error(f"{option}= got {len(names)} metric names; at most {limit} per capture")
    for name in names:
        if not isinstance(name, str):
            raise error(f"{option}= metric names are strings, not {name!r}")
    return [name.strip() for name in names]


def close_matches(name: str, supported: list[str], n: int = 5) -> list[str]:
    """Up to ``n`` supported metric names closest to ``name`` (same unit prefix first)."""
    unit = name.split("__", 1)[0] + "__"
    pool = [s for s in supported if s.startswith(unit)] or supported
    return difflib.get_close_matches(name, pool, n=n, cutoff=0.5)


def explain(exc: Exception) -> Exception:
    """A project error for a failure of the native counters (``exc`` has ``.code``, the
    CUptiResult, when it came from CUPTI)."""
    code = getattr(exc, "code", None)
    if code == _INSUFFICIENT_PRIVILEGES:
        return CountersUnavailable(
            "hardware counters are restricted to admin users on this machine (the NVIDIA "
            "driver's NVreg_RestrictProfilingToAdminUsers=1, ERR_NVGPUCTRPERM): run as root, "
            "or set `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
            "/etc/modprobe.d/ and reload the driver (or reboot)")
    if code in _BUSY:
        return CountersUnavailable(
            f"another tool holds the GPU's profiler ({exc}): Nsight Compute, Nsight Systems "
            "with --gpu-metrics, DCGM profiling or a second counting session; stop it and "
            "capture again")
    if code in _NOT_SUPPORTED:
        return CountersUnavailable(f"this GPU/driver does not support hardware counters ({exc})")
    if code == _PROFILER_MISSING or code == -3:
        return CountersUnavailable(f"hardware counters are not available: {exc}")
    return CountersFailed(f"hardware counters failed: {exc}")


def check_known(native: Any, metrics: tuple[str, ...]) -> None:
    """Raise :class:`UnknownCounter` naming every metric of ``metrics`` the profiler does not
    know, with close matches from the chip's supported list."""
    try:
        unknown = list(native.counters_unknown(list(metrics)))
    except native.CaptureError as exc:
        raise explain(exc) from None
    if unknown:
        raise unknown_counter(unknown, native.counters_supported, native.CaptureError,
                              "this GPU's profiler")


def unknown_counter(unknown: list[str], supported: Any, failure: type[Exception],
                    who: str) -> UnknownCounter:
    """The :class:`UnknownCounter` naming ``unknown`` metrics that ``who`` does not know, each
    with its close matches among ``supported()`` (none where that raises ``failure``)."""
    try:
        names = list(supported())
    except failure:
        names = []
    parts = []
    for name in unknown:
        near = close_matches(name, names)
        parts.append(f"{name!r}" + (f" (close: {', '.join(near)})" if near else ""))
    return UnknownCounter(f"{who} does not know the metric(s) {'; '.join(parts)}")


def replay_mode() -> str:
    """The replay counting uses: :data:`REPLAY`, or ``$HOOKMAGIC_COUNTERS_REPLAY`` when it
    names one of :data:`REPLAYS`."""
    asked = os.environ.get("HOOKMAGIC_COUNTERS_REPLAY", "").strip()
    return asked if asked in REPLAYS else REPLAY


def start(native: Any, metrics: tuple[str, ...]) -> dict[str, Any]:
    """Check the names and start counting every kernel launched from now on (the capture is
    already running); returns what :func:`stop` needs. Raises :class:`UnknownCounter` or
    :class:`CountersUnavailable`/:class:`CountersFailed`."""
    check_known(native, metrics)
    replay = replay_mode()
    try:
        passes = int(native.counters_start(list(metrics), MAX_KERNELS, replay))
    except native.CaptureError as exc:
        raise explain(exc) from None
    return {"metrics": list(metrics), "passes": passes, "replay": replay}


def stop(native: Any) -> dict[str, Any]:
    """Stop counting: the native rows (``range_index``, ``metric``, ``value``, ...)."""
    try:
        return dict(native.counters_stop())
    except native.CaptureError as exc:
        raise explain(exc) from None


#: ``counters.attrs`` key of the user replay's windows (CUPTI ns, ``[start, end]`` rows)
WINDOWS_ATTR = "counting_windows"


def _windows(rows: dict[str, Any]) -> np.ndarray:
    start = np.asarray(rows.get("window_start", []), dtype=np.int64)
    end = np.asarray(rows.get("window_end", []), dtype=np.int64)
    return np.stack([start, end], axis=1) if len(start) == len(end) else np.empty((0, 2), np.int64)


def without_counting_work(kernels: pd.DataFrame | None, windows: np.ndarray) -> pd.DataFrame | None:
    """``kernels`` less the launches the user replay made itself: those starting inside one of
    ``windows`` (its replays and L2 flushes, which run while the program's launch waits), and
    those CUPTI left without timestamps (launches under the range profiler), which under user
    replay are only the replays."""
    if kernels is None or not len(kernels) or not len(windows):
        return kernels
    start = kernels["start_ns"].to_numpy(np.int64)
    untimed = (start == 0) & (kernels["end_ns"].to_numpy(np.int64) == 0)
    order = np.argsort(windows[:, 0], kind="stable")
    w0, w1 = windows[order, 0], windows[order, 1]
    at = np.searchsorted(w0, start, side="right") - 1
    inside = (at >= 0) & (start <= w1[np.clip(at, 0, None)])
    return kernels[~(inside | untimed)].reset_index(drop=True)


def counters_table(rows: dict[str, Any], kernels: pd.DataFrame | None) -> tuple[pd.DataFrame, int]:
    """The ``counters`` table (long form) from the native rows, joined to ``kernels``.

    Ranges are numbered in launch order; so are the kernel launches of one capture when their
    ``correlation`` ids are sorted (CUPTI numbers API calls in the order they are made). The
    i-th range is the i-th launch (of the program's launches: under user replay those the
    counting made itself are left out first, and its windows are kept in the table's
    ``attrs[WINDOWS_ATTR]`` for :func:`replayed_kernel_times`). Returns the table and the
    number of ranges left without a launch (correlation_id -1; e.g. when the kernels table is
    empty)."""
    windows = _windows(rows)
    kernels = without_counting_work(kernels, windows)
    index = np.asarray(rows.get("range_index", []), dtype=np.int64)
    metric = list(rows.get("metric", []))
    value = np.asarray(rows.get("value", []), dtype=np.float64)
    if kernels is not None and len(kernels):
        order = kernels.sort_values("correlation", kind="stable")
        corr = order["correlation"].to_numpy(np.int64)
        names = order["name"].astype(str).to_numpy()
    else:
        corr = np.empty(0, np.int64)
        names = np.empty(0, object)
    matched = index < len(corr)
    safe = np.where(matched, index, 0)
    correlation = np.where(matched, corr[safe] if len(corr) else -1, -1).astype(np.int64)
    kernel = np.where(matched, names[safe] if len(names) else "", "")
    table = pd.DataFrame({"correlation_id": correlation, "kernel": kernel.astype(str),
                          "metric": metric, "value": value})
    unmatched = len(set(index[~matched].tolist()))
    table.attrs[WINDOWS_ATTR] = windows
    return table, unmatched


#: ``meta["kernel_timestamps"]`` of a capture with counters
REPLAY_TIMESTAMPS = ("kernel replay: each kernel's duration is one replayed pass "
                     "(gpu__time_duration), kernels laid end to end in launch order from the "
                     "capture's start; not the program's timeline")


def replayed_kernel_times(kernels: pd.DataFrame, counters: pd.DataFrame,
                          start_ns: int) -> pd.DataFrame:
    """``kernels`` with times for launches CUPTI left without any.

    Under the range profiler's kernel replay CUPTI's kernel records carry no timestamps (start
    and end 0). Such a launch gets :data:`DURATION_NS` of its counters as its duration, and the
    launches are placed end to end in launch order from ``start_ns`` (replay serialises them;
    the gaps of saving and restoring memory between passes are left out), so that totals and
    per-kernel times are measured ones while the positions are only an order. Launches that
    have timestamps, or no duration counter, are returned unchanged. Under user replay
    (``counters.attrs[WINDOWS_ATTR]`` set) the program's launches keep their own timestamps,
    and the result is ``kernels`` less the counting's own launches."""
    if counters is not None and len(counters.attrs.get(WINDOWS_ATTR, ())):
        return without_counting_work(kernels, counters.attrs[WINDOWS_ATTR])
    if kernels is None or not len(kernels):
        return kernels
    untimed = (kernels["start_ns"].to_numpy() == 0) & (kernels["end_ns"].to_numpy() == 0)
    if not untimed.any() or counters is None or not len(counters):
        return kernels
    dur = counters[counters["metric"] == DURATION_NS].groupby("correlation_id")["value"].first()
    out = kernels.copy()
    measured = out["correlation"].map(dur)
    fill = untimed & measured.notna().to_numpy()
    if not fill.any():
        return kernels
    order = np.argsort(out["correlation"].to_numpy(), kind="stable")
    durations = np.where(fill, np.nan_to_num(measured.to_numpy(np.float64)), 0).astype(np.int64)
    ends = int(start_ns) + np.cumsum(durations[order])
    start = np.empty(len(out), np.int64)
    start[order] = ends - durations[order]
    out.loc[fill, "start_ns"] = start[fill]
    out.loc[fill, "end_ns"] = start[fill] + durations[fill]
    out.loc[fill, "duration_ns"] = durations[fill]
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)
