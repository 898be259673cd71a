"""Timeline of a trace: one row per device and stream, plus launch latency and ranges.

Rows hold kernels, copies and memsets (each its own colour); one row per device shows the
launch latency of each piece of work (its API call's start to its start on the GPU); one row
per host thread shows user/NVTX ranges. A capture with PM sampling (``pm_samples``) adds a lane
under the rows: each sampled metric over time, on the same x axis. Drawn with WebGL (Scattergl).

A row with more events in the window than ``max_events_per_row`` is binned: the window is cut
into ``bins`` equal slices and each slice is drawn as one mark coloured by how busy the row
was in it (hover for the count). The title says when this happened; pass ``start_ns`` /
``end_ns`` to look at a shorter window, where every event is drawn. The figure's size is
therefore bounded by rows x bins, whatever the number of events.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from hookmagic.analysis.tables import as_set, root_label, table
from hookmagic.analysis.idle import api_by_correlation, merge_intervals, overlap
from hookmagic.common.format import duration_ns as format_ns
from hookmagic.common.format import plotly_text
from hookmagic.cupti.pm_sampling import short_name

COLOURS = {"kernel": "#1f77b4", "memcpy": "#2ca02c", "memset": "#ff7f0e", "range": "#9467bd",
           "latency": "#d62728"}
BIN_SCALES = {"kernel": "Blues", "memcpy": "Greens", "memset": "Oranges", "range": "Purples",
              "latency": "Reds"}
MAX_EVENTS_PER_ROW = 5_000
BINS = 2_000


def _gpu_rows(trace: Any, devices: list[int] | None, streams: list[int] | None,
              lo: int, hi: int) -> dict[str, pd.DataFrame]:
    """Kernels, copies and memsets overlapping [lo, hi], with the columns the drawing needs."""
    out = {}
    for kind, name in (("kernel", "kernels"), ("memcpy", "memcpy"), ("memset", "memset")):
        frame = table(trace, name)
        if len(frame) == 0:
            continue
        s = frame["start_ns"].to_numpy()
        e = frame["end_ns"].to_numpy()
        mask = (e >= lo) & (s <= hi)
        if devices is not None:
            mask &= np.isin(frame["device"].to_numpy(), devices)
        if streams is not None:
            mask &= np.isin(frame["stream"].to_numpy(), streams)
        f = frame[mask] if not mask.all() else frame
        if len(f):
            out[kind] = f
    return out


def _segments(starts: np.ndarray, ends: np.ndarray, t0: int) -> np.ndarray:
    """x values for line segments: start, end, NaN (a break) per event, in ms from t0."""
    x = np.empty(3 * len(starts), dtype=np.float64)
    x[0::3] = (starts - t0) / 1e6
    x[1::3] = (ends - t0) / 1e6
    x[2::3] = np.nan
    return x


def _exact_trace(kind: str, row: int, starts: np.ndarray, ends: np.ndarray, texts: list[str],
                 t0: int, width: float, name: str, y_offset: np.ndarray | None = None) -> go.Scattergl:
    y = np.full(3 * len(starts), float(row))
    if y_offset is not None:
        y[0::3] += y_offset
        y[1::3] += y_offset
    y[2::3] = np.nan
    hover = np.empty(3 * len(starts), dtype=object)
    hover[0::3] = texts
    hover[1::3] = texts
    hover[2::3] = None
    return go.Scattergl(x=_segments(starts, ends, t0), y=y, mode="lines", name=name,
                        legendgroup=kind, showlegend=False,
                        line=dict(color=COLOURS[kind], width=width), hovertext=hover,
                        hoverinfo="text", connectgaps=False)


def _binned_trace(kind: str, row: int, starts: np.ndarray, ends: np.ndarray, lo: int, hi: int,
                  bins: int, t0: int, what: str, name: str,
                  values: np.ndarray | None = None) -> go.Scattergl:
    """One mark per non-empty slice: colour = busy fraction (or mean of ``values``)."""
    edges = np.linspace(lo, hi, bins + 1).round().astype(np.int64)
    width = np.maximum(np.diff(edges), 1)
    slot = np.clip(np.searchsorted(edges, starts, side="right") - 1, 0, bins - 1)
    counts = np.bincount(slot, minlength=bins)
    if values is None:
        us, ue = merge_intervals(starts, ends)
        shade = overlap(us, ue, edges[:-1], edges[1:]) / width
        label = [f"{c:,} {what} · busy {100 * f:.0f}%" for c, f in zip(counts, shade)]
        cmax = 1.0
    else:
        sums = np.bincount(slot, weights=values, minlength=bins)
        shade = np.divide(sums, counts, out=np.zeros(bins), where=counts > 0)
        label = [f"{c:,} {what} · mean {format_ns(v)}" for c, v in zip(counts, shade)]
        cmax = float(np.percentile(values, 99)) if values.size else 1.0
    show = (counts > 0) | (shade > 0)
    centres = ((edges[:-1] + edges[1:]) / 2 - t0) / 1e6
    text = [f"{name}<br>{(edges[i] - t0) / 1e6:,.3f}–{(edges[i + 1] - t0) / 1e6:,.3f} ms<br>"
            f"{label[i]}" for i in np.flatnonzero(show)]
    return go.Scattergl(x=centres[show], y=np.full(int(show.sum()), float(row)), mode="markers",
                        name=name, legendgroup=kind, showlegend=False, hovertext=text,
                        hoverinfo="text",
                        marker=dict(symbol="square", size=12, color=shade[show], cmin=0,
                                    cmax=max(cmax, 1e-9), colorscale=BIN_SCALES[kind],
                                    line=dict(width=0)))


def timeline_figure(trace: Any, start_ns: int | None = None, end_ns: int | None = None,
                    device: int | Iterable[int] | None = None,
                    stream: int | Iterable[int] | None = None,
                    max_events_per_row: int = MAX_EVENTS_PER_ROW, bins: int = BINS,
                    latency: bool = True, ranges: bool = True,
                    pm_sampling: bool = True) -> go.Figure:
    """Timeline of ``trace`` per device and stream (Plotly, WebGL).

    Parameters
    ----------
    start_ns, end_ns : the window to draw, on the trace's clock (default: the whole capture).
        Zoom in by calling again with a shorter window: rows under ``max_events_per_row``
        draw every event.
    device, stream : rows to keep (int or list; None: all).
    max_events_per_row : above this many events in the window a row is binned.
    bins : slices per binned row.
    latency : add a row per device with each launch's API-call-to-GPU-start latency.
    ranges : add a row per host thread with the user/NVTX ranges.
    pm_sampling : add a lane under the rows with the PM-sampled metrics over time (each sample
        drawn at its middle; more than ``bins`` samples in the window are averaged per slice).

    Times on the x axis are milliseconds from the capture's start (``meta["start_ns"]``, else
    the first event).
    """
    devices, streams = as_set(device), as_set(stream)
    meta = getattr(trace, "meta", None) or {}
    everything = _gpu_rows(trace, devices, streams, np.iinfo(np.int64).min, np.iinfo(np.int64).max)
    first = min((int(f["start_ns"].min()) for f in everything.values()), default=0)
    last = max((int(f["end_ns"].max()) for f in everything.values()), default=first + 1)
    t0 = int(meta["start_ns"]) if meta.get("start_ns") is not None else first
    lo = int(start_ns) if start_ns is not None else min(t0, first)
    hi = int(end_ns) if end_ns is not None else max(int(meta.get("end_ns") or last), last)
    hi = max(hi, lo + 1)
    events = _gpu_rows(trace, devices, streams, lo, hi) if (start_ns is not None or
                                                            end_ns is not None) else everything

    # rows: each (device, stream) with work, then a latency row per device
    row_key = {kind: (f["device"].to_numpy(np.int64) << 32) + (f["stream"].to_numpy(np.int64)
                                                                 & 0xFFFFFFFF)
               for kind, f in events.items()}
    keys = np.unique(np.concatenate(list(row_key.values()))) if row_key else np.zeros(0, np.int64)
    row_of = {kind: np.searchsorted(keys, k) for kind, k in row_key.items()}
    per_row = sum((np.bincount(r, minlength=len(keys)) for r in row_of.values()),
                  np.zeros(len(keys), dtype=np.int64))
    row_names: list[str] = [f"GPU {int(k >> 32)} · stream {_stream_of(k)}" for k in keys]
    traces: list[go.Scattergl] = []
    binned_rows: list[str] = []
    n_events = int(per_row.sum())
    for kind, f in events.items():
        rows = row_of[kind]
        order = np.argsort(rows, kind="stable")
        bounds = np.searchsorted(rows[order], np.arange(len(keys) + 1))
        st = f["start_ns"].to_numpy(np.int64)
        en = f["end_ns"].to_numpy(np.int64)
        for row in range(len(keys)):
            idx = order[bounds[row]:bounds[row + 1]]
            if idx.size == 0:
                continue
            label = f"{row_names[row]} · {kind}"
            if per_row[row] > max_events_per_row:
                traces.append(_binned_trace(kind, row, st[idx], en[idx], lo, hi, bins, t0,
                                            f"{kind}s" if kind == "kernel" else kind, label))
                binned_rows.append(row_names[row])
            else:
                sub = f.iloc[idx]
                names = (sub["name"].to_numpy(dtype=object) if kind == "kernel"
                         else _copy_text(sub, kind))
                texts = [f"{plotly_text(nm)}<br>{format_ns(e - b)} · {row_names[row]}"
                         for nm, b, e in zip(names, st[idx], en[idx])]
                traces.append(_exact_trace(kind, row, st[idx], en[idx], texts, t0, 14, label))

    if latency:
        traces += _latency_traces(trace, events, sorted({int(k >> 32) for k in keys}), row_names, lo, hi,
                                  bins, t0, max_events_per_row, binned_rows)
    if ranges:
        traces += _range_traces(trace, row_names, lo, hi, bins, t0, max_events_per_row,
                                binned_rows)

    lane = _pm_traces(trace, devices, lo, hi, bins, t0) if pm_sampling else []
    fig = go.Figure(traces + lane)
    # a legend of the colours, drawn once (the data traces hide theirs)
    for kind in ("kernel", "memcpy", "memset", "range", "latency"):
        fig.add_trace(go.Scattergl(x=[None], y=[None], mode="lines", name=kind,
                                   line=dict(color=COLOURS[kind], width=8), hoverinfo="skip"))
    rows = "stream row" if len(keys) == 1 else "stream rows"
    title = (f"Timeline — {plotly_text(root_label(trace))}: {n_events:,} GPU events on "
             f"{len(keys)} {rows}")
    if binned_rows:
        title += (f"<br><sup>{len(set(binned_rows))} row(s) with more than "
                  f"{max_events_per_row:,} events binned into {bins:,} slices (colour = busy); "
                  "pass start_ns/end_ns to zoom in to every event</sup>")
    fig.update_layout(
        title=dict(text=title, x=0.01),
        # ",~f": 14,960 ms, never plotly's SI "14.96k ms"
        xaxis=dict(title="ms from capture start", range=[(lo - t0) / 1e6, (hi - t0) / 1e6],
                   tickformat=",~f"),
        yaxis=dict(tickvals=list(range(len(row_names))), ticktext=row_names,
                   autorange="reversed", zeroline=False),
        height=max(250, 60 + 40 * len(row_names)), margin=dict(l=5, r=5, t=70, b=40),
        hovermode="closest", legend=dict(orientation="h", y=-0.15))
    if lane:
        # the rows above, the lane below on the same x axis
        fig.update_layout(yaxis=dict(domain=[0.34, 1.0]),
                          yaxis2=dict(domain=[0.0, 0.26], anchor="x", title="PM sampling",
                                      zeroline=False),
                          height=max(250, 60 + 40 * len(row_names)) + 220)
    return fig


def _pm_traces(trace: Any, devices: list[int] | None, lo: int, hi: int, bins: int,
               t0: int) -> list[go.Scattergl]:
    """One line per (device, metric) of ``pm_samples`` in [lo, hi], on the second y axis."""
    frame = table(trace, "pm_samples")
    if not len(frame):
        return []
    mid = (frame["start_ns"].to_numpy(np.int64) + frame["end_ns"].to_numpy(np.int64)) // 2
    mask = (mid >= lo) & (mid <= hi)
    if devices is not None:
        mask &= np.isin(frame["device"].to_numpy(), devices)
    frame, mid = frame[mask], mid[mask]
    out = []
    several = frame["device"].nunique() > 1
    for (dev, metric), idx in frame.groupby(["device", "metric"], sort=True).indices.items():
        x, y = mid[idx], frame["value"].to_numpy(np.float64)[idx]
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        if len(x) > bins:  # the mean of each slice with samples
            edges = np.linspace(lo, hi, bins + 1)
            slot = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
            counts = np.bincount(slot, minlength=bins)
            keep = counts > 0
            y = np.bincount(slot, weights=y, minlength=bins)[keep] / counts[keep]
            x = ((edges[:-1] + edges[1:]) / 2)[keep]
        name = short_name(metric) + (f" · GPU {int(dev)}" if several else "")
        out.append(go.Scattergl(x=(x - t0) / 1e6, y=y, mode="lines", name=name, yaxis="y2",
                                hovertemplate=f"{plotly_text(name)}: %{{y:.1f}}<br>"
                                              "%{x:,.3f} ms<extra></extra>"))
    return out


def _stream_of(key: int) -> int:
    """The stream of a row key (device << 32 | stream as 32 bits), sign restored."""
    low = int(key) & 0xFFFFFFFF
    return low - (1 << 32) if low >= (1 << 31) else low


def _copy_text(frame: pd.DataFrame, kind: str) -> list[str]:
    if kind == "memcpy":
        return [f"memcpy {k} {b:,} B" for k, b in zip(frame["kind"], frame["bytes"])]
    return [f"memset {b:,} B" for b in frame["bytes"]]


def _latency_traces(trace: Any, events: dict[str, pd.DataFrame], devices: list[int],
                    row_names: list[str], lo: int, hi: int, bins: int, t0: int,
                    max_events: int, binned_rows: list[str]) -> list[go.Scattergl]:
    """Rows of API-call-start -> GPU-start segments, one per device."""
    calls = api_by_correlation(table(trace, "api"))
    a_start = calls.values["start_ns"]
    if len(calls) == 0:
        return []
    out = []
    for d in devices:
        starts, gpu = [], []
        for f in events.values():
            f = f[f["device"].to_numpy() == d]
            pos = calls.positions(f["correlation"].to_numpy(np.int64))
            hit = pos >= 0
            starts.append(a_start[pos[hit]])
            gpu.append(f["start_ns"].to_numpy(np.int64)[hit])
        a = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        g = np.concatenate(gpu) if gpu else np.zeros(0, np.int64)
        if a.size == 0:
            continue
        row = len(row_names)
        row_names.append(f"GPU {d} · launch latency")
        if a.size > max_events:
            out.append(_binned_trace("latency", row, g, g, lo, hi, bins, t0, "launches",
                                     row_names[row], values=(g - a).astype(np.float64)))
            binned_rows.append(row_names[row])
        else:
            texts = [f"launch latency {format_ns(x)}" for x in (g - a)]
            out.append(_exact_trace("latency", row, a, g, texts, t0, 3, row_names[row]))
    return out


def _range_traces(trace: Any, row_names: list[str], lo: int, hi: int, bins: int, t0: int,
                  max_events: int, binned_rows: list[str]) -> list[go.Scattergl]:
    """Rows of user/NVTX ranges, one per host thread; nested ranges sit slightly lower."""
    rng = table(trace, "ranges")
    if len(rng) == 0:
        return []
    s = rng["start_ns"].to_numpy(np.int64)
    e = rng["end_ns"].to_numpy(np.int64)
    rng = rng[(e >= lo) & (s <= hi)]
    out = []
    for thread, r in rng.groupby("thread", sort=True):
        row = len(row_names)
        row_names.append(f"ranges · thread {thread}" if thread >= 0 else "ranges")
        st, en = r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)
        if len(r) > max_events:
            out.append(_binned_trace("range", row, st, en, lo, hi, bins, t0, "ranges",
                                     row_names[row]))
            binned_rows.append(row_names[row])
        else:
            depth = r["depth"].to_numpy(np.float64)
            texts = [f"{plotly_text(n)}<br>{format_ns(b - a)}"
                     for n, a, b in zip(r["name"], st, en)]
            out.append(_exact_trace("range", row, st, en, texts, t0, 8, row_names[row],
                                    y_offset=np.minimum(depth, 4) * 0.1))
    return out
