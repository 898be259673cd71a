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
  the GPU holds) -> batch size, block size, registers, shared memory.

Thresholds are module constants so that tests and users can see them. Pure function.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from hookmagic.analysis.copies import copy_bandwidth, tiny_kernels
from hookmagic.analysis.tables import table
from hookmagic.analysis.idle import idle_summary
from hookmagic.analysis.kernels import kernel_summary
from hookmagic.analysis.occupancy import kernel_occupancy

FEW_KERNELS_TOP = 3            #: "a few" kernels
FEW_KERNELS_SHARE = 0.60       #: ... holding this share of kernel time
TRANSFER_SHARE = 0.30          #: copies' share of GPU work time
IDLE_SHARE = 0.30              #: GPU idle share of the capture for launch-bound
SHORT_KERNEL_NS = 10_000       #: a "tiny" kernel (a launch costs a few microseconds)
TINY_LAUNCH_SHARE = 0.50       #: share of launches that are tiny for launch-bound
SYNC_SHARE = 0.20              #: idle time after synchronisation, share of the capture
DIVERSE_NAMES = 20             #: distinct kernels for "diverse operators"
DIVERSE_TOP5_SHARE = 0.50      #: ... with the top five holding less than this
LOW_OCCUPANCY = 0.25           #: theoretical occupancy considered low
HEAVY_KERNEL_SHARE = 0.10      #: a kernel worth checking for occupancy

