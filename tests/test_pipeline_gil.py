"""The GIL in the pipeline model: the shared resource against CPython's switching rules, the
model against queueing theory on synthetic runs, and against real runs of real Python stages
(loops that hold the GIL, sleeps that release it, and both).

The synthetic runs are written out below (times in ms); the real ones are run here."""
from __future__ import annotations

import heapq
import time

import numpy as np
import pandas as pd
import pytest

from hookmagic.common.errors import InvalidArgument
from hookmagic.pipeline import Pipeline, PipelineRun, Stage
from hookmagic.pipeline.gil import Gil
from hookmagic.pipeline.model import has_cpu_times, simulate

MS = 1_000_000


def _loop(n: int):
    """A stage that runs ``n`` iterations of a Python loop: it holds the GIL throughout."""
    def fn(x):
        for _ in range(n):
            pass
        return x
    return fn


def _loops_per_ms() -> float:
    n = 200_000
    t = time.thread_time()
    for _ in range(n):
        pass
    return n / max(time.thread_time() - t, 1e-9) / 1e3


def _as_run(rows: list[tuple], n: int, stages: int, **meta: float) -> PipelineRun:
    """A SYNTHETIC run of ``stages`` one-worker CPU stages (stage 0 the source) and ``n`` frames
    from its event rows (frame, stage, stage_index, worker, batch, batch_size, enqueue_ns,
    start_ns, end_ns, put_ns, gpu_start_ns, gpu_end_ns, status, error, cpu_ns)."""
    ev = pd.DataFrame(rows, columns=["frame", "stage", "stage_index", "worker", "batch",
                                     "batch_size", "enqueue_ns", "start_ns", "end_ns", "put_ns",
                                     "gpu_start_ns", "gpu_end_ns", "status", "error", "cpu_ns"])
    fr = pd.DataFrame({"frame": range(n), "source": "synthetic", "index": range(n),
                       "created_ns": ev[ev["stage_index"] == 0]["start_ns"].to_numpy(),
                       "outcome": "done", "reason": "", "error": "", "stage": "s"})
    info = {"pipeline": "synthetic", "queue_size": 4, "overflow": "block",
            "streams": [{"name": "synthetic", "fps": None}], **meta,
            "stages": [{"name": f"s{k}", "workers": 1, "batch": None, "device": "cpu",
                        "kind": "source" if k == 0 else "stage"} for k in range(stages)]}
    return PipelineRun(ev, fr, info)


def synthetic_run(stages: list[tuple[float, float]], n: int = 300) -> PipelineRun:
    """A synthetic run whose stage k took ``held + free`` ms per frame, ``held`` of them on the
    thread's CPU (stage 0 = read). Only the durations matter to the model; the reads are laid
    out on their own line, one right after the other (as an unpaced reader does), the other
    stages one frame after the other."""
    rows, t = [], 0
    for f in range(n):
        for k, (held, free) in enumerate(stages):
            d = int((held + free) * MS)
            at = f * d if k == 0 else t
            rows.append((f, f"s{k}", k, 0, -1, 1, at, at, at + d, at + d, -1, -1, "ok", "",
                         int(held * MS)))
            t += d
    return _as_run(rows, n, len(stages), switch_interval_s=0.005)


class _Clock:
    """A minimal event loop for :class:`Gil` alone."""

    def __init__(self) -> None:
        self.heap: list = []
        self.n = 0
        self.gil = Gil(0.005, self.push)

    def push(self, t, kind, data) -> None:
        self.n += 1
        heapq.heappush(self.heap, (t, self.n, kind, data))

    def run(self) -> None:
        while self.heap:
            t, _, _, data = heapq.heappop(self.heap)
            self.gil.event(t, data)


