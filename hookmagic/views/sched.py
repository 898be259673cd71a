"""Plotly figures of scheduling results. Each draws a table that :mod:`hookmagic.sched.metrics`
returned (or a result's own tables); none computes metrics itself.

Several results can be overlaid (simulated beside real): pass ``{"sim": frame, "real": frame}``
where a single frame is accepted.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from hookmagic.common.format import plotly_text

__all__ = ["latency_cdf_figure", "p99_vs_slo_figure", "batch_histogram_figure", "gantt_figure",
           "queue_depth_figure", "MODEL_COLOURS"]

MODEL_COLOURS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6",
                 "#9d755d"]
_DASH = {0: "solid", 1: "dash", 2: "dot", 3: "dashdot"}


def _runs(frames: pd.DataFrame | Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    return dict(frames) if isinstance(frames, Mapping) else {"": frames}


def _colour(names: list, name) -> str:
    return MODEL_COLOURS[names.index(name) % len(MODEL_COLOURS)] if name in names else "#888"


def _layout(fig: go.Figure, title: str, **kw) -> go.Figure:
    fig.update_layout(title=title, template="plotly_white", height=kw.pop("height", 340),
                      margin=dict(l=60, r=20, t=50, b=45), legend=dict(orientation="h", y=-0.2),
                      **kw)
    return fig


def latency_cdf_figure(cdf: pd.DataFrame | Mapping[str, pd.DataFrame], by: str = "model",
                       log_x: bool = True) -> go.Figure:
    """Latency CDF per model (from :func:`metrics.latency_cdf`); one line style per run."""
    fig = go.Figure()
    runs = _runs(cdf)
    names = sorted({m for f in runs.values() for m in f[by].unique()}, key=str)
    for k, (run, frame) in enumerate(runs.items()):
        for name, g in frame.groupby(by, sort=True, observed=True):
            label = plotly_text(f"{name} {run}".strip())   # names from a file: literal text
            fig.add_trace(go.Scatter(x=g["latency_ms"], y=g["fraction"], mode="lines", name=label,
                                     line=dict(color=_colour(names, name), dash=_DASH[k % 4]),
                                     hovertemplate="%{x:.2f} ms: %{y:.1%}<extra>" + label + "</extra>"))
    fig.update_xaxes(title="latency (ms)", type="log" if log_x else "linear", tickformat=",~f")
    fig.update_yaxes(title="fraction of served requests", range=[0, 1.01])
    return _layout(fig, "Latency CDF per model")


def p99_vs_slo_figure(summary: pd.DataFrame | Mapping[str, pd.DataFrame]) -> go.Figure:
    """p99 latency per model (bars, one group per run) against each model's SLO (markers)."""
    fig = go.Figure()
    runs = _runs(summary)
    for run, s in runs.items():
        fig.add_trace(go.Bar(x=[plotly_text(i) for i in s.index], y=s["p99_ms"],
                             name=plotly_text(f"p99 {run}".strip()),
                             text=[f"{v:.1f}" for v in s["p99_ms"]], textposition="outside"))
    first = next(iter(runs.values()))
    if "slo_ms" in first:
        fig.add_trace(go.Scatter(x=[plotly_text(i) for i in first.index], y=first["slo_ms"], mode="markers",
                                 name="SLO", marker=dict(symbol="line-ew-open", size=40,
                                                         line=dict(width=3, color="#d62728"))))
    fig.update_yaxes(title="ms", tickformat=",~f")
    return _layout(fig, "p99 latency vs SLO", barmode="group")


def batch_histogram_figure(hist: pd.DataFrame | Mapping[str, pd.DataFrame], by: str = "model") -> go.Figure:
    """Which batch sizes were formed (from :func:`metrics.batch_histogram`), per model."""
    fig = go.Figure()
    runs = _runs(hist)
    names = sorted({m for f in runs.values() for m in f[by].unique()}, key=str)
    for k, (run, h) in enumerate(runs.items()):
        for name, g in h.groupby(by, sort=True, observed=True):
            fig.add_trace(go.Bar(x=g["size"], y=g["share"], name=plotly_text(f"{name} {run}".strip()),
                                 marker=dict(color=_colour(names, name),
                                             pattern_shape="" if k == 0 else "/"),
                                 hovertemplate="size %{x}: %{y:.1%} of batches<extra></extra>"))
    fig.update_xaxes(title="batch size", dtick=1)
    fig.update_yaxes(title="share of the model's batches", tickformat=".0%")
    return _layout(fig, "Batch sizes formed", barmode="group")


def gantt_figure(batches: pd.DataFrame, t0: float | None = None, span_s: float = 0.25,
                 max_batches: int = 3000) -> go.Figure:
    """Batches per stream over a window (``span_s`` seconds from ``t0``; default: the middle).

    One horizontal bar per batch, coloured by model, labelled with its size. At most
    ``max_batches`` are drawn so the figure stays small.
    """
    fig = go.Figure()
    if batches.empty:
        return _layout(fig, "Batches per stream")
    if t0 is None:
        mid = 0.5 * (batches["start_s"].min() + batches["end_s"].max())
        t0 = max(float(batches["start_s"].min()), mid - span_s / 2)
    b = batches[(batches["end_s"] >= t0) & (batches["start_s"] <= t0 + span_s)].head(max_batches)
    names = sorted(batches["model"].unique(), key=str)
    for name, g in b.groupby("model", sort=True, observed=True):
        fig.add_trace(go.Bar(
            base=g["start_s"] * 1e3, x=(g["end_s"] - g["start_s"]) * 1e3,
            y=[f"stream {s}" for s in g["stream"]], orientation="h", name=plotly_text(name),
            marker=dict(color=_colour(names, name), line=dict(width=0.5, color="white")),
            text=g["size"].astype(str), textposition="inside", insidetextanchor="middle",
            customdata=np.stack([g["size"], g["compute_ms"]], axis=1),
            hovertemplate="size %{customdata[0]}, %{customdata[1]:.2f} ms<extra>" + plotly_text(name)
                          + "</extra>"))
    fig.update_xaxes(title="time (ms)", tickformat=",~f")
    fig.update_yaxes(categoryorder="category descending")
    return _layout(fig, f"Batches per stream ({span_s * 1e3:g} ms window)", barmode="overlay")


def queue_depth_figure(depth: pd.DataFrame, by: str = "model", max_points: int = 5000) -> go.Figure:
    """Requests waiting over time per model (from :func:`metrics.queue_depth`), as steps."""
    fig = go.Figure()
    names = sorted(depth[by].unique(), key=str) if len(depth) else []
    for name, g in depth.groupby(by, sort=True, observed=True):
        if len(g) > max_points:  # keep the peaks: max per time bucket
            bucket = pd.cut(g["time_s"], max_points // 2, labels=False)
            g = g.loc[g.groupby(bucket)["depth"].idxmax()]
        fig.add_trace(go.Scatter(x=g["time_s"], y=g["depth"], mode="lines", line_shape="hv",
                                 name=plotly_text(name), line=dict(color=_colour(names, name))))
    fig.update_xaxes(title="time (s)")
    fig.update_yaxes(title="requests waiting")
    return _layout(fig, "Queue depth")
