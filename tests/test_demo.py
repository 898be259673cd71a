"""`hookmagic demo`: the tour executed and rendered to HTML that draws its figures offline."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hookmagic import demo
from hookmagic.cli import main

SHOTS = Path(__file__).resolve().parent.parent / "test-output" / "browser"

pytest.importorskip("nbconvert")
pytest.importorskip("nbclient")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """``hookmagic demo`` once for this module: (the finished process, the page it wrote)."""
    out = tmp_path_factory.mktemp("demo") / "report"
    run = subprocess.run([sys.executable, "-m", "hookmagic.cli", "demo", "--out", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run, out / "00_tour.html"


def test_demo_writes_html_with_figures_and_plotly_js_once(demo_run):
    run, html_path = demo_run
    assert run.stdout.strip() == str(html_path)
    html = html_path.read_text(encoding="utf-8")
    assert "NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22" in html
    assert html.count("Plotly.newPlot(") >= 5             # each figure draws itself
    # plotly.js itself is embedded exactly once (no network needed to view the page)
    assert html.count("basemaps.cartocdn.com/gl/voyager-gl-style") == 1
    assert "Traceback" not in html
    # the cells' progress (tqdm), shown because the tour takes more than a few seconds
    assert "running 00_tour.ipynb" in run.stderr
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


@pytest.mark.browser
def test_demo_page_renders_everything_with_the_network_off(demo_run):
    from .offline_page import open_offline

    _, html_path = demo_run
    seen = open_offline(html_path, screenshot=SHOTS / "demo-offline.png")
    assert seen.refused == [], seen.refused            # no CDN: RequireJS, MathJax, widgets
    assert seen.errors == [], seen.errors
    assert seen.widget_views >= 1                       # every view rendered (waited for)
    assert seen.plots >= 7                              # the tour's figures outside the report
    assert list(seen.tabs)[:6] == ["Summary", "Flame graph", "Timeline", "Diagnosis", "Kernels",
                                   "Memory"]
    for name in ("Flame graph", "Timeline"):
        assert seen.tabs[name]["plots"] == 1, (name, seen.tabs[name])
    assert "Error displaying widget" not in seen.text


def test_recordings_docstring_lists_what_available_finds():
    """The module's example is run as a doctest: its listing must be what ``available()`` finds
    in hookmagic/data/recordings, and asking for an unknown name is a project error."""
    import doctest

    import pytest

    from hookmagic import recordings
    from hookmagic.common.errors import InvalidArgument

    result = doctest.testmod(recordings, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 2 and result.failed == 0
    assert len(recordings.available()) == len(list(recordings.FOLDER.glob("*.hmtrace"))) >= 1
    with pytest.raises(InvalidArgument, match="available: \\['cupy_pipeline'"):
        recordings.path("no_such_recording")
