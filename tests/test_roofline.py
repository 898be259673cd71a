"""Roofline analysis on a synthetic trace: declared work joined to captured launches by name."""
from __future__ import annotations


import pandas as pd
import pytest

from hookmagic.analysis.roofline import (declared_work, kernel_rates, nvrtc_vs_capture, peaks_for, peaks_table,
                                         roofline)
from hookmagic.trace.model import Trace


def synthetic_trace() -> Trace:
    """Two synthetic kernels: 'synthetic_gemm' launched twice (1 ms each) inside range 'step A',
    'synthetic_copy' once (2 ms) in 'step B'; an undeclared kernel is left out."""
    ms = 1_000_000
    kernels = pd.DataFrame({
        "start_ns": [0, 2 * ms, 4 * ms, 7 * ms], "end_ns": [1 * ms, 3 * ms, 6 * ms, 8 * ms],
        "device": 0, "context": 1, "stream": 7, "correlation": [1, 2, 3, 4],
        "name": ["synthetic_gemm", "synthetic_gemm", "synthetic_copy", "synthetic_undeclared"],
        "grid_x": 8, "grid_y": 1, "grid_z": 1, "block_x": [256, 256, 128, 32], "block_y": 1, "block_z": 1,
        "registers": [120, 120, 16, 8], "static_smem": [1024, 1024, 0, 0], "dynamic_smem": [2048, 2048, 0, 0],
        "local_mem": 0, "graph_id": 0, "graph_node": 0, "thread": 1, "stack_id": -1, "range_id": [1, 1, 2, -1],
    })
    kernels["duration_ns"] = kernels["end_ns"] - kernels["start_ns"]
    ranges = pd.DataFrame({"range_id": [1, 2], "name": ["step A", "step B"], "start_ns": [0, 4 * ms],
                           "end_ns": [3 * ms, 6 * ms], "thread": 1, "depth": 0, "parent_id": -1, "source": "hookmagic"})
    ranges["duration_ns"] = ranges["end_ns"] - ranges["start_ns"]
    work = [{"kernel": "synthetic_gemm", "flops": 2e12, "dram_bytes": 1e9, "args": {"dtype": "float16"}},
            {"kernel": "synthetic_gemm", "flops": 2e12, "dram_bytes": 1e9, "args": {"dtype": "float16"}},
            {"kernel": "synthetic_copy", "flops": 1e6, "dram_bytes": 4e9, "args": {"dtype": "float32"}}]
    nvrtc = {"arch": "sm_90", "kernels": [
        {"kernel": "synthetic_gemm", "registers": 120, "smem_bytes": 1024, "spill_store_bytes": 0},
        {"kernel": "synthetic_copy", "registers": 18, "smem_bytes": 0, "spill_store_bytes": 0}]}
    return Trace({"kernels": kernels, "ranges": ranges}, {"work": work, "nvrtc": nvrtc})


def test_rates_by_hand():
    r = kernel_rates(synthetic_trace()).set_index("name")
    assert list(r.index) == ["synthetic_gemm", "synthetic_copy"]
    g = r.loc["synthetic_gemm"]
    assert g["launches"] == 2 and g["step"] == "step A" and g["mean_ns"] == 1_000_000
    assert g["tflops"] == pytest.approx(4e12 / 2e-3 / 1e12)          # 2000 TFLOP/s
    assert g["gbps"] == pytest.approx(2e9 / 2e-3 / 1e9)
    assert g["intensity"] == pytest.approx(2000.0)
    assert (g["registers"], g["smem_per_block"], g["threads_per_block"]) == (120, 3072, 256)
    c = r.loc["synthetic_copy"]
    assert c["gbps"] == pytest.approx(4e9 / 2e-3 / 1e9) and c["step"] == "step B"