def test_a_waiting_thread_takes_the_gil_after_the_switch_interval():
    # CPython: a thread that waits 5 ms (sys.getswitchinterval) while another keeps running
    # Python gets it at its next bytecode boundary; the other then waits for it in turn
    c, done = _Clock(), {}
    c.gil.request(0.0, 0.012, lambda t: done.setdefault("a", t), who=0)
    c.push(0.001, "gil", (-1, "noop"))  # a stale event: ignored
    c.gil.request(0.001, 0.001, lambda t: done.setdefault("b", t), who=1)
    c.run()
    assert done["b"] == pytest.approx(0.001 + 0.005 + 0.001)
    assert done["a"] == pytest.approx(0.007 + (0.012 - 0.006))
    assert c.gil.waited[0] == pytest.approx(0.001)  # switched out: waits inside its execution
    assert 1 not in c.gil.waited  # its wait before it began is not inside an execution


def test_a_thread_that_keeps_running_python_keeps_the_gil():
    c, order = _Clock(), []

    def first(t):
        order.append(("a1", t))
        c.gil.request(t, 0.002, lambda t2: order.append(("a2", t2)), who=0)

    c.gil.request(0.0, 0.002, first, who=0)
    c.gil.request(0.0005, 0.001, lambda t: order.append(("b", t)), who=1)
    c.run()
    assert [k for k, _ in order] == ["a1", "a2", "b"]
    assert order[-1][1] == pytest.approx(0.005)


def test_pure_python_stages_share_one_gil():
    # every stage holds the GIL all its time: one frame at a time through all of them
    run = synthetic_run([(0.5, 0.0), (2.0, 0.0), (3.0, 0.0), (1.0, 0.0)])
    assert has_cpu_times(run)
    assert simulate(run, gil=True)["fps"] == pytest.approx(1000 / 6.5, rel=0.03)
    # independent servers: the slowest stage alone
    assert simulate(run)["fps"] == pytest.approx(1000 / 3.0, rel=0.03)


def test_gil_free_stages_run_side_by_side():
    run = synthetic_run([(0.0, 0.5), (0.0, 2.0), (0.0, 3.0), (0.0, 1.0)])
    assert simulate(run, gil=True)["fps"] == pytest.approx(1000 / 3.0, rel=0.03)


def test_a_stage_that_releases_the_gil_overlaps_the_others_python():
    # s1 holds 1 ms then sleeps 3 ms; s2 holds 2 ms: the GIL is busy 3 of every 4 ms and s1's
    # 4 ms cycle limits (s2's Python runs while s1 sleeps)
    run = synthetic_run([(0.0, 0.2), (1.0, 3.0), (2.0, 0.0)])
    assert simulate(run, gil=True)["fps"] == pytest.approx(250.0, rel=0.04)
    # s2 made 2x faster changes nothing; s1 made 2x faster (0.5 ms held, 1.5 ms asleep: a
    # 2 ms cycle) makes the GIL the limit, 0.5 + 2 ms held per frame -> 400 fps
    assert simulate(run, {"s2": 2.0}, gil=True)["fps"] == pytest.approx(250.0, rel=0.04)
    assert simulate(run, {"s1": 2.0}, gil=True)["fps"] == pytest.approx(400.0, rel=0.04)


def test_runs_record_the_cpu_time_of_each_execution():
    per_ms = _loops_per_ms()
    run = Pipeline([Stage("loop", _loop(int(2 * per_ms))),
                    Stage("sleep", lambda x: (time.sleep(0.003), x)[1])]).run(range(30))
    ev = run.events
    share = {s: (d["cpu_ns"].sum() / (d["end_ns"] - d["start_ns"]).sum())
             for s, d in ev[ev["stage"] != "read"].groupby("stage")}
    # a Python loop is CPU (it may also wait for the GIL or a core); a sleep is not
    assert share["loop"] > 0.3
    assert share["sleep"] < 0.1
    assert run.meta["switch_interval_s"] == pytest.approx(__import__("sys").getswitchinterval())


