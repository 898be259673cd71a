"""Roofline chart: achieved FLOP/s of each kernel against its arithmetic intensity, under the
GPU's compute roofs (one per precision) and its DRAM bandwidth slope."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

_COLORS = {"float32": "#1f77b4", "float16": "#d62728", "bfloat16": "#9467bd", "int8": "#2ca02c"}


def roofline_figure(points: pd.DataFrame, peaks: Mapping[str, Any], title: str = "Roofline") -> Any:
    """A plotly figure of :func:`hookmagic.analysis.roofline.roofline` rows (log-log axes)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    lo = max(float(points["intensity"].min()) / 4, 0.1) if len(points) else 0.1
    hi = max(float(points["intensity"].max()) * 4, 10.0) if len(points) else 1e4
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    bw = float(peaks["dram"])
    for p in ("float32", "float16", "bfloat16", "int8"):
        if p not in peaks or (len(points) and p not in set(points["precision"])):
            continue
        roof = np.minimum(float(peaks[p]), x * bw) / 1e12
        fig.add_trace(go.Scatter(x=x, y=roof, mode="lines", line={"color": _COLORS[p], "dash": "dot"},
                                 name=f"roof {p} ({peaks[p] / 1e12:.0f} T/s, {bw / 1e12:.2f} TB/s)"))
    for p, grp in points.groupby("precision", sort=False):
        fig.add_trace(go.Scatter(
            x=grp["intensity"], y=grp["tflops"], mode="markers+text", text=grp["step"],
            textposition="middle right", marker={"size": 9, "color": _COLORS.get(p, "#333")}, name=f"{p} kernels",
            hovertemplate="%{text}<br>%{y:.1f} TFLOP/s at %{x:.0f} FLOP/B<extra></extra>"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP per DRAM byte, compulsory traffic)")
    fig.update_yaxes(type="log", title="achieved TFLOP/s (INT8: TOP/s)")
    fig.update_layout(title=f"{title} — peaks: {peaks.get('source', '')}", height=520,
                      legend={"font": {"size": 10}}, margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return fig
