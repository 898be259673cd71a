"""Hardware counters without a GPU: the ``counters=`` option, the long-to-wide pivot and the
join to kernels on synthetic tables, the errors, and the CPU machine's "nothing captured"."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

import hookmagic
from hookmagic.common.errors import InvalidArgument, Unavailable
from hookmagic.cupti import counters as C
from hookmagic.cupti.errors import CaptureOptionError
from hookmagic.cupti.options import CaptureOptions
from hookmagic.trace import Trace


# -- the option ------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [None, False])
def test_no_counters_by_default(value):
    assert C.resolve(value) is None
    assert CaptureOptions(counters=value).counters is None
    assert CaptureOptions().counters is None


@pytest.mark.parametrize("value", [True, "default", " default ", ["default"]])
def test_the_default_set(value):
    assert C.resolve(value) == C.DEFAULT_COUNTERS


def test_default_set_holds_each_named_kind_once():
    names = C.DEFAULT_COUNTERS
    assert len(set(names)) == len(names)
    for wanted in (C.SM_THROUGHPUT_PCT, C.DRAM_THROUGHPUT_PCT, C.DRAM_BYTES_READ,
                   C.DRAM_BYTES_WRITE, C.ACHIEVED_OCCUPANCY_PCT, C.L1_HIT_RATE_PCT,
                   C.L2_HIT_RATE_PCT, C.TENSOR_PIPE_PCT, C.FP32_FFMA, C.FP16_HFMA,
                   C.TENSOR_INSTRUCTIONS, C.DURATION_NS):
        assert wanted in names


def test_names_keep_order_and_drop_repeats():
    got = C.resolve(["dram__bytes_read.sum", "lts__t_sector_hit_rate.pct", "dram__bytes_read.sum"])
    assert got == ("dram__bytes_read.sum", "lts__t_sector_hit_rate.pct")
    assert C.resolve("dram__bytes_read.sum, lts__t_sector_hit_rate.pct") == got
    mixed = C.resolve(["dram__bytes_read.sum", "default"])
    assert mixed[0] == "dram__bytes_read.sum" and len(mixed) == len(C.DEFAULT_COUNTERS)


@pytest.mark.parametrize("value, words", [
    (3, "not int"), (1.5, "not float"), ({"a": 1}, "not dict"), ([], "empty"), ("", "empty"),
    ([3], "strings"), (["dram bytes"], "not a metric name"), (["x; rm -rf"], "not a metric name"),
    (["nodoubleunderscore.sum"], "not a metric name"), (["a__b"] * 0 + [f"a__m{i}.sum" for i in range(300)], "at most"),
])
def test_bad_counters_are_refused(value, words):
    with pytest.raises(C.CounterOptionError, match=words):
        C.resolve(value)
    with pytest.raises(CaptureOptionError):
        CaptureOptions(counters=value)


def test_counters_are_a_capture_option():
    options = CaptureOptions.from_kwargs(counters=["dram__bytes_read.sum"])
    assert options.counters == ("dram__bytes_read.sum",)
    assert options.as_dict()["counters"] == ("dram__bytes_read.sum",)
    lite = CaptureOptions(lite=True, counters=True)
    assert lite.lite and lite.counters == C.DEFAULT_COUNTERS


# -- the tables (synthetic) ----------------------------------------------------------------
def synthetic_long() -> pd.DataFrame:
    return pd.DataFrame({
        "correlation_id": [12, 12, 7, 7, 20],
        "kernel": ["synthetic_gemm", "synthetic_gemm", "synthetic_add", "synthetic_add",
                   "synthetic_copy"],
        "metric": ["dram__bytes_read.sum", "gpu__time_duration.sum",
                   "dram__bytes_read.sum", "gpu__time_duration.sum", "gpu__time_duration.sum"],
        "value": [4096.0, 1500.0, 8192.0, 700.0, 250.0]})


def test_wide_table_has_one_row_per_launch_and_one_column_per_metric():
    wide = Trace({"counters": synthetic_long()}).kernel_counters()
    assert list(wide.columns) == ["correlation_id", "kernel", "dram__bytes_read.sum",
                                  "gpu__time_duration.sum"]
    assert wide["correlation_id"].tolist() == [12, 7, 20]          # order of first appearance
    assert wide["kernel"].tolist() == ["synthetic_gemm", "synthetic_add", "synthetic_copy"]
    assert wide["dram__bytes_read.sum"].tolist()[:2] == [4096.0, 8192.0]
    assert math.isnan(wide["dram__bytes_read.sum"].iloc[2])         # not counted for that launch
    assert wide["gpu__time_duration.sum"].tolist() == [1500.0, 700.0, 250.0]


def test_trace_without_counters_has_an_empty_table_and_wide_frame():
    trace = Trace()
    assert trace.counters.empty and list(trace.counters.columns) == [
        "correlation_id", "kernel", "metric", "value"]
    wide = trace.kernel_counters()
    assert wide.empty and list(wide.columns) == ["correlation_id", "kernel"]


def test_counters_table_is_conformed_to_the_schema():
    table = Trace({"counters": synthetic_long()}).counters
    assert str(table["correlation_id"].dtype) == "int64"
    assert str(table["value"].dtype) == "float64"


def synthetic_kernels() -> pd.DataFrame:
    # launch order is correlation order; the table itself is in completion order
    return pd.DataFrame({"correlation": [9, 4, 6], "name": ["k_third", "k_first", "k_second"],
                         "start_ns": [300, 100, 200], "end_ns": [310, 110, 210],
                         "duration_ns": [10, 10, 10]})


def synthetic_rows(ranges: int) -> dict:
    index = np.repeat(np.arange(ranges, dtype=np.int64), 2)
    return {"range_index": index, "range_name": [str(i) for i in index],
            "metric": ["m__a.sum", "m__b.sum"] * ranges,
            "value": np.arange(2 * ranges, dtype=np.float64)}


def test_ranges_join_launches_in_correlation_order():
    table, unmatched = C.counters_table(synthetic_rows(3), synthetic_kernels())
    assert unmatched == 0
    assert table["correlation_id"].tolist() == [4, 4, 6, 6, 9, 9]
    assert table["kernel"].tolist() == ["k_first"] * 2 + ["k_second"] * 2 + ["k_third"] * 2
    assert table["value"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_ranges_beyond_the_launches_are_counted_unmatched():
    table, unmatched = C.counters_table(synthetic_rows(4), synthetic_kernels())
    assert unmatched == 1
    assert table["correlation_id"].tolist()[-2:] == [-1, -1]
    table, unmatched = C.counters_table(synthetic_rows(2), None)
    assert unmatched == 2 and set(table["correlation_id"]) == {-1}


# -- errors ------------------------------------------------------------------------------------
class SyntheticCaptureError(RuntimeError):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def test_admin_only_profiling_names_the_driver_setting_and_the_fix():
    err = C.explain(SyntheticCaptureError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", 35))
    assert isinstance(err, C.CountersUnavailable) and isinstance(err, Unavailable)
    assert "NVreg_RestrictProfilingToAdminUsers" in str(err) and "=0" in str(err)


@pytest.mark.parametrize("code", [26, 36, 39])
def test_a_busy_profiler_says_another_tool_holds_it(code):
    err = C.explain(SyntheticCaptureError("busy", code))
    assert isinstance(err, C.CountersUnavailable) and "another tool" in str(err)


def test_unsupported_and_other_failures():
    assert "does not support" in str(C.explain(SyntheticCaptureError("x", 27)))
    assert isinstance(C.explain(SyntheticCaptureError("CUPTI at x lacks y", -1)), C.CountersUnavailable)
    other = C.explain(SyntheticCaptureError("odd", 999))
    assert isinstance(other, C.CountersFailed) and "odd" in str(other)


class SyntheticNative:
    """The native module's counter calls, answering from a fixed list of supported names."""
    CaptureError = SyntheticCaptureError

    def __init__(self, supported, start_code=None):
        self.supported, self.start_code, self.started = list(supported), start_code, None

    def counters_unknown(self, metrics):
        return [m for m in metrics if m not in self.supported]

    def counters_supported(self):
        return self.supported

    def counters_start(self, metrics, max_ranges, replay):
        if self.start_code is not None:
            raise SyntheticCaptureError("refused", self.start_code)
        self.started = (metrics, max_ranges, replay)
        return 7


