"""Roofline chart: achieved FLOP/s of each kernel against its arithmetic intensity, under the
GPU's compute roofs (one per precision) and its DRAM bandwidth slope.

Points come from declared work (:func:`hookmagic.analysis.roofline.kernel_rates`) or from
hardware counters (:func:`hookmagic.analysis.roofline.measured_rates`); :func:`trace_roofline`
picks counters when the trace has them and says which in the title.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from hookmagic.analysis.counters import has_counters
from hookmagic.analysis.roofline import PEAKS, kernel_rates, measured_rates, peaks_for, roofline
from hookmagic.common.errors import InvalidArgument, Unavailable
from hookmagic.common.format import plotly_text, short

_COLORS = {"float32": "#1f77b4", "float16": "#d62728", "bfloat16": "#9467bd", "int8": "#2ca02c"}
_AXIS_X = {"declared": "arithmetic intensity (FLOP per DRAM byte, compulsory traffic)",
           "measured": "arithmetic intensity (FLOP per DRAM byte, measured traffic)"}


def roofline_figure(points: pd.DataFrame, peaks: Mapping[str, Any], title: str = "Roofline",
                    source: str = "declared") -> Any:
    """A plotly figure of :func:`hookmagic.analysis.roofline.roofline` rows (log-log axes).

    ``source`` is ``"declared"`` (work declared per launch: compulsory DRAM traffic) or
    ``"measured"`` (hardware counters: the traffic DRAM measured); it names the x axis. Points
    without a positive intensity and FLOP/s cannot sit on log axes and are left out (the title
    says how many). Kernel and range names are shown as literal text."""
    import plotly.graph_objects as go

    if source not in _AXIS_X:
        raise InvalidArgument(f"source must be one of {sorted(_AXIS_X)}, not {source!r}")
    fig = go.Figure()
    if len(points):
        x_ok = pd.to_numeric(points["intensity"], errors="coerce")
        y_ok = pd.to_numeric(points["tflops"], errors="coerce")
        placeable = np.isfinite(x_ok) & np.isfinite(y_ok) & (x_ok > 0) & (y_ok > 0)
        left_out = int((~placeable).sum())
        points = points[placeable.to_numpy()]
    else:
        left_out = 0
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
        labels = [plotly_text(s if s else short(n, 40))
                  for s, n in zip(grp.get("step", pd.Series("", index=grp.index)).fillna(""),
                                  grp["name"])]
        names = [plotly_text(short(n, 80)) for n in grp["name"]]
        fig.add_trace(go.Scatter(
            x=grp["intensity"], y=grp["tflops"], mode="markers+text", text=labels,
            customdata=names, textposition="middle right",
            marker={"size": 9, "color": _COLORS.get(p, "#333")}, name=f"{plotly_text(p)} kernels",
            hovertemplate="%{customdata}<br>%{y:.3g} TFLOP/s at %{x:.3g} FLOP/B<extra></extra>"))
    fig.update_xaxes(type="log", title=_AXIS_X[source])
    fig.update_yaxes(type="log", title="achieved TFLOP/s (INT8: TOP/s)")
    note = f" ({left_out} without FLOPs or bytes left out)" if left_out else ""
    fig.update_layout(title=f"{plotly_text(title)}{note} — peaks: {plotly_text(peaks.get('source', ''))}",
                      height=520, legend={"font": {"size": 10}},
                      margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return fig


def trace_roofline(trace: Any, peaks: Mapping[str, Any] | str | None = None,
                   title: str | None = None) -> Any:
    """The roofline of ``trace``: each kernel at its measured intensity and FLOP/s when the trace
    has hardware counters, else at its declared work; the title says which.

    ``peaks``: a mapping like :data:`hookmagic.analysis.roofline.PEAKS`'s entries, or a GPU name
    for :func:`~hookmagic.analysis.roofline.peaks_for`; by default the trace's first GPU (or the
    GPU it was recorded on). Raises :class:`~hookmagic.common.errors.Unavailable` when no peaks
    are known for it."""
    meta = getattr(trace, "meta", None) or {}
    if peaks is None or isinstance(peaks, str):
        gpus = [str(d.get("name", "")) for d in meta.get("devices") or [] if isinstance(d, Mapping)]
        names = [peaks] if isinstance(peaks, str) else gpus + [str(meta.get("recorded_on") or "")]
        found = next((pk for pk in map(peaks_for, names) if pk), None)
        if found is None:
            raise Unavailable(f"no datasheet peaks known for GPU {', '.join(n for n in names if n) or '(unknown)'}; "
                              "pass peaks={'float32': FLOP/s, 'float16': ..., 'dram': bytes/s, "
                              f"'source': '...'}} or the name of a GPU with known peaks ({', '.join(PEAKS)})")
        peaks = found
    elif not isinstance(peaks, Mapping) or "dram" not in peaks:
        raise InvalidArgument("peaks must be a GPU name or a mapping with at least 'dram' (bytes/s)")
    measured = has_counters(trace)
    rates = measured_rates(trace) if measured else kernel_rates(trace)
    points = roofline(rates, peaks)
    what = ("measured hardware counters" if measured else "declared work")
    label = meta.get("label")
    head = title or f"Roofline{f' of {label}' if label else ''}"
    return roofline_figure(points, peaks, title=f"{head}: {len(points)} kernels from {what}",
                           source="measured" if measured else "declared")
