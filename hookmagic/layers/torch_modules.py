"""Profile a PyTorch module layer by layer: GPU time of each leaf module from a live capture.

Every call of a leaf module runs inside ``hookmagic.range(<qualified module name>)`` (entered
by a forward pre-hook, left by a forward hook), and every iteration inside
``hookmagic.range("hookmagic.iteration <i>")``. The capture tags each kernel, copy and memset
with the innermost open range, so a layer's GPU time is the sum of the durations of the
activity launched while it ran (:mod:`hookmagic.layers.attribution`).

How end-to-end latency and launch gaps are counted
--------------------------------------------------
* The **reference end-to-end latency** (``meta["latency_ms"]``, also ``meta["latency_clean_ms"]``)
  is measured with CUDA events around each forward call, over ``iterations`` back-to-back runs
  made *without* hooks and without a capture: the model's own latency. The layer sum is
  compared with it (``reconcile``), on medians.
* The **hooked run** (hooks, ranges, CUPTI) has its own CUDA-event latency per iteration
  (``meta["latency_hooked_ms"]``). Its GPU busy time (union of the iteration's activity,
  ``meta["gpu_busy_ms"]``) equals the layer sum when every activity is attributed and nothing
  overlaps. The rest, hooked latency minus busy time, is the iteration's **launch gaps**
  (``meta["launch_gap_ms"]``): the GPU idle while the host (Python, the hooks, the CUPTI
  callbacks) had not yet launched the next kernel, plus the short gaps between back-to-back
  kernels that the runs without hooks have too (their latency minus the layer sum).
* Each gap is charged to the layer whose activity follows it, in the layer table's ``gap_ms``
  column (mean per iteration, so the column sums to the mean gap per iteration); the idle time
  at the iteration's edges goes to its first layer (:func:`~hookmagic.layers.attribution.charge_gaps`).
  ``gap_ms`` is not part of ``mean_ms`` and not in the layer sum: nothing is hidden, nothing
  counted twice.
* Host jitter (a page fault, a buffer flush, the garbage collector) gives the hooked latency a
  long tail, so comparisons use medians (``meta["reconcile_stat"] = "median"``); means and p90
  are in the same statistics.

To keep the host ahead of the GPU, the collector is paused during the measured runs, CUDA events
are created before the capture starts, and ``capture_warmup`` hooked iterations run under the
capture (inside a ``hookmagic.warmup`` range, set aside) before the measured ones, so one-time
costs of the first launches under CUPTI land in no measured iteration.

Needs torch and a CUDA GPU; the CPU-side pieces (hooks, naming, aggregation) are plain Python.
"""
from __future__ import annotations

import gc
import json
import math
from typing import Any, Callable, Iterable, Sequence

import pandas as pd

from hookmagic.common.errors import CaptureFailed, InvalidArgument

from .attribution import (ITERATION_PREFIX, OUTSIDE, WARMUP_RANGE, activity, assign_layers,
                          charge_gaps, iteration_summary, kernels_by_layer, layer_times)
from .model import LayerProfile, make_layers
from .trtexec import latency_stats

_TORCH_PRECISION = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16", "float64": "FP64",
                    "int8": "INT8", "uint8": "UINT8", "int32": "INT32", "int64": "INT64",
                    "bool": "BOOL", "float8_e4m3fn": "FP8", "float8_e5m2": "FP8"}


def precision_of_dtype(dtype: Any) -> str:
    """``torch.float16`` (or its string) -> ``"FP16"``; unknown types give ``"Unknown"``."""
    return _TORCH_PRECISION.get(str(dtype).replace("torch.", ""), "Unknown")


def leaf_modules(model: Any) -> list[tuple[str, Any]]:
    """``(qualified name, module)`` for every module without children, in registration order.

    A model that is itself a leaf is returned under its class name. Modules shared between
    several names are listed once, under their first name.
    """
    seen: set[int] = set()
    out = []
    for qual, mod in model.named_modules():
        if next(iter(mod.children()), None) is None and id(mod) not in seen:
            seen.add(id(mod))
            out.append((qual or type(mod).__name__, mod))
    return out


