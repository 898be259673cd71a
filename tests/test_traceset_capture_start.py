"""The first captured step of the real 2-GPU DDP recordings (2x H200): a rank that began its
capture later must not be reported late by that much. Checked against the independent
reference each rank wrote itself: the sleeps it really took (time.perf_counter around
time.sleep), in truth_rank=<N>.json beside the traces."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import hookmagic

pytest.importorskip("duckdb")
RUNS = Path(__file__).resolve().parents[1] / "notebooks" / "recordings" / "multirank"


@pytest.mark.parametrize("job", ["ddp_slow0_50ms", "ddp_slow1_20ms"])
def test_every_captured_step_names_the_slowed_rank_and_its_sleep(job):
    truth = {r: json.loads((RUNS / job / f"truth_rank={r}.json").read_text()) for r in (0, 1)}
    slow = truth[0]["slow_rank"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = hookmagic.load_many(RUNS / job)
    with ts:
        st = ts.stragglers()
    assert st["step"].tolist() == [6, 7, 8, 9]
    assert (st["straggler_rank"] == slow).all()
    assert (st["cause"] == "host").all()           # the first captured step included
    slept = [truth[slow]["sleep_s"][step] * 1e9 for step in st["step"]]
    for late, sleep in zip(st["lateness_ns"], slept):
        assert sleep < late < 1.15 * sleep          # never the capture's start on top
    first = st.iloc[0]
    # the slowed rank began capturing tens of ms after the other: reported, not blamed
    assert first["capture_start_ns"] > 10_000_000
    assert (st["capture_start_ns"].iloc[1:] == 0).all()
