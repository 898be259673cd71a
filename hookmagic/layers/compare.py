"""Engine comparison: pair the layers of two builds of one network and show what changed.

Builds of the same network in different precisions fuse and name layers differently, so layers
are paired in two passes: equal names first; then, among layers with the same *signature*
(type, first input shape, first output shape, and for convolutions kernel, stride, output maps
and groups), the pair whose names share the most words, ties going to the closer execution
position. Pairs found the second way say ``match == "signature"``: they are a guess.
"""
from __future__ import annotations

import json
import re
from typing import Any, Sequence

import pandas as pd

from .model import MIB, LayerProfile

_SIG_KEYS = ("Kernel", "Stride", "OutMaps", "Groups", "Dilation")

COMPARE_COLUMNS = ["order_a", "order_b", "name_a", "name_b", "type", "match", "precision_a",
                   "precision_b", "ms_a", "ms_b", "delta_ms", "speedup", "precision_changed",
                   "tactic_changed", "tactic_a", "tactic_b"]


def signature(row: pd.Series | dict[str, Any]) -> tuple:
    """What must agree for two layers of different builds to be the same piece of work."""
    try:
        details = json.loads(row["details"]) if row["details"] else {}
    except (TypeError, ValueError):
        details = {}
    params = tuple(json.dumps(details.get(k)) for k in _SIG_KEYS) if isinstance(details, dict) else ()
    first_in = str(row["in_shapes"]).split(", ")[0]
    first_out = str(row["out_shapes"]).split(", ")[0]
    return (row["type"], first_in, first_out, params)


def pair_layers(a: LayerProfile, b: LayerProfile) -> pd.DataFrame:
    """Pairs of row positions ``(i_a, i_b, match)``; unpaired layers appear with -1 opposite."""
    la, lb = a.layers.reset_index(drop=True), b.layers.reset_index(drop=True)
    pairs: list[tuple[int, int, str]] = []
    free_a, free_b = set(range(len(la))), set(range(len(lb)))
    # pass 1: equal names, k-th occurrence with k-th occurrence
    slots: dict[tuple[str, int], int] = {}
    count: dict[str, int] = {}
    for j, name in enumerate(lb["name"]):
        k = count.get(name, 0)
        count[name] = k + 1
        slots[(name, k)] = j
    count = {}
    for i, name in enumerate(la["name"]):
        k = count.get(name, 0)
        count[name] = k + 1
        j = slots.get((name, k))
        if j is not None:
            pairs.append((i, j, "name"))
            free_a.discard(i)
            free_b.discard(j)
    # pass 2: same signature, most shared name words, nearest relative position
    sig_a = {i: signature(la.iloc[i]) for i in free_a}
    sig_b = {j: signature(lb.iloc[j]) for j in free_b}
    groups: dict[tuple, tuple[list[int], list[int]]] = {}
    for i, s in sig_a.items():
        groups.setdefault(s, ([], []))[0].append(i)
    for j, s in sig_b.items():
        groups.setdefault(s, ([], []))[1].append(j)
    na, nb = max(len(la), 1), max(len(lb), 1)
    for ia, jb in groups.values():
        if not ia or not jb:
            continue
        scored = sorted(
            ((-_similarity(la.at[i, "name"], lb.at[j, "name"]), abs(i / na - j / nb), i, j)
             for i in ia for j in jb))
        for _, _, i, j in scored:
            if i in free_a and j in free_b:
                pairs.append((i, j, "signature"))
                free_a.discard(i)
                free_b.discard(j)
    pairs += [(i, -1, "only a") for i in sorted(free_a)]
    pairs += [(-1, j, "only b") for j in sorted(free_b)]
    out = pd.DataFrame(pairs, columns=["i_a", "i_b", "match"])
    # execution order of a, with b-only layers placed after their b-predecessor's partner
    key = [i if i >= 0 else _anchor(j, out) for i, j in zip(out["i_a"], out["i_b"])]
    out["_key"] = key
    out["_kb"] = out["i_b"]
    return out.sort_values(["_key", "_kb"], kind="stable").drop(columns=["_key", "_kb"]) \
        .reset_index(drop=True)


def _anchor(j: int, pairs: pd.DataFrame) -> float:
    # place a b-only layer just after the a-layer paired with the nearest earlier b-layer
    earlier = pairs[(pairs["i_b"] >= 0) & (pairs["i_b"] < j) & (pairs["i_a"] >= 0)]
    if earlier.empty:
        return -0.5
    return float(earlier.loc[earlier["i_b"].idxmax(), "i_a"]) + 0.5


def _similarity(x: str, y: str) -> float:
    wx, wy = _words(x), _words(y)
    return len(wx & wy) / len(wx | wy) if wx | wy else 0.0