class ModuleRangeHooks:
    """Forward pre/post hooks that open and close one range per leaf-module call, and note
    each module's input/output shapes and dtypes on its first call.

    ``range_factory(name)`` returns a context manager (``hookmagic.range``). Ranges are closed
    in last-in-first-out order; :meth:`close_all` closes any left open by an exception.
    """

    def __init__(self, leaves: Sequence[tuple[str, Any]], range_factory: Callable[[str], Any]) -> None:
        self.leaves = list(leaves)
        self.range_factory = range_factory
        self.names = {id(m): q for q, m in self.leaves}
        self.open: list[tuple[int, Any]] = []
        self.shapes: dict[str, dict[str, Any]] = {}
        self.calls: dict[str, int] = {}
        self.described: set[int] = set()   # modules whose output shapes are noted
        self.handles: list[Any] = []

    def install(self) -> "ModuleRangeHooks":
        for _, mod in self.leaves:
            self.handles.append(mod.register_forward_pre_hook(self.pre))
            try:  # always_call (torch >= 2.1) runs the post-hook even if forward raises
                self.handles.append(mod.register_forward_hook(self.post, always_call=True))
            except TypeError:
                self.handles.append(mod.register_forward_hook(self.post))
        return self

    def remove(self) -> None:
        self.close_all()
        for h in self.handles:
            h.remove()
        self.handles = []

    # The two hooks run on every leaf call while the GPU may be waiting for the next launch, so
    # they do the least they can: a dict lookup, a counter, and the range; shapes are described
    # on a module's first call only.
    def pre(self, module: Any, args: tuple) -> None:
        mid = id(module)
        name = self.names.get(mid) or type(module).__name__
        calls = self.calls
        calls[name] = calls.get(name, 0) + 1
        if name not in self.shapes:
            self.shapes[name] = {"inputs": _describe(args)}
        rng = self.range_factory(name)
        rng.__enter__()
        self.open.append((mid, rng))

    def post(self, module: Any, args: tuple, output: Any) -> None:
        mid = id(module)
        opened = self.open
        if opened and opened[-1][0] == mid and mid in self.described:
            opened.pop()[1].__exit__(None, None, None)     # the common case: shapes known
            return
        name = self.names.get(mid) or type(module).__name__
        if output is not None:    # None: forward raised (always_call); note shapes next time
            if "outputs" not in self.shapes.get(name, {"outputs": 1}):
                self.shapes[name]["outputs"] = _describe(output)
            self.described.add(mid)
        # close ranges opened after this module's (left open by an inner failure), then its own
        while opened:
            top, rng = opened.pop()
            rng.__exit__(None, None, None)
            if top == mid:
                break

    def close_all(self) -> None:
        while self.open:
            _, rng = self.open.pop()
            rng.__exit__(None, None, None)


