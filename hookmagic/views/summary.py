"""Draw a :class:`~hookmagic.analysis.summary.Summary` as compact HTML (no JS) and plain text."""
from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from hookmagic.common.format import iec_bytes, percent, seconds, short

if TYPE_CHECKING:  # pragma: no cover - typing only
    from hookmagic.analysis.summary import Summary

_NAME_WIDTH = 72   # long C++ template names would push the numbers off screen

_STYLE = (
    "<style>"
    ".hm-summary{font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;"
    "line-height:1.35;max-width:56em}"
    ".hm-summary table{border-collapse:collapse;margin:2px 0 6px 0}"
    ".hm-summary th,.hm-summary td{padding:1px 8px 1px 0;text-align:left;border:none;"
    "background:none}"
    # numbers never wrap ("49.9 µs" split over two lines in a narrow widget)
    ".hm-summary td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    ".hm-summary th{font-weight:600;color:var(--jp-ui-font-color2,#555)}"
    ".hm-summary .hm-warn{color:#b45309}"
    ".hm-summary code{font-size:11px}"
    "</style>"
)


def unavailable_line(summary: "Summary") -> str:
    """The one line shown when nothing was captured."""
    return f"hookmagic: nothing captured — {summary.reason or 'no reason given'}"


def summary_bundle(summary: "Summary") -> dict[str, str]:
    """MIME bundle for Jupyter: HTML plus text/plain (text only when nothing was captured)."""
    if summary.status == "unavailable":
        return {"text/plain": unavailable_line(summary)}
    return {"text/html": summary_html(summary), "text/plain": summary_text(summary)}


def summary_text(summary: "Summary") -> str:
    """The summary as a few lines of plain text."""
    if summary.status == "unavailable":
        return unavailable_line(summary)
    lines = [_title(summary)]
    if summary.status != "complete":
        lines.append(f"  status: {summary.status}" + (f" — {summary.reason}" if summary.reason
                                                       else ""))
    for key, value in _headline(summary):
        lines.append(f"  {key}: {value}")
    if len(summary.top_kernels):
        lines.append("  top kernels:")
        for row in summary.top_kernels.itertuples(index=False):
            lines.append(f"    {percent(row.share):>6}  {seconds(row.total_s):>9}  "
                         f"{row.count:>7,}×  {short(row.name, _NAME_WIDTH)}")
    for row in summary.copies.itertuples(index=False):
        lines.append(f"  copies {row.kind}: {row.count:,}, {iec_bytes(row.bytes)} in "
                     f"{seconds(row.total_s)} ({_bw(row.gb_per_s)})")
    for row in summary.memsets.itertuples(index=False):
        lines.append(f"  memsets {row.memory_kind}: {row.count:,}, {iec_bytes(row.bytes)} in "
                     f"{seconds(row.total_s)}")
    for warn in _warnings(summary):
        lines.append(f"  ! {warn}")
    return "\n".join(lines)


def summary_html(summary: "Summary") -> str:
    """The summary as a small styled HTML block (tables only, no scripts)."""
    if summary.status == "unavailable":
        return f"<div>{html.escape(unavailable_line(summary))}</div>"
    e = html.escape
    parts = [_STYLE, '<div class="hm-summary">', f"<b>{e(_title(summary))}</b>"]
    if summary.status != "complete":
        parts.append(f'<div class="hm-warn">status: {e(summary.status)}'
                     f"{' — ' + e(summary.reason) if summary.reason else ''}</div>")
    parts.append("<table>")
    for key, value in _headline(summary):
        parts.append(f"<tr><th>{e(key)}</th><td>{e(value)}</td></tr>")
    parts.append("</table>")
    if len(summary.top_kernels):
        parts.append("<table><tr><th>share</th><th>total</th><th>mean</th><th>count</th>"
                     "<th>kernel</th></tr>")
        for row in summary.top_kernels.itertuples(index=False):
            parts.append(f'<tr><td class="n">{percent(row.share)}</td>'
                         f'<td class="n">{seconds(row.total_s)}</td>'
                         f'<td class="n">{seconds(row.mean_s)}</td>'
                         f'<td class="n">{row.count:,}</td>'
                         f'<td title="{e(row.name)}"><code>{e(short(row.name, _NAME_WIDTH))}</code></td></tr>')
        parts.append("</table>")
    if len(summary.copies) or len(summary.memsets):
        parts.append("<table><tr><th>transfer</th><th>count</th><th>bytes</th><th>time</th>"
                     "<th>bandwidth</th></tr>")
        for row in summary.copies.itertuples(index=False):
            parts.append(f"<tr><td>memcpy {e(row.kind)}</td><td class=\"n\">{row.count:,}</td>"
                         f'<td class="n">{iec_bytes(row.bytes)}</td>'
                         f'<td class="n">{seconds(row.total_s)}</td>'
                         f'<td class="n">{_bw(row.gb_per_s)}</td></tr>')
        for row in summary.memsets.itertuples(index=False):
            parts.append(f"<tr><td>memset {e(row.memory_kind)}</td>"
                         f'<td class="n">{row.count:,}</td>'
                         f'<td class="n">{iec_bytes(row.bytes)}</td>'
                         f'<td class="n">{seconds(row.total_s)}</td><td></td></tr>')
        parts.append("</table>")
    for warn in _warnings(summary):
        parts.append(f'<div class="hm-warn">{e(warn)}</div>')
    parts.append("</div>")
    return "".join(parts)


def _title(summary: "Summary") -> str:
    title = "hookmagic"
    if summary.label:
        title += f" · {summary.label}"
    if summary.device_names:
        title += " · " + ", ".join(summary.device_names[d] for d in sorted(summary.device_names))
    if summary.recorded_on:
        title += f" · recorded on {summary.recorded_on}"
    return title


def _headline(summary: "Summary") -> list[tuple[str, str]]:
    rows = [("wall time", seconds(summary.wall_s))]
    busy = seconds(summary.busy_s)
    if not math.isnan(summary.idle_fraction):
        busy += f" (idle {percent(summary.idle_fraction)})"
    rows.append(("GPU busy", busy))
    rows.append(("kernels", f"{summary.kernel_count:,} in {seconds(summary.kernel_time_s)}"))
    if summary.allocations or summary.frees or summary.peak_memory:
        peaks = ", ".join(f"GPU {d}: {iec_bytes(v)}" for d, v in sorted(summary.peak_memory.items()))
        rows.append(("memory", f"{summary.allocations:,} allocs, {summary.frees:,} frees"
                     + (f"; peak allocated during capture {peaks}" if peaks else "")))
    if summary.api_calls:
        rows.append(("API calls", f"{summary.api_calls:,}"))
    if summary.overhead_s:
        rows.append(("capture overhead", seconds(summary.overhead_s)))
    line = counters_line(getattr(summary, "counters", None) or {})
    if line:
        rows.append(("counters", line))
    return rows


def counters_line(counters: dict) -> str:
    """``12 of 14 kernel launches, 11 metrics; 38 replay passes per kernel, 2.41 s wall time
    with replay (kernel replay)`` from :attr:`Summary.counters`; "" without counters."""
    if not counters:
        return ""
    text = (f"{counters.get('kernels', 0):,} of {counters.get('launches', 0):,} kernel launches, "
            f"{counters.get('metrics', 0):,} metrics")
    cost = []
    if "passes" in counters:
        cost.append(f"{counters['passes']:,} replay passes per kernel")
    if "replay_wall_s" in counters:
        cost.append(f"{seconds(counters['replay_wall_s'])} wall time with replay")
    if "evaluate_s" in counters:
        cost.append(f"{seconds(counters['evaluate_s'])} evaluating")
    if cost:
        text += "; " + ", ".join(cost)
    if counters.get("replay"):
        text += f" ({counters['replay']} replay)"
    if counters.get("dropped"):
        text += f"; {counters['dropped']:,} launches past the counting limit not counted"
    if counters.get("unmatched"):
        text += f"; {counters['unmatched']:,} counted ranges matched to no launch"
    return text


def _warnings(summary: "Summary") -> list[str]:
    found = [" ".join(str(w).split()) for w in getattr(summary, "warnings", []) or []]
    lost = {k: v for k, v in summary.dropped.items() if v}
    if not lost:
        return found
    what = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in lost.items())
    return [f"dropped: {what} — numbers above undercount"] + found


def _bw(gb_per_s: float) -> str:
    return "—" if gb_per_s is None or math.isnan(gb_per_s) else f"{gb_per_s:.3g} GB/s"
