"""GPU idle gaps and their causes, launch latency, and the interval helpers, worked by hand."""
from __future__ import annotations

import numpy as np
import pytest

from hookmagic.analysis.idle import (
    covered_until,
    idle_gaps,
    idle_summary,
    launch_latency,
    merge_intervals,
    overlap,
    touches,
)
from hookmagic.trace.schema import empty_table
from tests.synthetic import synthetic


def gap_trace():
    """Device 0, times in us (x1000 ns). Capture 0..100.

    k1 [10, 20] launched at 5; k2 [30, 40] launched at 25 -> gap [20, 30]: host 5, launch 5.
    k3 [60, 70] launched at 41 (before the gap [40, 60] ends) -> host 1, launch 19.
    k4 [90, 95] launched at 88; the host sat in cudaDeviceSynchronize [65, 71] and a
    sync-table wait [72, 75] -> gap [70, 90]: sync 1 + 3 = 4, launch 2, host 14, after_sync.
    Tail gap [95, 100]: host 5. Lead gap [0, 10]: host 5, launch 5.
    A memcpy [15, 18] overlaps k1 and adds no busy time.
    """
    us = 1000
    kernels = {"start_ns": np.array([10, 30, 60, 90]) * us, "end_ns": np.array([20, 40, 70, 95]) * us,
               "device": 0, "stream": 7, "correlation": [1, 2, 3, 4], "name": ["k1", "k2", "k3", "k4"]}
    kernels["duration_ns"] = kernels["end_ns"] - kernels["start_ns"]
    memcpy = {"start_ns": [15 * us], "end_ns": [18 * us], "duration_ns": [3 * us], "device": 0,
              "stream": 8, "correlation": [9], "bytes": 100, "kind": "htod"}
    api = {"start_ns": np.array([5, 25, 41, 88, 65, 14]) * us,
           "end_ns": np.array([6, 26, 42, 89, 71, 15]) * us,
           "name": ["cudaLaunchKernel"] * 4 + ["cudaDeviceSynchronize", "cudaMemcpyAsync"],
           "correlation": [1, 2, 3, 4, 50, 9], "domain": "runtime"}
    sync = {"start_ns": [72 * us], "end_ns": [75 * us], "type": "event"}
    return synthetic({"start_ns": 0, "end_ns": 100 * us}, kernels=kernels, memcpy=memcpy, api=api,
                     sync=sync)


def test_gaps_split_by_cause():
    g = idle_gaps(gap_trace())
    us = 1000
    assert list(g["position"]) == ["lead", "between", "between", "between", "tail"]
    assert list(g["start_ns"] // us) == [0, 20, 40, 70, 95]
    assert list(g["end_ns"] // us) == [10, 30, 60, 90, 100]
    assert list(g["host_ns"] // us) == [5, 5, 1, 14, 5]
    assert list(g["launch_ns"] // us) == [5, 5, 19, 2, 0]
    assert list(g["sync_ns"] // us) == [0, 0, 0, 4, 0]
    assert list(g["after_sync"]) == [False, False, False, True, False]
    assert list(g["cause"]) == ["host-bound", "host-bound", "launch latency", "synchronisation",
                                "host-bound"]
    assert list(g["next_name"])[:4] == ["k1", "k2", "k3", "k4"]
    assert (g["host_ns"] + g["launch_ns"] + g["sync_ns"] == g["duration_ns"]).all()


def test_summary_adds_up():
    s = idle_summary(gap_trace()).iloc[0]
    us = 1000
    # busy: [10, 20] + [30, 40] + [60, 70] + [90, 95] = 35 us of 100
    assert s["span_ns"] == 100 * us and s["busy_ns"] == 35 * us and s["idle_ns"] == 65 * us
    assert s["idle_share"] == pytest.approx(0.65)
    assert s["host_ns"] + s["launch_ns"] + s["sync_ns"] == s["idle_ns"]
    assert s["sync_bound_ns"] == 20 * us and s["gaps"] == 3
    # launch latencies of k1..k4: 5, 5, 19, 2 us -> median 5
    assert s["launch_latency_p50_ns"] == pytest.approx(5 * us)


def test_launch_latency_rows():
    lat = launch_latency(gap_trace()).set_index("correlation")
    us = 1000
    assert lat.loc[3, "latency_ns"] == 19 * us and lat.loc[3, "queue_ns"] == 18 * us
    assert lat.loc[9, "kind"] == "memcpy" and lat.loc[9, "api_name"] == "cudaMemcpyAsync"
    assert 50 not in lat.index  # the synchronize launched nothing


def test_no_meta_window_and_no_api():
    tr = gap_trace()
    tr.meta = {}
    tr.api = empty_table("api")
    tr.sync = empty_table("sync")
    g = idle_gaps(tr)
    assert list(g["position"]) == ["between"] * 3
    assert (g["cause"] == "host-bound").all() and (g["launch_ns"] == 0).all()


def brute_cover(starts, ends, x):
    grid = np.zeros(200, dtype=bool)
    for s, e in zip(starts, ends):
        grid[s:e] = True
    return int(grid[:x].sum())


def test_interval_helpers_against_brute_force():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 180, 40)
    e = s + rng.integers(0, 15, 40)
    us, ue = merge_intervals(s, e)
    assert (us[1:] > ue[:-1]).all()
    xs = np.arange(0, 200)
    assert list(covered_until(us, ue, xs)) == [brute_cover(s, e, x) for x in xs]
    a, b = np.array([3, 50, 120]), np.array([40, 50, 199])
    assert list(overlap(us, ue, a, b)) == [brute_cover(s, e, y) - brute_cover(s, e, x)
                                           for x, y in zip(a, b)]
    t = touches(np.array([10]), np.array([20]), np.array([0, 20, 21, 5]), np.array([9, 25, 30, 10]))
    assert list(t) == [False, True, False, True]
