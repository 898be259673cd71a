"""A real browser: JupyterLab on a localhost port, Debian's Chromium driven by Playwright, runs
every cell of notebooks/00_tour.ipynb and checks that the figures and widgets actually drew.

nbval cannot see whether a chart or a widget rendered; this can. Needs the Debian package
``chromium`` (``apt-get install -y chromium``) and ``pip install playwright`` (Playwright's own
browser download is not used). Screenshot: test-output/browser/tour.png.

    pytest -m browser tests/test_browser.py
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("HOOKMAGIC_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "test-output" / "browser"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
#: JupyterLab settings for the test: every cell in the DOM (no virtualisation), no autosave
#: (the run must not rewrite the notebook in the repository), no news or update checks.
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
}
SERVER_START_S, KERNEL_IDLE_S, RUN_ALL_S = 60, 60, 90

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                               "(pip install playwright)")
if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
    pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)",
                allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[str]:
    """A JupyterLab server on a free localhost port, rooted at the repository; stopped after."""
    settings = tmp_path / "settings"
    for name, value in SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PLOTLY_RENDERER", None)
    log = open(tmp_path / "jupyter.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
         "--ServerApp.token=", "--ServerApp.password=", "--LabApp.expose_app_in_browser=True",
         f"--port={port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.root_dir={ROOT}", f"--LabApp.user_settings_dir={settings}",
         f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if server.poll() is not None:
                pytest.fail(f"jupyter lab exited: {(tmp_path / 'jupyter.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer on {url} in {SERVER_START_S} s")
            time.sleep(0.5)
        yield url
    finally:
        # the server and the kernels it started share its session: stop them all, by its id
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=5)
        log.close()


KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle';
}"""

ALL_CELLS_RAN = """() => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
  return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
}"""


def _dismiss_news_prompt(page) -> None:
    """JupyterLab may ask "Would you like to get notified about official Jupyter news?" in a
    toast that covers the notebook: answer No if it is there (settings above also say no)."""
    toast = page.locator(".Toastify__toast", has_text="news")
    try:
        toast.first.wait_for(state="visible", timeout=3000)
    except sync_api.TimeoutError:
        return
    toast.first.get_by_role("button", name="No").click()
    toast.first.wait_for(state="hidden", timeout=5000)


def test_tour_runs_in_jupyterlab_and_draws_figures_and_widgets(lab: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{lab}/lab/tree/notebooks/00_tour.ipynb", wait_until="domcontentloaded")
            page.wait_for_function(KERNEL_IDLE, timeout=KERNEL_IDLE_S * 1000)
            _dismiss_news_prompt(page)
            # start from no outputs, so everything checked below was drawn by this run
            page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
            assert page.locator(".js-plotly-plot").count() == 0
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(ALL_CELLS_RAN, timeout=RUN_ALL_S * 1000, polling=500)
            page.wait_for_function(KERNEL_IDLE, timeout=RUN_ALL_S * 1000)
            # the report widget is the last cell; give its figures a moment to lay out
            page.locator(".widget-tab").first.wait_for(state="visible", timeout=30_000)
            page.wait_for_timeout(1500)

            body = page.inner_text("body")
            titles = page.eval_on_selector_all(
                ".js-plotly-plot .gtitle", "els => els.map(e => e.textContent)")
            plots = page.locator(".jp-OutputArea .js-plotly-plot").count()
            widgets = page.locator(".widget-tab, .jupyter-widgets").count()
            errors_shown = page.locator(".jp-OutputArea-output[data-mime-type="
                                        "'application/vnd.jupyter.stderr'] .jp-RenderedText"
                                        ", .jp-OutputArea-output .jp-RenderedText[data-mime-type="
                                        "'application/vnd.jupyter.error']").count()

            flame = page.locator(".js-plotly-plot", has_text="GPU time by launching call path")
            flame.first.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "tour.png"))
            # open the report's Flame graph tab: its figure must draw at full width when shown
            report = page.locator(".widget-tab").first
            report.scroll_into_view_if_needed()
            report.locator(".lm-TabBar-tab", has_text="Flame graph").click()
            report_flame = report.locator(".js-plotly-plot").first
            report_flame.wait_for(state="visible", timeout=10_000)
            page.wait_for_timeout(1000)
            flame_box = report_flame.bounding_box()
            page.screenshot(path=str(SHOTS / "tour-report.png"))
            news_left = page.locator(".Toastify__toast", has_text="news").count()
        finally:
            browser.close()
    elapsed = time.monotonic() - started

    assert "Error displaying widget" not in body
    assert news_left == 0, "JupyterLab's news prompt is still covering the page"
    assert errors_shown == 0, "a cell printed an error"
    # flame (time), flame (bytes), timeline, diff, Kineto flame, and the report's flame + timeline
    assert plots >= 7, (plots, titles)
    assert any(t.startswith("GPU time by launching call path") for t in titles), titles
    assert any(t.startswith("bytes copied by launching call path") for t in titles), titles
    assert any(t.startswith("Timeline") for t in titles), titles
    assert any(t.startswith("Differential flame graph") for t in titles), titles
    assert widgets > 0
    assert flame_box is not None and flame_box["width"] > 500 and flame_box["height"] > 300, flame_box
    assert "This is a REPLAY of recordings made on a GPU" in body or "GPU(s), driver" in body
    assert not [e for e in errors if "plotly" in e.lower() or "widget" in e.lower()], errors
    assert elapsed < 170, f"browser run took {elapsed:.0f} s"
