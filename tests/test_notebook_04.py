"""notebooks/04_scheduler.ipynb runs top to bottom without a GPU. (The same
execution is checked as nbval checks it, every `# NBVAL_CHECK_OUTPUT` cell: tests/notebook_runner.py.)"""
from __future__ import annotations

from tests.notebook_runner import NOTEBOOKS, output_text as _text, run_notebook


def test_notebook_runs_and_agrees_with_theory(monkeypatch):
    code = run_notebook("04_scheduler.ipynb", monkeypatch)
    text = "\n".join(_text(c) for c in code)
    assert "identical requests: True" in text and "identical batches: True" in text
    assert "Erlang C" in text and "Cobham" in text
    assert "dynamic_batching {" in text and "@serve.batch" in text
    # the recorded real runs: labelled with the GPU, driver and date of calibration.json, and the
    # fidelity table as the benchmark wrote it (expected strings computed from the recording)
    import json
    import pandas as pd
    rec = NOTEBOOKS / "recordings" / "sched_fidelity"
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
