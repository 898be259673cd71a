"""The scheduler Result speaks the project's result protocol: ``summary()`` (a Headline with
``to_frame()``), ``metrics()`` (a DataFrame), chart methods returning Plotly figures, and
``save(path)`` writing one file that ``load_result`` and ``hookmagic.load`` open. Checked on a
small synthetic simulation; the headline numbers against counts made here from the request
table, the round trip against the tables saved."""
import io
import json
import zipfile

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

import hookmagic
from hookmagic import sched as S
from hookmagic.common.errors import HookmagicError, InputFileError, InvalidArgument
from hookmagic.common.results import SAVED_KIND_KEY, Headline
from hookmagic.sched import result as R

# synthetic models and traffic: an EDF queue that drops late requests, two streams
MODELS = [S.ModelSpec.linear("det", 2.0, 0.5, 16), S.ModelSpec.linear("cls", 0.5, 0.1, 32)]
SOURCES = [S.Cameras("det", n=4, fps=30, slo_ms=12),
           S.Bursty("cls", rate_on=20000, on_s=0.05, off_s=0.2, slo_ms=6, priority=1)]


@pytest.fixture(scope="module")
def res():
    return S.simulate(MODELS, SOURCES, S.Policy(order="edf", batching=S.Batching(8, 2.0),
                                                 queue=S.QueuePolicy(max_size=32), streams=2),
                      duration_s=4, seed=2)


def test_summary_is_a_headline_of_the_request_table(res):
    h = res.summary()
    assert isinstance(h, Headline)
    r = res.requests
    done = r["status"] == "done"
    assert h["requests"] == len(r) and h["served"] == int(done.sum())
    assert h["dropped"] == int((~done).sum()) > 0
    assert h["throughput"] == pytest.approx(done.sum() / 4.0)
    assert h["goodput"] == pytest.approx(r["met_slo"].sum() / 4.0)
    assert h["slo_attainment"] == pytest.approx(100 * r["met_slo"].mean())
    assert h["p99_latency"] == pytest.approx(np.percentile(r.loc[done, "latency_ms"], 99))
    assert h["streams"] == 2 and h["batches"] == len(res.batches)
    frame = h.to_frame()
    assert frame.loc["p50_latency", "unit"] == "ms" and frame.loc["goodput", "unit"] == "requests/s"
    assert "Simulated run" in str(h) and "<table>" in h._repr_html_()
    late = res.summary(warmup_s=1.0)
    assert late["requests"] == int((r["arrival_s"] >= 1.0).sum())


def test_save_writes_one_file_that_loads_back_the_same_tables(res, tmp_path):
    path = res.save(tmp_path / "edf")
    assert path == tmp_path / "edf.hmsched" and path.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["edf.hmsched"]
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    assert manifest[SAVED_KIND_KEY] == "sched_result" and manifest["meta"]["mode"] == "sim"
    assert R.sniff(path)
    for back in (S.load_result(path), hookmagic.load(path)):
        assert type(back) is S.SimResult
        pd.testing.assert_frame_equal(back.requests, res.requests, check_categorical=False,
                                      check_dtype=False)
        pd.testing.assert_frame_equal(back.batches, res.batches, check_dtype=False)
        assert back.meta["policy"] == res.meta["policy"]


def test_sniff_says_no_to_other_files_and_never_raises(tmp_path):
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("manifest.json", json.dumps({SAVED_KIND_KEY: "pipeline_run"}))
    (tmp_path / "text.hmsched").write_text("not a zip")
    for p in (other, tmp_path / "text.hmsched", tmp_path / "missing", tmp_path):
        assert R.sniff(p) is False


