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
    # the recorded real runs: labelled with the GPU, driver and date of calibration.json, and the
    # fidelity table as the benchmark wrote it (expected strings computed from the recording)
    import json
    import pandas as pd
    rec = NOTEBOOK.parent / "recordings" / "sched_fidelity"
    info = json.loads((rec / "calibration.json").read_text())
    assert f"Recorded on {info['gpu']} (driver {info['driver']}" in text and info["date"] in text
    fid = pd.read_csv(rec / "fidelity.csv")
    assert f"{int(fid['ok'].sum())} of {len(fid)} groups pass" in text
    for r in fid[~fid["ok"]].itertuples():
        assert f"misses: {r.scenario} / {r.group}: p50 {r.p50_sim_ms:.1f} ms simulated" in text
    assert "recomputed from the Parquet records, same table: True" in text
    titles = [o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"]
              for c in code for o in c.outputs
              if "application/vnd.plotly.v1+json" in o.get("data", {})]
    for scenario in ("mixed_priorities", "cameras_bursty_edf", "two_streams_fifo"):
        assert any(t.startswith(f"{scenario}: simulated (solid) vs real (dashed)")
                   and info["driver"] in t for t in titles), titles
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for c in code for o in c.outputs)
