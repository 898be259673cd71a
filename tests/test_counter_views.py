"""Views and analyses over hardware counters, on a synthetic counters table.

Every expected number is worked by hand from the synthetic counters below (FLOPs from
instruction counts, intensity, rates, each kernel's place under the H100 SXM datasheet's
roofs, the speed-of-light classification); none is taken from the code's own output.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hookmagic.analysis.counters import (BUSY_PCT, LONG_COLUMNS, LOW_OCCUPANCY, classify,
                                         counter_costs, counters_by_kernel, trace_counters)
from hookmagic.analysis.diagnose import diagnose
from hookmagic.analysis.roofline import measured_rates, peaks_for, roofline
from hookmagic.analysis.summary import summarize
from hookmagic.cupti import counters as M
from hookmagic.trace import schema
from hookmagic.views.roofline import roofline_figure, trace_roofline
from hookmagic.views.summary import summary_html, summary_text
from tests.synthetic import synthetic

MS = 1_000_000
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0],
        "multiprocessors": 132}
FFMA, FADD, FMUL, HFMA = M.FP32_FFMA, M.FP32_FADD, M.FP32_FMUL, M.FP16_HFMA
TENSOR_FP16 = M.TENSOR_FP16_OPS
SCRIPT = "synthetic_reduce<script>alert(1)</script>"

# correlation -> (name, duration ms, registers, {metric: value}); launched back to back
SYNTHETIC_LAUNCHES = {
    1: ("synthetic_hgemm", 1.0, 64, {M.SM_THROUGHPUT_PCT: 80, M.TENSOR_PIPE_PCT: 80,
                                     M.DRAM_THROUGHPUT_PCT: 10, M.ACHIEVED_OCCUPANCY_PCT: 40,
                                     M.DRAM_BYTES_READ: 0.3e9, M.DRAM_BYTES_WRITE: 0.1e9,
                                     TENSOR_FP16: 0.8e12}),
    2: ("synthetic_hgemm", 3.0, 64, {M.SM_THROUGHPUT_PCT: 90, M.TENSOR_PIPE_PCT: 80,
                                     M.DRAM_THROUGHPUT_PCT: 10, M.ACHIEVED_OCCUPANCY_PCT: 40,
                                     M.DRAM_BYTES_READ: 0.3e9, M.DRAM_BYTES_WRITE: 0.1e9,
                                     TENSOR_FP16: 0.8e12}),
    3: ("synthetic_copy", 2.0, 64, {M.SM_THROUGHPUT_PCT: 15, M.DRAM_THROUGHPUT_PCT: 91,
                                    M.ACHIEVED_OCCUPANCY_PCT: 80, M.DRAM_BYTES_READ: 3.2e9,
                                    M.DRAM_BYTES_WRITE: 3.2e9, FADD: 1e9, FFMA: 0, FMUL: 0}),
    4: ("synthetic_sgemm", 1.0, 64, {M.SM_THROUGHPUT_PCT: 75, M.TENSOR_PIPE_PCT: 0,
                                     M.DRAM_THROUGHPUT_PCT: 10, M.ACHIEVED_OCCUPANCY_PCT: 45,
                                     M.DRAM_BYTES_READ: 1e8, M.DRAM_BYTES_WRITE: 5e7,
                                     FFMA: 2e10, FADD: 1e9, FMUL: 5e8}),
    5: (SCRIPT, 1.0, 64, {M.SM_THROUGHPUT_PCT: 30, M.DRAM_THROUGHPUT_PCT: 35,
                          M.ACHIEVED_OCCUPANCY_PCT: 50, M.DRAM_BYTES_READ: 1e9,
                          M.DRAM_BYTES_WRITE: 1e6, FFMA: 1e8}),
    6: ("synthetic_lowocc", 1.0, 168, {M.SM_THROUGHPUT_PCT: 20, M.DRAM_THROUGHPUT_PCT: 10,
                                       M.ACHIEVED_OCCUPANCY_PCT: 11, M.DRAM_BYTES_READ: 1e8,
                                       M.DRAM_BYTES_WRITE: 1e8}),
    7: ("synthetic_uncounted", 0.5, 64, {}),
}
SYNTHETIC_COUNTER_META = {"metrics": list(M.DEFAULT_COUNTERS), "passes": 12,
                          "replay_wall_s": 1.5, "evaluate_s": 0.25, "replay": "kernel"}


def synthetic_kernels() -> pd.DataFrame:
    durs = [int(v[1] * MS) for v in SYNTHETIC_LAUNCHES.values()]
    starts = np.r_[0, np.cumsum(durs)[:-1]].astype(np.int64)
    return pd.DataFrame({
        "start_ns": starts, "end_ns": starts + durs, "duration_ns": durs, "device": 0,
        "stream": 7, "correlation": list(SYNTHETIC_LAUNCHES),
        "name": [v[0] for v in SYNTHETIC_LAUNCHES.values()],
        "grid_x": 1320, "grid_y": 1, "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1,
        "registers": [v[2] for v in SYNTHETIC_LAUNCHES.values()]})


def synthetic_counter_rows() -> pd.DataFrame:
    rows = [(c, name, metric, float(value)) for c, (name, _, _, values) in SYNTHETIC_LAUNCHES.items()
            for metric, value in values.items()]
    return pd.DataFrame(rows, columns=list(LONG_COLUMNS))


def synthetic_counter_trace(counters: bool = True):
    """The synthetic launches as a Trace; with the counters table and meta["counters"]."""
    meta = {"source": "synthetic", "devices": [H100], "start_ns": 0, "end_ns": int(9.5 * MS)}
    if not counters:
        return synthetic(meta, kernels=synthetic_kernels())
    meta["counters"] = SYNTHETIC_COUNTER_META
    if "counters" in schema.TABLE_NAMES:
        return synthetic(meta, kernels=synthetic_kernels(), counters=synthetic_counter_rows())
    trace = synthetic(meta, kernels=synthetic_kernels())
    trace.counters = synthetic_counter_rows()   # until the schema holds the table
    return trace


# -- FLOPs, intensity and rates ----------------------------------------------------------------

def test_flops_from_instruction_counts_by_hand():
    t = trace_counters(synthetic_counter_trace()).set_index("correlation_id")
    # FFMA is 2 FLOPs per thread instruction, FADD and FMUL 1
    assert t.loc[4, "float32_flops"] == pytest.approx(2 * 2e10 + 1e9 + 5e8)
    assert t.loc[4, "flops"] == pytest.approx(4.15e10) and t.loc[4, "precision"] == "float32"
    assert t.loc[3, "flops"] == pytest.approx(1e9)          # FADD only
    # tensor-path ops are FLOPs unscaled
    assert t.loc[1, "float16_flops"] == pytest.approx(0.8e12) and t.loc[1, "precision"] == "float16"
    assert np.isnan(t.loc[1, "float32_flops"])              # no FP32 counter collected
    assert np.isnan(t.loc[6, "flops"]) and t.loc[6, "precision"] == ""
    # intensity and achieved rates from each launch's duration in the trace
    assert t.loc[3, "dram_bytes"] == pytest.approx(6.4e9)
    assert t.loc[3, "intensity"] == pytest.approx(1e9 / 6.4e9)
    assert t.loc[3, "gbps"] == pytest.approx(6.4e9 / 2e-3 / 1e9)      # 3200 GB/s
    assert t.loc[3, "tflops"] == pytest.approx(1e9 / 2e-3 / 1e12)     # 0.5 TFLOP/s
    assert t.loc[2, "tflops"] == pytest.approx(0.8e12 / 3e-3 / 1e12)
    assert t.loc[3, "dram_read_gb"] == pytest.approx(3.2)
    assert t.attrs["units"]["tflops"] == "TFLOP/s" and t.attrs["units"]["dram_read_gb"] == "GB"
    assert 7 not in t.index                                   # no counters, no row


def test_rates_use_the_replay_pass_duration_and_skip_unmatched_ranges():
    rows = pd.DataFrame([(1, "synthetic_k", FFMA, 5e9), (1, "synthetic_k", M.DURATION_NS, 2e6),
                         (-1, "", FFMA, 7e9)], columns=list(LONG_COLUMNS))
    kernels = pd.DataFrame({"correlation": [1], "duration_ns": [4_000_000]})
    t = trace_counters(type("T", (), {"counters": rows, "kernels": kernels, "meta": {}})())
    assert list(t["correlation_id"]) == [1]
    # 2 x 5e9 FLOPs over the 2 ms replay pass, not the kernels table's 4 ms
    assert t.loc[0, "duration_ns"] == 2e6 and t.loc[0, "tflops"] == pytest.approx(1e10 / 2e-3 / 1e12)


def test_tensor_work_without_tensor_flop_counters_gets_no_rate():
    # a BF16 GEMM: tensor-pipe instructions issued, no FP16 tensor ops, some FP32 epilogue math
    rows = pd.DataFrame([(1, "synthetic_bf16", M.TENSOR_INSTRUCTIONS, 1e6),
                         (1, "synthetic_bf16", M.TENSOR_FP16_OPS, 0.0),
                         (1, "synthetic_bf16", FFMA, 1e6),
                         (1, "synthetic_bf16", M.DRAM_BYTES_READ, 1e6),
                         (1, "synthetic_bf16", M.DRAM_BYTES_WRITE, 1e6),
                         (1, "synthetic_bf16", M.DURATION_NS, 1e6)], columns=list(LONG_COLUMNS))
    t = trace_counters(type("T", (), {"counters": rows, "meta": {}})())
    assert t.loc[0, "flops"] == 2e6 and not t.loc[0, "flops_complete"]
    assert np.isnan(t.loc[0, "intensity"]) and np.isnan(t.loc[0, "tflops"])
    assert t.loc[0, "gbps"] == pytest.approx(2e6 / 1e-3 / 1e9)


def test_half_precision_fma_counts_two_flops():
    rows = pd.DataFrame([(1, "synthetic_h", HFMA, 5.0)], columns=list(LONG_COLUMNS))
    t = trace_counters(type("T", (), {"counters": rows, "meta": {}})())
    assert t.loc[0, "float16_flops"] == 10.0 and t.loc[0, "flops"] == 10.0


def test_warp_pipe_counts_alone_give_no_flops():
    rows = pd.DataFrame([(1, "synthetic_w", M.FP32_INSTRUCTIONS, 100.0),
                         (1, "synthetic_w", "l1tex__t_bytes.sum", 7.0)], columns=list(LONG_COLUMNS))
    t = trace_counters(type("T", (), {"counters": rows, "meta": {}})())
    assert t.loc[0, "fp32_warp_inst"] == 100.0 and np.isnan(t.loc[0, "flops"])
    assert t.loc[0, "l1tex__t_bytes.sum"] == 7.0          # any other metric keeps its name


def test_per_kernel_sums_and_duration_weighted_percentages():
    by = counters_by_kernel(trace_counters(synthetic_counter_trace())).set_index("name")
    g = by.loc["synthetic_hgemm"]
    assert g["launches"] == 2 and g["total_ns"] == 4 * MS
    assert g["flops"] == pytest.approx(1.6e12) and g["dram_bytes"] == pytest.approx(0.8e9)
    assert g["sm_pct"] == pytest.approx((80 * 1 + 90 * 3) / 4)
    assert g["tflops"] == pytest.approx(1.6e12 / 4e-3 / 1e12) and g["intensity"] == pytest.approx(2000)
    assert list(by.index[:2]) == ["synthetic_hgemm", "synthetic_copy"]   # most time first


# -- classification --------------------------------------------------------------------------

@pytest.mark.parametrize("sm, tensor, dram, occ, bound", [
    (55, np.nan, 20, 50, "latency-bound"),                  # ncu: both under 60 % is latency
    (20, np.nan, BUSY_PCT, 50, "memory-bound"),             # at the threshold
    (20, np.nan, BUSY_PCT - 0.1, 50, "latency-bound"),      # just under it
    (70, np.nan, 70, 50, "memory-bound"),                   # a tie goes to memory
    (BUSY_PCT, np.nan, 10, 50, "compute-bound"),
    (40, 65, 10, 50, "compute-bound"),                      # the tensor pipe is the busy unit
    (30, np.nan, 30, LOW_OCCUPANCY * 100 - 0.1, "low occupancy"),
    (30, np.nan, 30, LOW_OCCUPANCY * 100, "latency-bound"),
    (30, np.nan, 30, np.nan, "latency-bound"),              # occupancy not collected
    (np.nan, np.nan, np.nan, 10, "unknown"),
])
def test_bound_thresholds(sm, tensor, dram, occ, bound):
    row = pd.DataFrame({"sm_pct": [sm], "tensor_pipe_pct": [tensor], "dram_pct": [dram],
                        "occupancy_pct": [occ]})
    assert classify(row)["bound"].iloc[0] == bound


def test_bound_reasons_carry_the_numbers():
    by = counters_by_kernel(trace_counters(synthetic_counter_trace())).set_index("name")
    assert by.loc["synthetic_copy", "bound"] == "memory-bound"
    assert "DRAM 91% of peak" in by.loc["synthetic_copy", "bound_reason"]
    assert by.loc["synthetic_hgemm", "bound"] == "compute-bound"
    assert "tensor pipe 80%" in by.loc["synthetic_hgemm", "bound_reason"]
    assert by.loc["synthetic_sgemm", "bound"] == "compute-bound"
    assert "SM 75% of peak" in by.loc["synthetic_sgemm", "bound_reason"]
    assert by.loc[SCRIPT, "bound"] == "latency-bound"
    low = by.loc["synthetic_lowocc"]
    # 168 regs x 32 threads = 5376 per warp; (65536 / 4) // 5376 = 3 warps per sub-partition,
    # 12 per SM: one 8-warp block of 64 warp slots = 12.5 %, limited by registers
    assert low["bound"] == "low occupancy" and low["limiter"] == "registers"
    assert low["theoretical_occupancy_pct"] == pytest.approx(12.5)
    assert "achieved occupancy 11%, limited by registers" in low["bound_reason"]


# -- roofline ---------------------------------------------------------------------------------

def test_measured_points_sit_where_the_datasheet_puts_them():
    peaks = peaks_for("NVIDIA H100 80GB HBM3")   # 67 / 989.4 TFLOP/s, 3.35 TB/s
    pts = roofline(measured_rates(synthetic_counter_trace()), peaks).set_index("name")
    copy = pts.loc["synthetic_copy"]
    assert copy["bound"] == "memory"
    assert copy["roof_tflops"] == pytest.approx(1e9 / 6.4e9 * 3.35e12 / 1e12)
    assert copy["of_roof"] == pytest.approx(0.5 / (1e9 / 6.4e9 * 3.35))
    hgemm = pts.loc["synthetic_hgemm"]
    assert hgemm["bound"] == "compute" and hgemm["roof_tflops"] == pytest.approx(989.4)
    assert hgemm["tflops"] == pytest.approx(400.0) and hgemm["launches"] == 2
    assert pts.loc["synthetic_sgemm", "roof_tflops"] == pytest.approx(
        min(67.0, 4.15e10 / 1.5e8 * 3.35))
    assert pts.loc["synthetic_lowocc", "bound"] == "unknown"   # no FLOPs counted


def test_roofline_figure_places_measured_points_and_leaves_out_unplaceable():
    pytest.importorskip("plotly")
    peaks = peaks_for("H100")
    pts = roofline(measured_rates(synthetic_counter_trace()), peaks)
    fig = roofline_figure(pts, peaks, source="measured")
    placed = {}
    for tr in fig.data:
        if tr.mode == "markers+text":
            placed.update({c: (x, y) for c, x, y in zip(tr.customdata, tr.x, tr.y)})
    assert placed["synthetic_copy"] == pytest.approx((1e9 / 6.4e9, 0.5))
    assert placed["synthetic_hgemm"] == pytest.approx((2000.0, 400.0))
    assert "synthetic_lowocc" not in placed                 # NaN FLOPs: not on log axes
    assert "1 without FLOPs or bytes left out" in fig.layout.title.text
    assert "measured traffic" in fig.layout.xaxis.title.text


def test_trace_roofline_says_measured_or_declared():
    pytest.importorskip("plotly")
    measured = trace_roofline(synthetic_counter_trace())
    assert "measured hardware counters" in measured.layout.title.text
    declared_trace = synthetic_counter_trace(counters=False)
    declared_trace.meta["work"] = [{"kernel": "synthetic_sgemm", "flops": 4e10,
                                    "dram_bytes": 1e8, "args": {"dtype": "float32"}}]
    declared = trace_roofline(declared_trace)
    assert "declared work" in declared.layout.title.text
    assert "compulsory traffic" in declared.layout.xaxis.title.text
    pts = [tr for tr in declared.data if tr.mode == "markers+text"]
    assert len(pts) == 1 and pts[0].x[0] == pytest.approx(400.0)    # 4e10 / 1e8


# -- diagnosis --------------------------------------------------------------------------------

def test_diagnosis_uses_the_counters():
    d = diagnose(synthetic_counter_trace()).set_index("pattern")
    assert "Memory-bound: 91% of DRAM peak" in d.loc["memory-bound", "finding"]
    assert "synthetic_copy" in d.loc["memory-bound", "finding"]
    assert "3,200 GB/s" in d.loc["memory-bound", "evidence"]
    assert d.loc["memory-bound", "metric"] == pytest.approx(0.91)
    # hgemm (tensor pipe) and sgemm (CUDA cores) are both compute-bound
    # sgemm's SM 75 %, hgemm's (80 x 1 ms + 90 x 3 ms) / 4 ms = 87.5 %
    assert "Compute-bound: SM up to 88% of peak" in d.loc["compute-bound", "finding"]
    assert "2 heavy kernels" in d.loc["compute-bound", "finding"]
    assert "tensor pipe 80%" in d.loc["compute-bound", "evidence"]
    assert "Low occupancy: 11%, limited by registers" in d.loc["low-achieved-occupancy", "finding"]
    assert "Latency-bound" in d.loc["latency-bound", "finding"]
    # the theoretical rule leaves the measured kernel to the achieved one
    assert "low-occupancy" not in d.index


def test_a_grid_under_one_wave_is_still_reported_with_counters():
    trace = synthetic_counter_trace()
    k = trace.kernels.copy()
    # 10 blocks where 132 SMs x 4 resident blocks (64 regs x 256 threads) hold 528
    k.loc[k["name"] == "synthetic_sgemm", "grid_x"] = 10
    trace.kernels = k
    low = diagnose(trace).set_index("pattern").loc["low-occupancy"]
    assert "synthetic_sgemm" in low["evidence"] and "0.02 waves" in low["evidence"]
    assert "synthetic_lowocc" not in low["evidence"]          # judged by its achieved occupancy


def test_compute_bound_on_tensor_pipe_names_it():
    rows = synthetic_counter_rows()
    rows = rows[rows["kernel"] == "synthetic_hgemm"]
    trace = synthetic_counter_trace()
    trace.counters = rows
    d = diagnose(trace).set_index("pattern")
    assert "Compute-bound: tensor pipe 80%" in d.loc["compute-bound", "finding"]
    assert d.loc["compute-bound", "severity"] == "info"


def test_a_trace_without_counters_is_diagnosed_as_before():
    plain = diagnose(synthetic_counter_trace(counters=False))
    assert not {"memory-bound", "compute-bound", "latency-bound",
                "low-achieved-occupancy"} & set(plain["pattern"])
    # the theoretical rule still finds the 12.5 % kernel
    low = plain.set_index("pattern").loc["low-occupancy"]
    assert "synthetic_lowocc: occupancy 12% limited by registers" in low["evidence"]
    empty = synthetic_counter_trace(counters=False)
    empty.counters = synthetic_counter_rows().iloc[0:0]
    pd.testing.assert_frame_equal(diagnose(empty), plain)


# -- summary ----------------------------------------------------------------------------------

def test_summary_says_what_counters_cost():
    s = summarize(synthetic_counter_trace())
    assert counter_costs(synthetic_counter_trace()) == {
        "kernels": 6, "launches": 7, "metrics": 10, "passes": 12, "replay_wall_s": 1.5,
        "evaluate_s": 0.25, "replay": "kernel"}
    frame = s.to_frame()
    assert frame.loc["counter_kernels", "value"] == 6 and frame.loc["counter_passes", "value"] == 12
    assert frame.loc["counter_replay_s", "unit"] == "s"
    assert ("6 of 7 kernel launches, 10 metrics; 12 replay passes per kernel, 1.5 s wall time "
            "with replay, 250 ms evaluating (kernel replay)") \
        in summary_text(s)


def test_summary_names_launches_left_uncounted():
    trace = synthetic_counter_trace()
    trace.meta["counters"] = {**SYNTHETIC_COUNTER_META, "dropped": 3, "unmatched": 0}
    costs = counter_costs(trace)
    assert costs["dropped"] == 3 and "unmatched" not in costs
    assert "3 launches past the counting limit not counted" in summary_text(summarize(trace))


def test_summary_without_counters_has_no_counter_line():
    s = summarize(synthetic_counter_trace(counters=False))
    assert s.counters == {} and "counters" not in summary_text(s)
    assert not [n for n in s.to_frame().index if n.startswith("counter")]


# -- names reach HTML escaped ----------------------------------------------------------------

def test_kernel_names_reach_html_escaped():
    pytest.importorskip("plotly")
    trace = synthetic_counter_trace()
    trace.meta["counters"] = {**SYNTHETIC_COUNTER_META, "replay": "<script>x</script>"}
    page = summary_html(summarize(trace))
    assert "<script>" not in page and "&lt;script&gt;" in page
    fig = trace_roofline(trace)
    text = [t for tr in fig.data if tr.mode == "markers+text" for t in tr.text]
    assert any("&lt;script&gt;" in t for t in text) and not any("<script>" in t for t in text)
    assert "<script>alert" not in fig.to_html(include_plotlyjs=False)
    assert "<script>alert" not in diagnose(trace).to_html()


def test_trace_roofline_needs_known_peaks():
    from hookmagic.common.errors import Unavailable
    trace = synthetic_counter_trace()
    trace.meta["devices"] = [{**H100, "name": "synthetic GPU"}]
    with pytest.raises(Unavailable, match="synthetic GPU"):
        trace_roofline(trace)
    fig = trace_roofline(trace, peaks="NVIDIA H200")      # a name: its datasheet peaks
    assert "4.80 TB/s" in " ".join(tr.name for tr in fig.data)


def test_a_cuda_core_kernel_with_a_few_tensor_pipe_instructions_keeps_its_rate():
    # as an H200's FP32 SGEMMs: 2.9 % of warp instructions on the tensor pipe, the pipe 0.6 % busy
    rows = pd.DataFrame([(1, "synthetic_sgemm", M.TENSOR_INSTRUCTIONS, 6.8e7),
                         (1, "synthetic_sgemm", M.TENSOR_PIPE_PCT, 0.6),
                         (1, "synthetic_sgemm", M.TENSOR_FP16_OPS, 0.0),
                         (1, "synthetic_sgemm", FFMA, 1e9),
                         (1, "synthetic_sgemm", M.DRAM_BYTES_READ, 1e6),
                         (1, "synthetic_sgemm", M.DRAM_BYTES_WRITE, 1e6),
                         (1, "synthetic_sgemm", M.DURATION_NS, 1e6)], columns=list(LONG_COLUMNS))
    t = trace_counters(type("T", (), {"counters": rows, "meta": {}})())
    assert t.loc[0, "flops_complete"] and t.loc[0, "tflops"] == pytest.approx(2e9 / 1e-3 / 1e12)
    busy = rows.copy()
    busy.loc[busy.metric == M.TENSOR_PIPE_PCT, "value"] = 40.0     # real tensor work, uncounted
    t = trace_counters(type("T", (), {"counters": busy, "meta": {}})())
    assert not t.loc[0, "flops_complete"] and np.isnan(t.loc[0, "tflops"])
