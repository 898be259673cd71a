"""Per-kernel hardware counters as numbers people read: how busy the SMs and DRAM were, the DRAM
traffic, achieved occupancy, cache hit rates, FLOPs counted from executed instructions, the
arithmetic intensity and achieved rates they give, and what bounds each kernel.

Input is the trace's ``counters`` table in long form (``correlation_id, kernel, metric,
value``; one row per kernel launch and metric, the metric names those of Nsight Compute /
CUPTI) and its ``kernels`` table, joined by correlation (``kernels.correlation ==
counters.correlation_id``) for each launch's duration, launch configuration and range.

FLOPs, exactly as computed here (:data:`FLOP_COUNTERS`):

- CUDA-core FP32: ``2 x FFMA + FADD + FMUL`` thread instructions executed with their predicate
  true (a fused multiply-add is a multiply and an add); FP16 the same with HFMA, HADD, HMUL
  (a packed ``HFMA2`` is one thread instruction, so it is counted as Nsight Compute's
  half-precision roofline counts it).
- Tensor Cores, FP16 sources: the tensor path's count of math operations, taken as FLOPs
  unscaled, as Nsight Compute's tensor roofline does. Tensor Core work from other source types
  (BF16, TF32, FP8, INT8) has no counter in the set: a launch whose tensor pipe was busy
  (:data:`TENSOR_WORK_PCT` of its cycles or more) but has no tensor FLOPs counted gets
  ``flops_complete`` False, and no intensity or FLOP/s (its FLOPs would be only the CUDA-core
  part).
- A precision's FLOPs are NaN when none of its counters was collected; ``flops`` is the sum
  over the precisions that were (NaN when none was). Warp-level instruction counts (FMA pipe,
  tensor pipe) are shown but give no FLOPs: one warp instruction may be an FFMA (64 FLOPs),
  an FADD (32), an integer IMAD (none), or an MMA whose FLOPs depend on its shape.

Rates use the duration of one replay pass (``gpu__time_duration``, the duration Nsight Compute
reports beside the same counters), or the launch's duration in the ``kernels`` table when that
metric was not collected. Counters are measured under kernel replay (launches serialised,
memory restored between passes), so a kernel's DRAM bytes and duration are those of a replayed
run, which can differ from the same launch in the unprofiled program.

The bound of a kernel (:func:`classify`) follows Nsight Compute's speed-of-light rule: a unit
at :data:`BUSY_PCT` % of its peak or more bounds the kernel (``compute-bound`` when the SM or
its tensor pipe is the busier, named the tensor pipe when that is at :data:`BUSY_PCT` % or more;
``memory-bound`` when DRAM is, ties included); when neither is, the kernel is
``low occupancy`` if its achieved occupancy is under :data:`LOW_OCCUPANCY`, else
``latency-bound``. Memory here is DRAM only: a kernel limited by L1 or L2 bandwidth reads as
latency-bound.

Pure functions: no plotting, no I/O.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import numpy as np
import pandas as pd

from hookmagic.analysis.occupancy import device_limits, theoretical_occupancy
from hookmagic.analysis.tables import table
from hookmagic.common.format import percent
from hookmagic.cupti import counters as metrics

LONG_COLUMNS = ("correlation_id", "kernel", "metric", "value")

#: a unit at this share of its peak (percent) or more bounds the kernel; below it in both
#: compute and memory, Nsight Compute's speed-of-light rule says "latency issues"
BUSY_PCT = 60.0
#: occupancy (a fraction of the SM's warp slots) considered low, theoretical or achieved
LOW_OCCUPANCY = 0.25
#: the tensor pipe's busy share (% of active cycles) from which a launch holds Tensor Core work
TENSOR_WORK_PCT = 1.0

BOUNDS = ("memory-bound", "compute-bound", "latency-bound", "low occupancy", "unknown")


class Readable(NamedTuple):
    column: str
    metric: str
    scale: float
    unit: str


#: the default counters as columns: name, metric, factor from the metric's unit, unit shown
READABLE: tuple[Readable, ...] = (
    Readable("sm_pct", metrics.SM_THROUGHPUT_PCT, 1.0, "% of peak"),
    Readable("dram_pct", metrics.DRAM_THROUGHPUT_PCT, 1.0, "% of peak"),
    Readable("dram_read_gb", metrics.DRAM_BYTES_READ, 1e-9, "GB"),
    Readable("dram_write_gb", metrics.DRAM_BYTES_WRITE, 1e-9, "GB"),
    Readable("occupancy_pct", metrics.ACHIEVED_OCCUPANCY_PCT, 1.0, "% of warp slots"),
    Readable("l1_hit_pct", metrics.L1_HIT_RATE_PCT, 1.0, "%"),
    Readable("l2_hit_pct", metrics.L2_HIT_RATE_PCT, 1.0, "%"),
    Readable("tensor_pipe_pct", metrics.TENSOR_PIPE_PCT, 1.0, "% of active cycles"),
    Readable("fp32_warp_inst", metrics.FP32_INSTRUCTIONS, 1.0, "warp instructions"),
    Readable("fp16_warp_inst", metrics.FP16_INSTRUCTIONS, 1.0, "warp instructions"),
    Readable("tensor_warp_inst", metrics.TENSOR_INSTRUCTIONS, 1.0, "warp instructions"),
    Readable("replay_ns", metrics.DURATION_NS, 1.0, "ns"),
)


class FlopCounter(NamedTuple):
    metric: str
    flops_each: float
    precision: str
    tensor: bool = False


#: the counters FLOPs are computed from, the FLOPs each counted event does, and its precision
#: (the keys of :data:`hookmagic.analysis.roofline.PEAKS`)
FLOP_COUNTERS: tuple[FlopCounter, ...] = (
    FlopCounter(metrics.FP32_FFMA, 2.0, "float32"),
    FlopCounter(metrics.FP32_FADD, 1.0, "float32"),
    FlopCounter(metrics.FP32_FMUL, 1.0, "float32"),
    FlopCounter(metrics.FP16_HFMA, 2.0, "float16"),
    FlopCounter(metrics.FP16_HADD, 1.0, "float16"),
    FlopCounter(metrics.FP16_HMUL, 1.0, "float16"),
    FlopCounter(metrics.TENSOR_FP16_OPS, 1.0, "float16", tensor=True),
)
FLOP_PRECISIONS = tuple(dict.fromkeys(c.precision for c in FLOP_COUNTERS))

#: the unit of every column :func:`kernel_counters` and :func:`counters_by_kernel` compute
UNITS: dict[str, str] = {
    **{r.column: r.unit for r in READABLE},
    "duration_ns": "ns", "mean_ns": "ns", "total_ns": "ns", "dram_bytes": "bytes",
    **{f"{p}_flops": "FLOP" for p in FLOP_PRECISIONS}, "flops": "FLOP",
    "intensity": "FLOP per DRAM byte", "tflops": "TFLOP/s", "gbps": "GB/s",
    "theoretical_occupancy_pct": "% of warp slots",
}

_PCT_COLUMNS = ("sm_pct", "dram_pct", "occupancy_pct", "l1_hit_pct", "l2_hit_pct",
                "tensor_pipe_pct")


def counter_rows(trace: Any) -> pd.DataFrame:
    """The long ``counters`` table of ``trace`` (an empty one when it has none)."""
    tables = getattr(trace, "tables", None)
    frame = tables.get("counters") if isinstance(tables, Mapping) else None
    if not isinstance(frame, pd.DataFrame):
        frame = getattr(trace, "counters", None)
    if not isinstance(frame, pd.DataFrame) or frame.empty:
        return pd.DataFrame({c: pd.Series(dtype=d) for c, d in
                             zip(LONG_COLUMNS, ("int64", "str", "str", "float64"))})
    return frame


def has_counters(trace: Any) -> bool:
    """Whether ``trace`` holds any counter values."""
    return len(counter_rows(trace)) > 0


def kernel_counters(rows: pd.DataFrame, kernels: pd.DataFrame | None = None,
                    meta: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """One row per kernel launch with counters, in the order of the launches' first counter row.

    Rows of ``rows`` not matched to a launch (``correlation_id`` below 0) are left out.

    Columns: ``correlation_id, name, duration_ns`` (one replay pass's, else the launch's in
    ``kernels``; see the module's docstring), the :data:`READABLE` columns (NaN where a
    metric was not collected), ``dram_bytes`` (read + written), ``<precision>_flops`` per :data:`FLOP_PRECISIONS` and
    ``flops`` and ``flops_complete`` (see the module's docstring), ``precision`` (the one with the most FLOPs, "" when
    no FLOPs were counted), ``intensity`` (FLOPs per DRAM byte), ``tflops`` and ``gbps``
    (achieved: FLOPs and DRAM bytes over the duration), ``theoretical_occupancy_pct`` and
    ``limiter`` (from the launch configuration, :mod:`hookmagic.analysis.occupancy`), ``bound``
    and ``bound_reason`` (:func:`classify`), then any other collected metric under its own
    name. ``attrs["units"]`` gives each column's unit.
    """
    if rows is not None and len(rows):
        rows = rows.loc[rows["correlation_id"] >= 0, list(LONG_COLUMNS)]
    if rows is None or rows.empty:
        return _with_units(pd.DataFrame(columns=["correlation_id", "name", "duration_ns"]
                                        + [r.column for r in READABLE]))
    wide = rows.pivot_table(index="correlation_id", columns="metric", values="value",
                            aggfunc="first", sort=False)
    names = rows.groupby("correlation_id", sort=False)["kernel"].first()
    out = pd.DataFrame({"correlation_id": wide.index.astype(np.int64),
                        "name": names.reindex(wide.index).astype(str).to_numpy()})
    wide = wide.reset_index(drop=True).astype(float)

    def col(metric: str) -> pd.Series:
        return wide[metric] if metric in wide else pd.Series(np.nan, index=wide.index)

    for r in READABLE:
        out[r.column] = col(r.metric) * r.scale
    k = kernels if kernels is not None else pd.DataFrame(columns=["correlation", "duration_ns"])
    dur = (k.drop_duplicates("correlation").set_index("correlation")["duration_ns"]
           if len(k) else pd.Series(dtype=float))
    traced = out["correlation_id"].map(dur).astype(float)
    out.insert(2, "duration_ns", out["replay_ns"].where(out["replay_ns"] > 0, traced))
    out["dram_bytes"] = (col(metrics.DRAM_BYTES_READ) + col(metrics.DRAM_BYTES_WRITE))

    for p in FLOP_PRECISIONS:
        terms = [col(c.metric) * c.flops_each for c in FLOP_COUNTERS
                 if c.precision == p and c.metric in wide]
        out[f"{p}_flops"] = (pd.concat(terms, axis=1).sum(axis=1, min_count=1)
                             if terms else np.nan)
    per_p = out[[f"{p}_flops" for p in FLOP_PRECISIONS]]
    out["flops"] = per_p.sum(axis=1, min_count=1)
    tensor = [col(c.metric) for c in FLOP_COUNTERS if c.tensor and c.metric in wide]
    tensor_flops = pd.concat(tensor, axis=1).sum(axis=1) if tensor else pd.Series(0.0, index=out.index)
    # tensor work the counters cannot turn into FLOPs: the tensor pipe busy for at least
    # TENSOR_WORK_PCT of the cycles (CUDA-core kernels issue a few tensor-pipe instructions too:
    # an H200's FP32 SGEMMs 0-3 % of their warp instructions, the pipe below 1 % busy), or any
    # tensor-pipe instruction where the pipe's utilisation was not collected
    pipe = out["tensor_pipe_pct"] if "tensor_pipe_pct" in out else pd.Series(np.nan, index=out.index)
    tensor_work = pipe.ge(TENSOR_WORK_PCT).where(pipe.notna(), out["tensor_warp_inst"] > 0)
    out["flops_complete"] = ~(tensor_work.astype(bool) & ~(tensor_flops > 0))
    best = per_p.fillna(-1.0).to_numpy().argmax(axis=1)
    out["precision"] = np.where(out["flops"].fillna(0) > 0,
                                np.array(FLOP_PRECISIONS, dtype=object)[best], "")
    _rates(out, out["duration_ns"])
    out = _join_occupancy(out, k, meta)
    out = classify(out)
    known = {r.metric for r in READABLE} | {c.metric for c in FLOP_COUNTERS}
    for extra in (m for m in wide.columns if m not in known):
        out[extra] = wide[extra].to_numpy()
    return _with_units(out)


def counters_by_kernel(per_launch: pd.DataFrame) -> pd.DataFrame:
    """:func:`kernel_counters` rows summed per kernel name, most GPU time first.

    ``launches, total_ns, mean_ns``; DRAM bytes and FLOPs summed; every percentage the
    duration-weighted mean of its launches (so a hit rate is the mean over time, not over
    accesses); ``intensity``, ``tflops``, ``gbps`` and the bound recomputed from the sums;
    ``precision`` the one with the most FLOPs summed; occupancy and limiter of the launch
    configuration with the most time.
    """
    cols = ["name", "launches", "total_ns", "mean_ns", "dram_read_gb", "dram_write_gb",
            "dram_bytes", *[f"{p}_flops" for p in FLOP_PRECISIONS], "flops", "flops_complete",
            "precision",
            "intensity", "tflops", "gbps", *_PCT_COLUMNS, "theoretical_occupancy_pct",
            "limiter", "bound", "bound_reason"]
    if per_launch is None or per_launch.empty:
        return _with_units(pd.DataFrame(columns=cols))
    d = per_launch.assign(_w=per_launch["duration_ns"].astype(float))
    g = d.groupby("name", sort=False)
    sums = ["dram_read_gb", "dram_write_gb", "dram_bytes",
            *[f"{p}_flops" for p in FLOP_PRECISIONS], "flops"]
    out = g[sums].sum(min_count=1)
    out["flops_complete"] = g["flops_complete"].all()
    out.insert(0, "launches", g.size())
    out.insert(1, "total_ns", g["_w"].sum(min_count=1))
    out.insert(2, "mean_ns", out["total_ns"] / out["launches"])
    for c in _PCT_COLUMNS:
        w = d["_w"].where(d[c].notna())
        out[c] = (d[c] * w).groupby(d["name"], sort=False).sum(min_count=1) / \
            w.groupby(d["name"], sort=False).sum(min_count=1)
    longest = d.sort_values("_w", ascending=False, kind="stable").groupby("name", sort=False).head(1)
    longest = longest.set_index("name")
    out["theoretical_occupancy_pct"] = longest["theoretical_occupancy_pct"]
    out["limiter"] = longest["limiter"]
    per_p = out[[f"{p}_flops" for p in FLOP_PRECISIONS]]
    best = per_p.fillna(-1.0).to_numpy().argmax(axis=1)
    out["precision"] = np.where(out["flops"].fillna(0) > 0,
                                np.array(FLOP_PRECISIONS, dtype=object)[best], "")
    out = out.reset_index()
    _rates(out, out["total_ns"])
    out = classify(out)
    return _with_units(out.sort_values("total_ns", ascending=False, kind="stable")
                       .reset_index(drop=True)[cols])


def trace_counters(trace: Any) -> pd.DataFrame:
    """:func:`kernel_counters` of a trace's ``counters``, ``kernels`` and ``meta``."""
    return kernel_counters(counter_rows(trace), table(trace, "kernels"),
                           getattr(trace, "meta", None) or {})


