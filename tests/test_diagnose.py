"""The diagnosis patterns, copy bandwidth against the link, and tiny-kernel detection.

Each synthetic trace is built to show one pattern; the numbers in the evidence are worked by
hand from it.
"""
from __future__ import annotations

import numpy as np
import pytest

from hookmagic.analysis.copies import copy_bandwidth, link_peaks, tiny_kernels
from hookmagic.analysis.diagnose import diagnose
from tests.synthetic import synthetic

US = 1000
A100 = {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": [8, 0],
        "multiprocessors": 108}


def kernels_table(starts, durations, names, **extra):
    starts = np.asarray(starts, dtype=np.int64)
    durations = np.asarray(durations, dtype=np.int64)
    base = {"start_ns": starts, "end_ns": starts + durations, "duration_ns": durations,
            "device": 0, "stream": 7, "correlation": np.arange(len(starts)) + 1, "name": names,
            "grid_x": 1080, "grid_y": 1, "grid_z": 1, "block_x": 256, "block_y": 1, "block_z": 1,
            "registers": 32}
    base.update(extra)
    return base


def patterns(tr):
    return list(diagnose(tr)["pattern"])


def test_few_kernels_dominate():
    # back-to-back: sgemm 8 x 1 ms, softmax 1 x 0.5 ms, then 10 small 10 us kernels
    names = ["ampere_sgemm_128x64_nn"] * 8 + ["softmax"] + [f"op{i}" for i in range(10)]
    durs = [1000 * US] * 8 + [500 * US] + [10 * US] * 10
    starts = np.r_[0, np.cumsum(durs)[:-1]]
    tr = synthetic({"start_ns": 0, "end_ns": int(sum(durs)), "devices": [A100]},
                   kernels=kernels_table(starts, durs, names))
    d = diagnose(tr).set_index("pattern")
    assert "few-kernels" in d.index and "launch-bound" not in d.index
    row = d.loc["few-kernels"]
    # top 3: sgemm 8000 + softmax 500 + op0 10 of 8600 us
    assert row["metric"] == pytest.approx(8510 / 8600)
    assert row["severity"] == "high" and "FP32" in row["advice"] and "Tensor Cores" in row["advice"]
    assert "93%" in row["evidence"]  # sgemm 8000 / 8600


def test_transfers_dominate_with_pageable_memory():
    # one 1 ms kernel; 8 MB pageable htod copies taking 4 x 1 ms = 2 GB/s of 31.5 GB/s
    k = kernels_table([0], [1000 * US], ["gemm"])
    starts = np.array([2, 4, 6, 8]) * 1000 * US
    memcpy = {"start_ns": starts, "end_ns": starts + 1000 * US, "duration_ns": 1000 * US,
              "device": 0, "stream": 7, "bytes": 2_000_000, "kind": "htod",
              "src_kind": "pageable", "dst_kind": "device", "correlation": [11, 12, 13, 14]}
    tr = synthetic({"start_ns": 0, "end_ns": 9000 * US, "devices": [A100]}, kernels=k,
                   memcpy=memcpy)
    d = diagnose(tr).set_index("pattern")
    row = d.loc["transfers"]
    assert row["metric"] == pytest.approx(0.8) and row["severity"] == "high"
    assert "pinned" in row["advice"] and "non_blocking" in row["advice"]
    assert "100% of host bytes from pageable memory" in row["evidence"]
    assert "2.0 GB/s of 32 GB/s" in row["evidence"]


def test_copy_bandwidth_against_link():
    memcpy = {"start_ns": [0, 10_000, 20_000, 30_000], "end_ns": [1000, 11_000, 22_000, 31_000],
              "duration_ns": [1000, 1000, 2000, 1000], "device": 0, "stream": 7,
              "bytes": [10_000, 30_000, 1_000_000, 500_000],
              "kind": ["htod", "htod", "dtod", "dtoh"],
              "src_kind": ["pinned", "pinned", "device", "device"],
              "dst_kind": ["device", "device", "device", "pageable"]}
    tr = synthetic({"devices": [A100]}, memcpy=memcpy)
    bw = copy_bandwidth(tr).set_index(["kind", "host_memory"])
    htod = bw.loc[("htod", "pinned")]
    assert htod["bytes"] == 40_000 and htod["achieved_gbps"] == pytest.approx(20.0)
    assert htod["best_gbps"] == pytest.approx(30.0)
    assert htod["peak_gbps"] == pytest.approx(31.5) and htod["link"] == "PCIe Gen4 x16"
    assert htod["peak_source"].startswith("assumed")
    dtod = bw.loc[("dtod", "")]
    assert dtod["achieved_gbps"] == pytest.approx(500.0)
    assert dtod["peak_gbps"] == pytest.approx(2039.0 / 2)  # read + write
    assert bw.loc[("dtoh", "pageable"), "fraction_of_peak"] == pytest.approx(500 / 31.5)
    # the capture's own link description wins over family defaults
    meta = {"devices": [{**A100, "pcie_gen": 3, "pcie_width": 8}]}
    assert link_peaks(meta, 0)["host_gbps"] == pytest.approx(0.985 * 8)
    assert link_peaks(meta, 0)["host_source"] == "meta"
    orin = link_peaks({"devices": [{"name": "Orin (nvgpu)"}]}, 0)
    assert orin["integrated"] and orin["link"].startswith("shared")