SUPPORTED = ["dram__bytes_read.sum", "dram__bytes_write.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
             "lts__t_sector_hit_rate.pct", "sm__warps_active.avg.pct_of_peak_sustained_active"]


def test_unknown_metric_is_named_with_close_matches():
    native = SyntheticNative(SUPPORTED)
    with pytest.raises(C.UnknownCounter) as caught:
        C.start(native, ("dram__bytes_red.sum", "lts__t_sector_hit_rate.pct"))
    text = str(caught.value)
    assert "'dram__bytes_red.sum'" in text and "dram__bytes_read.sum" in text
    assert "lts__t_sector_hit_rate.pct'" not in text      # the known one is not named
    assert isinstance(caught.value, InvalidArgument) and native.started is None


def test_start_passes_the_names_the_kernel_budget_and_the_replay(monkeypatch):
    monkeypatch.delenv("HOOKMAGIC_COUNTERS_REPLAY", raising=False)
    native = SyntheticNative(SUPPORTED)
    got = C.start(native, ("dram__bytes_read.sum",))
    assert got == {"metrics": ["dram__bytes_read.sum"], "passes": 7, "replay": C.REPLAY}
    assert native.started == (["dram__bytes_read.sum"], C.MAX_KERNELS, C.REPLAY)
    for replay in C.REPLAYS:
        monkeypatch.setenv("HOOKMAGIC_COUNTERS_REPLAY", replay)
        assert C.start(native, ("dram__bytes_read.sum",))["replay"] == replay
    monkeypatch.setenv("HOOKMAGIC_COUNTERS_REPLAY", "bogus")  # not a replay: the default
    assert C.start(native, ("dram__bytes_read.sum",))["replay"] == C.REPLAY
    with pytest.raises(C.CountersUnavailable, match="NVreg_RestrictProfilingToAdminUsers"):
        C.start(SyntheticNative(SUPPORTED, start_code=35), ("dram__bytes_read.sum",))


