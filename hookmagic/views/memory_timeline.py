"""Memory over time, fragmentation over time, and the what-if table — drawing only.

Each function draws a DataFrame an analysis returned:
:func:`~hookmagic.analysis.memory.memory_over_time`,
:func:`~hookmagic.analysis.memory.memory_by`,
:func:`~hookmagic.analysis.fragmentation.fragmentation_over_time`,
:func:`~hookmagic.memory.replay.what_if`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from hookmagic.common.format import MiB



def _envelope(t: np.ndarray, ys: list[np.ndarray], points: int = 3000):
    """At most ``points`` samples; each keeps the maximum of its bucket so peaks survive."""
    n = len(t)
    if n <= points:
        return t, ys
    edges = np.linspace(0, n, points + 1).astype(np.int64)[:-1]
    return t[edges], [np.maximum.reduceat(y, edges) for y in ys]


def memory_timeline_figure(over_time: pd.DataFrame, by: pd.DataFrame | None = None,
                           title: str = "GPU memory over time") -> go.Figure:
    """Reserved / allocated / requested lines, and (with ``by``) allocated bytes stacked by
    category (allocating line, pool, ...) underneath."""
    rows = 2 if by is not None else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=(["reserved vs allocated vs requested"]
                                        + (["allocated, by category"] if by is not None else [])))
    t = over_time["time_ns"].to_numpy()
    t0 = t[0] if len(t) else 0
    cols = ["reserved", "allocated", "requested"]
    tt, ys = _envelope((t - t0) / 1e6, [over_time[c].to_numpy() for c in cols])
    for c, y, dash in zip(cols, ys, ("solid", "solid", "dot")):
        fig.add_trace(go.Scatter(x=tt, y=y / MiB, name=c, mode="lines", line_shape="hv",
                                 line_dash=dash), row=1, col=1)
    if by is not None:
        cats = [c for c in by.columns if c != "time_ns"]
        tb = by["time_ns"].to_numpy()
        tt, ys = _envelope((tb - t0) / 1e6, [by[c].to_numpy() for c in cats])
        for c, y in zip(cats, ys):
            fig.add_trace(go.Scatter(x=tt, y=y / MiB, name=c, mode="lines", stackgroup="by",
                                     line_shape="hv"), row=2, col=1)
    fig.update_yaxes(title_text="MiB")
    fig.update_xaxes(title_text="time since start (ms)", row=rows, col=1)
    fig.update_xaxes(tickformat=",~f")         # 14,960, not plotly's SI "14.96k" (ms)
    fig.update_layout(title=title, height=320 * rows + 80, hovermode="x unified")
    return fig


def fragmentation_figure(frag: pd.DataFrame,
                         title: str = "largest free block vs total free") -> go.Figure:
    """Total free (reserved-but-unallocated) and the largest free block over time, with
    external fragmentation (1 - largest / free) on the right axis."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    t = frag["time_ns"].to_numpy()
    t0 = t[0] if len(t) else 0
    tt, (free, largest, ext) = _envelope((t - t0) / 1e6, [frag["free"].to_numpy(),
                                                          frag["largest_free"].to_numpy(),
                                                          frag["external"].to_numpy()])
    fig.add_trace(go.Scatter(x=tt, y=free / MiB, name="total free", line_shape="hv",
                             fill="tozeroy"), secondary_y=False)
    fig.add_trace(go.Scatter(x=tt, y=largest / MiB, name="largest free block",
                             line_shape="hv"), secondary_y=False)
    fig.add_trace(go.Scatter(x=tt, y=ext, name="external fragmentation", line_shape="hv",
                             line_dash="dot"), secondary_y=True)
    fig.update_yaxes(title_text="MiB", secondary_y=False)
    fig.update_yaxes(title_text="1 - largest/free", range=[0, 1], secondary_y=True)
    fig.update_xaxes(title_text="time since start (ms)", tickformat=",~f")
    fig.update_layout(title=title, height=380, hovermode="x unified")
    return fig


def what_if_figure(table: pd.DataFrame, title: str = "what-if: replay through allocator models"
                   ) -> go.Figure:
    """The what-if table: one row per model with peak reserved and the saving."""
    show = pd.DataFrame({
        "allocator": table["model"],
        # a space after each comma lets a long setting wrap inside its cell
        "PYTORCH_CUDA_ALLOC_CONF": table["setting"].replace("", "-").str.replace(",", ", "),
        "peak reserved (MiB)": (table["peak_reserved"] / MiB).round(1),
        "peak allocated (MiB)": (table["peak_allocated"] / MiB).round(1),
        "waste at peak": (100 * table["waste_at_peak"]).round(1).astype(str) + " %",
        "device allocs": table["device_allocs"],
        "saved (MiB)": (table["saved_bytes"] / MiB).round(1),
        "saved": table["saved_pct"].round(1).astype(str) + " %",
    })
    fig = go.Figure(go.Table(
        columnwidth=[2.2, 3.2, 1, 1, 1, 1, 1, 1],
        header={"values": list(show.columns), "align": "left", "fill_color": "#e8eef7",
                "height": 40},
        cells={"values": [show[c] for c in show.columns], "align": "left", "height": 24}))
    # a go.Table scrolls inside its figure, so the figure must be tall enough for every row,
    # counting rows whose text wraps (long allocator names and settings)
    fig.update_layout(title=title, height=110 + 40 + sum(24 * _lines(r) for r in show.itertuples()),
                      margin=dict(l=10, r=10, t=60, b=10))
    return fig


def _lines(row: tuple, chars: tuple[int, ...] = (22, 32)) -> int:
    """Lines a what-if row needs: its two text columns wrap at about ``chars`` characters."""
    texts = (str(row[1]), str(row[2]))
    return max(1, *(-(-len(t) // c) for t, c in zip(texts, chars)))
