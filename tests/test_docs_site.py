"""The documentation site draws every notebook figure with the network off, in a real browser.

Builds the site (``mkdocs build --strict``, as CI does; docs/hooks.py executes each notebook on
its recordings and turns its Plotly outputs into figures drawn by the site's own copy of
plotly.js) or uses a prebuilt one (``HOOKMAGIC_DOCS_SITE=path/to/site``), serves it on
127.0.0.1, and opens every notebook page in Debian's Chromium (through Playwright) with every
request to any other host refused. Each page must draw as many Plotly figures as it holds
(at least one), ask for nothing outside the site and raise no script error. The build's console
must be clean: no traceback, no kernel banner, no warning.

Needs ``apt-get install -y chromium`` and ``pip install playwright`` (its own browser download
is not used); skipped when either is missing.

    pytest -m browser tests/test_docs_site.py
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("HOOKMAGIC_CHROMIUM", "/usr/bin/chromium")
BUILD_S, PAGE_S = 1200, 60
NOTEBOOK_PAGES = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install playwright)")
pytest.importorskip("mkdocs", reason="the docs packages are in [dev] (pip install -e '.[docs]')")
if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
    pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    prebuilt = os.environ.get("HOOKMAGIC_DOCS_SITE")
    if prebuilt:
        return Path(prebuilt)
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {k: v for k, v in os.environ.items() if k not in ("PLOTLY_RENDERER",)}
    env["NO_MKDOCS_2_WARNING"] = "1"
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=BUILD_S)
    console = res.stdout + res.stderr
    assert res.returncode == 0, console[-5000:]
    for noise in ("Traceback", "WARNING", "Kernel is running over TCP", "DeprecationWarning"):
        assert noise not in console, f"{noise!r} in the docs build's output:\n{console[-5000:]}"
    return out


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:   # no request lines in the test's output
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def test_the_site_ships_plotly_js_and_no_cdn_script(site: Path):
    assert (site / "assets" / "javascripts" / "plotly.min.js").stat().st_size > 1_000_000
    for name in NOTEBOOK_PAGES:
        page = (site / "notebooks" / name / "index.html").read_text(encoding="utf-8")
        external = re.findall(r"<script[^>]+src=[\"'](https?://[^\"']+)", page)
        assert not external, (name, external)
        assert "application/vnd.plotly.v1+json" not in page


@pytest.mark.parametrize("name", NOTEBOOK_PAGES)
def test_notebook_page_draws_its_figures_offline(name: str, server: str, browser, site: Path):
    source = (site / "notebooks" / name / "index.html").read_text(encoding="utf-8")
    held = source.count('class="plotly-graph-div"')
    assert held >= 1, f"{name}: no figure on its page"
    page = browser.new_page()
    outside: list[str] = []
    errors: list[str] = []

    def route(r) -> None:
        if r.request.url.startswith(server):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{server}/notebooks/{name}/", wait_until="load", timeout=PAGE_S * 1000)
        page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot').length >= {held}",
                               timeout=PAGE_S * 1000)
        drawn = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
        svgs = page.evaluate("document.querySelectorAll('.js-plotly-plot svg.main-svg').length")
    finally:
        page.close()
    assert drawn == held and svgs >= held, (name, held, drawn, svgs)
    assert not outside, f"{name} asked for {outside}"
    assert not errors, f"{name}: {errors}"