def test_roofline_bounds_against_h100_datasheet():
    peaks = peaks_for("NVIDIA H100 80GB HBM3")
    assert peaks["gpu"] == "H100 SXM" and peaks["dram"] == 3.35e12
    pts = roofline(kernel_rates(synthetic_trace()), peaks).set_index("name")
    assert pts.loc["synthetic_gemm", "bound"] == "compute"
    assert pts.loc["synthetic_gemm", "roof_tflops"] == pytest.approx(989.4)
    assert pts.loc["synthetic_copy", "bound"] == "memory"
    assert pts.loc["synthetic_copy", "roof_tflops"] == pytest.approx(1e6 / 4e9 * 3.35e12 / 1e12)
    assert set(peaks_table(peaks)["resource"]) >= {"DRAM", "float16 Tensor Core", "float32 CUDA core"}
    assert peaks_for("Tesla T4") is None and peaks_for("NVIDIA H200")["dram"] == 4.8e12


def test_nvrtc_vs_capture_flags_disagreement():
    t = nvrtc_vs_capture(synthetic_trace()).set_index("name")
    assert bool(t.loc["synthetic_gemm", "agree"]) and not bool(t.loc["synthetic_copy", "agree"])


def test_no_work_gives_empty_tables():
    t = synthetic_trace()
    t.meta["work"] = []
    assert kernel_rates(t).empty and declared_work([]).empty


def test_roofline_figure_builds():
    pytest.importorskip("plotly")
    from hookmagic.views.roofline import roofline_figure
    peaks = peaks_for("H100")
    fig = roofline_figure(roofline(kernel_rates(synthetic_trace()), peaks), peaks)
    names = [tr.name for tr in fig.data]
    assert any(n.startswith("roof float16") for n in names) and "float16 kernels" in names


def test_range_rates_by_hand():
    from hookmagic.analysis.roofline import range_rates
    t = synthetic_trace()
    t.meta["range_work"] = {"step A": {"flops": 4e12, "dram_bytes": 2e9, "calls": 2},
                            "step B": {"dram_bytes": 4e9}, "never ran": {"dram_bytes": 1.0}}
    r = range_rates(t).set_index("step")
    assert list(r.index) == ["step A", "step B"]          # in the order the ranges start
    a = r.loc["step A"]                                    # two 1 ms launches of one kernel
    assert (a["calls"], a["kernels"], a["kernel_names"], a["gpu_ns"]) == (2, 2, 1, 2_000_000)
    assert a["mean_ns"] == 1_000_000 and a["tflops"] == pytest.approx(2000.0) and a["gbps"] == pytest.approx(1000.0)
    b = r.loc["step B"]                                    # one range, one 2 ms kernel; calls default to ranges
    assert (b["calls"], b["kernels"]) == (1, 1) and b["gbps"] == pytest.approx(2000.0) and b["tflops"] == 0
    assert range_rates(t, {}).empty and range_rates(synthetic_trace()).empty


def test_range_rates_count_copies_a_device_copy_is_not_a_kernel():
    """torch's device-to-device ``copy_`` is a memcpy record: a 'copy' step has GPU time from it
    (the bandwidth roof of notebook 05 came out empty when only kernels were counted)."""
    from hookmagic.analysis.roofline import range_rates
    t = synthetic_trace()
    ms = 1_000_000
    ranges = pd.concat([t.ranges, pd.DataFrame({
        "range_id": [3], "name": ["copy"], "start_ns": [9 * ms], "end_ns": [12 * ms], "thread": 1,
        "depth": 0, "parent_id": -1, "source": "hookmagic", "duration_ns": [3 * ms]})], ignore_index=True)
    memcpy = pd.DataFrame({"start_ns": [9 * ms, 10 * ms], "end_ns": [9 * ms + ms // 2, 11 * ms],
                           "range_id": [3, 3], "bytes": 1 << 20, "kind": "dtod"})
    memcpy["duration_ns"] = memcpy["end_ns"] - memcpy["start_ns"]
    t2 = Trace({"kernels": t.kernels, "ranges": ranges, "memcpy": memcpy}, dict(t.meta))
    r = range_rates(t2, {"copy": {"dram_bytes": 3e9, "calls": 2}, "step B": {"dram_bytes": 4e9}}).set_index("step")
    c = r.loc["copy"]
    assert (c["kernels"], c["copies"], c["gpu_ns"]) == (0, 2, 1_500_000)
    assert c["gbps"] == pytest.approx(2000.0)
    assert r.loc["step B", "copies"] == 0 and r.loc["step B", "gbps"] == pytest.approx(2000.0)