def _words(name: str) -> set[str]:
    # words plus adjacent word pairs, so "block2_3" and "block3_2" do not look alike
    tokens = re.findall(r"[A-Za-z0-9]+", name.lower())
    return set(tokens) | {f"{p} {q}" for p, q in zip(tokens, tokens[1:])}


def compare_layers(a: LayerProfile, b: LayerProfile) -> pd.DataFrame:
    """One row per paired (or unpaired) layer: times in both engines, speedup, what changed.

    ``speedup`` is ``ms_a / ms_b`` (above 1: b is faster); ``delta_ms`` is ``ms_b - ms_a``.
    ``precision_changed`` / ``tactic_changed`` flag pairs whose precision or kernel differs.
    """
    pairs = pair_layers(a, b)
    la, lb = a.layers.reset_index(drop=True), b.layers.reset_index(drop=True)

    def pick(frame: pd.DataFrame, idx: pd.Series, col: str, empty: Any) -> list[Any]:
        return [frame.at[i, col] if i >= 0 else empty for i in idx]

    out = pd.DataFrame({
        "order_a": pick(la, pairs["i_a"], "order", -1),
        "order_b": pick(lb, pairs["i_b"], "order", -1),
        "name_a": pick(la, pairs["i_a"], "name", ""),
        "name_b": pick(lb, pairs["i_b"], "name", ""),
        "type": [la.at[i, "type"] if i >= 0 else lb.at[j, "type"]
                 for i, j in zip(pairs["i_a"], pairs["i_b"])],
        "match": pairs["match"],
        "precision_a": pick(la, pairs["i_a"], "precision", ""),
        "precision_b": pick(lb, pairs["i_b"], "precision", ""),
        "ms_a": pick(la, pairs["i_a"], "mean_ms", 0.0),
        "ms_b": pick(lb, pairs["i_b"], "mean_ms", 0.0),
        "tactic_a": pick(la, pairs["i_a"], "tactic", ""),
        "tactic_b": pick(lb, pairs["i_b"], "tactic", ""),
    })
    out["ms_a"] = out["ms_a"].astype("float64")
    out["ms_b"] = out["ms_b"].astype("float64")
    out["delta_ms"] = out["ms_b"] - out["ms_a"]
    both = (pairs["i_a"] >= 0) & (pairs["i_b"] >= 0)
    out["speedup"] = (out["ms_a"] / out["ms_b"]).where(both & (out["ms_b"] > 0))
    out["precision_changed"] = both & (out["precision_a"] != out["precision_b"])
    out["tactic_changed"] = both & (out["tactic_a"] != out["tactic_b"])
    out = out[COMPARE_COLUMNS]
    out.attrs["labels"] = (a.name, b.name)
    return out


def compare_by(a: LayerProfile, b: LayerProfile, column: str = "type") -> pd.DataFrame:
    """Summed time per ``column`` value (type or precision) in each engine, and the speedup."""
    ta = a.layers.groupby(column, sort=False)["mean_ms"].sum().rename("ms_a")
    tb = b.layers.groupby(column, sort=False)["mean_ms"].sum().rename("ms_b")
    out = pd.concat([ta, tb], axis=1).fillna(0.0).reset_index().rename(columns={"index": column})
    out["delta_ms"] = out["ms_b"] - out["ms_a"]
    out["speedup"] = (out["ms_a"] / out["ms_b"]).where(out["ms_b"] > 0)
    return out.sort_values(["ms_a", column], ascending=[False, True], kind="stable") \
        .reset_index(drop=True)


def engines_summary(profiles: Sequence[LayerProfile], labels: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per engine: layers, layer sum, end-to-end latency, memory, speedup vs the first."""
    labels = list(labels) if labels is not None else [p.name for p in profiles]
    rows = []
    for label, p in zip(labels, profiles):
        rows.append({"engine": label, "layers": len(p.layers), "total_ms": p.total_ms,
                     "latency_ms": p.latency_ms if p.latency_ms is not None else float("nan"),
                     "weights_mib": p.weight_bytes / MIB,
                     "activations_mib": p.activation_bytes / MIB,
                     "precisions": ", ".join(sorted(set(p.layers["precision"])))})
    out = pd.DataFrame(rows)
    if len(out):
        out["speedup_vs_first"] = out["total_ms"].iloc[0] / out["total_ms"]
    return out


def stacked(profiles: Sequence[LayerProfile], column: str = "type",
            labels: Sequence[str] | None = None) -> pd.DataFrame:
    """Long table (engine, ``column`` value, mean_ms) for stacked bars of several engines."""
    labels = list(labels) if labels is not None else [p.name for p in profiles]
    parts = []
    for label, p in zip(labels, profiles):
        g = p.layers.groupby(column, sort=False)["mean_ms"].sum().reset_index()
        g.insert(0, "engine", label)
        parts.append(g)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["engine", column, "mean_ms"])
