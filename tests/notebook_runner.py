"""Executing a report notebook in a fresh kernel, for the notebook tests."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def run_notebook(name: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Execute ``notebooks/<name>`` (cwd: notebooks/); return its code cells; fail on any error."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.delenv("PLOTLY_RENDERER", raising=False)
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, [f"{o.ename}: {o.evalue}" for o in errors]
    return code


def output_text(cell: Any) -> str:
    """The text a cell printed or displayed."""
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                   for o in cell.get("outputs", []))
