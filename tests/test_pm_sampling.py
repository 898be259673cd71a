"""PM sampling without a GPU: the ``pm_sampling=`` option, the ``pm_samples`` table built from
native rows, the timeline's lane, and saving and loading. tests/gpu/test_pm_sampling_gpu.py
measures it on a GPU."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import hookmagic
from hookmagic.cupti import counters as C
from hookmagic.cupti import pm_sampling as P
from hookmagic.cupti.errors import CaptureOptionError
from hookmagic.cupti.options import CaptureOptions
from hookmagic.trace import Trace, schema
from hookmagic.trace.io import load_trace
from hookmagic.views.timeline import timeline_figure
from tests.synthetic import SYNTHETIC_T0, synthetic_meta, synthetic_tables

DRAM = P.DRAM_READ_PCT[0]
SM = P.SM_ACTIVE_PCT[0]


# -- the option -----------------------------------------------------------------------------
@pytest.mark.parametrize("given, metrics, interval_us", [
    (None, None, 100.0), (False, None, 100.0), (True, P.DEFAULT, 100.0),
    ("default", P.DEFAULT, 100.0), (250, P.DEFAULT, 250.0), (12.5, P.DEFAULT, 12.5),
    ([DRAM, SM, DRAM], (DRAM, SM), 100.0), (f"{DRAM}, {SM}", (DRAM, SM), 100.0),
])
def test_pm_sampling_option_resolves(given, metrics, interval_us):
    o = CaptureOptions(pm_sampling=given)
    assert o.pm_sampling == metrics and o.pm_interval_us == interval_us


@pytest.mark.parametrize("options", [
    dict(pm_sampling={}), dict(pm_sampling=[]), dict(pm_sampling=[3]),
    dict(pm_sampling="not a metric"), dict(pm_sampling=0.5), dict(pm_sampling=float("nan")),
    dict(pm_sampling=True, pm_interval_us=0), dict(pm_sampling=True, pm_interval_us=2e6),
    dict(pm_sampling=True, pm_interval_us="100"), dict(pm_sampling=[f"m__{i}.sum" for i in range(40)]),
])
def test_bad_pm_sampling_options_are_refused(options):
    with pytest.raises(P.PmSamplingOptionError) as err:
        CaptureOptions(**options)
    assert isinstance(err.value, CaptureOptionError) and isinstance(err.value, C.CounterOptionError)


def test_pm_sampling_and_counters_are_refused_together_with_a_clear_error():
    with pytest.raises(P.PmSamplingOptionError, match="counters=.*one capture"):
        hookmagic.capture(pm_sampling=True, counters=True)
    assert isinstance(P.PmSamplingOptionError("x"), C.COUNTER_ERRORS)


def test_options_keep_pm_sampling_in_the_saved_dict():
    d = CaptureOptions(pm_sampling=[DRAM], pm_interval_us=50).as_dict()
    assert d["pm_sampling"] == (DRAM,) and d["pm_interval_us"] == 50.0


# -- the table ------------------------------------------------------------------------------
def test_schema_has_one_pm_samples_table():
    assert schema.TABLES["pm_samples"] == {"start_ns": "int64", "end_ns": "int64",
                                           "device": "int32", "metric": "str", "value": "float64"}
    assert Trace.empty("synthetic").pm_samples.empty


def test_samples_table_is_one_row_per_sample_and_metric():
    """Synthetic native rows: 3 samples x 2 metrics, values row-major as the native side
    writes them."""
    rows = {"start_ns": np.array([100, 200, 300]), "end_ns": np.array([200, 300, 400]),
            "metrics": [DRAM, SM], "values": np.array([90.0, 10.0, 5.0, 80.0, 50.0, 50.0])}
    t = P.samples_table(rows, device=1)
    assert list(t.columns) == list(schema.TABLES["pm_samples"])
    assert t["start_ns"].tolist() == [100, 100, 200, 200, 300, 300]
    assert t["metric"].tolist() == [DRAM, SM] * 3
    by = t.set_index(["start_ns", "metric"])["value"]
    assert by[(100, DRAM)] == 90.0 and by[(200, SM)] == 80.0 and by[(300, DRAM)] == 50.0
    assert (t["device"] == 1).all()
    assert P.samples_table({"start_ns": [], "end_ns": [], "metrics": [DRAM], "values": []}).empty


def test_meta_reports_the_measured_interval():
    rows = {"start_ns": np.arange(0, 1_000_000, 100_000), "end_ns": np.arange(100_000, 1_100_000, 100_000),
            "metrics": [DRAM], "values": np.zeros(10), "overflow": 0, "cupti_start_ns": 5}
    m = P.meta_of({"metrics": [DRAM], "left_out": ["tensor_active"], "interval_us": 100.0}, rows, 0.1)
    assert m["samples"] == 10 and m["median_interval_us"] == 100.0
    assert m["first_ns"] == 0 and m["last_ns"] == 1_000_000 and m["left_out"] == ["tensor_active"]


def test_short_names():
    assert P.short_name(DRAM) == "dram__read_throughput %"
    assert P.short_name(SM) == "sm__cycles_active %"
    assert P.short_name("synthetic__bytes.sum") == "synthetic__bytes.sum"


# -- the view and saving --------------------------------------------------------------------
def _synthetic_trace() -> Trace:
    """The synthetic trace plus a synthetic PM lane: every 0.5 ms over its 10 ms, DRAM 80 %
    while the first gemms run ([0, 3.5] ms) and 5 % after; SM the other way round."""
    starts = SYNTHETIC_T0 + np.arange(0, 10_000_000, 500_000)
    dram = np.where(starts < SYNTHETIC_T0 + 3_500_000, 80.0, 5.0)
    rows = {"start_ns": starts, "end_ns": starts + 500_000, "metrics": [DRAM, SM],
            "values": np.column_stack([dram, 100.0 - dram]).reshape(-1)}
    tables = synthetic_tables()
    tables["pm_samples"] = P.samples_table(rows)
    meta = synthetic_meta()
    meta["pm_sampling"] = P.meta_of({"metrics": [DRAM, SM], "left_out": [], "interval_us": 500.0},
                                    rows, 0.0)
    return Trace(tables, meta)


def test_timeline_draws_a_lane_per_metric_under_the_rows():
    trace = _synthetic_trace()
    fig = timeline_figure(trace)
    lane = [t for t in fig.data if getattr(t, "yaxis", None) == "y2"]
    assert sorted(t.name for t in lane) == ["dram__read_throughput %", "sm__cycles_active %"]
    dram = next(t for t in lane if t.name.startswith("dram"))
    assert np.allclose(dram.x, np.arange(0.25, 10, 0.5))   # sample middles, ms from start
    assert dram.y[0] == 80.0 and dram.y[-1] == 5.0
    assert fig.layout.yaxis2.domain[1] < fig.layout.yaxis.domain[0]   # under the rows
    assert not [t for t in timeline_figure(trace, pm_sampling=False).data
                if getattr(t, "yaxis", None) == "y2"]


def test_timeline_averages_the_lane_when_samples_outnumber_bins():
    fig = timeline_figure(_synthetic_trace(), bins=4)
    dram = next(t for t in fig.data if getattr(t, "yaxis", None) == "y2" and t.name.startswith("dram"))
    # 4 slices of 2.5 ms: 5 samples each; the first slice is all 80 %, the second 2 of 5
    assert len(dram.x) == 4 and dram.y[0] == 80.0 and dram.y[1] == pytest.approx((2 * 80 + 3 * 5) / 5)


def test_timeline_without_pm_samples_has_no_lane():
    fig = timeline_figure(Trace(synthetic_tables(), synthetic_meta()))
    assert "yaxis2" not in fig.layout.to_plotly_json()


def test_pm_samples_survive_save_and_load(tmp_path):
    trace = _synthetic_trace()
    back = load_trace(trace.save(tmp_path / "synthetic_pm"))
    pd.testing.assert_frame_equal(back.pm_samples.reset_index(drop=True),
                                  trace.pm_samples.reset_index(drop=True), check_dtype=False)
    assert back.meta["pm_sampling"]["metrics"] == [DRAM, SM]


# -- the magic ------------------------------------------------------------------------------
class RecordingCapture:
    """Stands in for hookmagic.capture: keeps the options it was given."""
    made: list = []

    def __init__(self, **options):
        # the options a real capture takes: a refused combination fails the cell here too
        CaptureOptions.from_kwargs(**{k: v for k, v in options.items()
                                      if k != "label" and not k.startswith("_")})
        self.options = options
        RecordingCapture.made.append(self)

    def __enter__(self):
        self.trace = Trace.empty("synthetic: no GPU")
        return self.trace

    def __exit__(self, *exc):
        return False


@pytest.fixture
def ip(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    RecordingCapture.made = []
    monkeypatch.setattr(hookmagic, "capture", RecordingCapture, raising=False)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "hookmagic")
    yield shell
    shell.run_line_magic("unload_ext", "hookmagic")


@pytest.mark.parametrize("line, expected, interval", [
    ("-q --pm-sampling", "default", None), (f"-q --pm-sampling {DRAM}", DRAM, None),
    ("-q --pm-interval-us 50 --pm-sampling", "default", 50.0), ("-q", None, None),
])
def test_magic_passes_the_pm_sampling_flags(ip, line, expected, interval):
    result = ip.run_cell(f"%%cudahook {line}\nz = 1")
    assert result.success
    (made,) = RecordingCapture.made
    assert made.options.get("pm_sampling") == expected
    assert made.options.get("pm_interval_us") == interval


def test_magic_refuses_pm_sampling_beside_counters(ip):
    result = ip.run_cell("%%cudahook -q --pm-sampling --counters\nnot_run = 1")
    assert not result.success and "not_run" not in ip.user_ns


def test_a_sample_begun_before_sampling_started_is_left_out():
    """Synthetic rows shaped as the H200's: the first sample spans 2.7 s up to just after
    cuptiPmSamplingStart (at 10_000_000_000), the rest are 100 µs apart."""
    began = 10_000_000_000
    starts = np.array([began - 2_700_000_000, began + 50_000, began + 150_000])
    rows = {"start_ns": starts, "end_ns": np.array([began + 50_000, began + 150_000, began + 250_000]),
            "metrics": [DRAM], "values": np.array([0.1, 80.0, 81.0]), "cupti_start_ns": began}
    t = P.samples_table(rows, interval_us=100.0)
    assert t["start_ns"].tolist() == [began + 50_000, began + 150_000]
    assert t["value"].tolist() == [80.0, 81.0]
    m = P.meta_of({"metrics": [DRAM], "left_out": [], "interval_us": 100.0}, rows, 0.0)
    assert m["before_start"] == 1 and m["samples"] == 2 and m["first_ns"] == began + 50_000
