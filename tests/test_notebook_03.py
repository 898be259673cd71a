"""notebooks/03_layers.ipynb runs top to bottom without a GPU or TensorRT and shows TREx's
figures. (CI also runs `pytest --nbval-lax notebooks/03_layers.ipynb`, which compares every
`# NBVAL_CHECK_OUTPUT` cell with the saved outputs.)"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "03_layers.ipynb"


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def test_notebook_runs_and_reproduces_trex(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    first = _text(code[1])
    assert "layers: 72" in first and "layer sum: 0.470 ms" in first
    assert "weights: 3.3 MiB, activations: 15.9 MiB" in first
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for c in code for o in c.outputs)
    # the recorded PyTorch profile, labelled from its own meta (not hard-coded)
    from hookmagic.layers import LayerProfile
    rec = ROOT / "hookmagic" / "data" / "recordings" / "torch_convnet.layers.json"
    meta = LayerProfile.load(rec).meta
    text = "\n".join(_text(c) for c in code)
    assert f"recorded on {meta['device']} (driver {meta['driver']}" in text
    assert meta["recorded"] in text
    assert "launch gaps, hooked run" in text and "gap_ms" in text
