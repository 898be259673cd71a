"""Achieved FLOP/s and bytes/s of captured kernels from their declared work, placed on a roofline.

Work is declared per launch — by :mod:`hookmagic.kernels` for its own kernels, by user code with
``hookmagic.kernels.record(kernel, flops, dram_bytes)`` — and stored in ``trace.meta["work"]`` as
records ``{"kernel": name, "flops": F, "dram_bytes": B, "args": {...}}``. Captured launches are
joined to it by kernel name: each name's FLOPs and bytes per launch (the mean of its declared
launches) times its captured launches, over its captured GPU time.

The DRAM bytes are compulsory traffic (each operand once), so the arithmetic intensity is the
kernel's best case; a kernel that re-reads operands from DRAM moves more than that.

A trace with hardware counters places its kernels by what they measured instead
(:func:`measured_rates`): FLOPs counted from executed instructions and the bytes DRAM actually
moved (:mod:`hookmagic.analysis.counters`).

Pure functions: no plotting, no I/O.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from hookmagic.analysis.counters import counters_by_kernel, trace_counters
from hookmagic.analysis.tables import table

#: Datasheet peaks (dense, no sparsity). FLOP/s for float32 (CUDA cores), float16/bfloat16/int8
#: (Tensor Cores; int8 in OP/s), bytes/s for DRAM.
PEAKS: dict[str, dict[str, Any]] = {
    "H100 SXM": {"float32": 67e12, "float16": 989.4e12, "bfloat16": 989.4e12, "int8": 1978.9e12,
                 "dram": 3.35e12, "source": "NVIDIA H100 Tensor Core GPU datasheet (SXM5), dense"},
    "H100 PCIe": {"float32": 51e12, "float16": 756e12, "bfloat16": 756e12, "int8": 1513e12,
                  "dram": 2.0e12, "source": "NVIDIA H100 Tensor Core GPU datasheet (PCIe), dense"},
    "H200": {"float32": 67e12, "float16": 989.4e12, "bfloat16": 989.4e12, "int8": 1978.9e12,
             "dram": 4.8e12, "source": "NVIDIA H200 Tensor Core GPU datasheet (SXM), dense"},
    "A100 SXM": {"float32": 19.5e12, "float16": 312e12, "bfloat16": 312e12, "int8": 624e12,
                 "dram": 2.039e12, "source": "NVIDIA A100 datasheet (SXM 80GB), dense"},
}
PRECISIONS = ("float32", "float16", "bfloat16", "int8")


def peaks_for(gpu_name: str | None) -> dict[str, Any] | None:
    """The datasheet peaks of a GPU named like ``'NVIDIA H100 80GB HBM3'`` (None when unknown)."""
    name = (gpu_name or "").upper()
    if "H200" in name:
        return {"gpu": "H200", **PEAKS["H200"]}
    if "H100" in name:
        key = "H100 PCIe" if "PCIE" in name else "H100 SXM"
        return {"gpu": key, **PEAKS[key]}
    if "A100" in name:
        return {"gpu": "A100 SXM", **PEAKS["A100 SXM"]}
    return None


def peaks_table(peaks: Mapping[str, Any]) -> pd.DataFrame:
    """One row per resource: ``resource, peak, unit, source``."""
    rows = [{"resource": f"{p} {'Tensor Core' if p != 'float32' else 'CUDA core'}",
             "peak": peaks[p] / 1e12, "unit": "TOP/s" if p == "int8" else "TFLOP/s", "source": peaks["source"]}
            for p in PRECISIONS if p in peaks]
    rows.append({"resource": "DRAM", "peak": peaks["dram"] / 1e12, "unit": "TB/s", "source": peaks["source"]})
    return pd.DataFrame(rows)


def declared_work(work: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Per kernel name: ``declared`` launches, ``flops_per_launch``, ``bytes_per_launch`` (means),
    and ``precision`` (the ``dtype`` argument where declared)."""
    w = pd.DataFrame([{"name": r["kernel"], "flops": float(r["flops"]), "dram_bytes": float(r["dram_bytes"]),
                       "precision": (r.get("args") or {}).get("dtype", "")} for r in work])
    if w.empty:
        return pd.DataFrame(columns=["name", "declared", "flops_per_launch", "bytes_per_launch", "precision"])
    return (w.groupby("name", sort=False)
             .agg(declared=("flops", "size"), flops_per_launch=("flops", "mean"),
                  bytes_per_launch=("dram_bytes", "mean"), precision=("precision", "first"))
             .reset_index())


RATE_COLUMNS = ["name", "step", "launches", "mean_ns", "flops", "dram_bytes", "tflops", "gbps",
                "intensity", "precision", "registers", "smem_per_block", "threads_per_block"]


