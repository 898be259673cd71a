"""Stage statistics, bottleneck and what-if of hookmagic.pipeline.

The hand-made runs are synthetic (tables written out below, times in ms). The sleeping
pipelines are real runs whose stage durations are set by time.sleep, so their bottleneck is
known by construction."""
from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

from hookmagic.pipeline import Pipeline, PipelineRun, Stage, frames
from hookmagic.pipeline.export import chrome_trace
from hookmagic.pipeline.model import simulate

MS = 1_000_000


def synthetic_run(service_ms: list[float], n: int = 400, fps: float | None = None,
                  queue_size: int = 4) -> PipelineRun:
    """A synthetic run record whose every stage took exactly ``service_ms[k]`` (stage 0 = read).
    Only the durations matter to the model; the times are laid out back to back (the reads on
    their own line, one right after the other, as an unpaced reader does)."""
    rows, t = [], 0
    for f in range(n):
        for k, s in enumerate(service_ms):
            at = f * int(s * MS) if k == 0 else t
            rows.append((f, f"s{k}", k, 0, -1, 1, at, at, at + int(s * MS), at + int(s * MS),
                         -1, -1, "ok", ""))
            t += int(s * MS)
    ev = pd.DataFrame(rows, columns=["frame", "stage", "stage_index", "worker", "batch",
                                     "batch_size", "enqueue_ns", "start_ns", "end_ns", "put_ns",
                                     "gpu_start_ns", "gpu_end_ns", "status", "error"])
    fr = pd.DataFrame({"frame": range(n), "source": "synthetic", "index": range(n),
                       "created_ns": ev[ev["stage_index"] == 0]["start_ns"].to_numpy(),
                       "outcome": "done", "reason": "", "error": "", "stage": "s"})
    stages = [{"name": f"s{k}", "workers": 1, "batch": None, "device": "cpu",
               "kind": "source" if k == 0 else "stage"} for k in range(len(service_ms))]
    meta = {"pipeline": "synthetic", "stages": stages, "queue_size": queue_size,
            "overflow": "block", "streams": [{"name": "synthetic", "fps": fps}]}
    return PipelineRun(ev, fr, meta)


def test_model_of_a_deterministic_line_runs_at_its_slowest_stage():
    # a tandem line with blocking and constant service times: throughput 1 / max(service)
    run = synthetic_run([1.0, 2.0, 5.0, 3.0])
    sim = simulate(run)
    assert sim["fps"] == pytest.approx(200.0, rel=0.02)
    # the latency of frame i grows by (5 - 1) ms per frame until the queues fill, then is
    # bounded: frames wait in at most the queues and workers before the slow stage
    assert sim["p99_ms"] <= (1 + 4 + 1 + 4 + 1) * 5 + 1 + 2 + 3 + 1
    fast = simulate(run, {"s2": 5.0})  # now 1 ms: the 3 ms stage limits
    assert fast["fps"] == pytest.approx(1000 / 3, rel=0.02)


def test_model_of_a_paced_source_below_capacity_keeps_its_rate_and_latency():
    run = synthetic_run([0.1, 2.0, 3.0], n=300, fps=100.0)
    sim = simulate(run)
    assert sim["fps"] == pytest.approx(100.0, rel=0.02)
    # nothing waits: every frame takes the sum of the service times
    assert sim["p99_ms"] == pytest.approx(5.1, abs=0.01)


def test_stage_stats_on_a_synthetic_run_match_hand_computation():
    run = synthetic_run([1.0, 2.0, 3.0], n=10)
    st = run.stages()
    assert st.loc["s1", "p50_ms"] == pytest.approx(2.0)
    assert st.loc["s2", "mean_ms"] == pytest.approx(3.0)
    # laid out back to back: s2 busy 30 of 60 ms
    assert st.loc["s2", "utilisation"] == pytest.approx(0.5)
    assert st.loc["s1", "capacity_fps"] == pytest.approx(500.0)


def _sleeper(ms: float):
    def fn(x):
        time.sleep(ms / 1e3)
        return x
    return fn


class _SlowDecode:
    """A synthetic 'decoder' whose every frame takes ``ms`` to read."""

    def __init__(self, n: int, ms: float) -> None:
        self.n, self.ms = n, ms

    def __iter__(self):
        for i in range(self.n):
            time.sleep(self.ms / 1e3)
            yield i


