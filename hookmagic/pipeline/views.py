"""Plotly views of a pipeline run: per-frame Gantt, stage bars, queue depth, fps vs p99."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hookmagic.common.format import plotly_text
from hookmagic.pipeline.analysis import (bottleneck, kernels_by_frame, queue_depth, require_events,
                                         stage_stats)
from hookmagic.pipeline.run import PipelineRun

_COLORS = ["#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692",
           "#B6E880"]


def _go():
    import plotly.graph_objects as go
    return go


def frame_gantt_figure(run: PipelineRun, frames: int = 40, start: int = 0,
                       title: str | None = None, trace: Any = None):
    """Frames ``start`` .. ``start+frames`` as rows; per stage a bar while it ran (solid), the
    queue wait before it (faint), and for GPU stages the CUDA-event span (dark, thin). With
    ``trace`` (a capture taken around the run) each frame's GPU kernels are drawn too."""
    require_events(run, "gantt")
    go = _go()
    ev = run.events
    ids = sorted(ev["frame"].unique())[start:start + frames]
    ev = ev[ev["frame"].isin(ids)]
    t0 = int(min(run.events["enqueue_ns"].min(), run.events["start_ns"].min()))
    fig = go.Figure()
    for i, stage in enumerate(run.stage_names):
        sub = ev[ev["stage"] == stage]
        if sub.empty:
            continue
        c = _COLORS[i % len(_COLORS)]
        shown = plotly_text(stage)   # a name from a file: literal text in Plotly, never markup
        y = [f"frame {f}" for f in sub["frame"]]
        wait = (sub["start_ns"] - sub["enqueue_ns"]) / 1e6
        fig.add_bar(y=y, x=wait, base=(sub["enqueue_ns"] - t0) / 1e6, orientation="h",
                    marker_color=c, opacity=0.25, name=f"{shown} (queued)", legendgroup=shown,
                    showlegend=bool((wait > 0).any()),
                    hovertemplate=f"{shown} queue wait %{{x:.2f}} ms<extra></extra>")
        fig.add_bar(y=y, x=(sub["end_ns"] - sub["start_ns"]) / 1e6,
                    base=(sub["start_ns"] - t0) / 1e6, orientation="h", marker_color=c,
                    name=shown, legendgroup=shown, customdata=np.stack(
                        [sub["batch"], sub["worker"]], axis=-1),
                    hovertemplate=f"{shown} %{{x:.2f}} ms, batch %{{customdata[0]}}, worker "
                                  "%{customdata[1]}<extra></extra>")
        gpu = sub[sub["gpu_start_ns"] >= 0]
        if not gpu.empty:
            fig.add_bar(y=[f"frame {f}" for f in gpu["frame"]],
                        x=(gpu["gpu_end_ns"] - gpu["gpu_start_ns"]) / 1e6,
                        base=(gpu["gpu_start_ns"] - t0) / 1e6, orientation="h", width=0.3,
                        marker_color="black", name=f"{shown} on the GPU", legendgroup=shown,
                        hovertemplate=f"{shown} GPU %{{x:.2f}} ms<extra></extra>")
    if trace is not None:
        k = kernels_by_frame(run, trace)
        k = k[k["frame"].isin(ids)]
        if not k.empty:
            fig.add_bar(y=[f"frame {f}" for f in k["frame"]], x=(k["end_ns"] - k["start_ns"]) / 1e6,
                        base=(k["start_ns"] - t0) / 1e6, orientation="h", width=0.15,
                        marker_color="#FFD700", name="kernels (CUPTI)", customdata=k[["name"]].map(plotly_text),
                        hovertemplate="%{customdata[0]} %{x:.3f} ms<extra></extra>")
    fig.update_layout(barmode="overlay", title=title or f"Per-frame stages — {plotly_text(run.label)}",
                      xaxis_title="ms after the run started", height=max(300, 18 * len(ids)),
                      yaxis={"autorange": "reversed"}, legend={"orientation": "h"})
    return fig


def stages_figure(run: PipelineRun, title: str | None = None):
    """Per stage: latency p50 with p99 whiskers, and utilisation; the bottleneck in red."""
    require_events(run, "stage_chart")
    go = _go()
    from plotly.subplots import make_subplots

    st = stage_stats(run)
    bn = bottleneck(run).stage
    colors = ["#EF553B" if s == bn else "#636EFA" for s in st.index]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("latency per execution (ms)",
                                                        "utilisation per worker"))
    names = [plotly_text(s) for s in st.index]
    fig.add_trace(go.Bar(x=names, y=st["p50_ms"], marker_color=colors, name="p50",
                         error_y={"type": "data", "symmetric": False,
                                  "array": st["p99_ms"] - st["p50_ms"], "arrayminus": 0 * st["p50_ms"]},
                         hovertemplate="%{x}: p50 %{y:.2f} ms<extra></extra>"), 1, 1)
    fig.add_trace(go.Bar(x=names, y=st["utilisation"], marker_color=colors,
                         name="utilisation", hovertemplate="%{x}: %{y:.0%}<extra></extra>"), 1, 2)
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=1, col=2)
    fig.update_layout(showlegend=False, title=title or (
        f"Stages (bottleneck: {plotly_text(bn) if bn else 'none, source-paced'}) — "
        f"{plotly_text(run.label)}"))
    return fig


def queues_figure(run: PipelineRun, title: str | None = None):
    """Depth of each stage's input queue over the run (step lines), queue capacity dashed."""
    go = _go()
    fig = go.Figure()
    for i, stage in enumerate(run.stage_names[1:], start=1):
        q = queue_depth(run, stage)
        fig.add_scatter(x=q["t_ms"], y=q["depth"], mode="lines", line_shape="hv", name=plotly_text(stage),
                        line_color=_COLORS[i % len(_COLORS)])
    fig.add_hline(y=run.meta["queue_size"], line_dash="dash", annotation_text="queue size")
    fig.update_layout(title=title or f"Input queue depth — {plotly_text(run.label)}",
                      xaxis_title="ms after the run started", yaxis_title="frames waiting")
    return fig


def sweep_figure(table: pd.DataFrame, title: str = "fps vs p99 latency", label: Any = "config"):
    """One point per configuration of a sweep table (columns fps, p99_ms and ``label``)."""
    go = _go()
    fig = go.Figure(go.Scatter(x=table["p99_ms"], y=table["fps"], mode="markers+text",
                               text=table[label].astype(str).map(plotly_text),
                               textposition="top center",
                               hovertemplate="%{text}: %{y:.1f} fps, p99 %{x:.1f} ms<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="end-to-end p99 (ms)", yaxis_title="frames/s")
    return fig
