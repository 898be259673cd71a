"""The fragmentation map: each segment a row of address space, blocks coloured allocated /
rounding slack / free, a slider stepping through the recording, hover naming the allocating
line. Draws what :func:`hookmagic.analysis.fragmentation.map_steps` returns."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from hookmagic.analysis.fragmentation import map_steps
from hookmagic.analysis.memory import events_of, stack_labels, stacks_of
from hookmagic.common.format import MiB, iec_bytes, plotly_text

COLOURS = {"allocated": "#2f6db5", "slack": "#f0a030", "free": "#d9d9d9"}


def _bars(layout: pd.DataFrame, row_of: dict[int, str], labels: pd.Series,
          t0: int) -> list[go.Bar]:
    bars = []
    for kind in ("allocated", "slack", "free"):
        part = layout[layout["kind"] == kind]
        part = part[part["segment"].isin(row_of.keys())]
        seg = part["segment"].to_numpy()
        offset = (part["address"].to_numpy() - seg).astype(np.float64) / MiB
        who = pd.Series(part["stack_id"].to_numpy()).map(labels).fillna("(no stack)").to_numpy()
        if kind == "free":
            text = None
            bars.append(go.Bar(
                name=kind, orientation="h",
                y=np.fromiter((row_of[int(s)] for s in seg), dtype=np.int64, count=len(seg)),
                x=part["size"].to_numpy() / MiB, base=offset, marker_color=COLOURS[kind],
                marker_line_width=0.5, marker_line_color="white",
                hovertemplate="free: %{x:.2f} MiB<extra></extra>"))
            continue
        text = [f"{kind}: {iec_bytes(s, '.1f')}<br>block {iec_bytes(b, '.1f')} "
                f"(asked {iec_bytes(r, '.1f')})<br>{plotly_text(w)}"
                for s, b, r, w in zip(part["size"].to_numpy(), part["block_size"].to_numpy(),
                                      part["requested_size"].to_numpy(), who)]
        bars.append(go.Bar(
            name=kind, orientation="h",
            y=np.fromiter((row_of[int(s)] for s in seg), dtype=np.int64, count=len(seg)),
            x=part["size"].to_numpy() / MiB, base=offset, marker_color=COLOURS[kind],
            marker_line_width=0.5, marker_line_color="white", hovertext=text,
            hoverinfo="text", showlegend=True))
    return bars


def memory_map_figure(trace, steps: int = 30, max_segments: int = 60,
                      stacks: pd.DataFrame | None = None, title: str | None = None) -> go.Figure:
    """The fragmentation map of a Trace (or allocator-event DataFrame): ``Trace.memory_map()``.

    ``steps``: slider positions spread over the recording (plus the reserved peak);
    ``max_segments``: rows shown, largest segments first.
    """
    ev = events_of(trace)
    stacks = stacks if stacks is not None else stacks_of(trace)
    labels = stack_labels(stacks)
    idx, layouts = map_steps(ev, steps)
    fig = go.Figure()
    if not layouts:
        fig.update_layout(title=title or "fragmentation map: no allocator events")
        return fig
    # one row per segment seen at any step, largest first, keeping address order for ties
    seen = pd.concat(layouts)
    seg_size = seen.groupby("segment")["size"].sum().sort_values(ascending=False, kind="stable")
    keep = sorted(seg_size.index[:max_segments].astype(np.uint64))
    # rows are numbered (numeric arrays keep Plotly's validation fast); ticks name segments
    row_of = {int(s): k for k, s in enumerate(keep)}
    t = ev["time_ns"].to_numpy()
    t0 = int(t[0])
    start = int(np.argmax([lay["size"].sum() for lay in layouts]))
    fig.add_traces(_bars(layouts[start], row_of, labels, t0))
    fig.frames = [go.Frame(data=_bars(lay, row_of, labels, t0), name=str(int(i)))
                  for i, lay in zip(idx, layouts)]
    steps_ = [{"method": "animate", "label": f"{(t[i] - t0) / 1e6:.1f} ms",
               "args": [[str(int(i))], {"mode": "immediate", "frame": {"duration": 0,
                                                                    "redraw": True},
                                        "transition": {"duration": 0}}]} for i in idx]
    fig.update_layout(
        title=title or "fragmentation map (rows: segments; x: offset in MiB)",
        barmode="overlay", bargap=0.15, height=max(300, 22 * len(row_of) + 160),
        xaxis_title="offset in segment (MiB)",
        yaxis={"tickmode": "array", "tickvals": list(range(len(keep))),
               "ticktext": [f"{int(s):#x}" for s in keep], "title": "segment",
               "autorange": "reversed"},
        sliders=[{"active": start, "steps": steps_, "currentvalue": {"prefix": "t = "}}],
        legend={"orientation": "h", "y": 1.02, "x": 0},
    )
    return fig
