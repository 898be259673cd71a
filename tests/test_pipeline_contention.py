"""The model's contention option (``contention=True``): which stages were busy when each
execution started, the cost each busy stage added to another's executions, and the model with
nothing to add.

The runs here are SYNTHETIC, written out below (times in ms)."""
from __future__ import annotations

import numpy as np
import pytest

from hookmagic.common.errors import InvalidArgument
from hookmagic.pipeline.analysis import batches
from hookmagic.pipeline.model import _stage_times, busy_at_start, contention_costs, simulate
from tests.test_pipeline_gil import _as_run, synthetic_run

MS = 1_000_000


def synthetic_contended_run(n: int = 200):
    """A SYNTHETIC run of a read stage s0 and two stages: a frame every 10 ms; s0 reads it in
    1 ms; s1 takes 2 ms, 3 ms when s2 is still busy at its start; s2 starts 5 ms into the
    frame and takes 7 ms for even frames (so it is still busy when the next frame's s1 starts,
    at 11 ms) and 1 ms for odd ones."""
    rows = []
    for f in range(n):
        t0 = f * 10 * MS
        s2_busy = f % 2 == 1 and f > 0  # the even frame before it runs s2 until 12 ms
        s1 = (3 if s2_busy else 2) * MS
        s2 = (7 if f % 2 == 0 else 1) * MS
        for k, (a, d) in enumerate([(t0, MS), (t0 + MS, s1), (t0 + 5 * MS, s2)]):
            rows.append((f, f"s{k}", k, 0, -1, 1, a, a, a + d, a + d, -1, -1, "ok", "", d))
    return _as_run(rows, n, 3)


def _runs(run):
    return [batches(run, s).sort_values("start_ns") for s in run.stage_names]


def test_busy_at_start_marks_the_stages_under_way_at_each_start():
    run = synthetic_contended_run(6)
    x = busy_at_start(_runs(run))
    # s1 of frames 1, 3, 5 starts at 11, 31, 51 ms while s2 of frames 0, 2, 4 runs (5-12 ms...)
    assert x[1][:, 2].tolist() == [0, 1, 0, 1, 0, 1]
    # s0 ends as s1 starts: not under way; s0 of an odd frame starts while s2 still runs
    assert x[1][:, 0].tolist() == [0] * 6
    assert x[0][:, 2].tolist() == [0, 1, 0, 1, 0, 1] and (x[0][:, 1] == 0).all()
    # s2 starts 5 ms into the frame, after s1 ended (3 or 4 ms)
    assert x[2].sum() == 0
    assert (x[1][:, 1] == 0).all()  # never itself


def test_the_cost_of_a_busy_stage_is_measured_from_the_run():
    cost, x = contention_costs(synthetic_contended_run())
    assert abs(cost[1, 2] * 1e3 - 1.0) < 1e-6  # 3 ms against 2 ms
    # s0 was never busy at s1's start, s2 never had anything busy at its start, and s0 took
    # 1 ms whatever ran: nothing fitted
    assert cost[1, 0] == 0 and (cost[0] == 0).all() and (cost[2] == 0).all()


def test_without_measured_contention_the_option_changes_nothing():
    run = synthetic_run([(0.0, 2.0), (0.0, 3.0), (0.0, 1.0)])
    cost, _ = contention_costs(run)
    assert (cost == 0).all()
    for speedup in ({}, {"s1": 2.0}):
        a = simulate(run, speedup)
        b = simulate(run, speedup, contention=True)
        assert a["fps"] == b["fps"] and a["p50_ms"] == b["p50_ms"]


def test_the_measured_cost_is_taken_out_of_each_execution_and_kept_for_the_model():
    run = synthetic_contended_run()
    plain = _stage_times(run, gil=False)
    told = _stage_times(run, gil=False, contended=True)
    # s1's 3 ms executions (s2 busy at their start) become 2 ms like the others; what the model
    # adds back at each modelled start is the 1 ms cost of s2 being busy
    assert sorted(set(np.round((plain[1]["free"] - plain[1]["free"].min()) * 1e3, 6))) == [0, 1]
    assert np.allclose(told[1]["free"], plain[1]["free"].min())
    assert np.allclose(told[1]["contention"] * 1e3, [0, 0, 1])
    assert np.allclose(told[2]["free"], plain[2]["free"])


def test_the_gil_model_and_contention_are_not_combined():
    run = synthetic_contended_run(20)
    with pytest.raises(InvalidArgument, match="cannot be combined"):
        simulate(run, gil=True, contention=True)
