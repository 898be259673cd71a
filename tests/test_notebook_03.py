"""notebooks/03_layers.ipynb runs top to bottom without a GPU or TensorRT and shows TREx's
figures. (The same execution is checked as nbval checks it, every `# NBVAL_CHECK_OUTPUT` cell
against the saved outputs: tests/notebook_runner.py.)"""
from __future__ import annotations

from tests.notebook_runner import ROOT, output_text as _text, run_notebook


def test_notebook_runs_and_reproduces_trex(monkeypatch):
    code = run_notebook("03_layers.ipynb", monkeypatch)
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
