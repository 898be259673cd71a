"""Tie a capture's GPU activity to layers through its ranges (pure functions over trace tables).

Used by the PyTorch module backend (one ``hookmagic.range`` per leaf-module call, inside one
range per iteration) and to show the kernels inside a TensorRT Myelin layer when the engine ran
under a capture with NVTX ranges named after its layers.

Tables follow :mod:`hookmagic.trace.schema`: activity rows carry ``range_id`` (innermost open
range at launch, -1 for none); ``ranges`` has ``range_id, name, start_ns, end_ns, depth,
parent_id``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: name prefix of the per-iteration ranges that the module profiler opens
ITERATION_PREFIX = "hookmagic.iteration "
#: layer name given to GPU work launched in an iteration but outside every leaf module
OUTSIDE = "(outside leaf modules)"


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
    rows launched directly in the iteration range get :data:`OUTSIDE`.
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
            result = (-1, "")
        cache[rid] = result
        return result

    pairs = [resolve(int(r)) for r in act["range_id"]]
    out = act.copy()
    out["iteration"] = np.array([p[0] for p in pairs], dtype="int64")
    out["layer"] = [p[1] for p in pairs]
    return out


def layer_times(assigned: pd.DataFrame, iterations: int | None = None) -> pd.DataFrame:
    """Per layer: mean, median and p90 over iterations of its summed GPU time (ms), calls and
    first start, in execution order (by first start within each iteration).

    An iteration in which a layer launched nothing counts as 0 ms for it.
    """
    inside = assigned[assigned["iteration"] >= 0]
    n_iter = iterations if iterations is not None else int(inside["iteration"].nunique())
    cols = ["layer", "mean_ms", "median_ms", "p90_ms", "activities_per_iter", "first_start"]
    if inside.empty or n_iter == 0:
        return pd.DataFrame(columns=cols)
    per = inside.groupby(["layer", "iteration"])["duration_ns"].sum().unstack(fill_value=0)
    per = per.reindex(columns=range(n_iter), fill_value=0) / 1e6
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
    return out.sort_values(["first_start", "layer"], kind="stable").reset_index(drop=True)


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
