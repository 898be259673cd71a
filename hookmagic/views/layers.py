"""Plotly figures of layer profiles. Each function draws what an analysis in
:mod:`hookmagic.layers` returned; none computes anything itself.

All return ``plotly.graph_objects.Figure`` (rendered by JupyterLab as Plotly JSON, so saved
notebooks stay deterministic).
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from hookmagic.common.format import short

_HEIGHT_PER_BAR = 22
_PRECISION_COLORS = {"FP32": "#4c78a8", "TF32": "#72b7b2", "FP16": "#f58518", "BF16": "#e45756",
                     "FP8": "#b279a2", "INT8": "#54a24b", "INT4": "#9d755d", "FP4": "#bab0ac",
                     "Unknown": "#999999"}


def layer_bars(layers: pd.DataFrame, color: str = "precision", title: str = "Slowest layers") -> go.Figure:
    """Horizontal bars of layers' mean time (e.g. ``top_layers(...)`` or ``filter_layers(...)``),
    first row on top, coloured by ``color`` (precision or type)."""
    fig = go.Figure()
    keys = list(dict.fromkeys(layers[color])) if len(layers) else []
    for key in keys:
        sel = layers[layers[color] == key]
        fig.add_bar(
            y=[f"{o}: {short(n)}" for o, n in zip(sel["order"], sel["name"])],
            x=sel["mean_ms"], orientation="h", name=str(key),
            marker_color=_PRECISION_COLORS.get(key) if color == "precision" else None,
            customdata=sel[["name", "type", "precision"]].to_numpy(),
            hovertemplate="%{customdata[0]}<br>%{customdata[1]}, %{customdata[2]}"
                          "<br>%{x:.4f} ms<extra></extra>")
    order = [f"{o}: {short(n)}" for o, n in zip(layers["order"], layers["name"])]
    fig.update_layout(title=title, xaxis_title="mean time per inference (ms)", barmode="stack",
                      height=max(260, 80 + _HEIGHT_PER_BAR * len(layers)),
                      yaxis={"categoryorder": "array", "categoryarray": order[::-1]},
                      legend_title=color, margin={"l": 10, "r": 10, "t": 40, "b": 40})
    return fig


def time_by_bars(table: pd.DataFrame, column: str, title: str | None = None) -> go.Figure:
    """Bars of a ``time_by(...)`` table: summed ms per ``column`` value, share in the hover."""
    fig = go.Figure(go.Bar(
        x=table[column].astype(str), y=table["mean_ms"],
        text=[f"{p:.1f}%" for p in table["pct"]], textposition="outside",
        customdata=table[["layers"]].to_numpy(),
        hovertemplate="%{x}: %{y:.4f} ms, %{customdata[0]} layers<extra></extra>"))
    fig.update_layout(title=title or f"Time by {column}", yaxis_title="ms per inference",
                      xaxis_title=column, margin={"t": 40})
    return fig


def treemap(layers: pd.DataFrame, path: tuple[str, ...] = ("type", "precision", "name"),
            title: str = "Layer time") -> go.Figure:
    """Treemap of layer time along ``path`` (the layers table itself is the data)."""
    return _hierarchy(go.Treemap, layers, path, title)


def sunburst(layers: pd.DataFrame, path: tuple[str, ...] = ("precision", "type"),
             title: str = "Layer time by precision and type") -> go.Figure:
    """Sunburst of layer time along ``path``."""
    return _hierarchy(go.Sunburst, layers, path, title)


def _hierarchy(trace, layers: pd.DataFrame, path: tuple[str, ...], title: str) -> go.Figure:
    # build ids/parents/values explicitly: plotly.express would need a leaf per row anyway,
    # and explicit ids keep duplicate layer names apart
    ids, labels, parents, values = [], [], [], []
    root = "all"
    ids.append(root), labels.append("all"), parents.append(""), values.append(
        float(layers["mean_ms"].sum()))
    for depth in range(1, len(path) + 1):
        keys = list(path[:depth])
        grouped = layers.groupby(keys, sort=False)["mean_ms"].sum().reset_index()
        for _, row in grouped.iterrows():
            parts = [str(row[k]) for k in keys]
            ids.append(root + "/" + "/".join(parts))
            labels.append(short(parts[-1], 40))
            parents.append(root + ("/" + "/".join(parts[:-1]) if depth > 1 else ""))
            values.append(float(row["mean_ms"]))
    fig = go.Figure(trace(ids=ids, labels=labels, parents=parents, values=values,
                          branchvalues="total",
                          hovertemplate="%{label}<br>%{value:.4f} ms<extra></extra>"))
    fig.update_layout(title=title, margin={"l": 0, "r": 0, "t": 40, "b": 0})
    return fig


def engines_stacked(table: pd.DataFrame, column: str = "type",
                    title: str | None = None) -> go.Figure:
    """Stacked bars of several engines (a ``compare.stacked(...)`` table), one bar per engine."""
    fig = go.Figure()
    for key in dict.fromkeys(table[column]):
        sel = table[table[column] == key]
        fig.add_bar(x=sel["engine"], y=sel["mean_ms"], name=str(key),
                    marker_color=_PRECISION_COLORS.get(key) if column == "precision" else None,
                    hovertemplate=f"{key}: " + "%{y:.4f} ms<extra>%{x}</extra>")
    fig.update_layout(barmode="stack", title=title or f"Layer time by {column}",
                      yaxis_title="ms per inference", legend_title=column, margin={"t": 40})
    return fig


def speedup_bars(compare: pd.DataFrame, title: str | None = None) -> go.Figure:
    """Per-layer speedup of a ``compare_layers(...)`` table (paired layers, execution order);
    bars above 1 are faster in the second engine; colour marks a precision change."""
    pairs = compare[(compare["order_a"] >= 0) & (compare["order_b"] >= 0)]
    labels = compare.attrs.get("labels", ("a", "b"))
    colors = ["#54a24b" if c else "#4c78a8" for c in pairs["precision_changed"]]
    fig = go.Figure(go.Bar(
        x=[f"{o}: {short(n, 40)}" for o, n in zip(pairs["order_a"], pairs["name_a"])],
        y=pairs["speedup"], marker_color=colors,
        customdata=pairs[["name_b", "precision_a", "precision_b", "ms_a", "ms_b"]].to_numpy(),
        hovertemplate="%{x}<br>↔ %{customdata[0]}<br>%{customdata[1]} → %{customdata[2]}"
                      "<br>%{customdata[3]:.4f} → %{customdata[4]:.4f} ms"
                      "<br>speedup %{y:.2f}×<extra></extra>"))
    fig.add_hline(y=1, line_dash="dot")
    fig.update_layout(title=title or f"Per-layer speedup, {labels[0]} → {labels[1]}",
                      yaxis_title="speedup (×)", xaxis={"showticklabels": False},
                      margin={"t": 40})
    return fig


def reconcile_bars(table: pd.DataFrame, title: str = "Layer sum vs end-to-end") -> go.Figure:
    """Bars of a ``reconcile(...)`` table: the layer sum beside each end-to-end measure."""
    fig = go.Figure(go.Bar(x=table["measure"], y=table["mean_ms"],
                           text=[f"{v:.3f} ms" for v in table["mean_ms"]], textposition="outside"))
    fig.update_layout(title=title, yaxis_title="ms per inference", margin={"t": 40})
    return fig
