"""Python source files as the stacks of a trace name them: whose code a file is, and its text.

Two questions every view of "which line launched this" asks:

- :func:`is_library_file`: is a frame's file the user's own code, or a library's (anything in
  ``site-packages``/``dist-packages``, the Python standard library, ``<frozen ...>`` modules,
  hookmagic itself)? The user's innermost frame is the line that launched a kernel.
- :func:`source_lines`: the text of a file, from a snapshot stored with a trace
  (``meta["sources"]``, see :func:`snapshot_sources`), else from :mod:`linecache` (which also
  holds the cells of the running IPython kernel), else nothing. Files larger than
  :data:`MAX_SOURCE_BYTES` are not read.

The ground floor: imports nothing of hookmagic but :mod:`hookmagic.common`.
"""
from __future__ import annotations

import linecache
import os
import re
from typing import Iterable, Mapping

__all__ = ["MODULE_FILE", "MAX_SOURCE_BYTES", "is_library_file", "source_lines",
           "snapshot_sources"]

#: filename of the frames that name ``nn.Module`` calls (see hookmagic.cupti.modules)
MODULE_FILE = "<module>"
#: a file larger than this is not read for its source (bytes)
MAX_SOURCE_BYTES = 4 * 1024 * 1024
#: the most source text :func:`snapshot_sources` stores in one trace (bytes)
MAX_SNAPSHOT_BYTES = 2 * 1024 * 1024

_HOOKMAGIC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY = re.compile(
    r"[/\\](site-packages|dist-packages)[/\\]"         # installed packages
    r"|[/\\]lib[/\\](pypy|python)\d(\.\d+)?[/\\]"      # the standard library
    r"|^<frozen |^<__array_function__|^<built-in"
    # hookmagic's own package wherever it was installed when the trace was recorded
    r"|[/\\]hookmagic[/\\](?:(?:analysis|common|cupti|distributed|exporters|importers|kernels|layers|memory"
    r"|pipeline|sched|trace|traceset|views)[/\\])?[A-Za-z_]\w*\.py$"
    # relative paths, as torch.profiler (Kineto) names frames: the well-known frameworks
    r"|^(torch|torchvision|torchaudio|functorch|triton|numpy|cupy|cupyx|jax|jaxlib|tensorflow"
    r"|keras|transformers|accelerate|apex|onnxruntime|tensorrt|lightning|pytorch_lightning)[/\\]")


def is_library_file(filename: str) -> bool:
    """Whether ``filename`` (as a stack frame names it) is library code, not the user's.

    Library: installed packages (``site-packages``, ``dist-packages``), the standard library
    (``.../lib/python3.X/...``), frozen modules, hookmagic's own package, the module frames
    hookmagic makes (``<module>``), and relative paths into well-known frameworks
    (``torch/nn/modules/linear.py``, as torch.profiler names frames). Everything else, notebook
    cells (``<ipython-input-...>``, ``/tmp/ipykernel_*/*.py``) and scripts included, is the
    user's.
    """
    name = str(filename)
    if name == MODULE_FILE or _LIBRARY.search(name):
        return True
    return name.startswith(_HOOKMAGIC_DIR + os.sep)


def source_lines(filename: str, stored: Mapping[str, str] | None = None) -> tuple[list[str], str]:
    """The lines of ``filename`` (without line ends) and where they came from.

    Looks in ``stored`` (a trace's ``meta["sources"]``: filename -> text) first, then in
    :mod:`linecache` (the running kernel's cells, then the file on disk). Returns
    ``(lines, origin)`` with origin ``"recording"``, ``"disk"`` or ``"unavailable"`` (then
    ``lines`` is empty).
    """
    name = str(filename)
    if stored and isinstance(stored.get(name), str):
        return stored[name].splitlines(), "recording"
    if name == MODULE_FILE:
        return [], "unavailable"
    if not (name.startswith("<") and name.endswith(">")):
        try:
            if os.path.getsize(name) > MAX_SOURCE_BYTES:
                return [], "unavailable"
        except OSError:
            pass  # not on disk: linecache may still hold it (IPython cells)
    try:
        lines = linecache.getlines(name)
    except Exception:  # pragma: no cover - linecache swallows most errors itself
        lines = []
    if not lines:
        return [], "unavailable"
    return [line.rstrip("\r\n") for line in lines], "disk"


def snapshot_sources(filenames: Iterable[str], include_library: bool = False,
                     max_bytes: int = MAX_SNAPSHOT_BYTES) -> dict[str, str]:
    """The text of each named file that can be read, for ``trace.meta["sources"]``.

    Only the user's files unless ``include_library``; files are taken in the order given until
    ``max_bytes`` of text is stored (a file that would pass the budget is skipped). A trace
    saved with these sources shows its lines view on any machine.
    """
    out: dict[str, str] = {}
    spent = 0
    for name in dict.fromkeys(str(f) for f in filenames):
        if not include_library and is_library_file(name):
            continue
        lines, origin = source_lines(name)
        if origin == "unavailable":
            continue
        text = "\n".join(lines) + "\n"
        size = len(text.encode("utf-8", "replace"))
        if spent + size > max_bytes:
            continue
        out[name] = text
        spent += size
    return out
