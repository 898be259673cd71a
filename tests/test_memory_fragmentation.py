"""Fragmentation metrics against hand-worked layouts (synthetic event sequences)."""
import numpy as np
import pandas as pd
import pytest

from hookmagic.analysis.fragmentation import (
    fragmentation_over_time, free_blocks_at, layout_at, segment_fragmentation, would_fail,
)
from hookmagic.analysis.memory import (
    leak_report, memory_by, memory_over_time, peak_attribution,
)
from hookmagic.memory.replay import replay
from hookmagic.memory.torch_model import TorchCachingModel, TorchConfig
from hookmagic.trace import schema

MiB = 1 << 20
S1, S2 = 100 * MiB, 110 * MiB       # segment 2 starts exactly where segment 1 ends


def synthetic_events():
    """10 MiB segment: A [0,2) (100 B slack), B [2,5), C [5,6); B freed; then an adjacent
    2 MiB segment."""
    rows = [
        ("segment_alloc", S1, 10 * MiB, 10 * MiB, S1, "large", -1),
        ("alloc", S1, 2 * MiB, 2 * MiB - 100, S1, "large", 0),
        ("alloc", S1 + 2 * MiB, 3 * MiB, 3 * MiB, S1, "large", 1),
        ("alloc", S1 + 5 * MiB, MiB, MiB, S1, "large", 0),
        ("free_completed", S1 + 2 * MiB, 3 * MiB, 3 * MiB, S1, "large", 1),
        ("segment_alloc", S2, 2 * MiB, 2 * MiB, S2, "small", -1),
    ]
    f = pd.DataFrame(rows, columns=["action", "address", "size", "requested_size", "segment",
                                    "pool", "stack_id"])
    f["time_ns"] = np.arange(len(f)) * 1000
    return schema.conform("allocator_events", f)


def synthetic_stacks():
    return pd.DataFrame({"stack_id": [0, 0, 1], "depth": [0, 1, 0],
                         "filename": ["/home/u/train.py", "/x/site-packages/torch/nn.py",
                                      "/home/u/data.py"],
                         "function": ["step", "forward", "load"], "line": [10, 99, 5]})


def test_over_time_by_hand():
    f = fragmentation_over_time(synthetic_events())
    # after B is freed: free runs 3 MiB (B) and 4 MiB (tail) -> 1 - 4/7
    row = f.iloc[4]
    assert row["free"] == 7 * MiB and row["largest_free"] == 4 * MiB
    assert row["external"] == pytest.approx(1 - 4 / 7)
    assert row["internal_waste"] == 100
    # the adjacent segment's 2 MiB must not join the 4 MiB tail: 1 - 4/9, not 1 - 6/9
    last = f.iloc[5]
    assert last["free"] == 9 * MiB and last["largest_free"] == 4 * MiB
    assert last["external"] == pytest.approx(1 - 4 / 9)
    assert list(f["reserved"]) == [10 * MiB] * 5 + [12 * MiB]


def test_per_segment_by_hand():
    seg = segment_fragmentation(synthetic_events()).set_index("segment")
    assert seg.loc[S1, "free"] == 7 * MiB and seg.loc[S1, "largest_free"] == 4 * MiB
    assert seg.loc[S1, "external"] == pytest.approx(1 - 4 / 7)
    assert seg.loc[S1, "allocated"] == 3 * MiB and seg.loc[S1, "requested"] == 3 * MiB - 100
    assert seg.loc[S2, "free"] == 2 * MiB and seg.loc[S2, "external"] == 0.0


def test_layout_pieces():
    lay = layout_at(synthetic_events(), 5)
    s1 = lay[lay["segment"] == S1]
    assert list(s1["kind"]) == ["allocated", "slack", "free", "allocated", "free"]
    assert list(s1["size"]) == [2 * MiB - 100, 100, 3 * MiB, MiB, 4 * MiB]
    free = free_blocks_at(synthetic_events(), 5)
    assert list(free["whole_segment"]) == [False, False, True]


def test_memory_over_time_and_by_stack():
    ev = synthetic_events()
    mot = memory_over_time(ev)
    assert list(mot["allocated"]) == [0, 2 * MiB, 5 * MiB, 6 * MiB, 3 * MiB, 3 * MiB]
    assert mot["rounding"].iat[-1] == 100
    by = memory_by(ev, synthetic_stacks())
    # stack 0's user frame is train.py:10 (the torch frame is plumbing)
    assert by["train.py:10 step"].iat[-1] == 3 * MiB
    assert by["data.py:5 load"].max() == 3 * MiB and by["data.py:5 load"].iat[-1] == 0
    one = memory_by(ev, synthetic_stacks(), top=1)       # the rest is summed into "other"
    assert list(one.columns) == ["time_ns", "train.py:10 step", "other"]
    assert list(one["other"]) == list(by["data.py:5 load"])


def test_peak_and_leaks():
    ev = synthetic_events()
    peak = peak_attribution(ev, synthetic_stacks())
    assert peak.index == 3 and peak.allocated == 6 * MiB
    top = peak.by_stack.set_index("stack")
    assert top.loc["train.py:10 step", "bytes"] == 3 * MiB
    assert top.loc["data.py:5 load", "blocks"] == 1
    leaks = leak_report(ev, synthetic_stacks())
    assert list(leaks["stack"]) == ["train.py:10 step"] and leaks["bytes"].iat[0] == 3 * MiB


def test_would_fail_by_hand():
    ev = synthetic_events()
    assert would_fail(ev, 4 * MiB).fits_in_cache        # the 4 MiB tail
    r = would_fail(ev, 5 * MiB)                          # 7 MiB free but no 5 MiB run
    assert not r.fits_in_cache and r.fails is None and r.device_bytes == 20 * MiB
    # 2 MiB whole small segment is releasable, but it's not enough for a 20 MiB segment
    r = would_fail(ev, 5 * MiB, device_free=10 * MiB)
    assert r.fails and "although" in r.reason
    assert not would_fail(ev, 5 * MiB, device_free=19 * MiB).fails


@pytest.mark.parametrize("conf", [TorchConfig(), TorchConfig(expandable_segments=True)])
def test_tree_matches_layout_on_random_replay(conf):
    """The O(log n) segment tree against the direct layout at sampled moments."""
    rng = np.random.default_rng(1)
    rows, live, h = [], [], 0
    for i in range(3000):
        if live and rng.random() < 0.48:
            rows.append((i, "free", live.pop(int(rng.integers(len(live)))), 0, 0))
        else:
            size = int(rng.choice([rng.integers(1, MiB), rng.integers(MiB, 30 * MiB)]))
            rows.append((i, "alloc", h, size, int(rng.integers(2))))
            live.append(h)
            h += 1
    req = pd.DataFrame(rows, columns=["time_ns", "op", "handle", "size", "stream"])
    model = TorchCachingModel(conf, capacity=3 << 30)
    ev = replay(req, model).events
    f = fragmentation_over_time(ev)
    assert f["reserved"].max() == model.peak_reserved
    for i in np.linspace(0, len(ev) - 1, 25).astype(int):
        free = free_blocks_at(ev, int(i))
        assert f["largest_free"].iat[i] == (free["size"].max() if len(free) else 0)
        assert f["free"].iat[i] == free["size"].sum()