def kernel_rates(trace: Any, work: Iterable[Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Achieved rates of every captured kernel with declared work, in capture order.

    Columns: ``name, step`` (innermost range of its first launch), ``launches, mean_ns, flops,
    dram_bytes, tflops`` (achieved TFLOP/s, TOP/s for int8), ``gbps`` (achieved GB/s of compulsory
    traffic), ``intensity`` (FLOP per byte), ``precision, registers, smem_per_block, threads_per_block``.
    """
    k = table(trace, "kernels")
    w = declared_work(work if work is not None else (getattr(trace, "meta", {}) or {}).get("work", []))
    if k.empty or w.empty:
        return pd.DataFrame(columns=RATE_COLUMNS)
    k = k.sort_values("start_ns", kind="stable")
    ranges = table(trace, "ranges")
    step_of = dict(zip(ranges["range_id"], ranges["name"])) if not ranges.empty else {}
    g = k.groupby("name", sort=False)
    first = g.head(1).set_index("name")
    out = pd.DataFrame({"launches": g.size(), "total_ns": g["duration_ns"].sum()}).reset_index()
    out = out.merge(w, on="name", how="inner")
    out["step"] = [step_of.get(first.loc[n, "range_id"], "") for n in out["name"]]
    out["mean_ns"] = out["total_ns"] / out["launches"]
    out["flops"] = out["flops_per_launch"] * out["launches"]
    out["dram_bytes"] = out["bytes_per_launch"] * out["launches"]
    secs = out["total_ns"] / 1e9
    out["tflops"] = np.where(secs > 0, out["flops"] / secs / 1e12, np.nan)
    out["gbps"] = np.where(secs > 0, out["dram_bytes"] / secs / 1e9, np.nan)
    out["intensity"] = out["flops_per_launch"] / out["bytes_per_launch"].replace(0, np.nan)
    out["registers"] = [int(first.loc[n, "registers"]) for n in out["name"]]
    out["smem_per_block"] = [int(first.loc[n, "static_smem"]) + int(first.loc[n, "dynamic_smem"]) for n in out["name"]]
    out["threads_per_block"] = [int(first.loc[n, "block_x"]) * int(first.loc[n, "block_y"]) * int(first.loc[n, "block_z"])
                                for n in out["name"]]
    return out[RATE_COLUMNS]


def measured_rates(trace: Any) -> pd.DataFrame:
    """Achieved rates of every kernel with hardware counters, as :func:`kernel_rates` gives them
    from declared work, most GPU time first: the same columns, from
    :func:`hookmagic.analysis.counters.counters_by_kernel` (FLOPs counted from executed
    instructions, DRAM bytes read + written as measured, each launch's duration in the trace),
    plus ``bound`` and ``bound_reason`` from the counters. ``precision`` is the one with the most
    FLOPs; a kernel with no FLOP counters collected has NaN FLOPs and intensity."""
    by_name = counters_by_kernel(trace_counters(trace))
    cols = RATE_COLUMNS + ["bound_counters", "bound_reason"]
    if by_name.empty:
        return pd.DataFrame(columns=cols)
    k = table(trace, "kernels").sort_values("start_ns", kind="stable")
    first = k.groupby("name", sort=False).head(1).set_index("name")
    ranges = table(trace, "ranges")
    step_of = dict(zip(ranges["range_id"], ranges["name"])) if not ranges.empty else {}
    out = by_name.rename(columns={"bound": "bound_counters"}).copy()
    known = out["name"].isin(first.index)

    def launch(column: str, fill: Any) -> list[Any]:
        return [first.loc[n, column] if ok else fill for n, ok in zip(out["name"], known)]

    out["step"] = [step_of.get(r, "") for r in launch("range_id", -1)]
    out["registers"] = [int(v) for v in launch("registers", 0)]
    out["smem_per_block"] = [int(a) + int(b) for a, b in
                             zip(launch("static_smem", 0), launch("dynamic_smem", 0))]
    out["threads_per_block"] = [int(x) * int(y) * int(z) for x, y, z in
                                zip(launch("block_x", 0), launch("block_y", 0), launch("block_z", 0))]
    return out[cols].reset_index(drop=True)


def range_rates(trace: Any, work: Mapping[str, Mapping[str, float]] | None = None) -> pd.DataFrame:
    """Achieved rates per ``hookmagic.range``: for work that is one operation however many kernels
    carry it (a torch eager chain, a library call), declared per range name rather than per kernel.

    ``work`` (default ``trace.meta["range_work"]``) maps a range name to the totals of the work done
    inside all ranges of that name: ``{"flops": F, "dram_bytes": B, "calls": n}`` (``calls``
    optional). The GPU time is the sum of the durations of the kernels, copies and memsets launched
    inside those ranges (innermost range at launch; gaps between them are not counted): a torch
    ``copy_`` between device buffers is a copy, not a kernel.

    Columns, in the order the ranges first start: ``step, calls, kernels`` (kernel launches),
    ``copies`` (copies and memsets), ``kernel_names`` (distinct), ``gpu_ns, mean_ns`` (per call),
    ``flops, dram_bytes, tflops, gbps``.
    """
    cols = ["step", "calls", "kernels", "copies", "kernel_names", "gpu_ns", "mean_ns", "flops",
            "dram_bytes", "tflops", "gbps"]
    work = work if work is not None else (getattr(trace, "meta", {}) or {}).get("range_work", {})
    k, r = table(trace, "kernels"), table(trace, "ranges")
    moves = [t[["range_id", "duration_ns"]] for t in (table(trace, "memcpy"), table(trace, "memset"))
             if not t.empty and "range_id" in t]
    moves = pd.concat(moves, ignore_index=True) if moves else pd.DataFrame(
        {"range_id": pd.Series(dtype="int64"), "duration_ns": pd.Series(dtype="int64")})
    if not work or (k.empty and moves.empty) or r.empty:
        return pd.DataFrame(columns=cols)
    r = r.sort_values("start_ns", kind="stable")
    rows = []
    for name in dict.fromkeys(r["name"]):
        if name not in work:
            continue
        ids = r.loc[r["name"] == name, "range_id"]
        mine = k[k["range_id"].isin(ids)] if not k.empty else k
        moved = moves[moves["range_id"].isin(ids)]
        gpu_ns = float(mine["duration_ns"].sum()) + float(moved["duration_ns"].sum())
        w = work[name]
        calls = int(w.get("calls", len(ids)))
        secs = gpu_ns / 1e9
        rows.append({"step": name, "calls": calls, "kernels": len(mine), "copies": len(moved),
                     "kernel_names": mine["name"].nunique() if len(mine) else 0,
                     "gpu_ns": gpu_ns, "mean_ns": gpu_ns / calls if calls else np.nan,
                     "flops": float(w.get("flops", 0.0)), "dram_bytes": float(w.get("dram_bytes", 0.0)),
                     "tflops": float(w.get("flops", 0.0)) / secs / 1e12 if secs > 0 else np.nan,
                     "gbps": float(w.get("dram_bytes", 0.0)) / secs / 1e9 if secs > 0 else np.nan})
    return pd.DataFrame(rows, columns=cols)


def roofline(rates: pd.DataFrame, peaks: Mapping[str, Any]) -> pd.DataFrame:
    """Add each kernel's roof: ``roof_tflops = min(compute peak of its precision, intensity x DRAM
    bandwidth)``, ``bound`` ('memory' left of the ridge point, 'compute' right of it, 'unknown'
    for a precision without a peak in ``peaks`` or an unknown intensity) and ``of_roof``
    (achieved / roof)."""
    out = rates.copy()
    compute = out["precision"].map(lambda p: peaks.get(p or "float32", np.nan)).astype(float)
    mem = out["intensity"].astype(float) * float(peaks["dram"])
    out["roof_tflops"] = np.minimum(compute, mem) / 1e12
    out["bound"] = np.where(compute.isna() | mem.isna(), "unknown",
                            np.where(mem < compute, "memory", "compute"))
    out["of_roof"] = out["tflops"] / out["roof_tflops"]
    return out


def nvrtc_vs_capture(trace: Any) -> pd.DataFrame:
    """Registers and static shared memory per kernel as NVRTC reported them at compile time
    (``meta["nvrtc"]``) beside what the capture recorded for the launches; ``agree`` per row."""
    info = (getattr(trace, "meta", {}) or {}).get("nvrtc") or {}
    nv = pd.DataFrame(info.get("kernels", []))
    k = table(trace, "kernels")
    if nv.empty or k.empty:
        return pd.DataFrame(columns=["name", "nvrtc_registers", "captured_registers", "nvrtc_smem",
                                     "captured_static_smem", "agree"])
    cap = k.groupby("name", sort=False)[["registers", "static_smem"]].first().reset_index()
    out = nv.rename(columns={"kernel": "name", "registers": "nvrtc_registers", "smem_bytes": "nvrtc_smem"})
    out = out[["name", "nvrtc_registers", "nvrtc_smem", "spill_store_bytes"]].merge(
        cap.rename(columns={"registers": "captured_registers", "static_smem": "captured_static_smem"}),
        on="name", how="inner")
    out["agree"] = (out["nvrtc_registers"] == out["captured_registers"]) & (out["nvrtc_smem"] == out["captured_static_smem"])
    return out