def launch_bound_trace(n=2000):
    # 2 us kernels every 10 us; each launched 7 us before it starts (host-bound gaps of ~1 us
    # plus 7 us of launch latency)
    starts = np.arange(n) * 10 * US + 10 * US
    k = kernels_table(starts, np.full(n, 2 * US), [f"elementwise_{i % 4}" for i in range(n)])
    api = {"start_ns": starts - 7 * US, "end_ns": starts - 6 * US, "name": "cudaLaunchKernel",
           "domain": "runtime", "correlation": np.arange(n) + 1}
    return synthetic({"start_ns": 0, "end_ns": int(starts[-1] + 10 * US), "devices": [A100]},
                     kernels=k, api=api)


def test_launch_bound_and_tiny_kernels():
    tr = launch_bound_trace()
    tiny = tiny_kernels(tr)
    assert tiny["count"].sum() == 2000 and tiny["share_of_launches"].sum() == pytest.approx(1.0)
    d = diagnose(tr).set_index("pattern")
    row = d.loc["launch-bound"]
    assert row["metric"] == pytest.approx(0.8, abs=0.01) and row["severity"] == "high"
    assert "CUDA graph" in row["advice"] and "fuse" in row["advice"]
    assert "median launch latency 7.0 us" in row["evidence"]
    assert "synchronisation" not in d.index


def test_synchronisation_stalls():
    # kernel 1 ms; host syncs until it ends, then spends 1 ms before the next launch
    n = 20
    starts = np.arange(n) * 2000 * US
    k = kernels_table(starts, np.full(n, 1000 * US), ["gemm"] * n)
    api_start = np.r_[starts - 10 * US, starts + 1 * US]
    api = {"start_ns": api_start, "end_ns": np.r_[starts - 9 * US, starts + 1001 * US],
           "name": ["cudaLaunchKernel"] * n + ["cudaStreamSynchronize"] * n, "domain": "runtime",
           "correlation": np.r_[np.arange(n) + 1, np.arange(n) + 1000]}
    tr = synthetic({"start_ns": 0, "end_ns": int(starts[-1] + 2000 * US), "devices": [A100]},
                   kernels=k, api=api)
    d = diagnose(tr).set_index("pattern")
    assert "synchronisation" in d.index
    assert d.loc["synchronisation", "metric"] == pytest.approx(0.5, abs=0.01)
    assert ".item()" in d.loc["synchronisation", "advice"]


def test_diverse_operators():
    names = [f"op_{i}" for i in range(30)]
    durs = [100 * US] * 30
    starts = np.r_[0, np.cumsum(durs)[:-1]]
    tr = synthetic({"start_ns": 0, "end_ns": int(sum(durs)), "devices": [A100]},
                   kernels=kernels_table(starts, durs, names))
    d = diagnose(tr).set_index("pattern")
    assert "diverse-operators" in d.index and "few-kernels" not in d.index
    assert d.loc["diverse-operators", "metric"] == pytest.approx(1 - 5 / 30)
    assert "fus" in d.loc["diverse-operators", "advice"].lower()


def test_low_occupancy_of_heavy_kernel():
    # 1024-thread blocks with 64 regs: 2048 regs/warp -> 32 warps/SM -> 1 block (50%);
    # and a grid of 10 blocks cannot fill 108 SMs
    k = kernels_table([0], [1000 * US], ["big_kernel"], block_x=1024, registers=64, grid_x=10)
    d = diagnose(synthetic({"start_ns": 0, "end_ns": 1000 * US, "devices": [A100]},
                           kernels=k)).set_index("pattern")
    ev = d.loc["low-occupancy", "evidence"]
    assert "occupancy 50% limited by registers" in ev and "0.09 waves" in ev


def test_nothing_captured_and_balanced():
    empty = synthetic({"reason": "no NVIDIA GPU found"})
    d = diagnose(empty)
    assert list(d["pattern"]) == ["nothing-captured"] and "no NVIDIA GPU" in d["evidence"][0]
    # five kernels of 200 us back to back: busy, few names but none dominant enough...
    names = ["a", "b", "c", "d", "e", "f", "g", "h"]
    durs = [200 * US] * 8
    starts = np.r_[0, np.cumsum(durs)[:-1]]
    tr = synthetic({"start_ns": 0, "end_ns": int(sum(durs)), "devices": [A100]},
                   kernels=kernels_table(starts, durs, names, grid_x=100_000))
    assert patterns(tr) == ["balanced"]
