"""What-if replay and the memory views (synthetic request sequences)."""
import pandas as pd

from hookmagic.analysis.fragmentation import fragmentation_over_time
from hookmagic.analysis.memory import memory_by, memory_over_time
from hookmagic.memory.allocators import standard_models
from hookmagic.memory.replay import recommend, replay, requests_from_events, what_if
from hookmagic.memory.torch_model import TorchCachingModel
from hookmagic.views.memory_map import memory_map_figure
from hookmagic.views.memory_timeline import (
    fragmentation_figure, memory_timeline_figure, what_if_figure,
)

MiB = 1 << 20


def synthetic_requests():
    """Growing activations freed in the middle: the default allocator strands 20 MiB
    segments that expandable segments would reuse."""
    rows, h, t = [], 0, 0
    for step in range(6):
        handles = []
        for k in range(4):
            rows.append((t, "alloc", h, (3 + step + k) * MiB + 123, 0, k))
            handles.append(h)
            h, t = h + 1, t + 1000
        for hh in handles[::2]:
            rows.append((t, "free", hh, 0, 0, -1))
            t += 1000
    return pd.DataFrame(rows, columns=["time_ns", "op", "handle", "size", "stream", "stack_id"])


def test_requests_round_trip_through_events():
    req = synthetic_requests()
    first = replay(req, TorchCachingModel())
    again = requests_from_events(first.events)
    assert (again["op"] == "alloc").sum() == (req["op"] == "alloc").sum()
    assert list(again.loc[again["op"] == "alloc", "size"]) == list(req.loc[req["op"] == "alloc",
                                                                           "size"])
    assert replay(again, TorchCachingModel()).peak_reserved == first.peak_reserved


def test_what_if_table_and_recommendation():
    req = synthetic_requests()
    table = what_if(req, standard_models())
    assert set(table["model"]) >= {"pytorch default", "pytorch expandable_segments:True",
                                   "best-fit (ideal heap)", "cupy pool"}
    row = table.set_index("model")
    live_peak = row.loc["pytorch default", "peak_requested"]
    # no allocator can reserve less than the peak of live requested bytes
    assert (table["peak_reserved"] >= live_peak).all()
    assert row.loc["pytorch default", "saved_bytes"] == 0
    assert row.loc["best-fit (ideal heap)", "peak_reserved"] <= row.loc["pytorch default",
                                                                        "peak_reserved"]
    # the stranded segments (see synthetic_requests) are what expandable segments reuse
    rec = recommend(table)
    best_torch = table[table["model"].str.startswith("pytorch")].iloc[0]
    assert rec.setting == best_torch["setting"] == "expandable_segments:True"
    assert rec.saved_bytes == row.loc["pytorch default", "peak_reserved"] - best_torch[
        "peak_reserved"] > 0
    assert rec.text.startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def test_no_recommendation_when_no_setting_saves():
    # one 1 MiB tensor: every PyTorch setting reserves the same 2 MiB segment
    req = pd.DataFrame([(0, "alloc", 0, MiB, 0, -1), (1000, "free", 0, 0, 0, -1)],
                       columns=["time_ns", "op", "handle", "size", "stream", "stack_id"])
    table = what_if(req, standard_models())
    pytorch = table[table["model"].str.startswith("pytorch")]
    assert pytorch["peak_reserved"].nunique() == 1
    rec = recommend(table)
    assert rec.setting == "" and rec.saved_bytes == 0 and rec.text.startswith("keep the default")


def test_views_build():
    req = synthetic_requests()
    stacks = pd.DataFrame({"stack_id": [0, 1, 2, 3], "depth": 0,
                           "filename": "/home/u/model.py", "function": "block",
                           "line": [10, 11, 12, 13]})
    ev = replay(req, TorchCachingModel()).events
    fig = memory_map_figure(ev, steps=8, stacks=stacks)
    assert len(fig.frames) >= 8 and fig.layout.sliders[0].steps
    hovers = [h for tr in fig.data for h in (tr.hovertext or [])]
    assert any("model.py:10 block" in h for h in hovers)
    assert {tr.name for tr in fig.data} == {"allocated", "slack", "free"}
    # the curves: one point per event, reserved/allocated/requested plus one per allocating line
    mot = memory_over_time(ev)
    timeline = memory_timeline_figure(mot, memory_by(ev, stacks))
    names = [tr.name for tr in timeline.data]
    assert names[:3] == ["reserved", "allocated", "requested"]
    assert sorted(names[3:]) == [f"model.py:{line} block" for line in (10, 11, 12, 13)]
    assert all(len(tr.x) == len(ev) for tr in timeline.data)
    assert max(timeline.data[0].y) == mot["reserved"].max() / (1 << 20)
    frag = fragmentation_figure(fragmentation_over_time(ev))
    assert [tr.name for tr in frag.data] == ["total free", "largest free block",
                                             "external fragmentation"]
    table = what_if(req)
    (cells,) = what_if_figure(table).data
    assert list(cells.cells.values[0]) == list(table["model"])   # one row per model


def test_empty_inputs_do_not_crash():
    from hookmagic.trace import schema
    ev = schema.empty_table("allocator_events")
    assert len(fragmentation_over_time(ev)) == 0
    assert len(memory_map_figure(ev).frames) == 0
