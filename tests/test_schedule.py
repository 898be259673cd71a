"""Scheduled captures of long loops: ``hookmagic.capture(schedule=...)``.

The step plan is checked against torch.profiler's own ``schedule`` (the reference it copies);
the windows on a machine without a GPU (each still one Trace, saying why nothing was
captured); the cutting of a window on synthetic tables. tests/gpu/test_lite_schedule_gpu.py
checks windows of a real capture against kernel counts on the GPU.
"""
from __future__ import annotations

import itertools
import warnings

import pandas as pd
import pytest

import hookmagic
from hookmagic.common.errors import HookmagicError, InvalidArgument
from hookmagic.cupti import library
from hookmagic.cupti.errors import ScheduleError
from hookmagic.trace import Trace
from hookmagic.trace.window import window
from tests.conftest import synthetic_meta, synthetic_tables


@pytest.fixture(autouse=True)
def _no_driver(monkeypatch):
    library.driver_info.cache_clear()
    monkeypatch.setattr(library, "driver_info",
                        lambda: library.DriverInfo(error="no NVIDIA driver was found (synthetic)"))
    import hookmagic.cupti.session as session

    session._warned.add("no NVIDIA driver was found (synthetic)")  # said once, not per test


@pytest.mark.parametrize("wait, warmup, active, repeat, skip_first", [
    (1, 1, 2, 2, 0), (0, 0, 1, 0, 0), (2, 0, 3, 1, 1), (0, 2, 1, 3, 0), (3, 1, 1, 0, 2),
])
def test_the_plan_is_torch_profilers(wait, warmup, active, repeat, skip_first):
    torch_profiler = pytest.importorskip("torch.profiler")
    warnings.simplefilter("ignore", UserWarning)  # torch's note on warmup=0
    reference = torch_profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                                        skip_first=skip_first)
    ours = hookmagic.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                              skip_first=skip_first)
    for step in range(40):
        assert ours.action(step) == reference(step).name.lower(), step


@pytest.mark.parametrize("kwargs, name", [
    ({"active": 0}, "active"), ({"active": -2}, "active"), ({"active": 1.5}, "active"),
    ({"wait": -1}, "wait"), ({"warmup": 0.5}, "warmup"), ({"repeat": -1}, "repeat"),
    ({"active": True}, "active"), ({"skip_first": "1"}, "skip_first"),
])
def test_bad_schedules_are_refused(kwargs, name):
    args = {"wait": 1, "warmup": 1, "active": 2, **kwargs}
    with pytest.raises(ScheduleError, match=f"schedule {name} must") as info:
        hookmagic.schedule(**args)
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidArgument)
    assert isinstance(info.value, HookmagicError)


def test_schedule_misuse_is_refused():
    with pytest.raises(ScheduleError):
        hookmagic.capture(schedule=(1, 1, 2))
    with pytest.raises(ScheduleError, match="dir="):
        hookmagic.capture(schedule=hookmagic.schedule(wait=0, warmup=0, active=1), dir="/tmp/x")
    with pytest.raises(ScheduleError, match="needs schedule"):
        hookmagic.capture(on_trace_ready=print)
    with pytest.raises(ScheduleError, match="step"):
        hookmagic.capture().step()


def _loop(steps: int, **schedule_args) -> tuple[list[Trace], list[int]]:
    ran = []
    with hookmagic.capture(schedule=hookmagic.schedule(**schedule_args), lite=True) as prof:
        for i in range(steps):
            ran.append(i)
            prof.step()
    return prof.traces, ran


def test_one_trace_per_active_window_and_the_loop_runs_whole():
    traces, ran = _loop(20, wait=2, warmup=1, active=3, repeat=2)
    assert ran == list(range(20))
    assert len(traces) == 2
    for number, trace in enumerate(traces):
        info = trace.meta["schedule"]
        assert info["window"] == number and info["complete"] is True
        assert info["first_step"] == 3 + 6 * number
        assert (info["steps"], info["warmup_steps"]) == (3, 1)
        assert [s[0] for s in trace.meta["steps"]] == [3 + 6 * number + k for k in range(3)]
        assert trace.meta["label"] == f"schedule window {number}"
        assert trace.meta["options"]["lite"] is True
        # no GPU here, and it says so (where a GPU test already loaded CUPTI in this
        # process, the windows are real captures)
        assert trace.status in ("unavailable", "complete")