COLUMNS = ["pattern", "severity", "finding", "evidence", "advice", "metric"]
_SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms" if ns >= 1e5 else f"{ns / 1e3:,.1f} us"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else f"{100 * x:.2f}%"


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def diagnose(trace: Any) -> pd.DataFrame:
    """Findings about ``trace``: what bounds it, the evidence in numbers, and advice.

    Returns a DataFrame with ``pattern`` (few-kernels, transfers, launch-bound,
    synchronisation, diverse-operators, low-occupancy, balanced, nothing-captured),
    ``severity`` (high, medium, info), ``finding`` and ``advice`` (sentences), ``evidence``
    (the numbers) and ``metric`` (the number the pattern was judged on, 0..1), most severe
    first.
    """
    findings: list[dict[str, Any]] = []
    kernels = table(trace, "kernels")
    memcpy = table(trace, "memcpy")
    memset = table(trace, "memset")
    kernel_ns = int(kernels["duration_ns"].sum()) if len(kernels) else 0
    copy_ns = int(memcpy["duration_ns"].sum()) if len(memcpy) else 0
    memset_ns = int(memset["duration_ns"].sum()) if len(memset) else 0
    work_ns = kernel_ns + copy_ns + memset_ns
    if work_ns == 0 and len(kernels) + len(memcpy) + len(memset) == 0:
        meta = getattr(trace, "meta", None) or {}
        reason = meta.get("reason") or "the capture holds no kernels, copies or memsets"
        return _frame([{"pattern": "nothing-captured", "severity": "info",
                        "finding": "No GPU work was captured, so there is nothing to diagnose.",
                        "evidence": str(reason),
                        "advice": "Run the cell on a machine with an NVIDIA GPU and make sure "
                                  "it launches GPU work (tensors on the device).",
                        "metric": 0.0}])

    summary = kernel_summary(trace)
    idle = idle_summary(trace)
    n_launch = len(kernels)

    # -- few compute kernels dominate ----------------------------------------------------------
    if len(summary):
        top = summary.head(FEW_KERNELS_TOP)
        top_share = float(top["share"].sum())
        kernel_part = kernel_ns / work_ns if work_ns else 0.0
        if top_share >= FEW_KERNELS_SHARE and kernel_part >= 0.5:
            names = "; ".join(f"{_short(n)} {_pct(s)}" for n, s in zip(top["name"], top["share"]))
            fp32 = any(("sgemm" in n.lower() or "f32" in n.lower() or "fp32" in n.lower())
                       for n in top["name"])
            advice = ("Speed these kernels up and the whole run follows: run them in lower "
                      "precision (FP16/BF16, or INT8/FP8 where accuracy allows) so they use "
                      "Tensor Cores; a larger batch gives each launch more work; check their "
                      "occupancy below.")
            if fp32:
                advice += " At least one of them runs in FP32."
            findings.append({
                "pattern": "few-kernels", "severity": "high" if top_share >= 0.8 else "medium",
                "finding": f"{len(top)} kernel{'s' if len(top) > 1 else ''} take "
                           f"{_pct(top_share)} of all kernel time.",
                "evidence": f"{names}; kernels are {_pct(kernel_part)} of GPU work time "
                            f"({_ms(kernel_ns)} of {_ms(work_ns)}).",
                "advice": advice, "metric": top_share})

    # -- host/device transfers dominate ------------------------------------------------------------
    copy_part = copy_ns / work_ns if work_ns else 0.0
    if copy_part >= TRANSFER_SHARE:
        bw = copy_bandwidth(trace)
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
        evidence = (f"copies take {_pct(copy_part)} of GPU work time ({_ms(copy_ns)}, "
                    f"{len(memcpy):,} copies, {int(memcpy['bytes'].sum()) / 1e6:,.1f} MB); {rates}")
        if host_bytes:
            evidence += f"; {_pct(pageable / host_bytes)} of host bytes from pageable memory"
        findings.append({
            "pattern": "transfers", "severity": "high" if copy_part >= 0.5 else "medium",
            "finding": f"Host/device transfers take {_pct(copy_part)} of the GPU's working time.",
            "evidence": evidence + ".", "advice": advice, "metric": copy_part})

    # -- launch-bound and synchronisation stalls ------------------------------------------------
    if len(idle):
        span = float(idle["span_ns"].sum())
        idle_ns = float(idle["idle_ns"].sum())
        idle_share = idle_ns / span if span else 0.0
        host_launch = float(idle["host_ns"].sum() + idle["launch_ns"].sum())
        sync_bound = float(idle["sync_bound_ns"].sum())
        tiny = tiny_kernels(trace, SHORT_KERNEL_NS)
        tiny_share = float(tiny["count"].sum()) / n_launch if n_launch else 0.0
        median_kernel = float(np.median(kernels["duration_ns"].to_numpy())) if n_launch else 0.0
        lat = idle["launch_latency_p50_ns"].dropna()
        lat_text = f"; median launch latency {_ms(float(lat.median()))}" if len(lat) else ""
        if (idle_share >= IDLE_SHARE and host_launch - sync_bound >= 0.5 * idle_ns
                and (tiny_share >= TINY_LAUNCH_SHARE or median_kernel < SHORT_KERNEL_NS)):
            findings.append({
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
                "metric": idle_share})
        if span and sync_bound / span >= SYNC_SHARE:
            findings.append({
                "pattern": "synchronisation",
                "severity": "high" if sync_bound / span >= 0.4 else "medium",
                "finding": f"Synchronisation stalls: {_pct(sync_bound / span)} of the capture the "
                           "GPU sat idle after the host waited for it.",
                "evidence": f"{_ms(sync_bound)} of idle time in gaps that follow a synchronising "
                            f"call; {_ms(float(idle['sync_ns'].sum()))} with the host inside one.",
                "advice": "Remove synchronising calls from the loop: .item(), .cpu(), .numpy(), "
                          "printing tensors, torch.cuda.synchronize(), cudaMemcpy without Async; "
                          "synchronise once per step, or wait on CUDA events for what is needed.",
                "metric": sync_bound / span})

    # -- diverse operators -----------------------------------------------------------------------
    if len(summary) >= DIVERSE_NAMES:
        top5 = float(summary.head(5)["share"].sum())
        if top5 < DIVERSE_TOP5_SHARE:
            findings.append({
                "pattern": "diverse-operators", "severity": "medium",
                "finding": f"Time is spread over {len(summary):,} different kernels; no single "
                           "kernel is worth tuning on its own.",
                "evidence": f"the five largest hold {_pct(top5)} of kernel time; the largest "
                            f"{_short(str(summary['name'].iloc[0]))} holds "
                            f"{_pct(float(summary['share'].iloc[0]))}.",
                "advice": "Fuse operators (torch.compile, TensorRT layer fusion, fused attention "
                          "and optimizers), lower the precision of the whole network, and "
                          "profile layer by layer (%trtprofile) to find the costly layers.",
                "metric": 1.0 - top5})

    # -- dominant kernels that cannot fill the GPU ---------------------------------------------------
    heavy = summary[summary["share"] >= HEAVY_KERNEL_SHARE].head(5) if len(summary) else summary
    if len(heavy):
        sub = kernels[kernels["name"].isin(heavy["name"])]
        occ = kernel_occupancy(SimpleNamespace(kernels=sub, meta=getattr(trace, "meta", {})))
        occ = occ[occ["occupancy"].notna()]
        if len(occ):
            by_name = occ.sort_values("total_ns", ascending=False).groupby("name", sort=False).head(1)
            low = by_name[(by_name["occupancy"] < LOW_OCCUPANCY)
                          | (by_name["waves"].fillna(np.inf) < 1.0)]
            if len(low):
                parts = []
                for _, r in low.iterrows():
                    waves = (f", grid {int(r['grid_blocks']):,} blocks = {r['waves']:.2f} waves"
                             if np.isfinite(r["waves"]) else "")
                    parts.append(f"{_short(str(r['name']), 40)}: occupancy {_pct(r['occupancy'])} "
                                 f"limited by {r['limiter']} ({r['threads_per_block']} threads, "
                                 f"{r['registers']} regs, {r['smem_per_block']:,} B smem)"
                                 f"{waves}")
                share = float(heavy[heavy["name"].isin(low["name"])]["share"].sum())
                findings.append({
                    "pattern": "low-occupancy", "severity": "medium",
                    "finding": f"{len(low)} heavy kernel{'s' if len(low) > 1 else ''} "
                               f"({_pct(share)} of kernel time) cannot fill the GPU.",
                    "evidence": "; ".join(parts) + f" (limits: {low['limits_source'].iloc[0]}).",
                    "advice": "Give each launch more blocks (a larger batch size); where "
                              "registers limit, cap them (__launch_bounds__, maxrregcount); "
                              "where shared memory limits, use smaller tiles; where warps "
                              "limit with small blocks, use larger blocks.",
                    "metric": 1.0 - float(low["occupancy"].min())})

    if not findings:
        idle_share = float(idle["idle_ns"].sum() / idle["span_ns"].sum()) \
            if len(idle) and idle["span_ns"].sum() else 0.0
        findings.append({
            "pattern": "balanced", "severity": "info",
            "finding": "No dominant bottleneck pattern: the GPU is busy and time is spread "
                       "over a handful of kernels.",
            "evidence": f"{n_launch:,} kernels, {_ms(kernel_ns)} kernel time, copies "
                        f"{_pct(copy_part)} of GPU work, GPU idle {_pct(idle_share)}.",
            "advice": "Look at the flame graph for the costliest call paths, and compare "
                      "before/after a change with Trace.diff().",
            "metric": 0.0})
    return _frame(findings)


def _frame(findings: list[dict[str, Any]]) -> pd.DataFrame:
    out = pd.DataFrame(findings, columns=COLUMNS)
    order = out["severity"].map(_SEVERITY_ORDER).fillna(9)
    return (out.assign(_o=order).sort_values(["_o", "metric"], ascending=[True, False],
                                               kind="stable")
            .drop(columns="_o").reset_index(drop=True))