@pytest.mark.parametrize("case, expected", [
    ({"decode": 6, "preprocess": 1, "infer": 2, "post": 0.5}, "read"),
    ({"decode": 0, "preprocess": 6, "infer": 2, "post": 0.5}, "preprocess"),
    ({"decode": 0, "preprocess": 1, "infer": 6, "post": 0.5}, "infer"),
])
def test_bottleneck_names_the_stage_known_by_construction(case, expected):
    stages = [Stage(s, _sleeper(ms)) for s, ms in case.items() if s != "decode"]
    src = _SlowDecode(60, case["decode"]) if case["decode"] else range(60)
    run = Pipeline(stages, queue_size=4).run(src)
    bn = run.bottleneck()
    assert bn.stage == expected, str(bn)
    assert f"{expected}: busy" in bn.evidence[0]
    if expected != "read":
        assert "full" in bn.evidence[1] and "blocked" in bn.evidence[1]
    assert "starved" in bn.evidence[-1]


def test_no_stage_saturated_when_a_slow_camera_paces_the_run():
    run = Pipeline([Stage("a", _sleeper(1))]).run(frames(range(20), fps=50))
    bn = run.bottleneck()
    assert bn.stage is None and "paces the run" in bn.verdict


def test_what_if_predicts_the_measured_effect_of_a_faster_stage():
    slow = Pipeline([Stage("pre", _sleeper(2)), Stage("infer", _sleeper(8)),
                     Stage("post", _sleeper(3))], queue_size=4).run(range(120))
    table = slow.what_if("infer", 4.0)
    fast = Pipeline([Stage("pre", _sleeper(2)), Stage("infer", _sleeper(2)),
                     Stage("post", _sleeper(3))], queue_size=4).run(range(120))
    measured = fast.throughput()
    predicted = table.iloc[-1]
    # the post stage (3 ms) limits once infer takes 2 ms: about 333 fps instead of 125.
    # Tolerance 15 % on a loaded CI machine; benchmarks/bench_pipeline.py records the error.
    assert predicted["fps"] == pytest.approx(measured["fps"], rel=0.15)
    assert predicted["p50_ms"] == pytest.approx(measured["p50_ms"], rel=0.25)
    assert table.loc["model: as measured", "fps"] == pytest.approx(
        table.loc["measured", "fps"], rel=0.1)
    assert list(table.index) == ["measured", "model: as measured", "model: infer ×4 faster"]


def test_what_if_rejects_unknown_stages_and_bad_speedups():
    run = synthetic_run([1, 2], n=5)
    with pytest.raises(ValueError, match="no stage 'nope'"):
        run.what_if("nope", 2)
    with pytest.raises(ValueError, match="speedup"):
        run.what_if("s1", 0)


def test_frames_table_and_queue_depth():
    run = Pipeline([Stage("a", _sleeper(1)), Stage("b", _sleeper(3))], queue_size=3).run(range(30))
    ft = run.frames
    assert len(ft) == 30 and (ft["outcome"] == "done").all()
    assert {"a_ms", "a_wait_ms", "b_ms", "b_wait_ms", "e2e_ms"} <= set(ft.columns)
    # e2e covers at least the stages' own time
    assert (ft["e2e_ms"] >= ft["a_ms"] + ft["b_ms"] - 1e-6).all()
    q = run.queue_depth("b")
    assert q["depth"].max() <= 3 + 1 and q["depth"].min() >= 0 and q["depth"].iloc[-1] == 0


def test_chrome_trace_has_a_track_per_worker_and_a_flow_per_frame(tmp_path):
    run = Pipeline([Stage("a", lambda x: x, workers=2), Stage("b", lambda x: x)]).run(range(10))
    doc = chrome_trace(run)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"read stream 0", "b worker 0"} <= names and any(n.startswith("a worker") for n in names)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 30
    starts = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    assert len(starts) == 20 and len({e["id"] for e in starts}) == 10
    path = run.to_chrome_trace(tmp_path / "synthetic.json")
    assert json.loads(open(path).read())["traceEvents"]


