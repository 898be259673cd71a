"""A diagnosis of a trace in plain words, with the numbers behind it and what to try.

The patterns are those a TensorRT-style profiling review looks for:

- dominated by a few compute kernels -> precision (Tensor Cores), batch size, their occupancy;
- dominated by host/device transfers -> pinned memory, asynchronous copies that overlap
  compute, keeping data on the device;
- launch-bound (the GPU waits for the host between many short kernels) -> CUDA graphs,
  fusion, larger batches;
- synchronisation stalls (the host waits for the GPU, which then waits for the host) ->
  fewer synchronising calls;
- diverse operators (time spread over many different kernels) -> fusion, whole-network
  precision, a layer-by-layer profile;
- dominant kernels that cannot fill the GPU (low theoretical occupancy or fewer blocks than
  the GPU holds) -> batch size, block size, registers, shared memory;
- with hardware counters, what bounds each heavy kernel (:func:`hookmagic.analysis.counters.classify`):
  memory-bound (DRAM near its peak) -> fewer bytes; compute-bound (SM or tensor pipe near its
  peak) -> Tensor Cores or less math; latency-bound (neither busy) -> more work in flight; low
  achieved occupancy -> the resource that limits it. A trace without counters gets none of these.

Each pattern is one small rule (:data:`RULES`): a function of the trace's :class:`Facts`
that returns a finding or None. Add a pattern by writing a rule and listing it there.
Thresholds are module constants so that tests and users can see them. Pure functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from types import SimpleNamespace
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd

from hookmagic.analysis.copies import copy_bandwidth, tiny_kernels
from hookmagic.analysis.counters import BUSY_PCT, LOW_OCCUPANCY, counters_by_kernel, trace_counters
from hookmagic.analysis.tables import table
from hookmagic.analysis.idle import idle_summary
from hookmagic.analysis.kernels import kernel_summary
from hookmagic.analysis.occupancy import kernel_occupancy
from hookmagic.common.format import percent, short

FEW_KERNELS_TOP = 3            #: "a few" kernels
FEW_KERNELS_SHARE = 0.60       #: ... holding this share of kernel time
TRANSFER_SHARE = 0.30          #: copies' share of GPU work time
IDLE_SHARE = 0.30              #: GPU idle share of the capture for launch-bound
SHORT_KERNEL_NS = 10_000       #: a "tiny" kernel (a launch costs a few microseconds)
TINY_LAUNCH_SHARE = 0.50       #: share of launches that are tiny for launch-bound
SYNC_SHARE = 0.20              #: idle time after synchronisation, share of the capture
DIVERSE_NAMES = 20             #: distinct kernels for "diverse operators"
DIVERSE_TOP5_SHARE = 0.50      #: ... with the top five holding less than this
HEAVY_KERNEL_SHARE = 0.10      #: a kernel worth checking for occupancy and its bound

OCCUPANCY_ADVICE = ("Give each launch more blocks (a larger batch size); where registers "
                    "limit, cap them (__launch_bounds__, maxrregcount); where shared memory "
                    "limits, use smaller tiles; where warps limit with small blocks, use "
                    "larger blocks.")

COLUMNS = ["pattern", "severity", "finding", "evidence", "advice", "metric"]
_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms" if ns >= 1e5 else f"{ns / 1e3:,.1f} us"


def _pct(x: float) -> str:
    """Shares in findings: whole percents, two decimals under 1%."""
    return percent(x, 0, small_digits=2)


Finding = dict[str, Any]


@dataclass
class Facts:
    """What the rules read, each number computed once (the costlier ones on first use)."""

    trace: Any

    def __post_init__(self) -> None:
        self.kernels = table(self.trace, "kernels")
        self.memcpy = table(self.trace, "memcpy")
        self.memset = table(self.trace, "memset")
        self.kernel_ns = int(self.kernels["duration_ns"].sum()) if len(self.kernels) else 0
        self.copy_ns = int(self.memcpy["duration_ns"].sum()) if len(self.memcpy) else 0
        memset_ns = int(self.memset["duration_ns"].sum()) if len(self.memset) else 0
        self.work_ns = self.kernel_ns + self.copy_ns + memset_ns
        self.n_launch = len(self.kernels)
        self.copy_part = self.copy_ns / self.work_ns if self.work_ns else 0.0

    @property
    def empty(self) -> bool:
        """No kernels, copies or memsets at all."""
        return self.work_ns == 0 and len(self.kernels) + len(self.memcpy) + len(self.memset) == 0

    @cached_property
    def summary(self) -> pd.DataFrame:
        """Kernels by name, largest share first (:func:`kernel_summary`)."""
        return kernel_summary(self.trace)

    @cached_property
    def idle(self) -> pd.DataFrame:
        """Idle time per device and stream (:func:`idle_summary`)."""
        return idle_summary(self.trace)

    @cached_property
    def counters(self) -> pd.DataFrame:
        """Hardware counters per kernel name (:func:`counters_by_kernel`); empty without them."""
        return counters_by_kernel(trace_counters(self.trace))

    def heavy_counted(self, bound: str) -> pd.DataFrame:
        """The heavy kernels (the five largest holding :data:`HEAVY_KERNEL_SHARE` of kernel
        time or more) whose counters say ``bound``, with their ``share``, largest first."""
        if not len(self.counters) or not len(self.summary):
            return self.counters.iloc[0:0].assign(share=pd.Series(dtype=float))
        heavy = self.summary[self.summary["share"] >= HEAVY_KERNEL_SHARE].head(5)
        mine = self.counters[self.counters["bound"] == bound]
        return mine.merge(heavy[["name", "share"]], on="name").sort_values(
            "share", ascending=False, kind="stable").reset_index(drop=True)

    @property
    def idle_share(self) -> float:
        span = self.idle["span_ns"].sum() if len(self.idle) else 0
        return float(self.idle["idle_ns"].sum() / span) if span else 0.0


# -- the rules ---------------------------------------------------------------------------------

def few_kernels(f: Facts) -> Optional[Finding]:
    """A few compute kernels hold most of the kernel time."""
    if not len(f.summary):
        return None
    top = f.summary.head(FEW_KERNELS_TOP)
    top_share = float(top["share"].sum())
    kernel_part = f.kernel_ns / f.work_ns if f.work_ns else 0.0
    if top_share < FEW_KERNELS_SHARE or kernel_part < 0.5:
        return None
    names = "; ".join(f"{short(n)} {_pct(s)}" for n, s in zip(top["name"], top["share"]))
    fp32 = any(("sgemm" in n.lower() or "f32" in n.lower() or "fp32" in n.lower())
               for n in top["name"])
    advice = ("Speed these kernels up and the whole run follows: run them in lower "
              "precision (FP16/BF16, or INT8/FP8 where accuracy allows) so they use "
              "Tensor Cores; a larger batch gives each launch more work; check their "
              "occupancy below.")
    if fp32:
        advice += " At least one of them runs in FP32."
    return {
        "pattern": "few-kernels", "severity": "high" if top_share >= 0.8 else "medium",
        "finding": f"{len(top)} kernel{'s' if len(top) > 1 else ''} take "
                   f"{_pct(top_share)} of all kernel time.",
        "evidence": f"{names}; kernels are {_pct(kernel_part)} of GPU work time "
                    f"({_ms(f.kernel_ns)} of {_ms(f.work_ns)}).",
        "advice": advice, "metric": top_share}


def transfers(f: Facts) -> Optional[Finding]:
    """Host/device copies take a large share of the GPU's working time."""
    if f.copy_part < TRANSFER_SHARE:
        return None
    bw = copy_bandwidth(f.trace)
    host = bw[bw["kind"].isin(["htod", "dtoh"])]
    pageable = int(host.loc[host["host_memory"] == "pageable", "bytes"].sum())
    host_bytes = int(host["bytes"].sum())
    rates = "; ".join(
        f"{k} {hm or ''} {r:.1f} GB/s".replace("  ", " ")
        + (f" of {p:.0f} GB/s ({src.split(':')[0]})" if np.isfinite(p) else "")
        for k, hm, r, p, src in zip(bw["kind"], bw["host_memory"], bw["achieved_gbps"],
                                    bw["peak_gbps"], bw["peak_source"]))
    advice = ("Copy from pinned (page-locked) host memory (PyTorch: pin_memory=True in the "
              "DataLoader or tensor.pin_memory(); CuPy: cupyx.empty_pinned) with "
              "asynchronous copies (non_blocking=True, cudaMemcpyAsync) on their own stream "
              "so they overlap compute; keep data on the GPU between steps and merge many "
              "small copies into few large ones.")
    evidence = (f"copies take {_pct(f.copy_part)} of GPU work time ({_ms(f.copy_ns)}, "
                f"{len(f.memcpy):,} copies, {int(f.memcpy['bytes'].sum()) / 1e6:,.1f} MB); {rates}")
    if host_bytes:
        evidence += f"; {_pct(pageable / host_bytes)} of host bytes from pageable memory"
    return {
        "pattern": "transfers", "severity": "high" if f.copy_part >= 0.5 else "medium",
        "finding": f"Host/device transfers take {_pct(f.copy_part)} of the GPU's working time.",
        "evidence": evidence + ".", "advice": advice, "metric": f.copy_part}


