"""Figures of a :class:`~hookmagic.traceset.TraceSet`: one row per rank, stragglers, per-kernel
differences against the median rank. They only draw what :mod:`hookmagic.analysis.ranks`
returns; the size of each figure is bounded whatever the number of kernels (the timeline draws
merged busy intervals, at most ``max_intervals_per_rank`` per rank and kind)."""
from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from hookmagic.analysis import ranks as analysis

COLOURS = {"compute": "#1f77b4", "comm": "#d62728"}
LABELS = {"compute": "compute kernels", "comm": "NCCL collectives"}


def _recorded_on(ts: Any) -> str:
    notes = {str(m.meta.get("recorded_on", "")) for m in ts.members if m.meta}
    notes.discard("")
    return f" (recorded on {', '.join(sorted(notes))})" if notes else ""


def rank_timeline_figure(ts: Any, *, max_intervals_per_rank: int = 4000,
                         title: str | None = None) -> go.Figure:
    """Timeline with one row per rank: when compute kernels and NCCL collectives ran, on the
    clock of the reference rank (``ts.clock()`` says how the ranks were aligned)."""
    iv = analysis.busy_intervals(ts, max_intervals_per_rank=max_intervals_per_rank)
    fig = go.Figure()
    t0 = int(iv["start_ns"].min()) if len(iv) else 0
    for kind in ("compute", "comm"):
        part = iv[iv["kind"] == kind]
        if part.empty:
            continue
        y = np.repeat(part["rank"].map(lambda r: f"rank {r}").to_numpy(), 3)
        x = np.empty(3 * len(part))
        x[0::3] = (part["start_ns"].to_numpy() - t0) / 1e6
        x[1::3] = (part["end_ns"].to_numpy() - t0) / 1e6
        x[2::3] = np.nan
        y = y.astype(object)
        y[2::3] = None
        fig.add_trace(go.Scattergl(x=x, y=y, mode="lines", name=LABELS[kind],
                                   line=dict(color=COLOURS[kind], width=10 if kind == "compute"
                                             else 6), hoverinfo="x+y+name"))
    missing = ts.problems
    note = (f"; no data from rank(s) {', '.join(map(str, missing['rank']))}"
            if len(missing) else "")
    fig.update_layout(
        title=title or f"{len(ts.data_ranks)} ranks, one row each{note}{_recorded_on(ts)}",
        xaxis_title="ms from the first kernel (reference rank's clock)",
        yaxis=dict(categoryorder="array",
                   categoryarray=[f"rank {r}" for r in sorted(ts.data_ranks, reverse=True)]),
        height=max(220, 60 + 40 * len(ts.data_ranks)), legend=dict(orientation="h"))
    return fig


def straggler_chart(ts: Any, *, title: str | None = None) -> go.Figure:
    """Bars per step: how late the last rank arrived at a collective, coloured by which rank,
    with the cause (compute or host) in the hover text."""
    st = analysis.stragglers(ts)
    fig = go.Figure()
    label = "step" if len(st) and (st["step"] >= 0).any() else "collective"
    xs = st["step"] if label == "step" else np.arange(len(st))
    for rank in sorted(st["straggler_rank"].unique()) if len(st) else []:
        sel = st["straggler_rank"] == rank
        fig.add_trace(go.Bar(
            x=np.asarray(xs)[sel.to_numpy()], y=st.loc[sel, "lateness_ns"] / 1e6,
            name=f"rank {rank} last",
            customdata=np.stack([st.loc[sel, "cause"], st.loc[sel, "collective"],
                                 st.loc[sel, "seq"]], axis=1),
            hovertemplate=(f"{label} %{{x}}: rank {rank} %{{y:.3f}} ms late at "
                           "%{customdata[1]} #%{customdata[2]} (cause: %{customdata[0]})"
                           "<extra></extra>")))
    fig.update_layout(title=title or f"Last rank to reach a collective, per {label}"
                      f"{_recorded_on(ts)}",
                      xaxis_title=label, yaxis_title="lateness (ms)", barmode="group",
                      height=360)
    return fig


def vs_median_heatmap(ts: Any, *, top: int = 20, title: str | None = None) -> go.Figure:
    """Heat map of each rank's GPU time per kernel name minus the median rank's (ms)."""
    long = analysis.vs_median(ts, top=top)
    wide = long.pivot_table(index="name", columns="rank", values="delta_ns", fill_value=0)
    wide = wide.reindex(long.drop_duplicates("name")["name"])
    names = [n if len(n) <= 60 else n[:57] + "..." for n in wide.index]
    z = wide.to_numpy() / 1e6
    lim = float(np.nanmax(np.abs(z))) if z.size else 1.0
    fig = go.Figure(go.Heatmap(z=z, x=[f"rank {r}" for r in wide.columns], y=names,
                               colorscale="RdBu_r", zmin=-lim, zmax=lim,
                               colorbar=dict(title="ms vs median")))
    fig.update_layout(title=title or f"GPU time per kernel against the median rank"
                      f"{_recorded_on(ts)}", height=max(300, 60 + 22 * len(names)),
                      yaxis=dict(autorange="reversed"))
    return fig
