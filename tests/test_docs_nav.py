"""docs/hooks.py: nav entries whose page is not written yet are left out, so the site builds
with --strict at every merge (the site itself is built by .ci/run: mkdocs build --strict)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _hooks():
    pytest.importorskip("mkdocs", reason="the docs packages are in [dev]")
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_pages_leave_the_nav_and_present_ones_stay(tmp_path):
    hooks = _hooks()
    (tmp_path / "index.md").write_text("# home")
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "a.md").write_text("# a")
    nav = [{"Home": "index.md"}, {"Pipeline": "pipeline.md"},
           {"Guide": [{"A": "guide/a.md"}, {"B": "guide/b.md"}]},
           {"Only missing": [{"X": "x.md"}]}, {"Site": "https://example.org"},
           {"Tour": "notebooks/00_tour.ipynb"}]
    config = hooks.on_config({"nav": nav, "docs_dir": str(tmp_path)})
    assert config["nav"] == [{"Home": "index.md"}, {"Guide": [{"A": "guide/a.md"}]},
                             {"Site": "https://example.org"},
                             {"Tour": "notebooks/00_tour.ipynb"}]


def test_every_page_in_the_nav_of_this_checkout_exists_or_belongs_to_another_area():
    import yaml

    hooks = _hooks()
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    kept = hooks.on_config({"nav": nav, "docs_dir": str(ROOT / "docs")})["nav"]
    flat = [v for item in kept for v in (item.values() if isinstance(item, dict) else [item])]
    assert {"Home": "index.md"} in kept and len(flat) >= 10


def test_plotly_outputs_become_divs_and_widgets_a_note():
    """A SYNTHETIC notebook: its Plotly output becomes HTML that plotly.js draws (the figure's
    data carried over), its widget output a note, and saved widget state is dropped."""
    import json

    pytest.importorskip("plotly")
    hooks = _hooks()
    figure = {"data": [{"type": "bar", "x": ["a", "b"], "y": [3, 5]}],
              "layout": {"title": {"text": "synthetic <bars>"}}}
    nb = {"metadata": {"widgets": {"state": {}}}, "cells": [
        {"cell_type": "markdown", "source": "# t"},
        {"cell_type": "code", "source": "fig", "outputs": [
            {"output_type": "execute_result", "data": {hooks.PLOTLY_MIME: figure,
                                                       "text/plain": "Figure()"}}]},
        {"cell_type": "code", "source": "w", "outputs": [
            {"output_type": "display_data", "data": {hooks.WIDGET_MIME: {"model_id": "1"},
                                                     "text/plain": "VBox(<b>)"}}]}]}
    assert hooks.render_outputs(nb, "synthetic nb") == 1
    assert "widgets" not in nb["metadata"]
    (fig_out,), (widget_out,) = nb["cells"][1]["outputs"], nb["cells"][2]["outputs"]
    assert set(fig_out["data"]) == {"text/html"}
    page = fig_out["data"]["text/html"]
    assert 'id="synthetic_nb-figure-1"' in page and "Plotly.newPlot" in page
    import base64
    import re

    (payload,) = re.findall(r'atob\("([A-Za-z0-9+/=]+)"\)', page)
    assert json.loads(base64.b64decode(payload)) == figure   # the figure, as it was stored
    assert "<bars>" not in page and "[" not in payload
    assert "<script src" not in page   # plotly.js comes from the site, once per page
    assert "live kernel" in widget_out["data"]["text/html"]
    assert "VBox(&lt;b&gt;)" in widget_out["data"]["text/html"]


def test_notebook_pages_lose_cdn_scripts_and_get_the_sites_plotly(tmp_path):
    hooks = _hooks()

    class _File:
        src_uri = "notebooks/00_tour.ipynb"

    class _Page:
        file, url = _File(), "notebooks/00_tour/"

    content = ('<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js"> '
               '</script><script type="module">import("https://cdnjs.cloudflare.com/m.mjs")'
               '</script><div class="plotly-graph-div"></div><script>Plotly.newPlot()</script>')
    out = hooks.on_page_content(content, page=_Page(), config={}, files=[])
    assert "cdnjs" not in out and "Plotly.newPlot()" in out
    assert out.startswith('<script src="../../assets/javascripts/plotly.min.js"></script>')


def test_cli_page_lists_every_subcommand():
    hooks = _hooks()
    from hookmagic.cli import build_parser

    text = hooks.cli_markdown()
    commands = [" ".join(("hookmagic",) + words) for words, _ in hooks._parsers(build_parser())]
    assert {"hookmagic demo", "hookmagic report", "hookmagic trt summary",
            "hookmagic kernels check"} <= set(commands)
    for command in commands:
        assert f"## `{command}`" in text
        assert f"usage: {command}" in " ".join(text.split())