def test_a_run_without_cpu_times_is_modelled_as_independent_servers_only():
    run = synthetic_run([(0.5, 0.0), (2.0, 0.0), (3.0, 0.0)])
    old = PipelineRun(run.events.drop(columns=["cpu_ns"]), run.frame_outcomes, run.meta)
    assert not has_cpu_times(old)
    assert simulate(old)["fps"] == pytest.approx(1000 / 3.0, rel=0.03)
    with pytest.raises(InvalidArgument, match="cpu_ns"):
        simulate(old, gil=True)


def test_the_gil_model_follows_real_python_stages_where_independent_servers_do_not():
    # three stages of Python loops: they take turns on the GIL, so the pipeline runs at about
    # 1 / (sum of their times), not 1 / (the slowest)
    per_ms = _loops_per_ms()
    stages = [("pre", 1.5), ("infer", 3.0), ("post", 1.5)]

    def pipe(light: float = 1.0):
        return Pipeline([Stage(n, _loop(int(ms * per_ms / (light if n == "infer" else 1))))
                         for n, ms in stages], queue_size=4)

    heavy = pipe()
    heavy.run(range(10))
    run = heavy.run(range(150))
    table = run.what_if("infer", 2.0, gil=True)
    old = run.what_if("infer", 2.0)
    lighter = pipe(2.0)
    lighter.run(range(10))
    light = lighter.run(range(150)).throughput()["fps"]
    measured = table.loc["measured", "fps"]
    assert table.iloc[1]["fps"] == pytest.approx(measured, rel=0.35)
    # without the GIL the model runs the three stages side by side: further off (how far
    # each is depends on the machine's load; lab/pipeline/pipeline_gil.py measures it)
    assert abs(old.iloc[2]["fps"] / light - 1) > abs(table.iloc[2]["fps"] / light - 1)
    assert np.isfinite(table["fps"]).all()


def _line(durations_ms: list[list[float]], starts_ms: list[list[float]] | None = None
          ) -> PipelineRun:
    """A synthetic run: stage k's i-th execution took ``durations_ms[k][i]`` and began at
    ``starts_ms[k][i]`` (default: back to back from 0); one frame per execution."""
    n = len(durations_ms[0])
    rows = []
    for k, durs in enumerate(durations_ms):
        t = 0.0
        for f, d in enumerate(durs):
            at = starts_ms[k][f] if starts_ms else t
            a, e = int(at * MS), int((at + d) * MS)
            rows.append((f, f"s{k}", k, 0, -1, 1, a, a, e, e, -1, -1, "ok", "", 0))
            t = at + d
    return _as_run(rows, n, len(durations_ms))


def test_rare_long_executions_are_replayed_as_often_as_they_happened():
    # a read-bound line (reads 2 ms, the stage 1 ms) whose reader stalled 3 times for 200 ms
    # (a decoder reopening its file): it takes the sum of its reads, 300 x 2 ms + 3 x 198 ms
    reads = [2.0] * 300
    for i in (50, 150, 250):
        reads[i] = 200.0
    run = _line([reads, [1.0] * 300])
    expected = 300 / (sum(reads) / 1e3)
    for seed in range(4):  # whatever the order the model draws them in
        assert simulate(run, seed=seed)["fps"] == pytest.approx(expected, rel=0.01)


def test_a_stall_that_hits_two_stages_at_once_is_counted_once():
    # synthetic: reads 2 ms, the stage 1 ms; at 100 ms both stalled 150 ms together (the
    # stage's stalled execution overlaps the read's). The line loses the stall once:
    # 300 reads of 2 ms plus one 148 ms excess of the stalled read
    n = 300
    reads = [2.0] * n
    reads[50] = 150.0
    starts_r = list(np.cumsum([0.0] + reads[:-1]))
    work = [1.0] * n
    work[49] = 150.0
    starts_w = [s + d for s, d in zip(starts_r, reads)]  # each right after its read
    starts_w[49] = starts_r[50]  # stalled over the same 150 ms as read 50
    run = _line([reads, work], [starts_r, starts_w])
    expected = n / ((sum(reads)) / 1e3)
    assert simulate(run)["fps"] == pytest.approx(expected, rel=0.02)
