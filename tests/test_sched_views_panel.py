"""Figures, metrics tables and the widget panel on a small synthetic scenario."""
import json

import plotly.graph_objects as go
import pytest

from hookmagic import sched as S
from hookmagic.sched import metrics as M
from hookmagic.sched.panel import SchedulerPanel
from hookmagic.views import sched as V

MODELS = [S.ModelSpec.linear("det", 2.0, 0.5, 16), S.ModelSpec.linear("cls", 0.5, 0.1, 32)]
SOURCES = [S.Cameras("det", n=4, fps=30, slo_ms=40), S.Poisson("cls", 300, slo_ms=15, priority=1)]


@pytest.fixture(scope="module")
def res():
    return S.simulate(MODELS, SOURCES, S.Policy(order="priority", batching=S.Batching(8, 2.0),
                                                 streams=2), duration_s=5, seed=1)


def test_metrics_tables(res, tmp_path):
    m = res.metrics()
    assert set(m.index) == {"det", "cls"}
    assert (m["served"] + m["rejected"] + m["timeout"] + m["late"] + m["stale"] == m["offered"]).all()
    assert (m["p50_ms"] <= m["p90_ms"]).all() and (m["p95_ms"] <= m["p99_ms"]).all()
    assert res.metrics(by=None).index.tolist() == ["all"]
    assert set(res.metrics(by="priority").index) == {0, 1}
    busy = M.stream_busy(res.batches, res.duration_s)
    assert ((busy["busy_pct"] > 0) & (busy["busy_pct"] <= 100)).all()
    cams = M.camera_stats(res.requests)
    assert len(cams) == 4 and (cams["frames"] > 100).all()
    h = M.batch_histogram(res.batches)
    assert h.groupby("model")["share"].sum().round(9).eq(1).all()
    path = res.save(tmp_path / "run")
    assert path.name == "run.hmsched"
    back = S.load_result(path)
    assert isinstance(back, S.SimResult) and back.meta["engine"] == res.meta["engine"]
    assert back.metrics().round(9).equals(res.metrics().round(9))


def test_fidelity_table(res):
    s = res.metrics()
    real = s.copy()
    real["p50_ms"] *= 1.05
    real["p99_ms"] *= 1.2
    f = M.fidelity(s, real)
    assert f["p50_err_pct"].round(6).eq(round(100 * (1 / 1.05 - 1), 6)).all()
    assert not f["ok"].any()


def test_figures(res):
    figs = [V.latency_cdf_figure({"sim": M.latency_cdf(res.requests), "real": M.latency_cdf(res.requests)}),
            V.p99_vs_slo_figure(res.metrics()), V.batch_histogram_figure(M.batch_histogram(res.batches)),
            V.gantt_figure(res.batches), V.queue_depth_figure(M.queue_depth(res.requests))]
    for f in figs:
        assert isinstance(f, go.Figure) and len(f.data) >= 1
        json.loads(f.to_json())
    assert len(figs[0].data) == 4  # 2 models x 2 runs


def test_panel_resimulates_on_change():
    p = SchedulerPanel(MODELS, SOURCES, S.Policy(), duration_s=2)
    first = p.result
    p.rows["det"]["max_batch"].value = 8
    assert p.result is not first and p.policy.batching_for("det").max_batch == 8
    p.order.value = "edf"
    assert p.result.meta["engine"] == "general"
    p.rows["cls"]["rate"].value = 600.0
    assert (p.result.requests["model"] == "cls").sum() > 900
    p.find_best()       # applies a setting of its grid that meets the typed p99 limit
    assert p.rows["det"]["max_batch"].value in (1, 2, 4, 8, 16, 32)
    assert p.rows["det"]["max_delay_ms"].value in (0, 0.5, 1, 2, 5)
    assert p.streams.value in (1, 2, 4)
    assert p.result.metrics(by=None)["p99_ms"].iat[0] <= p.sweep_p99.value
    p.export()
    assert "dynamic_batching" in p.export_text and "@serve.batch" in p.export_text


def test_panel_run_on_gpu_says_why_it_did_not_run(monkeypatch):
    from hookmagic.sched import engines
    p = SchedulerPanel(MODELS, SOURCES, S.Policy(), duration_s=1)
    monkeypatch.setattr(engines, "gpu_available", lambda: (False, "SYNTHETIC: no CUDA device"))
    p.run_on_gpu()
    assert p.message == ("No GPU on this machine (SYNTHETIC: no CUDA device); showing the "
                         "simulation only.")
    assert p.real is None
    monkeypatch.setattr(engines, "gpu_available", lambda: (True, "SYNTHETIC GPU"))
    p.run_on_gpu()                       # a GPU, but no engines to run on it
    assert p.message.startswith("A GPU is present, but no engines were given") and p.real is None
