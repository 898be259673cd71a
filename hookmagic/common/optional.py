"""One gate for optional dependencies: :func:`require`.

Core hookmagic needs numpy, pandas, pyarrow, plotly, ipywidgets, IPython, traitlets, numba and tqdm. Everything else is
imported through :func:`require`, which names the extra that installs it when it is missing.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from hookmagic.common.errors import InvalidArgument, MissingDependency

__all__ = ["require", "EXTRAS"]

# extra -> what it is for (the same words as docs/install.md)
EXTRAS = {
    "pipeline": "frame pipelines: video decoding (PyAV) and Prometheus metrics",
    "kernels": "the CUDA kernel library (NVRTC through cuda-core)",
    "ray": "capture on Ray workers and the distributed analyses (Ray)",
    "ranks": "many ranks' traces analysed out of core (DuckDB)",
    "report": "the demo and HTML reports from notebooks (nbclient, nbconvert)",
    "cuda12": "CuPy and CUPTI for CUDA 12 drivers (Jetson JetPack 6)",
    "cuda13": "CuPy and CUPTI for CUDA 13 drivers",
    "docs": "the documentation site (MkDocs)",
}


def install_command(extra: str) -> str:
    """The command that adds ``extra`` (said by :func:`require` and ``hookmagic doctor``)."""
    return f"pip install 'hookmagic[{extra}]' (from a clone: pip install -e '.[{extra}]')"


def require(module: str, *, extra: str, purpose: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependency` naming ``pip install 'hookmagic[extra]'``.

    ``purpose`` says in a few words what needed it ("video decoding"); by default the extra's
    description.
    """
    if extra not in EXTRAS:
        raise InvalidArgument(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        why = purpose or EXTRAS[extra]
        raise MissingDependency(f"{module} is not installed ({why}): {install_command(extra)}") from err