def test_csv_per_batch_has_the_classic_columns(tmp_path):
    run = Pipeline([Stage("preprocess", lambda x: x), Stage("infer", lambda b: b, batch=4),
                    Stage("postprocess", lambda x: x)], queue_size=8).run(range(16))
    path = run.to_csv(tmp_path / "synthetic.csv")
    table = pd.read_csv(path)
    assert list(table.columns) == ["batch", "frames", "read_ms", "preprocess_ms", "infer_ms",
                                   "postprocess_ms", "e2e_ms", "fps"]
    assert table["frames"].sum() == 16
    assert np.isfinite(table["fps"]).all()


def test_kernels_of_a_capture_join_to_the_frames_of_their_stage_execution():
    from types import SimpleNamespace

    from hookmagic.pipeline.analysis import batches, kernels_by_frame

    run = Pipeline([Stage("pre", lambda x: x), Stage("infer", _sleeper(1), batch=3)],
                   queue_size=8).run(range(12))
    # a synthetic capture: one range per stage execution on a clock 5 s ahead, and one kernel
    # inside each range, 100 µs after it starts
    offset = 5_000_000_000
    rows, kern = [], []
    rid = 1
    for stage in ("pre", "infer"):
        for b in batches(run, stage).itertuples():
            rows.append({"range_id": rid, "name": stage, "start_ns": b.start_ns + offset,
                         "end_ns": b.end_ns + offset})
            kern.append({"range_id": rid, "name": f"synthetic_{stage}_kernel",
                         "start_ns": b.start_ns + offset + 100_000,
                         "end_ns": b.start_ns + offset + 200_000})
            rid += 1
    trace = SimpleNamespace(ranges=pd.DataFrame(rows), kernels=pd.DataFrame(kern))
    k = kernels_by_frame(run, trace)
    # every frame has its pre kernel and its batch's infer kernel, on the run's clock
    assert len(k) == 24 and set(k["frame"]) == set(range(12))
    ev = run.events.set_index(["frame", "stage"])
    for r in k.itertuples():
        assert r.start_ns == ev.loc[(r.frame, r.stage), "start_ns"] + 100_000
        assert r.name == f"synthetic_{r.stage}_kernel"
    fig = run.gantt(trace=trace)
    assert any(t.name == "kernels (CUPTI)" for t in fig.data)


def test_parquet_exports_read_back(tmp_path):
    run = Pipeline([Stage("infer", lambda b: b, batch=4)], queue_size=8).run(range(10))
    frames = pd.read_parquet(run.to_parquet(tmp_path / "synthetic_frames.parquet"))
    assert len(frames) == 10 and "e2e_ms" in frames
    events = pd.read_parquet(run.to_parquet(tmp_path / "synthetic_events.parquet", per="event"))
    assert events.equals(run.events)
    with pytest.raises(ValueError):
        run.to_parquet(tmp_path / "x.parquet", per="nope")


def synthetic_batched_run(period_ms: float, batches: list[list[int]], starts_ms: list[float],
                          service_ms: float, batch: int, wait_ms: float = 0.0,
                          device: str = "cpu", read_ms: float = 0.1) -> PipelineRun:
    """A synthetic run: a source paced at one frame per ``period_ms`` (each read ``read_ms``),
    then one batch stage whose executions ran ``batches`` (lists of frames) from
    ``starts_ms``, each taking ``service_ms``."""
    n = sum(len(b) for b in batches)
    rows = []
    rd = int(read_ms * MS)
    for f in range(n):
        t = int(f * period_ms * MS)
        rows.append((f, "read", 0, 0, -1, 1, t, t, t + rd, t + rd, -1, -1, "ok", ""))
    for b, (frames_, start) in enumerate(zip(batches, starts_ms)):
        s, e = int(start * MS), int((start + service_ms) * MS)
        for f in frames_:
            rows.append((f, "infer", 1, 0, b, len(frames_), int(f * period_ms * MS) + rd,
                         s, e, e, -1, -1, "ok", ""))
    ev = pd.DataFrame(rows, columns=["frame", "stage", "stage_index", "worker", "batch",
                                     "batch_size", "enqueue_ns", "start_ns", "end_ns", "put_ns",
                                     "gpu_start_ns", "gpu_end_ns", "status", "error"])
    fr = pd.DataFrame({"frame": range(n), "source": "synthetic", "index": range(n),
                       "created_ns": [int(f * period_ms * MS) for f in range(n)],
                       "outcome": "done", "reason": "", "error": "", "stage": "infer"})
    stages = [{"name": "read", "workers": 1, "batch": None, "device": "cpu", "kind": "source"},
              {"name": "infer", "workers": 1, "batch": batch, "batch_wait_ms": wait_ms,
               "device": device, "kind": "stage"}]
    meta = {"pipeline": "synthetic", "stages": stages, "queue_size": 16, "overflow": "block",
            "streams": [{"name": "synthetic", "fps": 1000 / period_ms}]}
    return PipelineRun(ev, fr, meta)


