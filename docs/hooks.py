"""mkdocs hooks for the hookmagic site.

- The nav lists pages that other parts of the project add (pipeline, kernels, several ranks,
  ...); an entry whose page is not in docs/ yet is dropped with an info line, so
  `mkdocs build --strict` passes at every stage. (docs/notebooks is a link to ../notebooks.)
- Notebook pages show every figure with the network off. The notebooks are stored light
  (figure outputs dropped, see tools/slim_notebooks.py), so each one is executed here, in a fresh
  kernel from notebooks/ on the recordings beside it, as nbval runs it; then every Plotly output
  (``application/vnd.plotly.v1+json``, which nbconvert cannot render) becomes a ``<div>`` drawn
  by ``Plotly.newPlot``, and the page loads plotly.js from the site itself
  (``assets/javascripts/plotly.min.js``, copied from the installed plotly package). Scripts that
  the notebook template would load from CDNs (MathJax, Mermaid) are left out; widget outputs,
  which need a live kernel, are replaced by a line saying so.
- Executed notebooks are kept in ``.cache/docs/notebooks/`` under a key of the notebook's
  bytes, so a second build reuses them (delete the folder after changing the package). ``HOOKMAGIC_DOCS_EXECUTE=0`` skips the
  execution (pages then show only the figures stored in the notebooks).
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from mkdocs.plugins import event_priority

log = logging.getLogger("mkdocs.hooks.hookmagic")
ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
#: (its last folder is named notebooks: mkdocs-jupyter picks pages by ``notebooks/*.ipynb``)
CACHE = ROOT / ".cache" / "docs" / "notebooks"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: where the site serves plotly.js from (one copy for every page)
PLOTLY_ASSET = "assets/javascripts/plotly.min.js"
#: a cell may take this long (the slowest notebook cell, a CPU pipeline sweep, takes ~1 min)
CELL_TIMEOUT_S = 600
#: <script> elements the notebook template adds that would load from a CDN
_CDN_SCRIPT = re.compile(
    r"<script\b[^>]*\bsrc=[\"']https?://[^>]*>\s*</script>"
    r"|<script\b[^>]*>(?:(?!</script>).)*?(?:cdnjs\.cloudflare\.com|unpkg\.com|cdn\.jsdelivr\.net)"
    r"(?:(?!</script>).)*</script>", re.S)


# -- the nav ------------------------------------------------------------------------------------

def _exists(docs: Path, page: str) -> bool:
    return (docs / page).is_file() or (page.startswith("notebooks/") and (ROOT / page).is_file())


def _prune(items: list, docs: Path) -> list:
    kept = []
    for item in items:
        if isinstance(item, dict):
            (title, value), = item.items()
            if isinstance(value, list):
                value = _prune(value, docs)
                if value:
                    kept.append({title: value})
            elif isinstance(value, str) and not value.startswith(("http:", "https:")) \
                    and not _exists(docs, value):
                log.info("nav: %s (%s) is not written yet; left out", title, value)
            else:
                kept.append(item)
        elif isinstance(item, str) and not _exists(docs, item):
            log.info("nav: %s is not written yet; left out", item)
        else:
            kept.append(item)
    return kept


def on_config(config, **_):
    config["nav"] = _prune(config["nav"], Path(config["docs_dir"]))
    return config


# -- notebooks with their figures ---------------------------------------------------------------

def figure_html(figure: dict, div_id: str) -> str:
    """A div and the script that draws ``figure`` (a Plotly JSON dict) with ``window.Plotly``.

    The figure travels base64-encoded: nothing in it is read as HTML or markdown by the site's
    other plugins (autorefs would take ``x["a"][0]`` for a cross-reference)."""
    height = (figure.get("layout") or {}).get("height")
    # a page's divs have no height of their own: the figure's, or plotly's default
    css_height = f"{height}px" if isinstance(height, (int, float)) else "450px"
    payload = base64.b64encode(json.dumps(
        {"data": figure.get("data", []), "layout": figure.get("layout", {})},
        ensure_ascii=False).encode("utf-8")).decode("ascii")
    return (f'<div id="{div_id}" class="plotly-graph-div" style="height:{css_height}; '
            f'width:100%;"></div>\n<script>(function () {{\n'
            f'  var bytes = Uint8Array.from(atob("{payload}"), function (c) {{ return c.charCodeAt(0); }});\n'
            f'  var fig = JSON.parse(new TextDecoder().decode(bytes));\n'
            f'  Plotly.newPlot("{div_id}", fig.data, fig.layout, '
            f'{{responsive: true, displaylogo: false}});\n}})();</script>')


def render_outputs(nb: dict, name: str) -> int:
    """Turn ``nb``'s Plotly outputs into HTML and its widget outputs into a note, in place;
    drop saved widget state. Returns the number of figures."""
    nb.get("metadata", {}).pop("widgets", None)
    figures = 0
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            data = out.get("data")
            if not isinstance(data, dict):
                continue
            if PLOTLY_MIME in data:
                figures += 1
                div_id = f"{re.sub(r'[^A-Za-z0-9]', '_', name)}-figure-{figures}"
                out["data"] = {"text/html": figure_html(data[PLOTLY_MIME], div_id)}
            elif WIDGET_MIME in data:
                plain = html.escape("".join(data.get("text/plain", "")))[:200]
                out["data"] = {"text/html": "<p><em>An interactive widget: it runs in JupyterLab "
                                            f"with a live kernel.</em> <code>{plain}</code></p>"}
    return figures


def _execute(nb: dict) -> dict:
    """``nb`` run top to bottom in a fresh kernel from notebooks/, as nbval runs it."""
    import nbclient
    import nbformat

    node = nbformat.reads(json.dumps(nb), as_version=4)
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + env_before if env_before else "")
    try:
        nbclient.NotebookClient(node, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOKS)}}
                                ).execute(stderr=subprocess.DEVNULL)   # no kernel banners;
        # a cell's errors still come back through the kernel's messages and fail the build
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before
    return json.loads(nbformat.writes(node))


def executed_notebook(src: Path) -> dict:
    """The notebook at ``src`` run top to bottom, kept in the cache under its bytes' hash.
    Raises what the failing cell raised."""
    key = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    cached = CACHE / f"{src.stem}-{key}.executed.ipynb"
    if cached.is_file():
        return json.loads(cached.read_text(encoding="utf-8"))
    log.info("executing %s for its figures", src.name)
    nb = _execute(json.loads(src.read_text(encoding="utf-8")))
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob(f"{src.stem}-*.executed.ipynb"):
        old.unlink()
    tmp = cached.with_suffix(".tmp")
    tmp.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    tmp.replace(cached)
    return nb


def rendered_notebook(src: Path, execute: bool = True) -> Path:
    """The notebook at ``src`` (executed when ``execute``) with HTML figures, in the cache."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    if execute:
        try:
            nb = executed_notebook(src)
        except Exception as exc:   # the cell's error, in one line; strict mode fails the build
            first = str(exc).strip().splitlines()
            log.error("%s does not run: %s: %s", src.name, type(exc).__name__,
                      first[-1] if first else "")
            return src
    log.info("%s: %d figures", src.name, render_outputs(nb, src.stem))
    dest = CACHE / f"{src.stem}.ipynb"
    CACHE.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    return dest


