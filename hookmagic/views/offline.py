"""HTML pages that render with the network off: widgets, Plotly figures and all.

nbconvert's HTML loads RequireJS, MathJax and the ipywidgets HTML manager from CDNs, so an
exported report shows blank widget outputs offline. Here the widget manager
(``@jupyter-widgets/html-manager``'s self-contained ``embed.js``, vendored from the npm registry
under ``hookmagic/data/vendor/html-manager``, BSD-3-Clause) and plotly.js (from the installed
plotly package) are inlined into the page instead:

- :func:`notebook_html` renders an executed notebook (``hookmagic demo``) through the
  ``hookmagic_offline`` nbconvert template (the ``lab`` template without CDN scripts);
- :func:`widget_page` writes widgets (the report of ``hookmagic report``, see
  :func:`hookmagic.views.report.report_page`) as one page;
- :func:`figure_html` is the HTML half of a figure's bundle inside a widget's Output, which
  the HTML manager can render (it has no Plotly mimetype renderer).
"""
from __future__ import annotations

import contextlib
import contextvars
import html
import json
import re
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from hookmagic.common.errors import Unavailable

DATA = Path(__file__).resolve().parent.parent / "data"
VENDOR = DATA / "vendor" / "html-manager"
TEMPLATES = DATA / "nbconvert"
TEMPLATE = "hookmagic_offline"
#: True while widgets are drawn for an exported page: their figures then carry HTML too
EXPORTING: contextvars.ContextVar[bool] = contextvars.ContextVar("hookmagic_exporting",
                                                                 default=False)


@contextlib.contextmanager
def exporting() -> Any:
    """Within this block, figures put into widgets also carry :func:`figure_html`."""
    token = EXPORTING.set(True)
    try:
        yield
    finally:
        EXPORTING.reset(token)


def script_json(text: str) -> str:
    """JSON text made safe inside an inline ``<script>``: ``<``, ``>``, ``&``, U+2028 and U+2029
    written as ``\\uXXXX`` escapes. In JSON they can only stand inside strings, where the escape
    means the same character, so the data is unchanged while no name from a file (a kernel
    called ``<!--<script>``) can end the script or start a comment in the page."""
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _inline_js(source: str) -> str:
    """``source`` made safe inside ``<script>...</script>`` (no closing tag, no source map)."""
    lines = [ln for ln in source.splitlines() if not ln.startswith("//# sourceMappingURL=")]
    return "\n".join(lines).replace("</script", "<\\/script").replace("<!--", "<\\!--")


#: webpack finds its asset folder from the <script src> it runs from, and throws when inline
#: (no src); inlined, it uses the page's own address instead (assets are fonts for icons only)
_PUBLIC_PATH = ('if(!e)throw new Error("Automatic publicPath is not supported in this browser");',
                "if(!e)e=document.baseURI;")


@lru_cache(maxsize=1)
def widgets_js() -> str:
    """The ipywidgets HTML manager (embed.js, ~1.9 MB), ready to inline into a ``<script>``."""
    source = (VENDOR / "embed.js").read_text(encoding="utf-8")
    if source.count(_PUBLIC_PATH[0]) != 1:
        raise Unavailable("vendored embed.js changed: update _PUBLIC_PATH in views/offline.py")
    return _inline_js(source.replace(*_PUBLIC_PATH))


def plotly_js() -> str:
    """plotly.js of the installed plotly package, ready to inline into a ``<script>``."""
    from plotly.offline import get_plotlyjs

    return _inline_js(get_plotlyjs())


def figure_html(fig: Any) -> str:
    """A div and a script that draw ``fig`` with the page's ``window.Plotly``.

    The widget manager inserts outputs before they are attached to the page, and tabs that are
    not selected are hidden; so the script waits until its div is in the page and visible
    (polling, 100 ms), then draws at the width it gets.
    """
    import plotly.io as pio

    div = f"hm-fig-{uuid.uuid4().hex[:12]}"
    spec = script_json(pio.to_json(fig, validate=False))
    return (f'<div id="{div}" class="hm-figure" style="width:100%"></div>'
            "<script>(function(){var fig=" + spec + ";"
            f"function draw(){{var el=document.getElementById('{div}');"
            "if(!el||!window.Plotly||el.offsetParent===null){return setTimeout(draw,100);}"
            "window.Plotly.newPlot(el,fig.data,fig.layout,{responsive:true});}"
            "draw();})();</script>")


def notebook_html(nb: Any, title: str) -> str:
    """An executed notebook as one HTML page that needs no network (``hookmagic demo``)."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name=TEMPLATE, extra_template_basedirs=[str(TEMPLATES)])
    body, _ = exporter.from_notebook_node(
        nb, resources={"metadata": {"name": title}, "hookmagic_widgets_js": widgets_js()})
    # plotly's notebook renderer puts a MathJax <script src=CDN> before every figure; figures
    # here have no LaTeX, and the page must not reach for the network
    return _CDN_MATHJAX.sub("", body)


_CDN_MATHJAX = re.compile(r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/[^"]*">'
                          r"\s*</script>")


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;margin:16px 24px;color:#222}}
h1{{font-size:20px;margin:0 0 4px}} .hm-sub{{color:#555;font-size:13px;margin-bottom:12px}}</style>
<script>{plotly}</script>
</head>
<body>
<h1>{title}</h1>
<div class="hm-sub">{subtitle}</div>
{views}
<script type="application/vnd.jupyter.widget-state+json">{state}</script>
<script>{widgets}</script>
</body>
</html>
"""


def widget_page(widgets: Iterable[Any], title: str, subtitle: str = "") -> str:
    """``widgets`` (ipywidgets, already drawn) as one self-contained HTML page: the widget
    state, the views, the HTML manager and plotly.js, all inline."""
    from ipywidgets.embed import dependency_state, embed_data

    views = list(widgets)
    # only these widgets and what they hold, not every widget alive in the process
    data = embed_data(views=views, state=dependency_state(views, drop_defaults=True))
    specs = "\n".join(
        '<script type="application/vnd.jupyter.widget-view+json">'
        + script_json(json.dumps(spec)) + "</script>" for spec in data["view_specs"])
    return _PAGE.format(title=html.escape(title), subtitle=html.escape(subtitle),
                        plotly=plotly_js(), views=specs, widgets=widgets_js(),
                        state=script_json(json.dumps(data["manager_state"])))