def test_model_waits_for_a_batch_to_fill_as_the_runner_does():
    # synthetic: a frame every 10 ms, batch 4 with a 25 ms wait: the worker takes a frame, two
    # more arrive within 25 ms, the batch of 3 runs at the deadline for 1 ms. Frames wait 25, 15
    # and 5 ms, so their latency is 0.1 + {25, 15, 5} + 1 ms: p50 16.1 ms (1.1 ms without the
    # wait), at the source's 100 fps
    batches = [[3 * i, 3 * i + 1, 3 * i + 2] for i in range(60)]
    starts = [30 * i + 0.1 + 25 for i in range(60)]
    run = synthetic_batched_run(10.0, batches, starts, 1.0, batch=4, wait_ms=25.0)
    sim = simulate(run)
    assert sim["fps"] == pytest.approx(100.0, rel=0.02)
    assert sim["p50_ms"] == pytest.approx(16.1, abs=0.6)
    assert sim["p99_ms"] == pytest.approx(26.1, abs=0.6)


@pytest.mark.parametrize("device, expected_ms", [("cuda", 8.0), ("cpu", 2.0)])
def test_a_batch_size_never_measured_is_scaled_by_the_stage_s_cost_line(device, expected_ms):
    # synthetic: measured only full batches of 4 taking 8 ms (frames queued, 2 ms apart). Paced
    # at one frame per 20 ms the model runs batches of 1: a GPU stage's smaller batch costs the
    # measured 8 ms, a CPU stage's 8 / 4 = 2 ms (latency = 0.1 ms read + that)
    batches = [[4 * i + j for j in range(4)] for i in range(30)]
    starts = [8 * 4 * i / 4 + 6 for i in range(30)]
    run = synthetic_batched_run(20.0, batches, starts, 8.0, batch=4, device=device)
    sim = simulate(run)
    assert sim["p50_ms"] == pytest.approx(0.1 + expected_ms, abs=0.2)


def test_batch_cost_is_the_line_through_the_measured_sizes():
    from hookmagic.pipeline.analysis import batch_cost
    sizes = np.array([8] * 20 + [4] * 5 + [2] * 3)
    dur = 0.002 + 0.0005 * sizes  # synthetic: 2 ms + 0.5 ms a frame, exactly
    a, b = batch_cost(sizes, dur, gpu=True)
    assert (a, b) == (pytest.approx(0.002), pytest.approx(0.0005))
    assert batch_cost(np.array([8, 8]), np.array([0.01, 0.01]), gpu=True) == (0.01, 0.0)
    assert batch_cost(np.array([8, 8]), np.array([0.01, 0.01]), gpu=False) == (0.0, 0.00125)


def test_a_batch_stage_busy_on_partial_batches_is_not_the_bottleneck():
    # synthetic: reads take the whole 2 ms between frames; the GPU batch stage runs batches of
    # 2 frames (what arrived), 4 ms each whatever their size, so it is busy all the time too —
    # but full batches of 16 would take it 4 ms per 16 frames: it uses an eighth of that
    batches = [[2 * i, 2 * i + 1] for i in range(100)]
    starts = [4 * i + 2 for i in range(100)]
    run = synthetic_batched_run(2.0, batches, starts, 4.0, batch=16, device="cuda", read_ms=2.0)
    st = run.stages()
    assert st.loc["infer", "utilisation"] > 0.95 and st.loc["read", "utilisation"] > 0.95
    assert st.loc["infer", "load"] == pytest.approx(0.125, abs=0.01)
    bn = run.bottleneck()
    assert bn.stage == "read"
    assert any("partial batches (mean 2.0 of 16)" in e for e in bn.evidence)
