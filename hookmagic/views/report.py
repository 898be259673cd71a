"""The tabbed report shown after ``%%cudahook``: Summary, Flame graph, Timeline, Diagnosis, Kernels,
Memory.

This module only draws: every number comes from :mod:`hookmagic.analysis` (the summary, the
flame tree behind the figures, the diagnosis, the kernel summary). Figures are ``go.Figure``
shown inside ``ipywidgets.Output`` (they render as Plotly's mimetype, which JupyterLab, the
widget state saved in a notebook and nbconvert all understand); ``go.FigureWidget`` is used
only when anywidget is installed, because plotly >= 6 needs it for FigureWidget.

Large captures are drawn lazily: a tab's figure is made the first time the tab is opened, so
showing the report after a cell of a million kernels costs only the summary.
"""
from __future__ import annotations

import html
from importlib.util import find_spec
from typing import Any, Callable

import ipywidgets as widgets
import pandas as pd

from hookmagic.common.format import duration_ns as format_ns
from hookmagic.views.summary import summary_html, summary_text

TABS = ("Summary", "Flame graph", "Timeline", "Diagnosis", "Kernels", "Memory")
#: tabs holding figures: drawn when first opened if the report is lazy
_FIGURE_TABS = ("Flame graph", "Timeline", "Memory")
#: above this many GPU events the figure tabs are drawn when first opened, not up front
LAZY_EVENTS = 100_000
_WEIGHTS = {"GPU time": "time", "launches": "launches", "bytes copied": "bytes"}
PLOTLY_MIME = "application/vnd.plotly.v1+json"

_TABLE_STYLE = (
    "<style>.hm-table{border-collapse:collapse;font-size:12px;"
    "font-family:var(--jp-ui-font-family,sans-serif)}"
    ".hm-table th,.hm-table td{padding:2px 8px;text-align:left;vertical-align:top;"
    "border-bottom:1px solid var(--jp-border-color2,#ddd)}"
    ".hm-table td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    # long names (templated kernels) wrap anywhere inside their own column, so a wide table
    # keeps its numeric columns on one line; the wrapper scrolls sideways if it must
    ".hm-table td.name{overflow-wrap:anywhere;word-break:break-word;min-width:24em}"
    ".hm-scroll{overflow-x:auto;max-width:100%}"
    ".hm-sev-high{color:#b91c1c;font-weight:600}.hm-sev-medium{color:#b45309}"
    ".hm-sev-low,.hm-sev-info{color:#555}</style>"
)


class ReportTab(widgets.Tab):
    """A ``Tab`` whose ``text/plain`` is the summary text, so consoles and logs stay readable."""

    def __init__(self, *args: Any, plain_text: str = "", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._plain_text = plain_text

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = super()._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict) and self._plain_text:
            bundle["text/plain"] = self._plain_text
        return bundle


def report_widget(trace: Any, lazy: bool | None = None) -> widgets.Tab:
    """The tabbed report of ``trace``: Summary, Flame graph, Timeline, Diagnosis, Kernels.

    ``lazy``: draw the figure tabs only when first opened (default: when the trace has more
    than ``LAZY_EVENTS`` GPU events). A static export (nbconvert HTML) shows only the tabs
    that were drawn, so reports meant for export should pass ``lazy=False``.
    """
    summary = trace.summary()
    if lazy is None:
        lazy = len(trace.kernels) + len(trace.memcpy) + len(trace.memset) > LAZY_EVENTS
    makers: list[Callable[[], widgets.Widget]] = [
        lambda: widgets.HTML(summary_html(summary)),
        lambda: _flame_panel(trace),
        lambda: _figure_box(trace.timeline()),
        lambda: widgets.HTML(diagnosis_html(trace.diagnose())),
        lambda: widgets.HTML(kernels_html(_kernel_summary(trace))),
        lambda: _memory_panel(trace),
    ]
    if trace.status == "unavailable":   # nothing to draw: every tab says why, once
        line = widgets.HTML(summary_html(summary))
        makers = [lambda: line] + [lambda: widgets.HTML("<i>nothing captured</i>")] * (len(TABS) - 1)
    tab = ReportTab(plain_text=summary_text(summary))
    # Summary, Diagnosis and Kernels are tables and cheap; only the figures wait when lazy.
    slots: list[widgets.Box] = [widgets.VBox() for _ in TABS]
    drawn = [False] * len(TABS)

    def draw(index: int) -> None:
        if drawn[index]:
            return
        drawn[index] = True
        try:
            slots[index].children = (makers[index](),)
        except Exception as err:  # a view that fails must not take the whole report down
            slots[index].children = (widgets.HTML(
                f"<pre>hookmagic: could not draw {TABS[index]}: {html.escape(repr(err))}</pre>"),)

    for i, name in enumerate(TABS):
        if not (lazy and name in _FIGURE_TABS):
            draw(i)
        else:
            slots[i].children = (widgets.HTML("<i>drawing…</i>"),)
    tab.children = slots
    tab.titles = TABS
    tab.observe(lambda change: draw(int(change["new"])) if change["new"] is not None else None,
                names="selected_index")
    return tab


def _figure_box(fig: Any) -> widgets.Widget:
    """One Plotly figure as a widget: FigureWidget when anywidget is there, else an Output."""
    if find_spec("anywidget") is not None:
        import plotly.graph_objects as go

        return go.FigureWidget(fig)
    out = widgets.Output(layout=widgets.Layout(width="100%"))
    # The bundle goes straight into the widget's state, not through `with out: display(fig)`,
    # so it is there whether or not a kernel is capturing output (callbacks, tests, nbclient).
    out.outputs = ({"output_type": "display_data", "data": figure_bundle(fig), "metadata": {}},)
    return out


