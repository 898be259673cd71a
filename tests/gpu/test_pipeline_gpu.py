"""hookmagic.pipeline on a real GPU: CUDA-event times of GPU stages, and each stage's kernels
grouped under its range by a live capture."""
from __future__ import annotations

import numpy as np
import pytest

import hookmagic
from hookmagic.pipeline import Pipeline, Stage

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())


def _pipe():
    w = torch.randn(1024, 1024, device="cuda")

    def upload(x):
        return torch.from_numpy(x).to("cuda")

    def matmul(batch):
        y = torch.stack(batch) @ w
        for _ in range(10):
            y = y @ w / 32
        return y

    return Pipeline([Stage("upload", upload, device="cuda"),
                     Stage("matmul", matmul, batch=4, device="cuda"),
                     Stage("download", lambda y: y.cpu().numpy(), device="cuda")], queue_size=8)


def test_gpu_stages_have_cuda_event_times_inside_their_host_span():
    frames = [np.random.default_rng(i).standard_normal((256, 1024), dtype=np.float32)
              for i in range(32)]
    run = _pipe().run(frames)
    assert run.outcomes.to_dict() == {"done": 32}
    ev = run.events[run.events["stage"] != "read"]
    # executions are timed at least INTERVAL_S apart per worker: each worker's first one always
    assert (ev.groupby("stage")["gpu_start_ns"].max() > 0).all()
    ev = ev[ev["gpu_start_ns"] >= 0]
    assert (ev["gpu_start_ns"] > 0).all() and (ev["gpu_end_ns"] >= ev["gpu_start_ns"]).all()
    # the GPU's time of a stage is no longer than the host's time around it (the host waited for
    # the end event); the reference event places them on one clock within a millisecond
    gpu = ev["gpu_end_ns"] - ev["gpu_start_ns"]
    host = ev["end_ns"] - ev["start_ns"]
    assert (gpu <= host + 50_000).all()
    assert (ev["gpu_start_ns"] >= ev["start_ns"] - 1_000_000).all()
    assert (ev["gpu_end_ns"] <= ev["end_ns"] + 1_000_000).all()
    st = run.stages()
    assert st.loc["matmul", "gpu_p50_ms"] > 0


def test_a_capture_around_a_run_groups_each_stage_s_kernels_under_its_range():
    frames = [np.ones((256, 1024), np.float32)] * 16
    pipe = _pipe()
    pipe.run(frames[:4])  # warm-up: cuBLAS handles, allocator
    with hookmagic.capture() as trace:
        run = pipe.run(frames)
    ranges = trace.ranges
    names = set(ranges["name"])
    assert {"upload", "matmul", "download"} <= names
    k = trace.kernels.merge(ranges[["range_id", "name"]].rename(columns={"name": "range"}),
                            on="range_id", how="left")
    in_matmul = k[k["range"] == "matmul"]
    assert len(in_matmul) >= 11 * (16 // 4)  # 11 GEMMs per batch of 4
    batches = run.events[run.events["stage"] == "matmul"]["batch"].nunique()
    assert (ranges["name"] == "matmul").sum() == batches


def test_runs_reuse_their_worker_threads_and_time_executions_spaced_in_time():
    import threading

    pipe = Pipeline([Stage("inc", lambda x: x + 1, device="cuda"),
                     Stage("dbl", lambda x: x * 2, device="cuda")], queue_size=4)
    base = torch.zeros(16, device="cuda")
    first = pipe.run([base] * 50)
    names = {t.ident for t in threading.enumerate() if t.name.startswith(("hookmagic-inc-",
                                                                         "hookmagic-dbl-"))}
    second = pipe.run([base] * 5000)
    assert {t.ident for t in threading.enumerate()
            if t.name.startswith(("hookmagic-inc-", "hookmagic-dbl-"))} == names
    from hookmagic.pipeline.cuda_events import INTERVAL_S
    for run in (first, second):
        assert run.meta["gpu_timing"] == "CUDA events (driver API)"
        ev = run.events[run.events["stage"] != "read"]
        for (_, _), w in ev.groupby(["stage", "worker"]):
            w = w.sort_values("start_ns")
            timed = (w["gpu_start_ns"] >= 0).to_numpy()
            start = w["start_ns"].to_numpy()
            assert timed[0] and (w.loc[~timed.astype(bool), "gpu_end_ns"] == -1).all()
            # an execution is timed iff it starts INTERVAL_S or more after the start of the
            # worker's previous timed one
            last = start[0]
            for t, was_timed in zip(start[1:], timed[1:]):
                assert was_timed == (t - last >= INTERVAL_S * 1e9)
                if was_timed:
                    last = t
        ev = ev[ev["gpu_start_ns"] >= 0]
        assert (ev["gpu_end_ns"] >= ev["gpu_start_ns"]).all()
        # the host waited for the stream after each execution: the GPU's end precedes the
        # host's end on one clock (within the reference event's placement, 1 ms)
        assert (ev["gpu_end_ns"] <= ev["end_ns"] + 1_000_000).all()
    off = Pipeline(pipe.stages, instrument=False).run([base] * 20)
    assert (off.events["gpu_start_ns"] == -1).all()
    assert off.meta["gpu_timing"] == "off (instrument=False)"
    pipe.close()
