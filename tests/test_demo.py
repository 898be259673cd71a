"""`hookmagic demo`: the tour executed and rendered to HTML that draws its figures offline."""
from __future__ import annotations

import subprocess
import sys

import pytest

from hookmagic import demo
from hookmagic.cli import main

pytest.importorskip("nbconvert")
pytest.importorskip("nbclient")


def test_demo_writes_html_with_figures_and_plotly_js_once(tmp_path):
    out = tmp_path / "report"
    run = subprocess.run([sys.executable, "-m", "hookmagic.cli", "demo", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    html_path = out / "00_tour.html"
    assert run.stdout.strip() == str(html_path)
    html = html_path.read_text(encoding="utf-8")
    assert "NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22" in html
    assert html.count("Plotly.newPlot(") >= 5             # each figure draws itself
    # plotly.js itself is embedded exactly once (no network needed to view the page)
    assert html.count("basemaps.cartocdn.com/gl/voyager-gl-style") == 1
    assert "Traceback" not in html
    # the kernel talks over Unix sockets in a private folder: no TCP warning, nothing left over
    if sys.platform != "win32":
        assert "without encryption" not in run.stderr
        assert "Parent appears to have exited" not in run.stderr


def test_demo_without_a_checkout_says_so(tmp_path, monkeypatch, capsys):
    def missing() -> None:
        raise demo.DemoError("the tour notebook is not at X: `hookmagic demo` runs from a "
                             "source checkout")
    monkeypatch.setattr(demo, "find_tour", missing)
    assert main(["demo", "--out", str(tmp_path)]) == 1
    assert "runs from a source checkout" in capsys.readouterr().err


def test_find_tour_is_the_checkouts_notebook():
    tour = demo.find_tour()
    assert tour.name == "00_tour.ipynb" and tour.parent.name == "notebooks"
