"""Source code with GPU time beside each line, the way line_profiler's ``%lprun`` shows CPU time.

:class:`LinesView` draws the blocks of :func:`hookmagic.analysis.lines.function_blocks`: HTML in
a notebook (``_repr_html_``), plain text anywhere else (``str()``/``repr()``; terminal IPython
and scripts print it). Each line shows the GPU time of the kernels launched *under* it
(inclusive: a line that calls a function is charged its kernels, as ``%lprun`` charges a line
its callees), the number of launches, the time per launch and the line's share of the
function's GPU time.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from hookmagic.analysis.lines import LineBlock
from hookmagic.common.format import duration_ns, short

__all__ = ["LinesView", "lines_view"]

_ORIGIN_WORDS = {
    "recording": "source stored in the trace",
    "disk": "source read from disk",
    "disk-changed": "source read from disk, which changed after the capture started",
    "unavailable": "source unavailable",
    "mismatch": "source unavailable: the file on disk no longer matches the recorded lines",
}
_HEADER = ("Line #", "Launches", "GPU time", "Per launch", "% Time", "Line contents")


@dataclass
class LinesView:
    """GPU time by line of one or more functions; ``.blocks`` holds the numbers, ``.table`` the
    per-line table of :meth:`Trace.lines` for the same focus."""

    blocks: list[LineBlock]
    title: str
    note: str = ""
    table: pd.DataFrame | None = field(default=None, repr=False)

    # -- text -------------------------------------------------------------------------------
    def __str__(self) -> str:
        out = [self.title]
        if self.note:
            out.append(self.note)
        for b in self.blocks:
            out.append("")
            out.extend(self._block_head(b))
            out.append("")
            widths = (7, 9, 11, 11, 7)
            out.append("".join(h.rjust(w) for h, w in zip(_HEADER, widths)) + "  " + _HEADER[-1])
            out.append("=" * 72)
            for r in b.rows.itertuples(index=False):
                cells = _cells(r)
                out.append("".join(c.rjust(w) for c, w in zip(cells, widths)) + "  "
                           + str(r.source).rstrip())
        return "\n".join(out)

    def __repr__(self) -> str:
        return str(self)

    def _block_head(self, b: LineBlock) -> list[str]:
        where = _ORIGIN_WORDS.get(b.origin, b.origin)
        return [f"Total GPU time: {duration_ns(b.total_ns)} in {b.launches:,} launches",
                f"File: {b.file}",
                f"Function: {b.function} at line {b.first} ({where})"]

    # -- HTML ------------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        esc = html.escape
        parts = [f"<div class='hookmagic-lines'><div><b>{esc(self.title)}</b></div>"]
        if self.note:
            parts.append(f"<div style='color:#555'>{esc(self.note)}</div>")
        for b in self.blocks:
            head = self._block_head(b)
            parts.append("<div style='margin-top:0.8em;font-family:monospace;font-size:90%'>"
                         + "<br>".join(esc(h) for h in head) + "</div>")
            rows = []
            for r in b.rows.itertuples(index=False):
                cells = _cells(r)
                pct = 100.0 * float(r.share)
                bar = (f"background:linear-gradient(90deg,#f2a03d55 {pct:.1f}%,transparent "
                       f"{pct:.1f}%)" if r.inclusive_ns > 0 else "")
                weight = "font-weight:600;" if r.inclusive_ns > 0 else "color:#777;"
                rows.append(
                    f"<tr style='{weight}'>" + "".join(
                        f"<td style='text-align:right;padding:0 0.6em'>{esc(c)}</td>"
                        for c in cells[:4])
                    + f"<td style='text-align:right;padding:0 0.6em;{bar}'>{esc(cells[4])}</td>"
                    + "<td style='text-align:left;white-space:pre;font-family:monospace'>"
                    + f"{esc(str(r.source))}</td></tr>")
            parts.append(
                "<table style='border-collapse:collapse;font-size:90%;margin-top:0.3em'><thead><tr>"
                + "".join(f"<th style='text-align:{'left' if h == _HEADER[-1] else 'right'};"
                          f"padding:0 0.6em'>{esc(h)}</th>" for h in _HEADER)
                + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
        parts.append("</div>")
        return "".join(parts)


def _cells(r: Any) -> list[str]:
    if r.inclusive_ns <= 0:
        return [str(r.line), "", "", "", ""]
    per = r.inclusive_ns / r.inclusive_launches if r.inclusive_launches else 0.0
    return [str(r.line), f"{r.inclusive_launches:,}", duration_ns(r.inclusive_ns),
            duration_ns(per), f"{100.0 * r.share:.1f}"]


def lines_view(blocks: list[LineBlock], focus_text: str | None, table: pd.DataFrame | None = None,
               label: str = "", hint: list[str] | None = None
               ) -> LinesView:
    """A :class:`LinesView` of ``blocks`` with a title naming the focus and the capture."""
    what = f"`{focus_text}`" if focus_text else "the functions with the most GPU time"
    title = f"GPU time by line of {what}" + (f" — {label}" if label else "")
    note = ("GPU time: the kernels launched under each line (inclusive, as %lprun counts a "
            "line that calls a function).")
    if not blocks:
        note = (f"No GPU time under {what} in this capture"
                + (f"; functions with GPU time: {', '.join(short(h, 60) for h in hint)}" if hint
                   else ": no kernel carries a Python stack (captured with stacks off?)") + ".")
    return LinesView(blocks=blocks, title=title, note=note, table=table)