def classify(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with ``bound`` (one of :data:`BOUNDS`) and ``bound_reason`` (the numbers
    that decide it) from its ``sm_pct, tensor_pipe_pct, dram_pct, occupancy_pct`` (and
    ``limiter``, ``theoretical_occupancy_pct`` where present). See the module's docstring."""
    out = frame.copy()
    bounds, reasons = [], []
    for r in out.to_dict("records"):
        bound, reason = _bound(r)
        bounds.append(bound)
        reasons.append(reason)
    out["bound"] = bounds
    out["bound_reason"] = reasons
    return out


def _bound(r: Mapping[str, Any]) -> tuple[str, str]:
    sm, tensor, dram = (_num(r.get(c)) for c in ("sm_pct", "tensor_pipe_pct", "dram_pct"))
    occ = _num(r.get("occupancy_pct"))
    compute = np.nanmax([sm, tensor]) if not (np.isnan(sm) and np.isnan(tensor)) else np.nan
    if np.isnan(compute) and np.isnan(dram):
        return "unknown", "no SM or DRAM throughput counters"
    busiest = np.nanmax([compute, dram])
    if busiest >= BUSY_PCT:
        if not np.isnan(dram) and (np.isnan(compute) or dram >= compute):
            return "memory-bound", (f"DRAM {_pc(dram)} of peak"
                                    + (f" (SM {_pc(sm)})" if not np.isnan(sm) else ""))
        if not np.isnan(tensor) and tensor >= BUSY_PCT:
            return "compute-bound", (f"tensor pipe {_pc(tensor)}, SM {_pc(sm)} of peak "
                                     f"(DRAM {_pc(dram)})")
        return "compute-bound", f"SM {_pc(sm)} of peak (DRAM {_pc(dram)})"
    units = f"SM {_pc(sm)}, DRAM {_pc(dram)} of peak"
    if not np.isnan(occ) and occ < LOW_OCCUPANCY * 100:
        limiter = str(r.get("limiter") or "")
        theo = _num(r.get("theoretical_occupancy_pct"))
        why = (f", limited by {limiter}" if limiter and limiter != "unknown" else "")
        theo_text = f", theoretical {_pc(theo)}" if not np.isnan(theo) else ""
        return "low occupancy", f"achieved occupancy {_pc(occ)}{why}{theo_text}; {units}"
    occ_text = f"; achieved occupancy {_pc(occ)}" if not np.isnan(occ) else ""
    return "latency-bound", f"{units}: neither unit is busy{occ_text}"


def _rates(out: pd.DataFrame, duration_ns: pd.Series) -> None:
    """Intensity and achieved rates in place; none from FLOPs known to be incomplete."""
    secs = duration_ns.astype(float) / 1e9
    secs = secs.where(secs > 0)
    flops = out["flops"].where(out["flops_complete"].astype(bool))
    out["intensity"] = flops / out["dram_bytes"].where(out["dram_bytes"] > 0)
    out["tflops"] = flops / secs / 1e12
    out["gbps"] = out["dram_bytes"] / secs / 1e9


def _join_occupancy(out: pd.DataFrame, kernels: pd.DataFrame,
                    meta: Mapping[str, Any] | None) -> pd.DataFrame:
    """Theoretical occupancy (percent) and its limiter of each launch's configuration, by
    :func:`hookmagic.analysis.occupancy.theoretical_occupancy` on its device's limits."""
    out["theoretical_occupancy_pct"] = np.nan
    out["limiter"] = ""
    need = {"correlation", "device", "block_x", "block_y", "block_z", "registers",
            "static_smem", "dynamic_smem"}
    if kernels is None or kernels.empty or not need <= set(kernels.columns):
        return out
    k = kernels.drop_duplicates("correlation").set_index("correlation")
    k = k.reindex(out["correlation_id"].to_numpy())
    known = k["device"].notna().to_numpy()
    for dev in pd.unique(k.loc[known, "device"]):
        sel = known & (k["device"] == dev).to_numpy()
        rows = k[sel]
        threads = (rows["block_x"].astype(np.int64) * rows["block_y"].astype(np.int64)
                   * rows["block_z"].astype(np.int64))
        smem = rows["static_smem"].astype(np.int64) + rows["dynamic_smem"].astype(np.int64)
        occ = theoretical_occupancy(threads.to_numpy(), rows["registers"].astype(np.int64).to_numpy(),
                                    smem.to_numpy(), device_limits(meta, int(dev)))
        out.loc[sel, "theoretical_occupancy_pct"] = occ["occupancy"].to_numpy() * 100
        out.loc[sel, "limiter"] = occ["limiter"].to_numpy()
    return out


def _with_units(frame: pd.DataFrame) -> pd.DataFrame:
    frame.attrs["units"] = {c: UNITS[c] for c in frame.columns if c in UNITS}
    return frame


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _pc(pct: float) -> str:
    """A percentage already in percent (91.3) as the findings write it ("91%")."""
    return percent(pct / 100, 0)


def counter_costs(trace: Any) -> dict[str, Any]:
    """What collecting a trace's counters covered and cost, for its summary; empty without
    counters.

    ``kernels`` (launches with counter values), ``launches`` (kernel launches in the trace),
    ``metrics`` (distinct metrics with values), and from ``meta["counters"]`` where the capture
    recorded them: ``passes`` (replay passes), ``replay_wall_s`` (wall time of the counted
    capture, replays included), ``evaluate_s`` (stopping and evaluating them), ``replay`` (the replay mode, e.g. ``"kernel"``), and, when not
    zero, ``dropped`` (launches past the capture's counting limit, not counted) and
    ``unmatched`` (counted ranges matched to no launch).
    """
    rows = counter_rows(trace)
    if rows.empty:
        return {}
    info = (getattr(trace, "meta", None) or {}).get("counters")
    info = info if isinstance(info, Mapping) else {}
    matched = rows["correlation_id"] >= 0
    out: dict[str, Any] = {"kernels": int(rows.loc[matched, "correlation_id"].nunique()),
                           "launches": len(table(trace, "kernels")),
                           "metrics": int(rows["metric"].nunique())}
    passes = _num(info.get("passes"))
    if np.isfinite(passes) and passes >= 0:
        out["passes"] = int(passes)
    for key in ("replay_wall_s", "evaluate_s"):
        secs = _num(info.get(key))
        if np.isfinite(secs) and secs >= 0:
            out[key] = secs
    if info.get("replay"):
        out["replay"] = str(info["replay"])
    for key in ("dropped", "unmatched"):
        n = _num(info.get(key))
        if np.isfinite(n) and n > 0:
            out[key] = int(n)
    return out
