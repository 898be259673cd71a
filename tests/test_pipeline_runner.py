"""hookmagic.pipeline: running frames through stages and recording each frame at each stage.

Frames here are synthetic (integers, small arrays); stages sleep or compute to have durations."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hookmagic.common.errors import HookmagicError, InvalidArgument
from hookmagic.pipeline import Pipeline, Stage, frames, load_run, synthetic_cameras


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("hookmagic-")]


def _threads_after_leaving(timeout_s: float = 5.0) -> list[str]:
    """The hookmagic threads still alive once closed ones had time to leave."""
    deadline = time.monotonic() + timeout_s
    while _threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return _threads()


def test_every_frame_passes_every_stage_in_order_with_its_value():
    out = []
    pipe = Pipeline([Stage("double", lambda x: 2 * x, workers=2), Stage("inc", lambda x: x + 1),
                     Stage("sink", lambda x: out.append(x) or x)], queue_size=2)
    run = pipe.run(range(100))
    assert sorted(out) == [2 * i + 1 for i in range(100)]
    assert run.outcomes.to_dict() == {"done": 100}
    assert run.stage_names == ["read", "double", "inc", "sink"]
    assert len(run.events) == 400
    ev = run.events
    for _, g in ev.groupby("frame"):
        g = g.sort_values("stage_index")
        assert list(g["stage"]) == run.stage_names
        # enqueue <= start <= end <= put, and each stage starts after the previous one was put
        assert (g["enqueue_ns"] <= g["start_ns"]).all() and (g["start_ns"] <= g["end_ns"]).all()
        assert (g["end_ns"] <= g["put_ns"]).all()
        assert (g["enqueue_ns"].to_numpy()[1:] == g["put_ns"].to_numpy()[:-1]).all()
    assert set(ev.loc[ev["stage"] == "double", "worker"]) <= {0, 1}
    # the stage workers are kept for the next run (the reader thread is gone); close ends them
    assert sorted(_threads()) == ["hookmagic-double-0", "hookmagic-double-1",
                                  "hookmagic-inc-0", "hookmagic-sink-0"]
    pipe.close()
    assert _threads_after_leaving() == []


def test_a_pipeline_keeps_its_worker_threads_across_runs():
    def workers() -> set[int]:
        return {t.ident for t in threading.enumerate() if t.name.startswith("hookmagic-where-")}

    seen: set[int] = set()
    pipe = Pipeline([Stage("where", lambda x: seen.add(threading.get_ident()) or x, workers=2)])
    pipe.run(range(20))
    first = workers()
    assert len(first) == 2
    pipe.run(range(20))
    assert workers() == first and seen <= first
    del pipe  # collecting the pipeline ends its threads
    assert _threads_after_leaving() == []


def test_batches_take_up_to_batch_frames_and_split_results():
    seen = []

    def infer(batch):
        seen.append(len(batch))
        time.sleep(0.002)
        return np.asarray(batch) * 10  # an array: split along its first axis

    res = []
    run = Pipeline([Stage("infer", infer, batch=4), Stage("post", lambda y: res.append(int(y)) or y)],
                   queue_size=16).run(frames(range(37)))
    assert sorted(res) == [10 * i for i in range(37)]
    assert max(seen) <= 4 and sum(seen) == 37
    inf = run.events[run.events["stage"] == "infer"]
    sizes = inf.groupby("batch")["frame"].count()
    assert (sizes == inf.groupby("batch")["batch_size"].first()).all()
    table = run.per_batch()
    assert list(table.columns) == ["batch", "frames", "read_ms", "infer_ms", "post_ms", "e2e_ms",
                                   "fps"]
    assert table["frames"].sum() == 37 and len(table) == len(seen)


def test_a_failing_frame_is_recorded_and_the_run_continues():
    def picky(x):
        if x == 3:
            raise RuntimeError("synthetic failure on frame 3")
        return x

    run = Pipeline([Stage("picky", picky), Stage("after", lambda x: x)]).run(range(10))
    fr = run.frame_outcomes.set_index("index")
    assert fr.loc[3, "outcome"] == "failed" and fr.loc[3, "stage"] == "picky"
    assert "RuntimeError: synthetic failure on frame 3" in fr.loc[3, "error"]
    assert (fr.drop(3)["outcome"] == "done").all()
    # the failed frame never reached the next stage
    assert 3 not in set(run.events.loc[run.events["stage"] == "after", "frame"])


def test_on_error_stop_reraises_once_keeps_the_partial_run_and_leaks_no_thread():
    def boom(x):
        if x == 5:
            raise ZeroDivisionError("synthetic")
        time.sleep(0.001)
        return x

    pipe = Pipeline([Stage("boom", boom), Stage("slow", lambda x: time.sleep(0.001) or x)],
                    on_error="stop")
    with pytest.raises(ZeroDivisionError) as info:
        pipe.run(range(1000))
    run = info.value.pipeline_run
    assert run is pipe.last_run
    assert run.frame_outcomes.set_index("index").loc[5, "outcome"] == "failed"
    assert len(run.frame_outcomes) < 1000
    pipe.close()
    assert _threads_after_leaving() == []


def test_keyboard_interrupt_in_a_stage_stops_cleanly():
    def interrupt(x):
        if x == 2:
            raise KeyboardInterrupt
        return x

    pipe = Pipeline([Stage("s", interrupt)])
    with pytest.raises(KeyboardInterrupt):
        pipe.run(range(10_000))
    assert pipe.last_run is not None
    pipe.close()
    assert _threads_after_leaving() == []


def test_returning_none_drops_the_frame_with_a_reason():
    run = Pipeline([Stage("odd_only", lambda x: x if x % 2 else None), Stage("next", lambda x: x)]
                   ).run(range(10))
    fr = run.frame_outcomes.set_index("index")
    assert list(fr.loc[[0, 2, 4], "outcome"]) == ["dropped"] * 3
    assert fr.loc[0, "reason"] == "odd_only returned None"
    assert (fr.loc[[1, 3, 5], "outcome"] == "done").all()


def test_a_batch_stage_returning_the_wrong_number_fails_its_frames():
    run = Pipeline([Stage("bad", lambda b: b[:1], batch=4)], queue_size=8).run(range(8))
    failed = run.frame_outcomes[run.frame_outcomes["outcome"] == "failed"]
    assert len(failed) >= 1 and "outputs for" in failed["error"].iloc[0]


def test_drop_oldest_drops_at_the_source_queue_and_accounts_for_every_frame():
    slow = Stage("slow", lambda x: time.sleep(0.02) or x)
    run = Pipeline([slow], queue_size=2, overflow="drop_oldest").run(frames(range(40), fps=500))
    counts = run.outcomes.to_dict()
    assert counts.get("dropped", 0) > 0
    assert sum(counts.values()) == 40
    assert set(run.frame_outcomes.loc[run.frame_outcomes["outcome"] == "dropped", "reason"]) == {
        "queue full (drop_oldest)"}


def test_synthetic_cameras_are_paced_sources_each_with_its_frames():
    run = Pipeline([Stage("mean", lambda f: float(f.mean()))]).run(
        synthetic_cameras(3, fps=100, height=8, width=8), frames=5)
    fr = run.frame_outcomes
    assert sorted(fr["source"].unique()) == ["cam0", "cam1", "cam2"]
    for _, g in fr.groupby("source"):
        assert list(g["index"]) == list(range(5))
    # paced: frame i is created when it is due, i/fps after the start, one clock for all
    created = fr.sort_values(["source", "index"]).groupby("source")["created_ns"].apply(
        lambda s: np.diff(s.to_numpy()))
    for d in created:
        assert np.allclose(d, 1e7, rtol=0.05)
    assert run.meta["streams"][0]["fps"] == 100


@pytest.mark.parametrize("bad", [
    lambda: Pipeline([]),
    lambda: Pipeline([Stage("a", abs), Stage("a", abs)]),
    lambda: Pipeline([Stage("a", abs)], queue_size=0),
    lambda: Pipeline([Stage("a", abs)], overflow="spill"),
    lambda: Stage("a", abs, workers=0),
    lambda: Stage("a", abs, batch=0),
    lambda: Stage("a", abs, device="tpu"),
    lambda: synthetic_cameras(1, fps=0),
    lambda: frames([], fps=-1),
    lambda: Pipeline([Stage("a", abs)]).run(range(3), frames=0),
])
def test_bad_arguments_raise_value_errors(bad):
    with pytest.raises(ValueError) as info:
        bad()
    assert isinstance(info.value, HookmagicError) and isinstance(info.value, InvalidArgument)


def test_save_and_load_give_the_same_tables(tmp_path):
    run = Pipeline([Stage("a", lambda x: x, batch=3)]).run(range(20))
    path = run.save(tmp_path / "synthetic_run")
    assert path.suffix == ".hmpipe" and path.is_file()
    back = load_run(path)
    assert back.events.equals(run.events) and back.frame_outcomes.equals(run.frame_outcomes)
    assert back.meta["stages"] == run.meta["stages"]


def test_loading_something_else_says_what_it_is(tmp_path):
    bad = tmp_path / "synthetic.hmpipe"
    bad.write_bytes(b"not a zip")
    with pytest.raises(HookmagicError, match="synthetic.hmpipe"):
        load_run(bad)


def test_seconds_stops_reading_and_finishes_what_was_read():
    # synthetic cameras never end: the run stops reading after `seconds`, then drains
    run = Pipeline([Stage("a", lambda f: f.sum())]).run(
        synthetic_cameras(2, fps=200, height=4, width=4), seconds=0.3)
    counts = run.outcomes.to_dict()
    assert counts.get("done", 0) > 0 and set(counts) == {"done"}
    assert _threads_after_leaving() == []  # the pipeline was collected: its workers left


def test_observers_hear_every_stage_execution_and_frame():
    class Tally:
        def __init__(self):
            self.stage, self.frames, self.queues = {}, {}, 0

        def on_stage(self, stage, seconds, n):
            self.stage[stage] = self.stage.get(stage, 0) + n

        def on_frame(self, source, outcome):
            self.frames[outcome] = self.frames.get(outcome, 0) + 1

        def on_queues(self, depths):
            self.queues += 1

    tally = Tally()
    run = Pipeline([Stage("a", lambda x: None if x == 0 else x), Stage("b", lambda b: b, batch=2)]
                   ).run(range(9), observers=[tally])
    assert tally.stage == {"read": 9, "a": 9, "b": 8}
    assert tally.frames == run.outcomes.to_dict() == {"done": 8, "dropped": 1}


def test_a_stage_runs_inside_its_range_only_while_a_capture_records_ranges():
    from hookmagic.cupti.ranges import RECORDER

    seen: list[int] = []

    def probe(x):  # how many ranges are open on this worker thread while the stage runs
        seen.append(len(getattr(RECORDER.local, "stack", None) or []))
        return x

    def depths(pipe, recording):
        seen.clear()
        if recording:
            RECORDER.start()  # what hookmagic.capture() does when it starts
        try:
            run = pipe.run(range(5))
        finally:
            if recording:
                RECORDER.stop()
        assert run.outcomes.to_dict() == {"done": 5}
        return list(seen)

    on = Pipeline([Stage("probe", probe)])
    off = Pipeline([Stage("probe", probe)], instrument=False)
    assert depths(on, recording=True) == [1] * 5
    assert depths(on, recording=False) == [0] * 5  # nothing would record it: no range
    assert depths(off, recording=True) == [0] * 5


def test_a_pipeline_runs_one_source_at_a_time():
    entered, release = threading.Event(), threading.Event()

    def wait(x):
        entered.set()
        release.wait(5)
        return x

    pipe = Pipeline([Stage("wait", wait)])
    first = threading.Thread(target=pipe.run, args=(range(3),))
    first.start()
    try:
        assert entered.wait(5)
        with pytest.raises(InvalidArgument, match="already running"):
            pipe.run(range(3))
    finally:
        release.set()
        first.join(5)
    assert pipe.last_run.outcomes.to_dict() == {"done": 3}
    assert pipe.run(range(2)).outcomes.to_dict() == {"done": 2}  # free again afterwards
    pipe.close()
