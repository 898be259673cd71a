"""Open a saved HTML page in Debian's Chromium (Playwright) with the network OFF and report
what rendered: every request that is not a local file is refused and recorded."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("HOOKMAGIC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

#: every widget view in the page got a rendered widget next to it
VIEWS_RENDERED = """() => {
  const specs = [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')];
  return specs.length > 0 && specs.every(s => {
    const area = s.previousElementSibling;
    return area && area.classList.contains('widget-subarea') && area.children.length > 0;
  });
}"""


@dataclass
class OfflinePage:
    """What a page showed with the network off."""
    refused: list[str] = field(default_factory=list)      # requests that left the machine
    errors: list[str] = field(default_factory=list)       # uncaught page errors
    plots: int = 0                                         # Plotly figures drawn outside widgets
    widget_views: int = 0                                  # widget views in the page
    tabs: dict[str, dict[str, object]] = field(default_factory=dict)   # per report tab: plots, text
    text: str = ""


def open_offline(path: Path, screenshot: Path | None = None) -> OfflinePage:
    """Load ``path`` from disk with the network off; open every tab of the first report."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)")
    seen = OfflinePage()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1300, "height": 1000})
            page = context.new_page()

            def route(r) -> None:
                if r.request.url.startswith(("file:", "data:", "blob:")):
                    r.continue_()
                else:
                    seen.refused.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.on("pageerror", lambda exc: seen.errors.append(str(exc)))
            page.goto(path.resolve().as_uri(), wait_until="load")
            page.wait_for_function(VIEWS_RENDERED, timeout=30_000, polling=200)
            seen.widget_views = page.locator(
                'script[type="application/vnd.jupyter.widget-view+json"]').count()
            seen.plots = page.locator(".js-plotly-plot").count()
            report = page.locator(".widget-tab").last
            names = report.locator(".lm-TabBar-tab").all_inner_texts()
            for name in names:
                report.locator(".lm-TabBar-tab", has_text=name).first.click()
                page.wait_for_timeout(600)
                pane = report.locator(".widget-tab-contents > :visible, .lm-StackedPanel > :visible")
                seen.tabs[name] = {"plots": report.locator(".js-plotly-plot:visible").count(),
                                   "text": pane.first.inner_text() if pane.count() else ""}
            if screenshot is not None:
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot))
            seen.text = page.inner_text("body")
        finally:
            browser.close()
    return seen
