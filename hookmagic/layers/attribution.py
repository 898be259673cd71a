"""Tie a capture's GPU activity to layers through its ranges (pure functions over trace tables).

Used by the PyTorch module backend (one ``hookmagic.range`` per leaf-module call, inside one
range per iteration) and to show the kernels inside a TensorRT Myelin layer when the engine ran
under a capture with NVTX ranges named after its layers.

Tables follow :mod:`hookmagic.trace.schema`: activity rows carry ``range_id`` (innermost open
range at launch, -1 for none); ``ranges`` has ``range_id, name, start_ns, end_ns, depth,
parent_id``.

Launch gaps (:func:`charge_gaps`): within one iteration, every stretch in which the GPU runs none
of the iteration's activity is charged to the layer whose activity starts right after it. The
stretch before the first activity is the iteration's end-to-end latency minus the span from the
first start to the last end (CUDA events cannot be placed on CUPTI's clock, so the idle time at
both edges is one number); it is charged to the first layer. The gaps of an iteration therefore
sum to its end-to-end latency minus its GPU busy time (union of activity), exactly.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

#: name prefix of the per-iteration ranges that the module profiler opens
ITERATION_PREFIX = "hookmagic.iteration "
#: layer name given to GPU work launched in an iteration but outside every leaf module
OUTSIDE = "(outside leaf modules)"
#: name of the range around warm-up iterations run under the capture (their work is set aside)
WARMUP_RANGE = "hookmagic.warmup"


def activity(kernels: pd.DataFrame, memcpy: pd.DataFrame | None = None,
             memset: pd.DataFrame | None = None) -> pd.DataFrame:
    """Kernels, copies and memsets as one table: ``range_id, start_ns, end_ns, duration_ns,
    name, kind``. Copies and memsets count as layer time: they occupy the GPU too."""
    parts = [kernels.assign(kind="kernel")[["range_id", "start_ns", "end_ns", "duration_ns",
                                            "name", "kind"]]]
    if memcpy is not None and len(memcpy):
        parts.append(memcpy.assign(kind="memcpy", name="memcpy " + memcpy["kind"].astype(str))
                     [["range_id", "start_ns", "end_ns", "duration_ns", "name", "kind"]])
    if memset is not None and len(memset):
        parts.append(memset.assign(kind="memset", name="memset")
                     [["range_id", "start_ns", "end_ns", "duration_ns", "name", "kind"]])
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)


def assign_layers(act: pd.DataFrame, ranges: pd.DataFrame,
                  iteration_prefix: str = ITERATION_PREFIX) -> pd.DataFrame:
    """``act`` with ``iteration`` (-1: outside every iteration) and ``layer`` columns.

    A row's layer is the range one level below its iteration range on the path from its own
    range upwards (so a user's range nested inside a leaf module still counts for that module);
    rows launched directly in the iteration range get :data:`OUTSIDE`. Rows outside every
    iteration get iteration -1 and layer :data:`WARMUP_RANGE` if launched inside a warm-up range,
    ``""`` otherwise.
    """
    parent = dict(zip(ranges["range_id"].tolist(), ranges["parent_id"].tolist()))
    name = dict(zip(ranges["range_id"].tolist(), ranges["name"].astype(str).tolist()))
    cache: dict[int, tuple[int, str]] = {}

    def resolve(rid: int) -> tuple[int, str]:
        if rid in cache:
            return cache[rid]
        path, cur = [], rid
        while cur in name and not name[cur].startswith(iteration_prefix):
            path.append(cur)
            cur = parent.get(cur, -1)
        if cur in name:  # reached an iteration range
            it = int(name[cur][len(iteration_prefix):])
            result = (it, name[path[-1]] if path else OUTSIDE)
        else:
            result = (-1, WARMUP_RANGE if any(name[p] == WARMUP_RANGE for p in path) else "")
        cache[rid] = result
        return result

    pairs = [resolve(int(r)) for r in act["range_id"]]
    out = act.copy()
    out["iteration"] = np.array([p[0] for p in pairs], dtype="int64")
    out["layer"] = [p[1] for p in pairs]
    return out


def layer_times(assigned: pd.DataFrame, iterations: int | None = None) -> pd.DataFrame:
    """Per layer: mean, median and p90 over iterations of its summed GPU time (ms), calls and
    first start, in execution order (by first start within each iteration). When ``assigned``
    went through :func:`charge_gaps`, also ``gap_ms``: the launch gaps charged to the layer,
    mean per iteration (a mean, so that the column sums to the mean idle time per iteration).

    An iteration in which a layer launched nothing counts as 0 ms for it.
    """
    inside = assigned[assigned["iteration"] >= 0]
    n_iter = iterations if iterations is not None else int(inside["iteration"].nunique())
    cols = ["layer", "mean_ms", "median_ms", "p90_ms", "activities_per_iter", "first_start"]
    if "gap_ns" in assigned.columns:
        cols.append("gap_ms")
    if inside.empty or n_iter == 0:
        return pd.DataFrame(columns=cols)
    per = _per_layer_iteration(inside, "duration_ns", n_iter)
    # execution order: where each layer first starts, relative to its iteration's first activity
    t0 = inside.groupby("iteration")["start_ns"].transform("min")
    first = (inside["start_ns"] - t0).groupby(inside["layer"]).min()
    out = pd.DataFrame({
        "layer": per.index,
        "mean_ms": per.mean(axis=1).to_numpy(),
        "median_ms": per.median(axis=1).to_numpy(),
        "p90_ms": per.quantile(0.9, axis=1).to_numpy(),
        "activities_per_iter": (inside.groupby("layer").size() / n_iter).reindex(per.index).to_numpy(),
        "first_start": first.reindex(per.index).to_numpy(),
    })
    if "gap_ns" in inside.columns:
        out["gap_ms"] = _per_layer_iteration(inside, "gap_ns", n_iter).reindex(per.index) \
            .mean(axis=1).to_numpy()
    return out.sort_values(["first_start", "layer"], kind="stable").reset_index(drop=True)


def _per_layer_iteration(inside: pd.DataFrame, column: str, n_iter: int) -> pd.DataFrame:
    """``column`` summed per (layer, iteration), in ms: layers as rows, iterations 0..n-1 as
    columns, 0 where a layer had nothing in an iteration."""
    per = inside.groupby(["layer", "iteration"])[column].sum().unstack(fill_value=0)
    return per.reindex(columns=range(n_iter), fill_value=0) / 1e6


def charge_gaps(assigned: pd.DataFrame, latencies_ms: Sequence[float] = ()) -> pd.DataFrame:
    """``assigned`` with ``gap_ns``: the idle GPU time charged to each activity (0 outside the
    iterations).

    Within an iteration, activities are taken in start order; an activity's gap is the time
    from the latest end of the activities before it to its own start (0 if it overlaps them).
    The first activity's gap is ``latencies_ms[iteration]`` (CUDA-event end-to-end time) minus
    the iteration's span (first start to last end): the idle time at both edges of the
    iteration, which CUDA events do not let us split. It is left signed (a few microseconds
    below zero mean the two clocks disagree, not idle time) so that the gaps of an iteration
    sum to exactly its latency minus its GPU busy time; without a latency it is 0.
    """
    out = assigned.copy()
    out["gap_ns"] = 0.0
    inside = out[out["iteration"] >= 0].sort_values(["iteration", "start_ns", "end_ns"],
                                                    kind="stable")
    if inside.empty:
        return out
    it = inside["iteration"]
    prev_end = inside["end_ns"].groupby(it).cummax().groupby(it).shift(1)
    gap = (inside["start_ns"] - prev_end).clip(lower=0).astype("float64")
    first = prev_end.isna()
    span = (inside.groupby("iteration")["end_ns"].max()
            - inside.groupby("iteration")["start_ns"].min()).astype("float64")
    lat = pd.Series({i: float(v) * 1e6 for i, v in enumerate(latencies_ms)}, dtype="float64")
    edge = (lat.reindex(span.index) - span).fillna(0.0)
    gap[first] = it[first].map(edge).to_numpy()
    out.loc[gap.index, "gap_ns"] = gap
    return out


def iteration_summary(charged: pd.DataFrame, iterations: int | None = None,
                      latencies_ms: Sequence[float] = ()) -> pd.DataFrame:
    """Per iteration (ms): ``layer_sum_ms`` (sum of activity durations, what the layer rows
    add up to), ``busy_ms`` (union of activity), ``gap_ms`` (gaps charged by
    :func:`charge_gaps`; equals ``latency_ms - busy_ms``), ``latency_ms`` (NaN if unknown)."""
    inside = charged[charged["iteration"] >= 0]
    n_iter = iterations if iterations is not None else int(inside["iteration"].nunique())
    idx = pd.RangeIndex(n_iter, name="iteration")
    g = inside.groupby("iteration")
    gaps = g["gap_ns"].sum() if "gap_ns" in inside.columns else pd.Series(dtype="float64")
    lat = list(latencies_ms)[:n_iter]
    out = pd.DataFrame({
        "iteration": np.arange(n_iter, dtype="int64"),
        "layer_sum_ms": (g["duration_ns"].sum().reindex(idx, fill_value=0) / 1e6).to_numpy(),
        "busy_ms": busy_ms(inside).reindex(idx, fill_value=0.0).to_numpy(),
        "gap_ms": (gaps.reindex(idx, fill_value=0) / 1e6).to_numpy(dtype="float64"),
        "latency_ms": np.array(lat + [np.nan] * (n_iter - len(lat)), dtype="float64"),
    })
    return out


def kernels_by_layer(assigned: pd.DataFrame, iterations: int | None = None) -> pd.DataFrame:
    """Per (layer, kernel name): calls and time per iteration, mean per call (ms)."""
    inside = assigned[assigned["iteration"] >= 0]
    n_iter = iterations if iterations is not None else max(1, int(inside["iteration"].nunique()))
    g = inside.groupby(["layer", "name"], sort=False)["duration_ns"].agg(["size", "sum"]).reset_index()
    out = pd.DataFrame({"layer": g["layer"], "kernel": g["name"],
                        "calls": g["size"] / n_iter, "total_ms": g["sum"] / 1e6 / n_iter,
                        "mean_ms": g["sum"] / 1e6 / g["size"]})
    return out.sort_values(["layer", "total_ms"], ascending=[True, False], kind="stable") \
        .reset_index(drop=True)


def busy_ms(assigned: pd.DataFrame) -> pd.Series:
    """GPU busy time per iteration (ms): the union of activity intervals, so overlapping work on
    several streams counts once. The rest of an iteration's wall time is launch gaps and idle."""
    inside = assigned[assigned["iteration"] >= 0]
    out = {}
    for it, g in inside.groupby("iteration"):
        iv = g[["start_ns", "end_ns"]].sort_values("start_ns").to_numpy()
        total, cur_s, cur_e = 0, None, None
        for s, e in iv:
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            total += cur_e - cur_s
        out[int(it)] = total / 1e6
    return pd.Series(out, dtype="float64", name="busy_ms")


def kernels_in_named_ranges(act: pd.DataFrame, ranges: pd.DataFrame,
                            layer_names: list[str] | set[str]) -> pd.DataFrame:
    """Activity attributed to ranges whose name is a layer name (e.g. NVTX ranges TensorRT
    emits per layer): ``layer, kernel, calls, total_ms, mean_ms``, the nearest enclosing
    layer-named range winning. Use it to open up Myelin/ForeignNode layers."""
    wanted = set(layer_names)
    parent = dict(zip(ranges["range_id"].tolist(), ranges["parent_id"].tolist()))
    name = dict(zip(ranges["range_id"].tolist(), ranges["name"].astype(str).tolist()))

    def layer_of(rid: int) -> str:
        while rid in name:
            if name[rid] in wanted:
                return name[rid]
            rid = parent.get(rid, -1)
        return ""

    tagged = act.assign(layer=[layer_of(int(r)) for r in act["range_id"]])
    tagged = tagged[tagged["layer"] != ""]
    g = tagged.groupby(["layer", "name"], sort=False)["duration_ns"].agg(["size", "sum"]).reset_index()
    return pd.DataFrame({"layer": g["layer"], "kernel": g["name"], "calls": g["size"],
                         "total_ms": g["sum"] / 1e6, "mean_ms": g["sum"] / 1e6 / g["size"]})
