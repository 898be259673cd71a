"""``hookmagic report TRACE -o report.html``: one offline page from a saved trace or Kineto JSON."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import hookmagic
from hookmagic.cli import main

from .offline_page import open_offline

DATA = Path(__file__).resolve().parent / "data"
SHOTS = Path(__file__).resolve().parent.parent / "test-output" / "browser"


def _state(html: str) -> dict:
    m = re.search(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', html, re.S)
    assert m, "no widget state in the page"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def saved_report(tmp_path_factory) -> Path:
    """The report of a recording made on an H100, saved and written through the CLI."""
    folder = tmp_path_factory.mktemp("report")
    trace = hookmagic.recordings.load("resnet18_inference_churn")
    trace.save(folder / "resnet.hmtrace")
    out = folder / "shared.html"
    assert main(["report", str(folder / "resnet.hmtrace"), "-o", str(out)]) == 0
    return out


def test_report_page_holds_every_tab_and_inlines_its_scripts(saved_report):
    html = saved_report.read_text(encoding="utf-8")
    state = _state(html)["state"]
    tabs = [m["state"] for m in state.values() if m["model_name"] == "TabModel"]
    assert tabs and tabs[0]["titles"] == ["Summary", "Flame graph", "Timeline", "Diagnosis",
                                          "Kernels", "Memory"]
    # every figure in the report's Outputs carries HTML the static widget manager can draw
    outputs = [m["state"]["outputs"] for m in state.values() if m["model_name"] == "OutputModel"]
    assert len(outputs) == 3 and all("text/html" in o[0]["data"] for o in outputs)
    assert "NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22" in html
    # no script is fetched (nbconvert's page loads embed-amd.js and RequireJS from CDNs)
    assert not re.search(r"<script[^>]+src=", html) and "embed-amd.js" not in html


def test_report_of_a_torch_profiler_json_defaults_its_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(DATA / "kineto_resnet18.json.gz")]) == 0
    out = tmp_path / "kineto_resnet18.html"
    assert capsys.readouterr().out.strip() == "kineto_resnet18.html" and out.is_file()
    assert "TabModel" in out.read_text(encoding="utf-8")


def test_report_of_a_missing_file_is_one_line_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope.hmtrace")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hookmagic: error: no trace file at") and err.count("\n") == 1


@pytest.mark.browser
def test_report_renders_every_tab_with_the_network_off(saved_report):
    seen = open_offline(saved_report, screenshot=SHOTS / "report-offline.png")
    assert seen.refused == [] and seen.errors == []
    assert list(seen.tabs) == ["Summary", "Flame graph", "Timeline", "Diagnosis", "Kernels", "Memory"]
    for name in ("Flame graph", "Timeline", "Memory"):
        assert seen.tabs[name]["plots"] == 1, (name, seen.tabs[name])
    assert "1,210" in str(seen.tabs["Summary"]["text"])
    assert "cudnn::bn_fw_inf_1C11_kernel_NCHW" in str(seen.tabs["Kernels"]["text"])
    assert str(seen.tabs["Diagnosis"]["text"]).startswith("severity")


def test_a_kernel_named_like_markup_cannot_break_the_page_script(tmp_path):
    """Names from the file land in the page's inline JSON escaped: no JSON script block holds
    anything that could end it or open a comment, and parsed, the JSON gives the name back."""
    trace = hookmagic.recordings.load("resnet18_inference_churn")
    hostile = "<!--<script>&\u2028</script>"
    trace.kernels["name"] = hostile           # every kernel: it is the top kernel
    trace.save(tmp_path / "hostile.hmtrace")
    out = tmp_path / "page.html"
    assert main(["report", str(tmp_path / "hostile.hmtrace"), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    blocks = re.findall(r'<script type="application/[^"]*json">(.*?)</script>', page, re.S)
    assert blocks
    for body in blocks:
        assert "<" not in body and ">" not in body and "\u2028" not in body
    # the summary table shows the name, HTML-escaped inside the (unescaped-back) JSON
    assert "&lt;!--&lt;script&gt;&amp;" in json.dumps(_state(page), ensure_ascii=False)


def test_report_refuses_to_overwrite_its_own_input(tmp_path, capsys):
    trace = hookmagic.recordings.load("resnet18_inference_churn")
    src = tmp_path / "t.hmtrace"
    trace.save(src)
    before = src.read_bytes()
    assert main(["report", str(src), "-o", str(src)]) != 0
    assert src.read_bytes() == before
    assert "being reported on" in capsys.readouterr().err


def test_report_takes_a_bundled_recordings_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report", "resnet18_inference_churn"]) == 0
    assert (tmp_path / "resnet18_inference_churn.html").stat().st_size > 100_000


def test_report_never_writes_over_another_file_that_is_not_a_page(tmp_path, capsys):
    trace = hookmagic.recordings.load("mlp_training")
    a, b = trace.save(tmp_path / "a.hmtrace"), trace.save(tmp_path / "b.hmtrace")
    before = b.read_bytes()
    with pytest.raises(SystemExit) as info:          # a usage error: the page must be .html
        main(["report", str(a), "-o", str(b)])
    assert info.value.code == 2 and b.read_bytes() == before
    assert "ending in .html" in capsys.readouterr().err


def test_report_of_a_result_that_is_not_a_trace_says_what_it_is(tmp_path, capsys):
    from hookmagic.layers.samples import load_sample
    saved = load_sample("resnet50_fp16").save(tmp_path / "layers.parquet")
    assert main(["report", str(saved), "-o", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err
    assert "holds a LayerProfile, not a trace" in err and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()
