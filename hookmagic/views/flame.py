"""Flame graphs of GPU work as Plotly icicles: one trace, or two traces compared.

The figures draw the node tables of :mod:`hookmagic.analysis.flame` and nothing else: one
icicle cell per tree node, never one per event, so a million kernels make a figure of a few
hundred kilobytes. Click a cell to zoom into it (Plotly does this natively; click the root
bar to go back); hover for time, share, calls and file:line.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from hookmagic.analysis.flame import Weight, flame_diff, flame_tree
from hookmagic.common.format import duration_ns as format_ns  # noqa: F401 (public here)
from hookmagic.common.format import plotly_text, short
from hookmagic.common.format import si_bytes as format_bytes  # noqa: F401 (public here)

KIND_COLOURS = {"root": "#b0b0b0", "frame": "#6b8fc7", "range": "#a98bd1",
                "kernel": "#f2a03d", "memcpy": "#5fb760", "memset": "#45b0a8"}
MATCH_COLOUR, FADED_COLOUR = "#e0245e", "#e4e4e4"
#: most cells drawn; smaller nodes are left out (their time stays in the parent's width)
MAX_NODES = 10_000
LABEL_CHARS = 60


def format_weight(value: float, weight: str) -> str:
    """A node value in the words of its weight."""
    if weight == "time":
        return format_ns(value)
    if weight == "bytes":
        return format_bytes(value)
    return f"{value:,.0f} launches"


def prune(nodes: pd.DataFrame, max_nodes: int = MAX_NODES) -> pd.DataFrame:
    """Keep the ``max_nodes`` heaviest nodes (by ``value``) and the root.

    A parent is never lighter than its child, so every kept node's ancestors are kept too.
    """
    if len(nodes) <= max_nodes:
        return nodes
    cut = np.sort(nodes["value"].to_numpy())[::-1][max_nodes - 1]
    keep = (nodes["value"].to_numpy() > cut) | (nodes["parent"].to_numpy() < 0)
    return nodes[keep]


def _matches(nodes: pd.DataFrame, search: str | None) -> np.ndarray:
    if not search:
        return np.zeros(len(nodes), dtype=bool)
    needle = search.lower()
    not_root = nodes["kind"].to_numpy() != "root"
    return not_root & (nodes["label"].str.lower().str.contains(needle, regex=False).to_numpy()
            | nodes["file_line"].str.lower().str.contains(needle, regex=False).to_numpy())


def flame_figure(trace: Any, weight: Weight = "time", device: int | Iterable[int] | None = None,
                 stream: int | Iterable[int] | None = None, search: str | None = None,
                 max_depth: int | None = None, max_nodes: int = MAX_NODES,
                 label: str | None = None, raw: bool = False) -> go.Figure:
    """Flame graph (icicle) of ``trace``: the cell, the Python frames, ranges, then kernels.

    Parameters
    ----------
    weight : "time" (GPU time), "launches" (number of kernels/copies/memsets) or "bytes"
        (bytes copied).
    device, stream : show only work on these devices / streams (int or list).
    search : highlight nodes whose name or file:line contains this text (case-insensitive);
        the title says how many matched and their share.
    max_depth : show this many levels at once (click to go deeper); None shows all.
    max_nodes : draw at most this many nodes, the heaviest (keeps the figure small).
    label : name of the root (default: the trace's label).
    raw : show every recorded frame. By default framework frames (``Module._call_impl``
        plumbing, decorator wrappers, TorchDynamo glue) are folded into their callers, so
        module names (``encoder.layers.0.self_attn (MultiheadAttention)``) and your own
        frames sit next to each other.
    """
    full = flame_tree(trace, weight, device, stream, label=label, fold=not raw)
    nodes = prune(full, max_nodes)
    total = float(nodes["value"].iloc[0])
    match = _matches(nodes, search)
    colours = np.array([KIND_COLOURS.get(k, "#999999") for k in nodes["kind"]], dtype=object)
    if search:
        colours = np.where(match, MATCH_COLOUR, FADED_COLOUR)
    hover = [
        f"<b>{plotly_text(lab)}</b><br>{kind}{(' · ' + plotly_text(fl)) if fl else ''}<br>"
        f"{format_weight(v, weight)} ({100 * sh:.1f}% of total)<br>"
        f"self {format_weight(sv, weight)} · {c:,} call{'s' if c != 1 else ''}"
        for lab, kind, fl, v, sh, sv, c in zip(
            nodes["label"], nodes["kind"], nodes["file_line"], nodes["value"], nodes["share"],
            nodes["self_value"], nodes["calls"])]
    fig = go.Figure(go.Icicle(
        ids=nodes["id"].astype(str).to_numpy(),
        parents=np.where(nodes["parent"] < 0, "", nodes["parent"].astype(str)),
        labels=[plotly_text(short(s, LABEL_CHARS)) for s in nodes["label"]],
        values=nodes["value"].to_numpy(dtype=np.float64),
        branchvalues="total",
        marker=dict(colors=colours, line=dict(width=0.5, color="white")),
        customdata=np.asarray(hover, dtype=object),
        hovertemplate="%{customdata}<extra></extra>",
        maxdepth=max_depth if max_depth else -1,
        tiling=dict(orientation="v"),
        sort=False,
    ))
    what = {"time": "GPU time", "launches": "launches", "bytes": "bytes copied"}[weight]
    title = (f"{what} by launching call path — {plotly_text(nodes['label'].iloc[0])}: "
             f"{format_weight(total, weight)}")
    filters = [f"device {device}" if device is not None else "",
               f"stream {stream}" if stream is not None else ""]
    if any(filters):
        title += " (" + ", ".join(f for f in filters if f) + ")"
    if search:
        # a matching node's descendants would count twice; sum the outermost matches only
        outer = match & ~_ancestor_matches(nodes, match)
        share = float(nodes.loc[outer, "value"].sum()) / total if total else 0.0
        title += (f"<br><sup>search {plotly_text(repr(search))}: {int(match.sum())} nodes, "
                  f"{100 * share:.1f}% of total</sup>")
    if len(nodes) < len(full):
        title += (f"<br><sup>showing the {len(nodes):,} heaviest of {len(full):,} nodes "
                  f"(max_nodes)</sup>")
    fig.update_layout(title=dict(text=title, x=0.01), margin=dict(l=5, r=5, t=60, b=5),
                      height=600)
    return fig


def _ancestor_matches(nodes: pd.DataFrame, match: np.ndarray) -> np.ndarray:
    """Whether some strict ancestor of each node matches (nodes come parents-first)."""
    pos = {i: k for k, i in enumerate(nodes["id"].to_numpy())}
    parent = nodes["parent"].to_numpy()
    out = np.zeros(len(nodes), dtype=bool)
    for k in range(len(nodes)):
        p = pos.get(int(parent[k]))
        if p is not None:
            out[k] = out[p] or match[p]
    return out


def diff_figure(a: Any, b: Any, weight: Weight = "time", device: int | Iterable[int] | None = None,
                stream: int | Iterable[int] | None = None, search: str | None = None,
                max_depth: int | None = None, max_nodes: int = MAX_NODES,
                raw: bool = False) -> go.Figure:
    """Differential flame graph from trace ``a`` (before) to trace ``b`` (after).

    A cell's width is its weight in both traces together, so code that vanished or appeared
    stays visible; its colour is log2(after / before): red got slower (or is new), blue got
    faster (or is gone), white did not change. Frames are matched by file and function,
    not line, so an edit that shifts lines still lines up. ``raw``: as in :func:`flame_figure`.
    """
    d = prune(flame_diff(a, b, weight, device, stream, fold=not raw), max_nodes)
    with np.errstate(divide="ignore", invalid="ignore"):
        shade = np.clip(np.log2(d["ratio"].to_numpy(dtype=np.float64)), -2.0, 2.0)
    shade = np.where(np.isnan(shade), 0.0, shade)
    match = _matches(d.assign(file_line=d["file_line"].fillna("")), search)
    hover = [
        f"<b>{plotly_text(lab)}</b><br>{kind}{(' · ' + plotly_text(fl)) if fl else ''}<br>"
        f"before {format_weight(va, weight)} · after {format_weight(vb, weight)}<br>"
        f"change {'+' if dv >= 0 else '−'}{format_weight(abs(dv), weight)}"
        f"{'' if not np.isfinite(r) else f' (×{r:.2f})'} · {st}<br>"
        f"calls {ca:,} → {cb:,}"
        for lab, kind, fl, va, vb, dv, r, st, ca, cb in zip(
            d["label"], d["kind"], d["file_line"], d["value_a"], d["value_b"], d["delta"],
            d["ratio"], d["status"], d["calls_a"], d["calls_b"])]
    marker: dict[str, Any] = dict(colors=shade, colorscale="RdBu_r", cmin=-2, cmax=2, cmid=0,
                                  showscale=True, line=dict(width=[2.5 if m else 0.5 for m in match],
                                                            color=["black" if m else "white"
                                                                   for m in match]),
                                  colorbar=dict(title="log2(after/before)", tickvals=[-2, -1, 0, 1, 2],
                                                ticktext=["≤ ¼×", "½×", "same", "2×", "≥ 4×"]))
    fig = go.Figure(go.Icicle(
        ids=d["id"].astype(str).to_numpy(),
        parents=np.where(d["parent"] < 0, "", d["parent"].astype(str)),
        labels=[plotly_text(short(str(s), LABEL_CHARS)) for s in d["label"]],
        values=d["value"].to_numpy(dtype=np.float64),
        branchvalues="total", marker=marker,
        customdata=np.asarray(hover, dtype=object),
        hovertemplate="%{customdata}<extra></extra>",
        maxdepth=max_depth if max_depth else -1, tiling=dict(orientation="v"), sort=False,
    ))
    before, after = float(d["value_a"].iloc[0]), float(d["value_b"].iloc[0])
    change = f"{100 * (after - before) / before:+.1f}%" if before else "new"
    root = str(d["label"].iloc[0])
    side_a, _, side_b = root.partition(" → ")
    if side_a == side_b:    # two parts of one capture: name the sides, not the label twice
        root = f"{side_a}, before → after"
    title = (f"Differential flame graph, {plotly_text(root)}: "
             f"{format_weight(before, weight)} → {format_weight(after, weight)} ({change})"
             "<br><sup>width: both traces together · red: slower or new · blue: faster or "
             "gone</sup>")
    fig.update_layout(title=dict(text=title, x=0.01), margin=dict(l=5, r=5, t=70, b=5),
                      height=600)
    return fig
