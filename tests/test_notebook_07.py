"""notebooks/07_multirank.ipynb replays the 2-GPU DDP recordings and shows what it claims: the
recordings labelled with where they were made, the slowed rank named with its delay within 10%
of the sleep it really took (truth_rank=N.json, timed in the job itself), and the figures.
(The same execution is checked as nbval checks it, every `# NBVAL_CHECK_OUTPUT` cell:
tests/notebook_runner.py.)"""
from __future__ import annotations

import json
import warnings
import zipfile

import numpy as np

import hookmagic
from tests.notebook_runner import NOTEBOOKS, output_text as _text, run_notebook

RUNS = NOTEBOOKS / "recordings" / "multirank"


def _truth(job: str) -> dict:
    return {int(p.stem.split("=")[1]): json.loads(p.read_text())
            for p in (RUNS / job).glob("truth_rank=*.json")}


def test_recordings_name_the_slowed_rank_within_ten_percent():
    for job in ("ddp_slow1_20ms", "ddp_slow0_50ms"):
        truth = _truth(job)
        slow = truth[0]["slow_rank"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")       # a complete recording: no rank has problems
            ts = hookmagic.load_many(RUNS / job)
        with ts:
            meta = ts.meta(0)
            assert meta["recorded_on"] and meta["source"] == "cupti"
            assert ts.ranks["status"].tolist() == ["complete", "complete"]
            assert ts.ranks["launcher"].tolist() == ["torchrun", "torchrun"]
            assert ts.ranks["gpu_uuid"].nunique() == 2        # one GPU per rank
            st = ts.stragglers()
            assert st["step"].tolist() == [6, 7, 8, 9]
            assert (st["straggler_rank"] == slow).all()
            slept = np.array([truth[slow]["sleep_s"][s] for s in st["step"]]) * 1e9
            late = st["lateness_ns"].to_numpy()
            # every step, the first too: each rank's first collective is measured from its own
            # capture start, so attaching CUPTI on the slowed rank is not counted as lateness
            assert np.all(np.abs(late - slept) <= 0.10 * slept), (job, st, slept)
            assert (st["cause"] == "host").all(), st


def test_notebook_replays_and_labels_the_recordings(monkeypatch):
    code = run_notebook("07_multirank.ipynb", monkeypatch)
    text = "\n".join(_text(c) for c in code)
    for job in ("ddp_baseline", "ddp_slow1_20ms", "ddp_slow0_50ms"):
        with zipfile.ZipFile(RUNS / job / "rank=0.hmtrace") as zf:     # read without hookmagic
            meta = json.loads(zf.read("meta.json"))["meta"]
        assert f"recorded on {meta['recorded_on']}" in text
    assert "rank 1 was slowed; it is named last in 4 of 4 steps" in text
    assert "in every captured step, lateness within" in text
    titles = [o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"]
              for c in code for o in c.outputs
              if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert any(t.startswith("Last rank to reach a collective, per step") for t in titles)
    assert any(t.startswith("2 ranks, one row each") for t in titles)
    assert any(t.startswith("GPU time per kernel against the median rank") for t in titles)
