"""GPU-wide utilisation over time through CUPTI's PM sampling: the metric names, the
``pm_sampling=`` option, and the native rows as the Trace's ``pm_samples`` table.

How they are collected (native/src/pm_sampling.cpp): the GPU's performance monitors are read
every ``pm_interval_us`` of GPU time (CUPTI's GPU-time trigger) into a hardware buffer that a
native thread drains every :data:`DECODE_PERIOD_MS`; each sample is evaluated on the host when
it is drained. Nothing is replayed: the program runs as it would, and each value is the whole
GPU's over one interval (not one kernel's). That makes it the choice for long cells where
``counters=`` (which replays every kernel once per pass) costs too much. A metric set must fit
in one pass of the hardware; sets that need more are refused.

The default set (``pm_sampling=True``) is one metric per quantity of :data:`DEFAULT_QUANTITIES`
(SM activity, DRAM read and write throughput, tensor pipe activity, SM issue), each the first
of its candidate names the GPU's PM sampling knows, kept while the set still fits in one pass;
the names used are in ``trace.meta["pm_sampling"]["metrics"]``.

PM sampling and ``counters=`` are refused together: both program the GPU's performance monitors,
and with the range profiler running CUPTI refuses PM sampling (on the H200, CUPTI 13.0:
``cuptiPmSamplingGetCounterAvailability`` returns ``CUPTI_ERROR_HARDWARE_BUSY``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from hookmagic.cupti.counters import (_METRIC_NAME, CounterOptionError, CountersUnavailable,
                                      explain, metric_names, unknown_counter)

# Candidates are tried in order. Measured on an H200 (CUPTI 13.0, driver 580): during an
# elementwise kernel moving 4.24 TB/s (88 % of the 4.81 TB/s the device attributes give),
# dram__read/write_throughput read 44.0 % + 44.0 %, while dramc__read/write_throughput read
# 0.46 % + 0.46 %: about 1/96 of it (the H200 has 96 HBM channels), so the dramc__ names are
# not offered.

#: SM activity: % of elapsed cycles the SMs had at least one warp in flight.
SM_ACTIVE_PCT = ("TPC.TriageCompute.sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
                 "sm__cycles_active.avg.pct_of_peak_sustained_elapsed")
#: DRAM read / write throughput, % of the peak (HBM on the H200).
DRAM_READ_PCT = ("dram__read_throughput.avg.pct_of_peak_sustained_elapsed",)
DRAM_WRITE_PCT = ("dram__write_throughput.avg.pct_of_peak_sustained_elapsed",)
#: Tensor pipe activity, % of elapsed cycles.
TENSOR_ACTIVE_PCT = (
    "TPC.TriageCompute.sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed")
#: SM instruction issue, % of the peak issue rate.
SM_ISSUE_PCT = ("sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed",
                "sm__inst_executed.avg.pct_of_peak_sustained_elapsed")

#: quantity -> candidate metric names, in the order the default set tries them
DEFAULT_QUANTITIES: dict[str, tuple[str, ...]] = {
    "sm_active": SM_ACTIVE_PCT, "dram_read": DRAM_READ_PCT, "dram_write": DRAM_WRITE_PCT,
    "tensor_active": TENSOR_ACTIVE_PCT, "sm_issue": SM_ISSUE_PCT,
}
#: Default sampling interval, µs of GPU time, and the range accepted.
INTERVAL_US = 100.0
INTERVAL_US_RANGE = (1.0, 1_000_000.0)
#: Hardware buffer the samples land in before they are drained, bytes.
BUFFER_BYTES = 256 << 20
#: How often the native thread drains the hardware buffer, ms.
DECODE_PERIOD_MS = 20
#: Samples one drain holds at most (the counter data image is sized for them); the interval's
#: samples over one decode period must fit: 20 ms / 1 µs = 20,000.
MAX_SAMPLES_PER_DECODE = 32_768
#: The most metrics one capture samples.
MAX_METRICS = 32
#: The ``pm_sampling=`` value standing for the default set, resolved on the device at start.
DEFAULT = "default"


class PmSamplingOptionError(CounterOptionError):
    """``pm_sampling=`` / ``pm_interval_us=`` are not a valid request (or ask for a metric set
    that needs more than one pass)."""


def resolve(pm_sampling: Any) -> tuple[str | tuple[str, ...] | None, float | None]:
    """``(metrics, interval_us)`` from ``pm_sampling=``: metrics is None (off), :data:`DEFAULT`
    or a tuple of metric names; interval_us is None unless a number was given.

    Accepted: None/False (off), True or ``"default"`` (the default set), a number (the default
    set every that many µs), a list/tuple of metric names or one string of comma-separated
    names. Raises :class:`PmSamplingOptionError` for anything else."""
    if pm_sampling is None or pm_sampling is False:
        return None, None
    if pm_sampling is True:
        return DEFAULT, None
    if isinstance(pm_sampling, (int, float)):
        return DEFAULT, check_interval(pm_sampling)
    if isinstance(pm_sampling, str):
        if pm_sampling.strip() == DEFAULT:
            return DEFAULT, None
    elif not isinstance(pm_sampling, (list, tuple)):
        raise PmSamplingOptionError(
            f"pm_sampling= takes True, a number of µs, or a list of metric names, not "
            f"{type(pm_sampling).__name__}")
    out: list[str] = []
    for name in metric_names(pm_sampling, "pm_sampling", PmSamplingOptionError, MAX_METRICS):
        bare = name.split(".", 2)[-1] if name.startswith("TPC.") else name
        if not _METRIC_NAME.match(bare):
            raise PmSamplingOptionError(
                f"pm_sampling=: {name[:80]!r} is not a metric name (Nsight Compute's form, "
                "e.g. dram__read_throughput.avg.pct_of_peak_sustained_elapsed)")
        if name not in out:
            out.append(name)
    return tuple(out), None


def check_interval(interval_us: Any) -> float:
    """``interval_us`` as a float, or :class:`PmSamplingOptionError` outside
    :data:`INTERVAL_US_RANGE`."""
    low, high = INTERVAL_US_RANGE
    if (isinstance(interval_us, bool) or not isinstance(interval_us, (int, float))
            or not math.isfinite(interval_us) or not low <= interval_us <= high):
        raise PmSamplingOptionError(f"the PM sampling interval must be a number of µs from "
                                    f"{low:g} to {high:g}, not {interval_us!r}")
    return float(interval_us)


def _known(native: Any, names: list[str]) -> list[str]:
    try:
        unknown = set(native.pm_unknown(names))
    except native.CaptureError as exc:
        raise explain(exc) from None
    return [n for n in names if n not in unknown]


def _passes(native: Any, names: list[str]) -> int:
    try:
        return int(native.pm_passes(names))
    except native.CaptureError as exc:
        raise explain(exc) from None


def default_metrics(native: Any) -> tuple[list[str], list[str]]:
    """The default set on this device: (metric names, quantities left out), one name per
    quantity of :data:`DEFAULT_QUANTITIES` (the first the device knows), each kept only if the
    set still fits in one pass."""
    chosen: list[str] = []
    left_out: list[str] = []
    for quantity, candidates in DEFAULT_QUANTITIES.items():
        for name in _known(native, list(candidates)):
            if _passes(native, chosen + [name]) == 1:
                chosen.append(name)
                break
        else:
            left_out.append(quantity)
    if not chosen:
        raise CountersUnavailable("PM sampling knows none of the default metrics on this GPU "
                                  f"({', '.join(left_out)})")
    return chosen, left_out


def check_metrics(native: Any, metrics: tuple[str, ...]) -> None:
    """Raise :class:`UnknownCounter` for names PM sampling does not know here, or
    :class:`PmSamplingOptionError` when the set needs more than one pass."""
    known = set(_known(native, list(metrics)))
    unknown = [m for m in metrics if m not in known]
    if unknown:
        raise unknown_counter(unknown, native.pm_supported, native.CaptureError,
                              "this GPU's PM sampling")
    passes = _passes(native, list(metrics))
    if passes != 1:
        raise PmSamplingOptionError(f"these PM sampling metrics need {passes} passes of the "
                                    "hardware; PM sampling takes a set that fits in one")


def start(native: Any, metrics: str | tuple[str, ...], interval_us: float) -> dict[str, Any]:
    """Resolve and check the metrics and start sampling (the capture is already running);
    returns what :func:`stop` and the Trace's meta need."""
    left_out: list[str] = []
    if metrics == DEFAULT:
        names, left_out = default_metrics(native)
    else:
        names = list(metrics)
        check_metrics(native, tuple(names))
    try:
        native.pm_start(names, int(round(interval_us * 1000)), BUFFER_BYTES,
                        MAX_SAMPLES_PER_DECODE, DECODE_PERIOD_MS)
    except native.CaptureError as exc:
        raise explain(exc) from None
    return {"metrics": names, "left_out": left_out, "interval_us": float(interval_us)}


