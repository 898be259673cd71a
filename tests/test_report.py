"""The tabbed report widget: on a real H100 recording, on nothing captured, and after %%cudahook
(the magic tests use the fake captures of test_magics: synthetic tables, no GPU)."""
from __future__ import annotations

import html

import ipywidgets as widgets
import pytest

import hookmagic
from hookmagic.trace.model import Trace
from hookmagic.views.report import PLOTLY_MIME, TABS, report_widget

from .test_magics import fake_capture, fake_unavailable, ip  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def resnet() -> Trace:
    return hookmagic.recordings.load("resnet18_inference_churn")


def _figure(output: widgets.Output) -> dict:
    (bundle,) = output.outputs
    return bundle["data"][PLOTLY_MIME]


def test_tabs_hold_summary_flame_timeline_diagnosis_kernels(resnet):
    tab = report_widget(resnet)
    assert isinstance(tab, widgets.Tab) and tab.titles == TABS
    summary, flame, timeline, diagnosis, kernels, memory = (slot.children[0] for slot in tab.children)
    assert "1,210" in summary.value and "NVIDIA H100 80GB HBM3" in summary.value
    switch, holder = flame.children
    icicle = _figure(holder.children[0])
    assert icicle["data"][0]["type"] == "icicle"
    assert icicle["layout"]["title"]["text"].startswith("GPU time by launching call path")
    assert _figure(timeline)["layout"]["title"]["text"].startswith("Timeline")
    # the diagnosis table shows every finding the analysis returned
    for finding in resnet.diagnose()["finding"]:
        assert html.escape(finding) in diagnosis.value
    assert "cudnn::bn_fw_inf_1C11_kernel_NCHW" in kernels.value and "41 more" not in kernels.value
    # the memory tab draws reserved / allocated / requested over time from the memory table
    mem = _figure(memory)
    assert [d["name"] for d in mem["data"]] == ["reserved", "allocated", "requested"]
    from hookmagic.analysis.memory import memory_over_time
    import base64

    import numpy as np
    y = mem["data"][0]["y"]      # plotly's typed-array JSON: {"dtype": "f8", "bdata": base64}
    reserved = np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"]) if isinstance(y, dict) else y
    assert max(reserved) * 2**20 == pytest.approx(memory_over_time(resnet)["reserved"].max())
    # text/plain is the summary, so a console shows numbers rather than a widget repr
    assert tab._repr_mimebundle_()["text/plain"] == repr(resnet.summary())
    # numeric cells never wrap ("49.9 µs" split over two lines in a narrow tab)
    for pane in (summary, kernels):
        assert 'class="n"' in pane.value
        assert "td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}" in pane.value


def test_flame_weight_switch_redraws_in_bytes(resnet):
    flame = report_widget(resnet).children[1].children[0]
    switch, holder = flame.children
    switch.value = "bytes copied"
    title = _figure(holder.children[0])["layout"]["title"]["text"]
    assert title.startswith("bytes copied by launching call path") and "MB" in title


def test_lazy_report_draws_a_figure_when_its_tab_opens(resnet):
    tab = report_widget(resnet, lazy=True)
    assert not isinstance(tab.children[2].children[0], widgets.Output)
    tab.selected_index = 2
    assert _figure(tab.children[2].children[0])["layout"]["title"]["text"].startswith("Timeline")


def test_nothing_captured_says_why_in_every_form():
    tab = report_widget(Trace.empty("synthetic: no NVIDIA driver"))
    assert "nothing captured — synthetic: no NVIDIA driver" in tab.children[0].children[0].value
    assert tab._repr_mimebundle_()["text/plain"].startswith("hookmagic: nothing captured")


def _displayed(monkeypatch) -> list:
    shown: list = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(objs))
    return shown


def test_magic_shows_report_by_default_and_summary_with_no_report(ip, fake_capture, monkeypatch):
    shown = _displayed(monkeypatch)
    assert ip.run_cell_magic("cudahook", "", "x = 2\nx * 21") == 42
    (report,) = shown
    assert isinstance(report, widgets.Tab) and report.titles == TABS
    assert "synthetic_gemm" in report._repr_mimebundle_()["text/plain"]
    shown.clear()
    ip.run_cell_magic("cudahook", "--no-report", "y = 1")
    (summary,) = shown
    assert type(summary).__name__ == "Summary"


def test_magic_report_setting_and_override(ip, fake_capture, monkeypatch):
    shown = _displayed(monkeypatch)
    ip.run_line_magic("config", "CudaHookMagics.report = False")
    try:
        ip.run_cell_magic("cudahook", "", "y = 1")
        ip.run_cell_magic("cudahook", "--report", "y = 1")
    finally:
        ip.run_line_magic("config", "CudaHookMagics.report = True")
    assert [type(s).__name__ for s in shown] == ["Summary", "ReportTab"]


def test_magic_without_gpu_shows_the_one_line_not_a_report(ip, fake_unavailable, monkeypatch):
    shown = _displayed(monkeypatch)
    ip.run_cell_magic("cudahook", "", "y = 1")
    (summary,) = shown
    assert type(summary).__name__ == "Summary" and summary.status == "unavailable"


@pytest.mark.browser
def test_a_kernel_named_like_markup_renders_as_text_in_a_browser(tmp_path):
    """The report page of a trace whose kernels are all named ``<!--<script>...`` (synthetic
    names on a real recording) still renders every tab in Chromium, showing the name as text."""
    from hookmagic.cli import main

    from .offline_page import open_offline

    trace = hookmagic.recordings.load("resnet18_inference_churn")
    hostile = "<!--<script>&\u2028</script><img src=x onerror=alert(1)>"
    trace.kernels["name"] = hostile
    trace.save(tmp_path / "synthetic_hostile.hmtrace")
    out = tmp_path / "page.html"
    assert main(["report", str(tmp_path / "synthetic_hostile.hmtrace"), "-o", str(out)]) == 0
    seen = open_offline(out)
    assert seen.errors == [] and seen.refused == []
    assert list(seen.tabs) == list(TABS)
    assert seen.tabs["Flame graph"]["plots"] == 1
    assert "<!--<script>&" in str(seen.tabs["Kernels"]["text"])     # shown, not interpreted