def _describe(obj: Any) -> list[dict[str, Any]]:
    """Shapes and dtypes of the tensors in ``obj`` (nested tuples/lists/dicts), in order."""
    out: list[dict[str, Any]] = []

    def walk(x: Any) -> None:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            out.append({"shape": [int(d) for d in x.shape], "dtype": str(x.dtype),
                        "bytes": int(getattr(x, "element_size", lambda: 0)() * _numel(x.shape))})
        elif isinstance(x, (tuple, list)):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for y in x.values():
                walk(y)

    walk(obj)
    return out


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def module_rows(times: pd.DataFrame, leaves: Sequence[tuple[str, Any]],
                shapes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """LayerProfile rows from :func:`~hookmagic.layers.attribution.layer_times` plus what the
    hooks learned (module class, parameter bytes and dtype, tensor shapes)."""
    mods = dict(leaves)
    rows = []
    for r in times.itertuples(index=False):
        mod = mods.get(r.layer)
        io = shapes.get(r.layer, {})
        ins, outs = io.get("inputs", []), io.get("outputs", [])
        kind = type(mod).__name__ if mod is not None else ("Other" if r.layer == OUTSIDE else "Unknown")
        params = list(mod.parameters(recurse=False)) if mod is not None and hasattr(mod, "parameters") else []
        in_prec = precision_of_dtype(ins[0]["dtype"]) if ins else "Unknown"
        out_prec = precision_of_dtype(outs[0]["dtype"]) if outs else "Unknown"
        rows.append({
            "name": r.layer, "type": kind, "layer_type": kind,
            "precision": in_prec, "in_precision": in_prec, "out_precision": out_prec,
            "in_format": ins[0]["dtype"] if ins else "", "out_format": outs[0]["dtype"] if outs else "",
            "mean_ms": r.mean_ms, "median_ms": r.median_ms, "p90_ms": r.p90_ms,
            "gap_ms": getattr(r, "gap_ms", math.nan),
            "weight_bytes": float(sum(p.numel() * p.element_size() for p in params)),
            "bias_bytes": 0.0,
            "activation_bytes": float(sum(t["bytes"] for t in ins + outs)) if ins + outs else math.nan,
            "in_shapes": ", ".join("x".join(map(str, t["shape"])) for t in ins),
            "out_shapes": ", ".join("x".join(map(str, t["shape"])) for t in outs),
            "source_nodes": [r.layer] if r.layer != OUTSIDE else [],
            "details": json.dumps({"module": r.layer, "class": kind,
                                   "repr": repr(mod)[:500] if mod is not None else "",
                                   "activities_per_iteration": r.activities_per_iter}),
        })
    return rows


def profile_from_capture(tables: dict[str, pd.DataFrame], leaves: Sequence[tuple[str, Any]],
                         shapes: dict[str, dict[str, Any]], iterations: int,
                         latencies_ms: Sequence[float] = (), clean_latencies_ms: Sequence[float] = (),
                         meta: dict[str, Any] | None = None) -> LayerProfile:
    """Assemble the LayerProfile from capture tables (``kernels``, ``memcpy``, ``memset``,
    ``ranges``), the hooks' notes and the CUDA-event latencies. Pure: testable without a GPU.

    ``latencies_ms[i]`` is hooked iteration ``i``'s CUDA-event latency; ``clean_latencies_ms``
    are runs without hooks or capture. Meta (statistics dicts: mean, median, p90, ...):
    ``latency_ms`` (the reference: the clean runs when given, else the hooked run, as
    ``latency_reference`` says), ``latency_clean_ms``, ``latency_hooked_ms``, ``layer_sum_ms``
    (per-iteration layer sum), ``gpu_busy_ms``, ``launch_gap_ms`` (hooked latency minus busy),
    ``unattributed_activities`` (activity outside every measured iteration and warm-up range)
    and ``reconcile_stat`` (``"median"``). ``times`` has the per-iteration numbers; the
    ``gap_ms`` column of ``layers`` the gaps charged to each layer (module docstring).
    """
    act = activity(tables["kernels"], tables.get("memcpy"), tables.get("memset"))
    assigned = charge_gaps(assign_layers(act, tables["ranges"]), latencies_ms)
    times = layer_times(assigned, iterations)
    per_iter = iteration_summary(assigned, iterations, latencies_ms)
    out_meta: dict[str, Any] = {"source": "torch", "iterations": iterations,
                                "reconcile_stat": "median", **(meta or {})}
    if len(clean_latencies_ms):
        out_meta["latency_clean_ms"] = latency_stats(clean_latencies_ms)
    if len(latencies_ms):
        out_meta["latency_hooked_ms"] = latency_stats(latencies_ms)
    if len(clean_latencies_ms) or len(latencies_ms):
        clean = bool(len(clean_latencies_ms))
        out_meta["latency_ms"] = out_meta["latency_clean_ms" if clean else "latency_hooked_ms"]
        out_meta["latency_reference"] = ("CUDA events, runs without hooks or capture" if clean
                                         else "CUDA events, hooked run (includes hook overhead)")
    if len(per_iter):
        out_meta["layer_sum_ms"] = latency_stats(per_iter["layer_sum_ms"])
        out_meta["gpu_busy_ms"] = latency_stats(per_iter["busy_ms"])
        if len(latencies_ms):
            out_meta["launch_gap_ms"] = latency_stats(per_iter["latency_ms"] - per_iter["busy_ms"])
    outside = assigned["iteration"] < 0
    warm = outside & (assigned["layer"] == WARMUP_RANGE)
    stray = outside & ~warm
    out_meta["unattributed_activities"] = int(stray.sum())
    if warm.any():
        out_meta["capture_warmup_activities"] = int(warm.sum())
    if stray.any():
        out_meta.setdefault("warnings", []).append(
            f"{int(stray.sum())} GPU activities ran outside the profiled iterations (ignored)")
    empty = per_iter["latency_ms"].notna() & (per_iter["layer_sum_ms"] == 0)
    if empty.any():
        out_meta.setdefault("warnings", []).append(
            f"{int(empty.sum())} iteration(s) launched no GPU work; their latency is in no layer's gap")
    frame = per_iter.rename(columns={"latency_ms": "latency_hooked_ms"})
    if len(clean_latencies_ms) == len(frame):
        frame["latency_clean_ms"] = list(clean_latencies_ms)   # the i-th clean run, a separate run
    return LayerProfile(layers=make_layers(module_rows(times, leaves, shapes)), meta=out_meta,
                        times=frame if len(frame) else None,
                        kernels=kernels_by_layer(assigned, iterations))


def profile_module(model: Any, example_inputs: Any, iterations: int = 20, warmup: int = 5,
                   name: str | None = None, clean_latency: bool = True,
                   capture_warmup: int = 2) -> LayerProfile:
    """Profile ``model(*example_inputs)`` on the GPU, one row per leaf module.

    Parameters
    ----------
    model : torch.nn.Module
        Already on the GPU, in the dtype you want measured (it is put in eval mode).
    example_inputs : tensor or tuple of tensors
        Arguments of one forward call, on the GPU.
    iterations, warmup : int
        Measured iterations (one range each) after ``warmup`` unmeasured ones.
    name : str, optional
        Label (default: the model's class name).
    clean_latency : bool
        Also time ``iterations`` runs without hooks or capture: the reference end-to-end
        latency (``meta["latency_ms"]``). Without it the reference is the hooked run's.
    capture_warmup : int
        Hooked iterations run under the capture before the measured ones and set aside.

    ``reconcile(profile)`` puts the layer sum beside the clean latency and the hooked run's
    latency, busy time and launch gaps; the layers' ``gap_ms`` column says after which layer's
    launch the GPU waited (the module docstring says how gaps are counted). Raises RuntimeError
    if the capture recorded nothing (no GPU, driver or CUPTI), with the capture's reason.
    """
    import torch

    from hookmagic import cupti

    if iterations < 1:
        raise InvalidArgument("iterations must be at least 1")
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    was_training = model.training
    model.eval()
    leaves = leaf_modules(model)
    hooks = ModuleRangeHooks(leaves, cupti.range)
    gc_was_enabled = gc.isenabled()
    try:
        with torch.inference_mode():
            for _ in range(warmup):
                model(*inputs)
            torch.cuda.synchronize()
            gc.collect()
            gc.disable()   # a collection mid-run stalls the host and the GPU waits for it
            clean = _timed_runs(torch, model, inputs, iterations) if clean_latency else []
            events = _event_pairs(torch, iterations)
            hooks.install()
            with cupti.capture(label=name or type(model).__name__, stacks=False) as trace:
                with cupti.range(WARMUP_RANGE):
                    for _ in range(capture_warmup):
                        model(*inputs)
                for i, (start, end) in enumerate(events):
                    with cupti.range(f"{ITERATION_PREFIX}{i}"):
                        start.record()
                        model(*inputs)
                        end.record()
                torch.cuda.synchronize()
    finally:
        if gc_was_enabled:
            gc.enable()
        hooks.remove()
        model.train(was_training)
    if trace.status == "unavailable":
        raise CaptureFailed(f"hookmagic: no layer profile: "
                            f"{trace.meta.get('reason', 'nothing captured')}")
    latencies = [s.elapsed_time(e) for s, e in events]
    device = torch.cuda.get_device_name(inputs[0].device) if hasattr(inputs[0], "device") else ""
    meta = {"name": name or type(model).__name__, "device": device,
            "torch_version": torch.__version__, "capture_status": trace.status,
            "capture_warmup": capture_warmup,
            "gap_note": ("layer sum compared with the CUDA-event latency of runs without hooks "
                         "(medians); the hooked run's idle GPU time (its latency minus GPU busy) "
                         "is charged to the layer whose work follows each gap (gap_ms), in no "
                         "layer's time")}
    calls = hooks.calls
    meta["calls_per_iteration"] = {k: v / (iterations + capture_warmup) for k, v in calls.items()}
    return profile_from_capture(trace.tables, leaves, hooks.shapes, iterations, latencies,
                                clean, meta)


def _event_pairs(torch: Any, n: int) -> list[tuple[Any, Any]]:
    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(n)]


def _timed_runs(torch: Any, model: Any, inputs: tuple, iterations: int) -> list[float]:
    """CUDA-event latency of ``iterations`` back-to-back forward calls, no hooks, no capture."""
    pairs = _event_pairs(torch, iterations)
    for start, end in pairs:
        start.record()
        model(*inputs)
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]