def launch_bound(f: Facts) -> Optional[Finding]:
    """The GPU idles between many short kernels, waiting for the host to launch them."""
    idle = f.idle
    if not len(idle):
        return None
    span = float(idle["span_ns"].sum())
    idle_ns = float(idle["idle_ns"].sum())
    idle_share = idle_ns / span if span else 0.0
    host_launch = float(idle["host_ns"].sum() + idle["launch_ns"].sum())
    sync_bound = float(idle["sync_bound_ns"].sum())
    if idle_share < IDLE_SHARE or host_launch - sync_bound < 0.5 * idle_ns:
        return None
    n_launch = f.n_launch
    tiny = tiny_kernels(f.trace, SHORT_KERNEL_NS)
    tiny_share = float(tiny["count"].sum()) / n_launch if n_launch else 0.0
    median_kernel = float(np.median(f.kernels["duration_ns"].to_numpy())) if n_launch else 0.0
    if tiny_share < TINY_LAUNCH_SHARE and median_kernel >= SHORT_KERNEL_NS:
        return None
    lat = idle["launch_latency_p50_ns"].dropna()
    lat_text = f"; median launch latency {_ms(float(lat.median()))}" if len(lat) else ""
    return {
        "pattern": "launch-bound", "severity": "high" if idle_share >= 0.5 else "medium",
        "finding": f"Launch-bound: the GPU is idle {_pct(idle_share)} of the time, "
                   f"waiting for the host to launch {n_launch:,} mostly short kernels.",
        "evidence": f"idle {_ms(idle_ns)} of {_ms(span)}, of which "
                    f"{_ms(host_launch)} host-side or launch latency; "
                    f"{_pct(tiny_share)} of kernels shorter than "
                    f"{SHORT_KERNEL_NS / 1000:g} us; median kernel "
                    f"{_ms(median_kernel)}{lat_text}.",
        "advice": "Capture the repeated launches in a CUDA graph (torch.cuda.CUDAGraph, "
                  "torch.compile(mode=\"reduce-overhead\"), trtexec --useCudaGraph) so "
                  "one launch replays them all; fuse small kernels (torch.compile, "
                  "TensorRT); raise the batch size so each launch does more work.",
        "metric": idle_share}