def figure_bundle(fig: Any) -> dict[str, Any]:
    """Plotly's own MIME bundle of ``fig`` (its JSON mimetype plus a text/plain line).

    Built directly rather than through ``fig._repr_mimebundle_()``: that depends on the
    renderer in force (nothing at all outside a kernel) and, under the ``notebook`` renderer,
    re-emits the whole of plotly.js into the cell on every call.
    """
    import json

    import plotly.io as pio

    bundle = {PLOTLY_MIME: json.loads(pio.to_json(fig, validate=False)),
              "text/plain": f"<Plotly figure: {fig.layout.title.text or 'untitled'}>"}
    if _for_html_export():
        # the HTML widget manager of an exported page has no Plotly renderer; it draws this
        from hookmagic.views.offline import figure_html

        bundle["text/html"] = figure_html(fig)
    return bundle


def _for_html_export() -> bool:
    """Whether figures should also carry HTML: under Plotly's ``notebook`` renderers (set by
    ``hookmagic demo``, or by anyone exporting notebooks to HTML) or inside
    :func:`hookmagic.views.offline.exporting`."""
    import plotly.io as pio

    from hookmagic.views import offline

    return offline.EXPORTING.get() or "notebook" in str(pio.renderers.default).split("+")


def _flame_panel(trace: Any) -> widgets.Widget:
    """The flame graph with a switch of what the widths mean (GPU time, launches, bytes)."""
    weight = widgets.ToggleButtons(options=list(_WEIGHTS), value="GPU time",
                                   description="width:", style={"button_width": "auto"})
    holder = widgets.VBox([_figure_box(trace.flame(weight="time"))])

    def redraw(change: dict[str, Any]) -> None:
        holder.children = (_figure_box(trace.flame(weight=_WEIGHTS[change["new"]])),)

    weight.observe(redraw, names="value")
    return widgets.VBox([weight, holder])


def _memory_panel(trace: Any) -> widgets.Widget:
    """Device memory over the capture (reserved / allocated / requested), or why there is none."""
    from hookmagic.analysis.memory import events_of, memory_over_time
    from hookmagic.views.memory_timeline import memory_timeline_figure

    if events_of(trace).empty:
        return widgets.HTML("<i>No device allocations or frees in this capture.</i>")
    return _figure_box(memory_timeline_figure(memory_over_time(trace)))


def _kernel_summary(trace: Any) -> pd.DataFrame:
    from hookmagic.analysis.kernels import kernel_summary

    return kernel_summary(trace)


def diagnosis_html(findings: pd.DataFrame) -> str:
    """The diagnosis (``Trace.diagnose()``) as an HTML table: severity, finding, evidence, advice."""
    if findings.empty:
        return "<i>No findings: nothing in this capture matched a known bottleneck pattern.</i>"
    e = html.escape
    rows = ["<tr><th>severity</th><th>finding</th><th>evidence</th><th>what to try</th></tr>"]
    for r in findings.itertuples(index=False):
        rows.append(f'<tr><td class="hm-sev-{e(str(r.severity))}">{e(str(r.severity))}</td>'
                    f"<td>{e(str(r.finding))}</td><td>{e(str(r.evidence))}</td>"
                    f"<td>{e(str(r.advice))}</td></tr>")
    return (_TABLE_STYLE + '<div class="hm-scroll"><table class="hm-table">' + "".join(rows)
            + "</table></div>")


def kernels_html(kernels: pd.DataFrame, top: int = 50) -> str:
    """The kernel summary (``analysis.kernels.kernel_summary``) as an HTML table, ``top`` rows."""
    if kernels.empty:
        return "<i>No kernels in this capture.</i>"
    e = html.escape
    rows = ["<tr><th>share</th><th>total</th><th>count</th><th>mean</th><th>p50</th>"
            "<th>p99</th><th>kernel</th></tr>"]
    for r in kernels.head(top).itertuples(index=False):
        name = str(r.name)
        rows.append(f'<tr><td class="n">{100 * r.share:.1f}%</td>'
                    f'<td class="n">{format_ns(r.total_ns)}</td><td class="n">{r.count:,}</td>'
                    f'<td class="n">{format_ns(r.mean_ns)}</td>'
                    f'<td class="n">{format_ns(r.p50_ns)}</td>'
                    f'<td class="n">{format_ns(r.p99_ns)}</td>'
                    f'<td class="name"><code>{e(name)}</code></td></tr>')
    more = (f"<div>{len(kernels) - top:,} more kernels not shown</div>"
            if len(kernels) > top else "")
    return (_TABLE_STYLE + '<div class="hm-scroll"><table class="hm-table">' + "".join(rows)
            + "</table></div>" + more)


def report_page(trace: Any, title: str | None = None) -> str:
    """The report of ``trace`` (Summary, Flame graph, Timeline, Diagnosis, Kernels, Memory) as
    one self-contained HTML page that renders with the network off: ``hookmagic report``."""
    from hookmagic.views.offline import exporting, widget_page

    with exporting():
        tab = report_widget(trace, lazy=False)
    label = trace.meta.get("label") or trace.meta.get("source") or "trace"
    summary = trace.summary()
    recorded = getattr(summary, "recorded_on", "") or ""
    return widget_page([tab], title=title or f"hookmagic report: {label}",
                       subtitle=str(recorded))
