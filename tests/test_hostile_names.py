"""Names read from a file (kernels, ranges, the capture's label) that look like markup reach
every HTML surface and Plotly text as literal text: escaped, never interpreted, and read back
unchanged (synthetic trace; hostile names of our own)."""
from __future__ import annotations

import html
import json

import pytest

from hookmagic.trace.model import Trace
from hookmagic.views.flame import flame_figure
from hookmagic.views.report import kernels_html
from hookmagic.views.summary import summary_html
from hookmagic.views.timeline import timeline_figure

from .synthetic import synthetic_meta, synthetic_tables

HOSTILE = '<a href="javascript:alert(1)">x</a><img src=x onerror=alert(2)><!--'


@pytest.fixture()
def hostile_trace() -> Trace:
    tables = synthetic_tables()
    tables["kernels"] = tables["kernels"].assign(name=HOSTILE)
    tables["ranges"] = tables["ranges"].assign(name=HOSTILE)
    return Trace(tables, {**synthetic_meta(), "label": HOSTILE, "warnings": [HOSTILE]})


def _no_raw_markup(text: str) -> None:
    assert "<a " not in text and "<img" not in text and "<!--" not in text, text[:300]


def test_summary_html_and_mime_bundle_escape_file_names(hostile_trace):
    page = summary_html(hostile_trace.summary())
    _no_raw_markup(page)
    assert html.escape(HOSTILE) in page or html.escape(HOSTILE, quote=False) in page
    _no_raw_markup(hostile_trace._repr_mimebundle_()["text/html"])
    _no_raw_markup(hostile_trace.summary().headline()._repr_html_())


def test_report_kernel_table_escapes_file_names(hostile_trace):
    _no_raw_markup(kernels_html(hostile_trace))


def test_plotly_text_of_flame_and_timeline_is_literal(hostile_trace):
    # Plotly reads <a href>, <b>, <br> in hover text, labels and titles as markup
    for fig in (flame_figure(hostile_trace), timeline_figure(hostile_trace)):
        spec = json.loads(fig.to_json())
        texts = [fig.layout.title.text or ""]
        for trace in spec["data"]:
            for key in ("labels", "customdata", "hovertext", "text"):
                value = trace.get(key)
                if isinstance(value, list):
                    texts += [str(v) for v in value if v is not None]
        _no_raw_markup(" ".join(texts))
        assert any(HOSTILE in html.unescape(t) for t in texts)


def _figure_texts(fig) -> list[str]:
    """Every string Plotly renders as pseudo-HTML: titles, trace names, hover templates,
    categorical axis values, text and custom data."""
    spec = json.loads(fig.to_json())
    layout = spec.get("layout", {})
    texts = [str((layout.get("title") or {}).get("text", ""))]
    texts += [str(a.get("text", "")) for a in layout.get("annotations", [])]
    for trace in spec["data"]:
        texts += [str(trace.get(k, "")) for k in ("name", "legendgroup", "hovertemplate")]
        for key in ("x", "y", "text", "customdata", "labels"):
            value = trace.get(key)
            if isinstance(value, list):
                flat = [v for row in value for v in (row if isinstance(row, list) else [row])]
                texts += [v for v in flat if isinstance(v, str)]
    return texts


def test_scheduler_figures_show_model_names_literally():
    from hookmagic import sched as S
    res = S.simulate([S.ModelSpec.linear(HOSTILE, 2.0, 0.5, 8)], [S.Poisson(HOSTILE, 200.0, slo_ms=20)],
                     S.Policy(batching=S.Batching(4, 2.0)), duration_s=0.5, seed=3)
    figures = [res.gantt(), res.latency_cdf(), res.slo_chart(), res.batch_histogram(), res.queue_chart()]
    for fig in figures:
        texts = _figure_texts(fig)
        _no_raw_markup(" ".join(texts))
    assert any(HOSTILE in html.unescape(t) for t in _figure_texts(figures[0]))


def test_pipeline_figures_show_stage_names_and_labels_literally():
    from hookmagic.pipeline import Pipeline, Stage, frames
    run = Pipeline([Stage(HOSTILE, lambda x: x)], name=HOSTILE).run(frames(range(6)))
    from hookmagic.pipeline.views import queues_figure
    for fig in (run.gantt(), run.stage_chart(), queues_figure(run)):
        texts = _figure_texts(fig)
        _no_raw_markup(" ".join(texts))
        assert any(HOSTILE in html.unescape(t) for t in texts)