# -- no GPU ----------------------------------------------------------------------------------
def test_capture_with_counters_on_a_cpu_machine_runs_the_block_and_says_why(monkeypatch):
    from hookmagic.cupti import session

    monkeypatch.setattr(session, "_warned", set())
    ran = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with hookmagic.capture(counters=True) as trace:
            ran.append(1)
    if trace.status != "unavailable":
        pytest.skip("this machine has a GPU: tests/gpu/test_counters_gpu.py covers it")
    assert ran == [1] and trace.counters.empty and trace.kernel_counters().empty
    assert trace.meta["options"]["counters"] == C.DEFAULT_COUNTERS
    assert sum(issubclass(w.category, hookmagic.CaptureUnavailable) for w in caught) == 1


# -- the magic ------------------------------------------------------------------------------
class RecordingCapture:
    """Stands in for hookmagic.capture: keeps the options it was given; refuses one metric."""
    made: list = []

    def __init__(self, **options):
        if options.get("counters") == "synthetic__unknown.sum":
            raise C.UnknownCounter("this GPU's profiler does not know the metric(s) "
                                   "'synthetic__unknown.sum'")
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


@pytest.mark.parametrize("line, expected", [
    ("-q --counters", "default"), ("-q --counters dram__bytes_read.sum", "dram__bytes_read.sum"),
    ("-q", None), ("-q --lite --counters=default", "default"),
])
def test_magic_passes_the_counters_flag(ip, line, expected):
    result = ip.run_cell(f"%%cudahook {line}\nz = 1")
    assert result.success
    (made,) = RecordingCapture.made
    assert made.options.get("counters") == expected


def test_magic_stops_the_cell_when_a_metric_is_unknown(ip):
    result = ip.run_cell("%%cudahook -q --counters synthetic__unknown.sum\nnot_run = 1")
    assert not result.success and "not_run" not in ip.user_ns
    assert "synthetic__unknown.sum" in str(result.error_in_exec)


def test_replayed_launches_get_their_counted_duration_end_to_end_in_launch_order():
    """Synthetic: kernel replay leaves CUPTI's kernel records without timestamps; each launch
    takes gpu__time_duration as its duration, placed end to end in correlation order."""
    from hookmagic.cupti import counters as C

    kernels = pd.DataFrame({"correlation": [7, 3, 5], "start_ns": 0, "end_ns": 0,
                            "duration_ns": 0, "name": ["c", "a", "b"]})
    counters = pd.DataFrame({"correlation_id": [3, 5, 7, 3], "kernel": ["a", "b", "c", "a"],
                             "metric": [C.DURATION_NS] * 3 + [C.DRAM_BYTES_READ],
                             "value": [100.0, 250.0, 40.0, 1e6]})
    out = C.replayed_kernel_times(kernels, counters, start_ns=1_000)
    assert out["name"].tolist() == ["a", "b", "c"]
    assert out["start_ns"].tolist() == [1_000, 1_100, 1_350]
    assert out["duration_ns"].tolist() == [100, 250, 40]
    assert (out["end_ns"] - out["start_ns"]).tolist() == [100, 250, 40]
    timed = kernels.assign(start_ns=[5, 6, 7], end_ns=[9, 9, 9])   # records with timestamps
    assert C.replayed_kernel_times(timed, counters, 1_000) is timed


def test_user_replay_leaves_out_the_counting_launches_and_joins_the_programs():
    """Synthetic: two program launches (correlations 10, 11) each preceded, inside its replay
    window, by the counting's flush kernels (timed) and replays (untimed, as CUPTI leaves
    launches under the range profiler)."""
    kernels = pd.DataFrame({
        "correlation": [10, 10, 10, 10, 11, 11, 11],
        "name": ["flush", "replay_a", "flush", "a", "flush", "replay_b", "b"],
        "start_ns": [1_000, 0, 1_500, 3_000, 4_000, 0, 6_000],
        "end_ns": [1_100, 0, 1_600, 3_100, 4_100, 0, 6_100],
        "duration_ns": [100, 0, 100, 100, 100, 0, 100]})
    rows = {"range_index": [0, 1], "metric": ["dram__bytes_read.sum"] * 2, "value": [1.0, 2.0],
            "window_start": np.array([900, 3_900], np.uint64),
            "window_end": np.array([2_000, 5_000], np.uint64)}
    table, unmatched = C.counters_table(rows, kernels)
    assert unmatched == 0
    assert table["kernel"].tolist() == ["a", "b"]
    assert table["correlation_id"].tolist() == [10, 11]
    left = C.replayed_kernel_times(kernels, table, start_ns=0)
    assert left["name"].tolist() == ["a", "b"]
    assert left["start_ns"].tolist() == [3_000, 6_000]  # the program's own timestamps


def test_without_windows_nothing_is_left_out():
    kernels = pd.DataFrame({"correlation": [1], "name": ["k"], "start_ns": [5], "end_ns": [9],
                            "duration_ns": [4]})
    assert C.without_counting_work(kernels, np.empty((0, 2), np.int64)) is kernels
