"""Figures and panels outside a notebook frontend (terminal IPython, plain Python, scripts).

Plotly's own default there is its ``browser`` renderer, which raises "could not locate runnable
browser" on servers and in containers. Outside a notebook frontend, and unless the user chose a
renderer (``PLOTLY_RENDERER``, or ``plotly.io.renderers.default`` set to anything but Plotly's
automatic choice), hookmagic's views switch Plotly to the ``hookmagic_file`` renderer: showing a
figure writes it to an HTML file (plotly.js beside it, so it opens offline) and prints one line
of text about it and the file's path. :func:`show_panel` does the same for widget panels.

Files go to ``$HOOKMAGIC_FIGURES_DIR``, by default ``<temp>/hookmagic-figures``.
"""
from __future__ import annotations

import itertools
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

RENDERER = "hookmagic_file"
#: what Plotly picks by itself outside a notebook kernel (browser, or nothing that works)
_PLOTLY_AUTOMATIC = ("", "browser", "plotly_mimetype+notebook")
_counter = itertools.count(1)


def in_notebook_frontend() -> bool:
    """False in plain Python and terminal IPython; True in a kernel that a frontend draws for
    (JupyterLab, Notebook, VS Code, nbclient, Colab) and in other embedded IPython shells."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False
    return not any(c.__name__ == "TerminalInteractiveShell" for c in type(shell).__mro__)


def figures_dir() -> Path:
    """Where figures and panels shown outside a notebook are written (created on demand)."""
    folder = Path(os.environ.get("HOOKMAGIC_FIGURES_DIR")
                  or Path(tempfile.gettempdir()) / "hookmagic-figures").expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _slug(text: str) -> str:
    text = re.sub(r"<[^>]+>", " ", text or "figure")
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:60].lower() or "figure"


def figure_text(fig: Any) -> str:
    """One line about ``fig``: its title and what it holds (trace kinds and counts)."""
    title = re.sub(r"<[^>]+>", " ", fig.layout.title.text or "untitled figure").strip()
    kinds = Counter(t.type for t in fig.data)
    what = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "no data"
    return f"{title} ({what})"


def write_figure(fig: Any, path: str | os.PathLike | None = None) -> Path:
    """``fig`` as an HTML file that opens offline (plotly.min.js written beside it once)."""
    import plotly.io as pio

    out = Path(path) if path else figures_dir() / (
        f"{next(_counter):03d}-{_slug(fig.layout.title.text or '')}-{os.getpid()}.html")
    pio.write_html(fig, out, include_plotlyjs="directory", full_html=True)
    return out


def _file_renderer() -> Any:
    from plotly.io._base_renderers import ExternalRenderer

    class FileRenderer(ExternalRenderer):
        """Plotly renderer: write the figure to an HTML file and print a line and its path."""

        def render(self, fig_dict: dict) -> None:
            import plotly.graph_objects as go

            fig = go.Figure(fig_dict, skip_invalid=True)
            print(f"{figure_text(fig)}\n  written to {write_figure(fig)}")

    return FileRenderer()


def install_renderer() -> None:
    """Make ``hookmagic_file`` Plotly's renderer when outside a notebook frontend and the user
    has not chosen one. Idempotent; does nothing inside a notebook kernel."""
    if in_notebook_frontend() or os.environ.get("PLOTLY_RENDERER"):
        return
    import plotly.io as pio

    if RENDERER not in pio.renderers:
        pio.renderers[RENDERER] = _file_renderer()
    if pio.renderers.default in _PLOTLY_AUTOMATIC:
        pio.renderers.default = RENDERER


def show_panel(make: Callable[[], Any], text: str, title: str) -> None:
    """Display the widget ``make()`` returns in a notebook; elsewhere write it (drawn for a
    static page) as an offline HTML file and print ``text`` and the file's path."""
    if in_notebook_frontend():
        from IPython.display import display

        display(make())
        return
    from hookmagic.views.offline import exporting, widget_page

    path = figures_dir() / f"{next(_counter):03d}-{_slug(title)}-{os.getpid()}.html"
    with exporting():
        page = widget_page([make()], title=title)
    path.write_text(page, encoding="utf-8")
    print(f"{text}\n  written to {path}")
