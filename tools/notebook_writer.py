"""Write a report notebook from (kind, source) cells and execute it in place, as the
make_notebook_*.py scripts do (one helper, so every report notebook is made the same way)."""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient


def write_notebook(cells: list[tuple[str, str]], path: Path, timeout: int = 300) -> None:
    """Build a notebook from ``cells`` (``"md"`` or ``"code"``, source), execute it with the
    notebook's folder as working directory, and write it to ``path``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, source in cells:
        nb.cells.append(nbformat.v4.new_markdown_cell(source) if kind == "md"
                        else nbformat.v4.new_code_cell(source))
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    print("wrote", path)
