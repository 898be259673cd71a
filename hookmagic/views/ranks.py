"""Figures of a :class:`~hookmagic.traceset.TraceSet`: one row per rank, stragglers, per-kernel
differences against the median rank. They only draw what :mod:`hookmagic.analysis.ranks`
returns; the size of each figure is bounded whatever the number of kernels (the timeline draws
merged busy intervals, at most ``max_intervals_per_rank`` per rank and kind)."""
from __future__ import annotations

import html
from typing import Any

import numpy as np
import plotly.graph_objects as go

from hookmagic.analysis import ranks as analysis

COLOURS = {"compute": "#1f77b4", "comm": "#d62728"}
LABELS = {"compute": "compute kernels", "comm": "NCCL collectives"}


def _recorded_on(ts: Any) -> str:
    notes = {str(m.meta.get("recorded_on", "")) for m in ts.members if m.meta}
    notes.discard("")
    return html.escape(f" (recorded on {', '.join(sorted(notes))})") if notes else ""


def rank_timeline_figure(ts: Any, *, ranks: Any = None, max_rows: int = 64, bins: int = 400,
                         max_intervals_per_rank: int = 4000,
                         title: str | None = None) -> go.Figure:
    """Timeline of the ranks on the clock of the reference rank (``ts.clock()`` says how the
    ranks were aligned). Up to ``max_rows`` ranks: one row per rank, when compute kernels and
    NCCL collectives ran. More: a heat map whose rows are groups of consecutive ranks and whose
    colour is the share of the time bin their GPUs spent in NCCL collectives (the compute share
    in the hover); ``ranks=[...]`` (or a range) zooms to those ranks."""
    selected = [r for r in ts.data_ranks if ranks is None or r in set(int(x) for x in ranks)]
    if len(selected) > max_rows:
        return _grouped_timeline(ts, selected, max_rows, bins, max_intervals_per_rank, title)
    iv = analysis.busy_intervals(ts, max_intervals_per_rank=max_intervals_per_rank,
                                 ranks=selected)
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
    fig.update_layout(
        title=title or f"{len(selected)} ranks, one row each{_missing(ts)}{_recorded_on(ts)}",
        xaxis_title="ms from the first kernel (reference rank's clock)",
        yaxis=dict(categoryorder="array",
                   categoryarray=[f"rank {r}" for r in sorted(selected, reverse=True)]),
        height=max(220, 60 + 40 * len(selected)), legend=dict(orientation="h"))
    return fig


def _missing(ts: Any) -> str:
    missing = ts.problems
    if not len(missing):
        return ""
    shown = ", ".join(map(str, missing["rank"].head(8)))
    more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
    return f"; no data from rank(s) {shown}{more}"


def _grouped_timeline(ts: Any, selected: list[int], max_rows: int, bins: int,
                      max_intervals: int, title: str | None) -> go.Figure:
    per_row = -(-len(selected) // max_rows)
    groups = np.full(max(selected) + 1, -1, dtype=np.int64)
    groups[np.asarray(selected)] = np.arange(len(selected)) // per_row
    iv = analysis.busy_intervals(ts, max_intervals_per_rank=max_intervals, ranks=selected)
    t0 = int(iv["start_ns"].min()) if len(iv) else 0
    t1 = int(iv["end_ns"].max()) if len(iv) else 1
    edges = np.linspace(t0, max(t1, t0 + 1), bins + 1).round().astype(np.int64)
    comm = analysis.busy_share(iv[iv["kind"] == "comm"], groups, edges)
    compute = analysis.busy_share(iv[iv["kind"] == "compute"], groups, edges)
    rows = int(groups.max()) + 1
    comm = np.pad(comm, ((0, rows - comm.shape[0]), (0, 0)))
    compute = np.pad(compute, ((0, rows - compute.shape[0]), (0, 0)))
    labels = []
    for k in range(rows):
        members = [r for r in selected if groups[r] == k]
        labels.append(f"ranks {members[0]}-{members[-1]}" if len(members) > 1
                      else f"rank {members[0]}")
    x = (edges[:-1] + np.diff(edges) / 2 - t0) / 1e6
    fig = go.Figure(go.Heatmap(
        z=comm, x=x, y=labels, customdata=compute, colorscale="Reds", zmin=0, zmax=1,
        colorbar=dict(title="share in NCCL"),
        hovertemplate="%{y}, %{x:.3f} ms: NCCL %{z:.0%}, compute %{customdata:.0%}"
                      "<extra></extra>"))
    fig.update_layout(
        title=title or (f"{len(selected)} ranks, {per_row} per row (pass ranks=[...] to zoom)"
                        f"{_missing(ts)}{_recorded_on(ts)}"),
        xaxis_title="ms from the first kernel (reference rank's clock)",
        yaxis=dict(autorange="reversed"), height=max(300, 60 + 12 * rows))
    return fig


def straggler_chart(ts: Any, *, max_legend: int = 20, title: str | None = None) -> go.Figure:
    """Bars per step: how late the last rank arrived at a collective, coloured by which rank
    (one legend entry per rank up to ``max_legend`` ranks, a colour scale beyond), with the
    cause (compute or host) in the hover text."""
    st = analysis.stragglers(ts)
    fig = go.Figure()
    label = "step" if len(st) and (st["step"] >= 0).any() else "collective"
    xs = st["step"] if label == "step" else np.arange(len(st))
    distinct = sorted(st["straggler_rank"].unique()) if len(st) else []
    if len(distinct) > max_legend:
        # many ranks: one series, the rank as the bar's colour and in the hover
        fig.add_trace(go.Bar(
            x=np.asarray(xs), y=st["lateness_ns"] / 1e6, name="last rank",
            marker=dict(color=st["straggler_rank"], colorscale="Viridis",
                        colorbar=dict(title="rank")),
            customdata=np.stack([st["cause"], st["collective"], st["seq"],
                                 st["straggler_rank"]], axis=1),
            hovertemplate=(f"{label} %{{x}}: rank %{{customdata[3]}} %{{y:.3f}} ms late at "
                           "%{customdata[1]} #%{customdata[2]} (cause: %{customdata[0]})"
                           "<extra></extra>")))
        distinct = []
    for rank in distinct:
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
    # kernel names come from the files: escaped, Plotly renders tags in tick labels
    names = [html.escape(n if len(n) <= 60 else n[:57] + "...") for n in map(str, wide.index)]
    z = wide.to_numpy() / 1e6
    lim = float(np.nanmax(np.abs(z))) if z.size else 1.0
    fig = go.Figure(go.Heatmap(z=z, x=[f"rank {r}" for r in wide.columns], y=names,
                               colorscale="RdBu_r", zmin=-lim, zmax=lim,
                               colorbar=dict(title="ms vs median")))
    fig.update_layout(title=title or f"GPU time per kernel against the median rank"
                      f"{_recorded_on(ts)}", height=max(300, 60 + 22 * len(names)),
                      yaxis=dict(autorange="reversed"))
    return fig
