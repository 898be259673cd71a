"""Profile a PyTorch module layer by layer: GPU time of each leaf module from a live capture.

Every call of a leaf module runs inside ``hookmagic.range(<qualified module name>)`` (entered
by a forward pre-hook, left by a forward hook), and every iteration inside
``hookmagic.range("hookmagic.iteration <i>")``. The capture tags each kernel, copy and memset
with the innermost open range, so a layer's GPU time is the sum of the durations of the
activity launched while it ran (:mod:`hookmagic.layers.attribution`).

End-to-end latency per iteration comes from CUDA events around the forward call. Launch gaps
(time the GPU sits idle between kernels while Python and the hooks run) are in the end-to-end
latency but in no layer; ``meta["gpu_busy_ms"]`` (union of activity per iteration) and
``meta["latency_clean_ms"]`` (the same iterations without hooks or capture) show how big they are.

Needs torch and a CUDA GPU; the CPU-side pieces (hooks, naming, aggregation) are plain Python.
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable, Sequence

import pandas as pd

from .attribution import (ITERATION_PREFIX, OUTSIDE, activity, assign_layers, busy_ms,
                          kernels_by_layer, layer_times)
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

    def pre(self, module: Any, args: tuple) -> None:
        name = self.names.get(id(module), type(module).__name__)
        self.calls[name] = self.calls.get(name, 0) + 1
        if name not in self.shapes:
            self.shapes[name] = {"inputs": _describe(args)}
        rng = self.range_factory(name)
        rng.__enter__()
        self.open.append((id(module), rng))

    def post(self, module: Any, args: tuple, output: Any) -> None:
        name = self.names.get(id(module), type(module).__name__)
        if "outputs" not in self.shapes.get(name, {"outputs": 1}):
            self.shapes[name]["outputs"] = _describe(output)
        # close ranges opened after this module's (left open by an inner failure), then its own
        while self.open:
            mid, rng = self.open.pop()
            rng.__exit__(None, None, None)
            if mid == id(module):
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
    ``ranges``), the hooks' notes and the CUDA-event latencies. Pure: testable without a GPU."""
    act = activity(tables["kernels"], tables.get("memcpy"), tables.get("memset"))
    assigned = assign_layers(act, tables["ranges"])
    times = layer_times(assigned, iterations)
    out_meta = {"source": "torch", "iterations": iterations, **(meta or {})}
    if len(latencies_ms):
        out_meta["latency_ms"] = latency_stats(latencies_ms)
    if len(clean_latencies_ms):
        out_meta["latency_clean_ms"] = latency_stats(clean_latencies_ms)
    busy = busy_ms(assigned)
    if len(busy):
        out_meta["gpu_busy_ms"] = latency_stats(busy)
    outside = assigned["iteration"] < 0
    if outside.any():
        out_meta.setdefault("warnings", []).append(
            f"{int(outside.sum())} GPU activities ran outside the profiled iterations (ignored)")
    return LayerProfile(layers=make_layers(module_rows(times, leaves, shapes)), meta=out_meta,
                        times=pd.DataFrame({"latency_ms": list(latencies_ms)}) if len(latencies_ms) else None,
                        kernels=kernels_by_layer(assigned, iterations))


def profile_module(model: Any, example_inputs: Any, iterations: int = 20, warmup: int = 5,
                   name: str | None = None, clean_latency: bool = True) -> LayerProfile:
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
        Also time ``iterations`` runs without hooks or capture (``meta["latency_clean_ms"]``).

    The layer sum and the CUDA-event latency are both in the result (``reconcile(profile)``);
    their difference is launch gaps, counted in no layer. Raises RuntimeError if the capture
    recorded nothing (no GPU, driver or CUPTI), with the capture's reason.
    """
    import torch

    import hookmagic

    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    was_training = model.training
    model.eval()
    leaves = leaf_modules(model)
    hooks = ModuleRangeHooks(leaves, hookmagic.range)
    try:
        with torch.inference_mode():
            for _ in range(warmup):
                model(*inputs)
            torch.cuda.synchronize()
            clean = _timed_runs(torch, model, inputs, iterations) if clean_latency else []
            hooks.install()
            events = []
            with hookmagic.capture(label=name or type(model).__name__, stacks=False) as trace:
                for i in range(iterations):
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    with hookmagic.range(f"{ITERATION_PREFIX}{i}"):
                        start.record()
                        model(*inputs)
                        end.record()
                    events.append((start, end))
                torch.cuda.synchronize()
    finally:
        hooks.remove()
        model.train(was_training)
    if trace.status == "unavailable":
        raise RuntimeError(f"hookmagic: no layer profile: {trace.meta.get('reason', 'nothing captured')}")
    latencies = [s.elapsed_time(e) for s, e in events]
    device = torch.cuda.get_device_name(inputs[0].device) if hasattr(inputs[0], "device") else ""
    meta = {"name": name or type(model).__name__, "device": device,
            "torch_version": torch.__version__, "capture_status": trace.status,
            "gap_note": "end-to-end latency includes launch gaps; no layer holds them"}
    hooks_calls = dict(hooks.calls)
    meta["calls_per_iteration"] = {k: v / iterations for k, v in hooks_calls.items()}
    return profile_from_capture(trace.tables, leaves, hooks.shapes, iterations, latencies,
                                clean, meta)


def _timed_runs(torch: Any, model: Any, inputs: tuple, iterations: int) -> list[float]:
    pairs = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(*inputs)
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]