def stop(native: Any) -> dict[str, Any]:
    """Stop sampling: the native rows (``start_ns``, ``end_ns``, ``metrics``, ``values``, ...)."""
    try:
        return dict(native.pm_stop())
    except native.CaptureError as exc:
        raise explain(exc) from None


def _before_start(rows: dict[str, Any], interval_us: float) -> np.ndarray:
    """The samples that start more than one interval before sampling started: on the H200 the
    first sample of every capture began 2.7-2.9 s before cuptiPmSamplingStart (ending just
    after it), so its values are an average over time before the capture."""
    start = np.asarray(rows.get("start_ns", []), dtype=np.int64)
    began = int(rows.get("cupti_start_ns", 0) or 0)
    if not began:
        return np.zeros(len(start), dtype=bool)
    return start < began - int(interval_us * 1e3)


def samples_table(rows: dict[str, Any], device: int = 0,
                  interval_us: float = INTERVAL_US) -> pd.DataFrame:
    """The ``pm_samples`` table (long form: one row per sample and metric) from the native
    rows, less samples that began more than ``interval_us`` before sampling started."""
    start = np.asarray(rows.get("start_ns", []), dtype=np.int64)
    end = np.asarray(rows.get("end_ns", []), dtype=np.int64)
    metrics = list(rows.get("metrics", []))
    values = np.asarray(rows.get("values", []), dtype=np.float64)
    n, m = len(start), len(metrics)
    values = values.reshape(n, m) if n and m else np.empty((0, m))
    keep = ~_before_start(rows, interval_us)
    if n and not keep.all():
        start, end, values = start[keep], end[keep], values[keep]
        n = len(start)
    return pd.DataFrame({
        "start_ns": np.repeat(start, m), "end_ns": np.repeat(end, m),
        "device": np.full(n * m, device, dtype=np.int32),
        "metric": np.tile(np.asarray(metrics, dtype=object), n).astype(str) if n * m else
        np.empty(0, dtype=str),
        "value": values.reshape(-1),
    })