def synchronisation(f: Facts) -> Optional[Finding]:
    """The GPU sits idle after the host waited for it (synchronising calls in the loop)."""
    idle = f.idle
    if not len(idle):
        return None
    span = float(idle["span_ns"].sum())
    sync_bound = float(idle["sync_bound_ns"].sum())
    if not span or sync_bound / span < SYNC_SHARE:
        return None
    return {
        "pattern": "synchronisation",
        "severity": "high" if sync_bound / span >= 0.4 else "medium",
        "finding": f"Synchronisation stalls: {_pct(sync_bound / span)} of the capture the "
                   "GPU sat idle after the host waited for it.",
        "evidence": f"{_ms(sync_bound)} of idle time in gaps that follow a synchronising "
                    f"call; {_ms(float(idle['sync_ns'].sum()))} with the host inside one.",
        "advice": "Remove synchronising calls from the loop: .item(), .cpu(), .numpy(), "
                  "printing tensors, torch.cuda.synchronize(), cudaMemcpy without Async; "
                  "synchronise once per step, or wait on CUDA events for what is needed.",
        "metric": sync_bound / span}


def diverse_operators(f: Facts) -> Optional[Finding]:
    """Kernel time is spread over many different kernels."""
    summary = f.summary
    if len(summary) < DIVERSE_NAMES:
        return None
    top5 = float(summary.head(5)["share"].sum())
    if top5 >= DIVERSE_TOP5_SHARE:
        return None
    return {
        "pattern": "diverse-operators", "severity": "medium",
        "finding": f"Time is spread over {len(summary):,} different kernels; no single "
                   "kernel is worth tuning on its own.",
        "evidence": f"the five largest hold {_pct(top5)} of kernel time; the largest "
                    f"{short(str(summary['name'].iloc[0]))} holds "
                    f"{_pct(float(summary['share'].iloc[0]))}.",
        "advice": "Fuse operators (torch.compile, TensorRT layer fusion, fused attention "
                  "and optimizers), lower the precision of the whole network, and "
                  "profile layer by layer (%trtprofile) to find the costly layers.",
        "metric": 1.0 - top5}


