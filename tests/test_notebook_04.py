"""notebooks/04_scheduler.ipynb runs top to bottom without a GPU. (CI also runs
`pytest --nbval-lax notebooks/04_scheduler.ipynb`, comparing every `# NBVAL_CHECK_OUTPUT` cell.)"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "04_scheduler.ipynb"


def _text(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", []))


def test_notebook_runs_and_agrees_with_theory(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    text = "\n".join(_text(c) for c in code)
    assert "identical requests: True" in text and "identical batches: True" in text
    assert "Erlang C" in text and "Cobham" in text
    assert "dynamic_batching {" in text and "@serve.batch" in text
    assert "nothing real is shown" in text or "Recorded on" in text
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for c in code for o in c.outputs)