def test_damaged_files_get_one_project_error(res, tmp_path):
    good = res.save(tmp_path / "good")
    raw = good.read_bytes()
    (tmp_path / "cut.hmsched").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputFileError):
        S.load_result(tmp_path / "cut.hmsched")
    # a request naming a batch that is not there
    with zipfile.ZipFile(good) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    bat = pd.read_parquet(io.BytesIO(members["batches.parquet"]))
    buf = io.BytesIO()
    bat.iloc[: len(bat) // 2].to_parquet(buf, index=False)
    members["batches.parquet"] = buf.getvalue()
    with zipfile.ZipFile(tmp_path / "short.hmsched", "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    with pytest.raises(InputFileError, match="name a batch"):
        S.load_result(tmp_path / "short.hmsched")
    with pytest.raises(InputFileError):
        S.load_result(tmp_path / "missing.hmsched")


def _with_table(good, out, name, change):
    with zipfile.ZipFile(good) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    buf = io.BytesIO()
    change(pd.read_parquet(io.BytesIO(members[f"{name}.parquet"]))).to_parquet(buf, index=False)
    members[f"{name}.parquet"] = buf.getvalue()
    with zipfile.ZipFile(out, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    return out


@pytest.mark.parametrize("name, change, why", [
    ("requests", lambda t: t.assign(arrival_s=t["arrival_s"].where(t.index > 0)), "arrivals"),
    ("requests", lambda t: t.assign(arrival_s=-5.0), "arrivals"),
    ("requests", lambda t: t.assign(arrival_s=np.inf), "arrivals"),
    ("requests", lambda t: t.assign(slo_ms=0.0), "SLOs of zero"),
    ("batches", lambda t: t.assign(end_s=t["start_s"] - 1.0), "end before they start"),
    ("batches", lambda t: t.assign(start_s=np.nan), "not finite"),
    ("batches", lambda t: t.assign(start_s="x"), "not numbers"),
], ids=["arrival-nan", "arrival-negative", "arrival-inf", "slo-zero", "batch-backwards",
        "batch-nan", "batch-text"])
def test_impossible_stored_times_are_refused(res, tmp_path, name, change, why):
    # SYNTHETIC damage to a saved simulation: numbers no run could have produced
    bad = _with_table(res.save(tmp_path / "good"), tmp_path / "bad.hmsched", name, change)
    with pytest.raises(InputFileError, match=why):
        hookmagic.load(bad)


def test_a_result_with_repeated_batch_ids_is_refused(res, tmp_path):
    twice = S.SimResult(pd.concat([res.requests, res.requests], ignore_index=True),
                        pd.concat([res.batches, res.batches], ignore_index=True), res.meta)
    with pytest.raises(InvalidArgument) as err:
        twice.save(tmp_path / "twice")
    assert isinstance(err.value, HookmagicError)


def test_charts_are_figures_named_for_the_chart(res):
    for fig in (res.gantt(span_s=0.1), res.latency_cdf(), res.batch_histogram(),
                res.queue_chart(), res.slo_chart()):
        assert isinstance(fig, go.Figure) and len(fig.data) >= 1
        json.loads(fig.to_json())
    assert not [n for n in dir(res) if n.startswith("plot_") or n.endswith("_figure")]


@pytest.mark.parametrize("call, match", [
    (lambda r: r.metrics(by="nope"), "no column 'nope'"),
    (lambda r: r.metrics(warmup_s=-1), "warmup_s"),
    (lambda r: r.summary(warmup_s=float("nan")), "warmup_s"),
    (lambda r: r.gantt(span_s=-1), "span_s"),
    (lambda r: r.latency_cdf(by="nope"), "no column 'nope'"),
])
def test_wrong_result_arguments_are_invalid_argument(res, call, match):
    with pytest.raises(InvalidArgument, match=match):
        call(res)


def test_simulating_no_model_is_one_clear_error():
    with pytest.raises(InvalidArgument, match="at least one ModelSpec"):
        S.simulate([], S.make_workload([], 1.0), S.Policy())


@pytest.mark.parametrize("name", ['m"\ninstance_group [ { count: 64 kind: KIND_CPU } ]\n# ',
                                  "x:\n    pass\nimport os\nos.system('true')\nclass Y", "a b", ""])
def test_exports_refuse_names_that_would_write_their_own_lines(name):
    from hookmagic.sched import export
    with pytest.raises(InvalidArgument, match="cannot be exported"):
        export.triton_config(name, S.Policy())
    with pytest.raises(InvalidArgument, match="cannot be exported"):
        export.ray_serve_snippet(name, S.Policy())


def test_exported_serve_source_compiles_for_any_plain_name():
    from hookmagic.sched import export
    for name in ("resnet18", "yolo-v8.n", "3d_unet"):
        source = export.ray_serve_snippet(name, S.Policy())
        compile(source, "<serve>", "exec")     # real Python, one class
        assert source.count("\nclass ") == 1