def low_occupancy(f: Facts) -> Optional[Finding]:
    """Heavy kernels that cannot fill the GPU (low occupancy, or less than one wave)."""
    summary = f.summary
    heavy = summary[summary["share"] >= HEAVY_KERNEL_SHARE].head(5) if len(summary) else summary
    if not len(heavy):
        return None
    sub = f.kernels[f.kernels["name"].isin(heavy["name"])]
    occ = kernel_occupancy(SimpleNamespace(kernels=sub, meta=getattr(f.trace, "meta", {})))
    occ = occ[occ["occupancy"].notna()]
    if not len(occ):
        return None
    by_name = occ.sort_values("total_ns", ascending=False).groupby("name", sort=False).head(1)
    small_grid = by_name["waves"].fillna(np.inf) < 1.0
    low = by_name[(by_name["occupancy"] < LOW_OCCUPANCY) | small_grid]
    if len(f.counters):
        # a kernel whose achieved occupancy was measured is judged by it (achieved_occupancy);
        # a grid smaller than one wave stays here, as achieved occupancy counts active SMs only
        measured = f.counters.loc[f.counters["occupancy_pct"].notna(), "name"]
        low = low[~low["name"].isin(measured) | small_grid.loc[low.index]]
    if not len(low):
        return None
    parts = []
    for _, r in low.iterrows():
        waves = (f", grid {int(r['grid_blocks']):,} blocks = {r['waves']:.2f} waves"
                 if np.isfinite(r["waves"]) else "")
        parts.append(f"{short(str(r['name']), 40)}: occupancy {_pct(r['occupancy'])} "
                     f"limited by {r['limiter']} ({r['threads_per_block']} threads, "
                     f"{r['registers']} regs, {r['smem_per_block']:,} B smem)"
                     f"{waves}")
    share = float(heavy[heavy["name"].isin(low["name"])]["share"].sum())
    return {
        "pattern": "low-occupancy", "severity": "medium",
        "finding": f"{len(low)} heavy kernel{'s' if len(low) > 1 else ''} "
                   f"({_pct(share)} of kernel time) cannot fill the GPU.",
        "evidence": "; ".join(parts) + f" (limits: {low['limits_source'].iloc[0]}).",
        "advice": OCCUPANCY_ADVICE,
        "metric": 1.0 - float(low["occupancy"].min())}


# -- the rules that read hardware counters (none fires on a trace without them) -----------------

def _each(rows: pd.DataFrame) -> str:
    """``name (share of kernel time): bound_reason; ...`` for the evidence."""
    return "; ".join(f"{short(str(r['name']), 40)} ({_pct(r['share'])} of kernel time): "
                     f"{r['bound_reason']}" + _traffic(r) for _, r in rows.iterrows())


