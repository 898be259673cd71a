"""summarize(): numbers checked against hand-computed synthetic intervals; its rendering."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hookmagic.analysis.summary import (busy_ns, device_memory_in_use, merge_intervals,
                                        summarize)
from hookmagic.trace.model import Trace


def test_merge_intervals_unions_overlaps_and_touching():
    s, e = merge_intervals(np.array([5, 0, 1, 10, 12, 20]), np.array([6, 2, 3, 12, 15, 20]))
    assert s.tolist() == [0, 5, 10, 20] and e.tolist() == [3, 6, 15, 20]
    assert busy_ns(np.array([0, 1, 1]), np.array([10, 2, 11])) == 11   # nested and extended
    assert busy_ns(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0
    assert busy_ns(np.array([5]), np.array([3])) == 0                   # end before start


def test_busy_time_counts_overlaps_once(synthetic_trace):
    s = summarize(synthetic_trace)
    # [0,2]∪[1,3]∪[2.5,3.5] = 3.5 ms, + relu 0.5 + htod 1.0 + memset 0.1 = 5.1 ms of 10 ms
    assert s.busy_s == pytest.approx(5.1e-3)
    assert s.wall_s == pytest.approx(0.01)
    assert s.idle_fraction == pytest.approx(0.49)
    assert s.per_device["device"].tolist() == [0]
    assert s.per_device["busy_s"].iloc[0] == pytest.approx(5.1e-3)


def test_kernel_table(synthetic_trace):
    s = summarize(synthetic_trace)
    assert s.kernel_count == 3 and s.kernel_time_s == pytest.approx(4.5e-3)
    top = s.top_kernels
    assert top["name"].tolist() == ["synthetic_gemm", 'synthetic_relu<"quoted">']
    assert top["count"].tolist() == [2, 1]
    assert top["total_s"].tolist() == pytest.approx([4e-3, 0.5e-3])
    assert top["mean_s"].tolist() == pytest.approx([2e-3, 0.5e-3])
    assert top["share"].tolist() == pytest.approx([4 / 4.5, 0.5 / 4.5])
    assert summarize(synthetic_trace, top=1).top_kernels["name"].tolist() == ["synthetic_gemm"]


def test_copies_and_memsets(synthetic_trace):
    s = summarize(synthetic_trace)
    copies = s.copies.set_index("kind")
    assert copies.loc["htod", "bytes"] == 4_000_000
    assert copies.loc["htod", "gb_per_s"] == pytest.approx(4.0)   # 4 MB in 1 ms
    assert copies.loc["dtoh", "gb_per_s"] == pytest.approx(1.0)
    assert s.memsets.to_dict("records") == [{"memory_kind": "device", "count": 1,
                                             "bytes": 1024, "total_s": pytest.approx(1e-4)}]


def test_peak_memory_pairs_frees_with_their_allocs(synthetic_trace):
    s = summarize(synthetic_trace)
    # device: +1000, +500, -1000 (free A), +2000 (A reused), -500, free of a pre-capture block
    assert s.peak_memory == {0: 2500} and s.peak_memory_bytes == 2500
    assert s.allocations == 4 and s.frees == 3
    assert s.per_device["peak_memory"].tolist() == [2500]


def test_device_memory_in_use_ignores_frees_without_bytes_and_double_frees():
    synthetic = pd.DataFrame({
        "time_ns": [1, 2, 3, 4, 5, 6],
        "op": ["alloc", "free", "free", "alloc", "alloc", "free"],
        "address": np.array([16, 16, 16, 16, 32, 32], dtype=np.uint64),
        "bytes": [100, 0, 0, 40, 7, 7], "memory_kind": "device", "device": [0, 0, 0, 0, 1, 1],
    })
    mem = Trace({"memory": synthetic}).memory
    use = device_memory_in_use(mem)
    # free records carry 0 bytes here: the alloc's size is subtracted; the repeat free nothing
    assert use["delta"].tolist() == [100, -100, 0, 40, 7, -7]
    assert use[use["device"] == 0]["in_use"].tolist() == [100, 0, 0, 40]
    assert use[use["device"] == 1]["in_use"].tolist() == [7, 0]


def test_multi_device_idle_uses_active_devices():
    synthetic = pd.DataFrame({"start_ns": [0, 0], "end_ns": [4, 2], "device": [0, 1],
                              "name": "synthetic_k"})
    synthetic["duration_ns"] = synthetic["end_ns"] - synthetic["start_ns"]
    s = summarize(Trace({"kernels": synthetic}, {"start_ns": 0, "end_ns": 10}))
    assert s.wall_s == pytest.approx(1e-8)
    assert s.per_device["idle_fraction"].tolist() == pytest.approx([0.6, 0.8])
    assert s.idle_fraction == pytest.approx(1 - 6 / 20)


def test_wall_falls_back_to_event_span():
    synthetic = pd.DataFrame({"start_ns": [100, 300], "end_ns": [200, 600], "name": "k"})
    s = summarize(Trace({"kernels": synthetic}))
    assert s.wall_s == pytest.approx(500e-9)


def test_overhead_dropped_and_status(synthetic_trace):
    synthetic_trace.meta.update(status="partial", reason="synthetic interrupt",
                                dropped={"activity_records": 12})
    s = summarize(synthetic_trace)
    assert s.overhead_s == pytest.approx(0.003)
    assert s.dropped == {"activity_records": 12}
    assert (s.status, s.reason) == ("partial", "synthetic interrupt")
    text = repr(s)
    assert "partial — synthetic interrupt" in text and "12 activity records" in text
    assert "12 activity records" in s._repr_mimebundle_()["text/html"]


def test_empty_trace_summary():
    s = summarize(Trace())
    assert s.kernel_count == 0 and s.busy_s == 0 and math.isnan(s.idle_fraction)
    assert s.top_kernels.empty and s.copies.empty and s.peak_memory == {}
    assert "kernels: 0" in repr(s)


def test_unavailable_renders_one_plain_line():
    s = Trace.empty("no CUDA driver (synthetic)").summary()
    assert s._repr_mimebundle_() == {
        "text/plain": "hookmagic: nothing captured — no CUDA driver (synthetic)"}
    assert repr(s) == "hookmagic: nothing captured — no CUDA driver (synthetic)"


def test_html_is_escaped_and_scriptless(synthetic_trace):
    bundle = summarize(synthetic_trace)._repr_mimebundle_()
    html = bundle["text/html"]
    assert "<script" not in html
    assert "synthetic_relu&lt;&quot;quoted&quot;&gt;" in html
    assert "5.1 ms" in html and "idle 49.0%" in html and "4 GB/s" in html
    assert "Synthetic GPU" in bundle["text/plain"]


def test_numeric_cells_do_not_wrap(synthetic_trace):
    # "49.9 µs" must not break into "49.9 / µs" in a narrow widget
    import re
    html = summarize(synthetic_trace)._repr_mimebundle_()["text/html"]
    assert re.search(r"\.hm-summary td\.n\{[^}]*white-space:nowrap", html)
    assert html.count('<td class="n">') >= 4


def test_long_kernel_names_are_shortened_in_display():
    synthetic = pd.DataFrame({"start_ns": [0], "end_ns": [10], "name": ["synthetic_" + "x" * 300]})
    s = summarize(Trace({"kernels": synthetic}))
    assert len(max(repr(s).splitlines(), key=len)) < 120
    assert s.top_kernels["name"].iloc[0] == "synthetic_" + "x" * 300   # data keeps it whole


def test_overhead_adds_seconds_not_counts(synthetic_trace):
    # A live capture's meta["overhead"] also holds counts (as the H100 recordings do) and the
    # parts of start and stop (subscribe, drain, detach), which must not be counted twice.
    synthetic_trace.meta["overhead"] = {"start_s": 0.001, "stop_s": 0.002, "take_s": 0.0005,
                                        "build_s": 0.004, "subscribe_s": 0.0008,
                                        "flush_s": 0.001, "detach_s": 0.0009,
                                        "decode_s": 0.0007, "callbacks": 1401,
                                        "stacks_sampled": 1401}
    assert summarize(synthetic_trace).overhead_s == pytest.approx(0.0075)


def test_summary_to_frame_is_the_shared_headline_table(synthetic_trace):
    s = summarize(synthetic_trace)
    frame = s.to_frame()
    assert list(frame.columns) == ["value", "unit"] and frame.index.name == "name"
    # the same hand-computed numbers as above, in the shared name/value/unit shape
    assert frame.loc["busy_s", "value"] == pytest.approx(5.1e-3)
    assert frame.loc["busy_s", "unit"] == "s"
    assert frame.loc["kernel_count", "value"] == 3
    assert frame.loc["wall_s", "value"] == pytest.approx(0.01)
    assert s["idle_fraction"] == pytest.approx(0.49)
    assert s.to_dict()["kernel_time_s"] == pytest.approx(4.5e-3)
    assert synthetic_trace.summary().to_frame().equals(frame)