def test_repeat_zero_runs_until_the_loop_ends_and_a_partial_window_is_kept():
    traces, _ = _loop(10, wait=1, warmup=0, active=3)   # windows at 1-3, 5-7, then 9 partial
    assert [t.meta["schedule"]["first_step"] for t in traces] == [1, 5, 9]
    assert [t.meta["schedule"]["complete"] for t in traces] == [True, True, False]
    assert [t.meta["schedule"]["steps"] for t in traces] == [3, 3, 1]


def test_a_window_still_warming_up_at_the_end_is_dropped():
    traces, _ = _loop(5, wait=1, warmup=2, active=2)   # window 1-2 warm-up, 3-4 active; 5: none
    assert len(traces) == 1
    traces, _ = _loop(6, wait=1, warmup=2, active=2)   # 6 = next cycle's wait
    assert len(traces) == 1
    traces, _ = _loop(6, wait=0, warmup=2, active=2)   # 4-5 warmed up, 6 not run
    assert len(traces) == 1


def test_on_trace_ready_receives_each_window_instead_of_keeping_it():
    got = []
    with hookmagic.capture(schedule=hookmagic.schedule(wait=0, warmup=1, active=1, repeat=3),
                           on_trace_ready=got.append) as prof:
        for _ in range(8):
            prof.step()
    assert [t.meta["schedule"]["window"] for t in got] == [0, 1, 2]
    assert prof.traces == []


def test_the_users_exception_passes_through_and_the_window_is_partial():
    with pytest.raises(KeyError):
        with hookmagic.capture(schedule=hookmagic.schedule(wait=0, warmup=0, active=4)) as prof:
            prof.step()
            prof.step()
            raise KeyError("in the loop")
    (trace,) = prof.traces
    assert trace.meta["schedule"]["complete"] is False and trace.meta["schedule"]["steps"] == 2


def test_a_window_keeps_the_rows_that_start_in_it():
    tables = synthetic_tables()
    meta = synthetic_meta()
    trace = Trace(tables, meta)
    kernels = trace.kernels
    cut = int(kernels["start_ns"].sort_values().iloc[len(kernels) // 2])
    part = window(trace, cut, schedule={"window": 0})
    assert len(part.kernels) == int((kernels["start_ns"] >= cut).sum()) > 0
    assert (part.kernels["start_ns"] >= cut).all()
    assert part.meta["start_ns"] == cut and part.meta["schedule"] == {"window": 0}
    pd.testing.assert_frame_equal(part.stacks, trace.stacks)
    for name in ("memcpy", "memset", "sync"):
        assert (getattr(part, name)["start_ns"] >= cut).all()
    assert (part.memory["time_ns"] >= cut).all()
    end = int(kernels["start_ns"].max())
    both = window(trace, cut, end)
    assert len(both.kernels) == int(((kernels["start_ns"] >= cut)
                                     & (kernels["start_ns"] < end)).sum())
    assert trace.kernels is kernels  # the original is untouched


def test_plan_cycles_have_the_stated_lengths():
    s = hookmagic.schedule(wait=2, warmup=1, active=3, repeat=2)
    actions = [s.action(i) for i in range(14)]
    groups = [(a, len(list(g))) for a, g in itertools.groupby(actions)]
    assert groups == [("none", 2), ("warmup", 1), ("record", 2), ("record_and_save", 1),
                      ("none", 2), ("warmup", 1), ("record", 2), ("record_and_save", 1),
                      ("none", 2)]


def test_a_window_saves_and_loads_with_its_schedule(tmp_path):
    trace = Trace(synthetic_tables(), synthetic_meta())
    cut = int(trace.kernels["start_ns"].median())
    part = window(trace, cut, schedule={"window": 1, "complete": True}, steps=[[4, cut, cut + 9]])
    part.save(tmp_path / "window.hmtrace")
    back = hookmagic.load(tmp_path / "window.hmtrace")
    assert back.meta["schedule"] == {"window": 1, "complete": True}
    assert back.meta["steps"] == [[4, cut, cut + 9]]
    pd.testing.assert_frame_equal(back.kernels, part.kernels)