def _traffic(r: pd.Series) -> str:
    parts = []
    if np.isfinite(r["gbps"]):
        parts.append(f"{r['gbps']:,.0f} GB/s from DRAM")
    if np.isfinite(r["tflops"]):
        parts.append(f"{_g(r['tflops'])} TFLOP/s")
    if np.isfinite(r["intensity"]):
        parts.append(f"{_g(r['intensity'])} FLOP/byte")
    return f", {', '.join(parts)}" if parts else ""


def _g(x: float) -> str:
    """Three significant digits, without an exponent from 0.001 up."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _judged(rows: pd.DataFrame, column: str) -> str:
    """The pattern's number in the finding: ``91%`` for one kernel, ``up to 91%`` for more."""
    top = float(rows[column].max())
    return ("" if len(rows) == 1 else "up to ") + percent(top / 100, 0)


def _kernels(rows: pd.DataFrame) -> str:
    n = len(rows)
    return (f"{short(str(rows['name'].iloc[0]), 40)} ({_pct(float(rows['share'].iloc[0]))} of "
            "kernel time)" if n == 1 else
            f"{n} heavy kernels ({_pct(float(rows['share'].sum()))} of kernel time)")


def memory_bound(f: Facts) -> Optional[Finding]:
    """Heavy kernels whose DRAM throughput is near its peak (hardware counters)."""
    rows = f.heavy_counted("memory-bound")
    if not len(rows):
        return None
    return {
        "pattern": "memory-bound", "severity": "medium",
        "finding": f"Memory-bound: {_judged(rows, 'dram_pct')} of DRAM peak — {_kernels(rows)}.",
        "evidence": _each(rows) + ".",
        "advice": "These kernels move data as fast as DRAM allows, so only moving fewer bytes "
                  "speeds them up: fuse them with their neighbours (torch.compile, TensorRT) so "
                  "intermediates stay on chip, keep tensors in a narrower type (FP16/BF16/FP8, "
                  "INT8), and reuse operands from shared memory or L2 (tiling) instead of "
                  "re-reading them.",
        "metric": float(rows["dram_pct"].max()) / 100}


def compute_bound(f: Facts) -> Optional[Finding]:
    """Heavy kernels whose SM or tensor pipe is near its peak (hardware counters)."""
    rows = f.heavy_counted("compute-bound")
    if not len(rows):
        return None
    tensor = rows["tensor_pipe_pct"].fillna(0) >= BUSY_PCT
    if tensor.all():
        what = f"tensor pipe {_judged(rows, 'tensor_pipe_pct')}"
        advice = ("The Tensor Cores are busy: the remaining gains are less math (a smaller "
                  "model, structured sparsity) or a narrower type with a higher peak (FP8, "
                  "INT8 where accuracy allows).")
    else:
        what = f"SM {_judged(rows, 'sm_pct')} of peak"
        advice = ("The SMs are busy on CUDA-core math: move it to Tensor Cores (FP16/BF16 "
                  "inputs, or TF32 for FP32 matmuls: torch.backends.cuda.matmul.allow_tf32), "
                  "or do less of it.")
    return {
        "pattern": "compute-bound", "severity": "info" if tensor.all() else "medium",
        "finding": f"Compute-bound: {what} — {_kernels(rows)}.",
        "evidence": _each(rows) + ".", "advice": advice,
        "metric": float(np.nanmax(rows[["sm_pct", "tensor_pipe_pct"]].to_numpy(float))) / 100}


def latency_bound(f: Facts) -> Optional[Finding]:
    """Heavy kernels that keep neither the SMs nor DRAM busy (hardware counters)."""
    rows = f.heavy_counted("latency-bound")
    if not len(rows):
        return None
    busiest = np.nanmax(rows[["sm_pct", "dram_pct"]].to_numpy(float), axis=1)
    return {
        "pattern": "latency-bound", "severity": "medium",
        "finding": f"Latency-bound: neither the SMs nor DRAM reach {BUSY_PCT:.0f}% of peak — "
                   f"{_kernels(rows)}.",
        "evidence": _each(rows) + ".",
        "advice": "The kernels wait (on memory latency, dependencies or synchronisation) with "
                  "too little independent work to hide it: put more work in flight (more "
                  "blocks: a larger batch; more independent loads and math per thread), make "
                  "memory accesses coalesced, and look at the warp stall reasons in Nsight "
                  "Compute for the kind of wait.",
        "metric": 1.0 - float(np.max(busiest)) / 100}


