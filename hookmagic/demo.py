"""``hookmagic demo``: execute the tour notebook on the bundled recordings and render it to HTML.

Needs no GPU and no network. The tour is found in the source checkout that hookmagic is
imported from (``pip install -e .`` keeps ``notebooks/`` beside the package), or in the wheel,
which ships it as package data (``hookmagic/data/notebooks/00_tour.ipynb``).

In the kernel that runs the tour, Plotly's renderer is ``plotly_mimetype+notebook`` (through
plotly's own ``PLOTLY_RENDERER`` variable): every figure then also carries HTML, and plotly.js
is embedded once, so the figures draw in the exported page with no network. The notebook kept
in the repository is executed with the plain mimetype renderer, which keeps it small.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hookmagic.common.errors import HookmagicError
from hookmagic.common.progress import bar

if TYPE_CHECKING:
    from traitlets.config import Config

TOUR = "00_tour.ipynb"
#: figures carry plotly.js-backed HTML as well as Plotly's JSON mimetype
HTML_RENDERER = "plotly_mimetype+notebook"


class DemoError(HookmagicError, RuntimeError):
    """The demo cannot be built (no notebook found, or a cell failed)."""


@dataclass(frozen=True)
class DemoResult:
    html: Path
    notebook: Path
    seconds: float


def find_tour() -> Path:
    """The tour notebook: ``notebooks/00_tour.ipynb`` of the source checkout hookmagic is
    imported from (``pip install -e .``), else the copy a wheel ships in
    ``hookmagic/data/notebooks/``."""
    import hookmagic

    package = Path(hookmagic.__file__).resolve().parent
    for tour in (package.parent / "notebooks" / TOUR, package / "data" / "notebooks" / TOUR):
        if tour.is_file():
            return tour
    raise DemoError(f"the tour notebook is in neither {package.parent / 'notebooks'} nor "
                    f"{package / 'data' / 'notebooks'}: reinstall hookmagic (pip install hookmagic)")


def build_demo(out_dir: str | os.PathLike = "hookmagic-demo", timeout_s: int = 600) -> DemoResult:
    """Execute the tour in a fresh kernel and write ``out_dir/00_tour.html``; returns the paths."""
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError

    from hookmagic.views.offline import notebook_html

    tour = find_tour()
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(tour, as_version=4)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hookmagic-demo-") as sockets:
        client = nbclient.NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                                         config=_kernel_config(sockets),
                                         resources={"metadata": {"path": str(tour.parent)}})
        cells = sum(c.cell_type == "code" for c in nb.cells)
        with bar(desc=f"running {tour.name}", total=cells, unit="cell") as shown:
            client.on_cell_executed = lambda **_: shown.update(1)
            try:
                # the tour runs from its own folder, as it does in JupyterLab
                client.execute(env={**os.environ, "PLOTLY_RENDERER": HTML_RENDERER})
            except CellExecutionError as err:
                raise DemoError(f"a cell of {tour.name} failed:\n{err}") from None
    seconds = time.perf_counter() - started
    notebook = out / TOUR
    nbformat.write(nb, notebook)
    body = notebook_html(nb, title="hookmagic tour")    # no CDN: widgets render offline
    html = out / (Path(TOUR).stem + ".html")
    html.write_text(body, encoding="utf-8")
    return DemoResult(html=html, notebook=notebook, seconds=seconds)


def _kernel_config(socket_dir: str) -> "Config":
    """How the tour's kernel is reached: where Unix sockets exist, over them in ``socket_dir``
    (a kernel on TCP is reachable by anyone on the host, and ipykernel warns about it)."""
    from traitlets.config import Config

    if os.name != "posix":
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "ip": os.path.join(socket_dir, "kernel")}})
