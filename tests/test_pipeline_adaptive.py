"""Adaptive batch size: grows under the SLO and the memory budget, splits and retries on
out-of-memory without losing frames, shrinks over the SLO. The "model" here is synthetic: it
sleeps per frame and raises a synthetic OutOfMemoryError above a known batch size; its
"memory" is a synthetic counter of bytes per frame."""
from __future__ import annotations

import time

import pytest

from hookmagic.pipeline import Pipeline, Stage
from hookmagic.pipeline.adaptive import AdaptiveBatch, is_out_of_memory


class OutOfMemoryError(RuntimeError):
    """Synthetic stand-in named like torch.cuda.OutOfMemoryError."""


def synthetic_model(oom_above: int, ms_per_frame: float = 0.2):
    def fn(batch):
        if len(batch) > oom_above:
            raise OutOfMemoryError(f"synthetic: batch {len(batch)} does not fit")
        time.sleep(ms_per_frame * len(batch) / 1e3)
        return [x * 2 for x in batch]
    return fn


def test_oom_splits_and_retries_without_losing_frames_and_settles_on_the_largest_fit():
    ctl = AdaptiveBatch(synthetic_model(oom_above=6), slo_ms=1000, max_batch=32, window=2,
                        memory=None)
    out = []
    run = Pipeline([Stage("infer", ctl, batch=32), Stage("sink", lambda y: out.append(y) or y)],
                   queue_size=64).run(range(400))
    assert run.outcomes.to_dict() == {"done": 400}
    assert sorted(out) == [2 * i for i in range(400)]
    d = ctl.decisions
    assert (d["action"] == "oom_split").any()
    assert "out of memory at batch 8" in d.loc[d["action"] == "oom_split", "reason"].iloc[0]
    # it never grows back to a size known to fail, and ends at the largest size that fits
    assert ctl.ceiling == 6 and ctl.size == 6
    assert max(n for n, _ in ctl.chunks) == 6


def test_grows_while_under_the_slo_and_shrinks_over_it():
    # a synthetic clock: each frame "takes" 5 ms, so the test does not depend on this
    # machine's timing. SLO 30 ms: sizes 1, 2, 4 fit (20 ms), 8 (40 ms) does not
    now = [0.0]

    def fn(batch):
        now[0] += 0.005 * len(batch)
        return batch

    ctl = AdaptiveBatch(fn, slo_ms=30, max_batch=16, window=3, headroom=0.0, memory=None,
                        clock=lambda: now[0])
    Pipeline([Stage("infer", ctl, batch=16)], queue_size=32).run(range(200))
    d = ctl.decisions
    grown = d.loc[d["action"] == "grow", "size_to"].tolist()
    assert grown[:3] == [2, 4, 8]
    shrink = d[d["action"] == "shrink"]
    assert not shrink.empty and (shrink["size_from"] == 8).all()
    assert "over the 30 ms SLO" in shrink["reason"].iloc[0]
    assert ctl.size in (4, 8)  # it probes the knee: 4 fits, 8 does not


def test_memory_budget_stops_growth():
    peak = {"bytes": 0}

    def fn(batch):
        peak["bytes"] = max(peak["bytes"], 100 * len(batch))  # synthetic: 100 bytes per frame
        return batch

    ctl = AdaptiveBatch(fn, slo_ms=1000, memory_budget=450, max_batch=32, window=2,
                        headroom=0.0, memory=(lambda: peak["bytes"], lambda: peak.update(bytes=0)))
    Pipeline([Stage("infer", ctl, batch=32)], queue_size=64).run(range(200))
    assert ctl.size == 4  # 8 frames would use 800 > 450 bytes
    shrink = ctl.decisions[ctl.decisions["action"] == "shrink"]
    assert not shrink.empty and "over the 450 byte budget" in shrink["reason"].iloc[0]


def test_a_single_frame_that_runs_out_of_memory_fails_only_that_frame():
    ctl = AdaptiveBatch(synthetic_model(oom_above=0), slo_ms=10, memory=None)
    run = Pipeline([Stage("infer", ctl, batch=4)]).run(range(5))
    assert run.outcomes.to_dict() == {"failed": 5}
    assert "synthetic: batch 1 does not fit" in run.frame_outcomes["error"].iloc[0]


def test_out_of_memory_detection_and_bad_arguments():
    assert is_out_of_memory(OutOfMemoryError("x"))
    assert is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_out_of_memory(ValueError("out of memory"))
    with pytest.raises(ValueError):
        AdaptiveBatch(lambda b: b, slo_ms=0)
    with pytest.raises(ValueError):
        AdaptiveBatch(lambda b: b, slo_ms=1, start=5, max_batch=4)