def achieved_occupancy(f: Facts) -> Optional[Finding]:
    """Heavy kernels with low achieved occupancy and neither unit busy (hardware counters)."""
    rows = f.heavy_counted("low occupancy")
    if not len(rows):
        return None
    low = rows.sort_values("occupancy_pct", kind="stable").iloc[0]
    limiter = str(low["limiter"] or "")
    why = f", limited by {limiter}" if limiter and limiter != "unknown" else ""
    lowest = percent(float(low["occupancy_pct"]) / 100, 0)
    return {
        "pattern": "low-achieved-occupancy", "severity": "medium",
        "finding": f"Low occupancy: {'' if len(rows) == 1 else 'down to '}{lowest}{why} — "
                   f"{_kernels(rows)}.",
        "evidence": _each(rows) + ".",
        "advice": OCCUPANCY_ADVICE,
        "metric": 1.0 - float(low["occupancy_pct"]) / 100}


#: the patterns looked for, in this order (the result is sorted by severity afterwards)
RULES: tuple[Callable[[Facts], Optional[Finding]], ...] = (
    few_kernels, transfers, launch_bound, synchronisation, diverse_operators, low_occupancy,
    memory_bound, compute_bound, latency_bound, achieved_occupancy)
#: the rules judged on the capture's timeline, left out for captures with counters
TIMELINE_RULES = (launch_bound, synchronisation)


def nothing_captured(f: Facts) -> Finding:
    """The finding for a trace without GPU work."""
    meta = getattr(f.trace, "meta", None) or {}
    reason = meta.get("reason") or "the capture holds no kernels, copies or memsets"
    return {"pattern": "nothing-captured", "severity": "info",
            "finding": "No GPU work was captured, so there is nothing to diagnose.",
            "evidence": str(reason),
            "advice": "Run the cell on a machine with an NVIDIA GPU and make sure "
                      "it launches GPU work (tensors on the device).",
            "metric": 0.0}


def balanced(f: Facts) -> Finding:
    """The finding when no rule fired."""
    return {
        "pattern": "balanced", "severity": "info",
        "finding": "No dominant bottleneck pattern: the GPU is busy and time is spread "
                   "over a handful of kernels.",
        "evidence": f"{f.n_launch:,} kernels, {_ms(f.kernel_ns)} kernel time, copies "
                    f"{_pct(f.copy_part)} of GPU work, GPU idle {_pct(f.idle_share)}.",
        "advice": "Look at the flame graph for the costliest call paths, and compare "
                  "before/after a change with Trace.diff().",
        "metric": 0.0}


def diagnose(trace: Any) -> pd.DataFrame:
    """Findings about ``trace``: what bounds it, the evidence in numbers, and advice.

    Returns a DataFrame with ``pattern`` (few-kernels, transfers, launch-bound,
    synchronisation, diverse-operators, low-occupancy, and with hardware counters
    memory-bound, compute-bound, latency-bound, low-achieved-occupancy; balanced,
    nothing-captured),
    ``severity`` (high, medium, info), ``finding`` and ``advice`` (sentences), ``evidence``
    (the numbers) and ``metric`` (the number the pattern was judged on, 0..1), most severe
    first.
    """
    facts = Facts(trace)
    if facts.empty:
        return _frame([nothing_captured(facts)])
    rules = RULES
    if "counters" in (getattr(trace, "meta", None) or {}):
        # kernel replay serialises the launches and stretches the capture: its timeline says
        # nothing about launch gaps or waiting
        rules = tuple(r for r in RULES if r not in TIMELINE_RULES)
    findings = [found for rule in rules if (found := rule(facts)) is not None]
    return _frame(findings or [balanced(facts)])


def _frame(findings: list[Finding]) -> pd.DataFrame:
    out = pd.DataFrame(findings, columns=COLUMNS)
    order = out["severity"].map(_SEVERITY_ORDER).fillna(9)
    return (out.assign(_o=order).sort_values(["_o", "metric"], ascending=[True, False],
                                               kind="stable")
            .drop(columns="_o").reset_index(drop=True))
