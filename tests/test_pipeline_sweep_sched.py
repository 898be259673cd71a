"""Sweeps over pipeline settings, and a run turned into scheduler inputs. Synthetic stages
(sleeping threads) over synthetic frames."""
from __future__ import annotations

import time

import pytest

from hookmagic import sched as S
from hookmagic.pipeline import Pipeline, Stage, cameras_that_fit, sweep, synthetic_cameras
from hookmagic.pipeline.views import sweep_figure


def _infer(ms_per_batch: float, ms_per_item: float):
    def fn(batch):
        time.sleep((ms_per_batch + ms_per_item * len(batch)) / 1e3)
        return batch
    return fn


def test_sweep_runs_every_setting_and_records_errors():
    def build(batch, workers):
        if batch == 3 and workers == 2:
            raise RuntimeError("synthetic: unsupported setting")
        # infer sleeps 4 ms a batch + 1 ms a frame (70-150 ms a run): busy well past SATURATED even
        # when a loaded 2-core CI machine is slow to schedule the reader (with 1 + 0.1 ms the run's
        # span was mostly thread start-up there and the analysis rightly said the source paced it)
        return Pipeline([Stage("pre", lambda x: x, workers=workers),
                         Stage("infer", _infer(4.0, 1.0), batch=batch)], queue_size=8)

    table = sweep(build, {"batch": [1, 3], "workers": [1, 2]}, source=lambda: range(30),
                  progress=False)
    assert len(table) == 4 and len(table.attrs["runs"]) == 4
    bad = table[(table["batch"] == 3) & (table["workers"] == 2)].iloc[0]
    assert "synthetic: unsupported setting" in bad["error"]
    good = table[table["error"] == ""]
    assert (good["frames_done"] == 30).all() and (good["bottleneck"] == "infer").all()
    # batching amortises the per-batch cost: batch 3 beats batch 1 by a clear margin
    fps = good.groupby("batch")["fps"].mean()
    assert fps[3] > fps[1]
    fig = sweep_figure(good)
    assert fig.data[0].mode == "markers+text"
    with pytest.raises(ValueError):
        sweep(build, {}, source=lambda: range(3))


def test_a_run_becomes_a_scheduler_model_and_cameras():
    run = Pipeline([Stage("pre", lambda x: x), Stage("infer", _infer(8.0, 2.0), batch=4)],
                   queue_size=16).run(synthetic_cameras(2, fps=100, height=4, width=4), frames=40)
    m = run.to_sched(slo_ms=50)
    assert isinstance(m.spec, S.ModelSpec) and m.spec.name == "infer" and m.spec.max_batch == 4
    # the latency table is the measured median per batch size
    b = run.events[run.events["stage"] == "infer"].drop_duplicates("start_ns")
    med = ((b["end_ns"] - b["start_ns"]) / 1e6).groupby(b["batch_size"]).median()
    assert dict(zip(m.spec.batch_sizes, m.spec.latency_ms)) == pytest.approx(med.to_dict())
    assert m.cameras[0].n == 2 and m.cameras[0].fps == 100
    table = cameras_that_fit(run, fps=30, slo_ms=50, max_cameras=40, duration_s=3)
    fit = table.attrs["fit"]
    assert 1 <= fit < len(table)
    assert table.loc[table["cameras"] == fit, "fits"].item()
    assert not table.loc[table["cameras"] == fit + 1, "fits"].item()