def meta_of(started: dict[str, Any], rows: dict[str, Any], stop_s: float) -> dict[str, Any]:
    """``trace.meta["pm_sampling"]``: what was sampled, how, and what was lost (figures of the
    samples kept in the table)."""
    early = _before_start(rows, started["interval_us"])
    start = np.asarray(rows.get("start_ns", []), dtype=np.int64)[~early]
    end = np.asarray(rows.get("end_ns", []), dtype=np.int64)[~early]
    return {"metrics": list(started["metrics"]), "left_out": list(started["left_out"]),
            "interval_us": started["interval_us"], "samples": int(len(start)),
            "before_start": int(early.sum()),
            "median_interval_us": (float(np.median(np.diff(start))) / 1e3
                                   if len(start) > 1 else None),
            "first_ns": int(start[0]) if len(start) else None,
            "last_ns": int(end[-1]) if len(end) else None,
            "cupti_start_ns": int(rows.get("cupti_start_ns", 0)),
            "cupti_stop_ns": int(rows.get("cupti_stop_ns", 0)),
            "overflow": int(rows.get("overflow", 0)), "image_full": int(rows.get("image_full", 0)),
            "decodes": int(rows.get("decodes", 0)), "decode_s": float(rows.get("decode_s", 0.0)),
            "stop_s": stop_s, "error": str(rows.get("error", ""))}


#: name parts left out of a metric's short label (the default set's names all end so)
_LABEL_TRIM = ("TPC.TriageCompute.", ".avg.pct_of_peak_sustained_elapsed", ".sum.pct_of_peak_sustained_elapsed")


def short_name(metric: str) -> str:
    """A metric's label for views: ``dramc__read_throughput %`` for
    ``dramc__read_throughput.avg.pct_of_peak_sustained_elapsed``."""
    label = str(metric)
    pct = "pct_of_peak" in label
    for part in _LABEL_TRIM:
        label = label.replace(part, "")
    return f"{label} %" if pct else label