def _is_notebook(file) -> bool:
    return str(file.src_uri).startswith("notebooks/") and str(file.src_uri).endswith(".ipynb")


#: each notebook page's notebook in the repository (its page is rendered from a copy)
_ORIGINALS: dict[str, Path] = {}


@event_priority(-100)   # after mkdocs-jupyter has wrapped the notebooks as pages
def on_files(files, config, **_):
    """Point each notebook page at its executed copy and add plotly.js to the site's files."""
    from mkdocs.structure.files import File
    import plotly

    execute = os.environ.get("HOOKMAGIC_DOCS_EXECUTE", "1") != "0"
    for file in files:
        if _is_notebook(file):
            _ORIGINALS[file.src_uri] = Path(file.abs_src_path)
            file.abs_src_path = str(rendered_notebook(Path(file.abs_src_path), execute))
    js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    files.append(File.generated(config, PLOTLY_ASSET, abs_src_path=str(js)))
    return files


def on_page_content(content, page, config, files, **_):
    """Notebook pages: no CDN scripts; plotly.js from the site, before the first figure."""
    if not _is_notebook(page.file):
        return content
    from mkdocs.utils import get_relative_url

    content = _CDN_SCRIPT.sub("", content)
    src = get_relative_url(PLOTLY_ASSET, page.url or ".")
    return f'<script src="{html.escape(src)}"></script>\n{content}'


# -- the command line page ----------------------------------------------------------------------

CLI_MARKER = "<!-- hookmagic-cli-help -->"


def _parsers(parser, path: tuple[str, ...] = ()):
    """``(command words, parser)`` for ``parser`` and every subcommand under it, depth first."""
    import argparse

    yield path, parser
    for action in parser._actions:   # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def cli_markdown() -> str:
    """Every ``hookmagic`` subcommand's ``--help``, from :func:`hookmagic.cli.build_parser`."""
    from hookmagic.cli import build_parser

    parts = []
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"   # argparse wraps at the terminal's width: the page's instead
    try:
        for words, parser in _parsers(build_parser()):
            title = " ".join(("hookmagic",) + words)
            parts.append(f"## `{title}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(parts)


def on_page_markdown(markdown, page, config, files, **_):
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    return markdown


@event_priority(-100)   # after mkdocs-jupyter has copied the rendered copy beside the page
def on_post_page(output, page, config, **_):
    """The notebook offered for download beside a page is the repository's, not the copy the
    page was rendered from."""
    original = _ORIGINALS.get(page.file.src_uri)
    if original is not None:
        target = Path(page.file.abs_dest_path).parent / original.name
        if target.is_file():
            shutil.copyfile(original, target)
    return output
