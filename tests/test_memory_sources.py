"""Sources: PyTorch snapshot conversion (synthetic snapshot dicts in PyTorch's layout), the
pickle opt-in, CuPy hook callbacks, recordings on disk (the Trace file and the retired format)."""
import io
import json
import pickle
import warnings
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from hookmagic.analysis.fragmentation import fragmentation_over_time
from hookmagic.analysis.memory import memory_over_time
from hookmagic.memory import cupy_hook, torch_history
from hookmagic.memory.cupy_hook import PoolEventLog
from hookmagic.memory.torch_history import events_from_snapshot, load_snapshot

MiB = 1 << 20
SEG = 0x7F0000000000


def frame(line):
    return [{"filename": "/usr/lib/python3/site-packages/torch/nn/modules/linear.py",
             "name": "forward", "line": 125},
            {"filename": "/home/u/train.py", "name": "step", "line": line}]


def synthetic_snapshot():
    """A 20 MiB large segment: 5 MiB block, then a 14.5 MiB one whose 0.5 MiB remainder PyTorch
    does not split off; a block allocated before the history started is freed."""
    trace = [
        {"action": "free_completed", "addr": SEG + 100 * MiB, "size": 1000, "stream": 0,
         "time_us": 5, "frames": []},
        {"action": "segment_alloc", "addr": SEG, "size": 20 * MiB, "stream": 0, "time_us": 10,
         "frames": frame(3)},
        {"action": "alloc", "addr": SEG, "size": 5 * MiB - 10, "stream": 0, "time_us": 10,
         "frames": frame(3)},
        {"action": "alloc", "addr": SEG + 5 * MiB, "size": int(14.5 * MiB), "stream": 0,
         "time_us": 11, "frames": frame(4)},
        {"action": "free_requested", "addr": SEG, "size": 5 * MiB - 10, "stream": 0,
         "time_us": 12, "frames": frame(5)},
        {"action": "free_completed", "addr": SEG, "size": 5 * MiB - 10, "stream": 0,
         "time_us": 12, "frames": frame(5)},
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 13},
    ]
    small = {"device": 0, "address": SEG + 100 * MiB, "total_size": 2 * MiB, "stream": 0,
             "segment_type": "small", "blocks": [
                 {"address": SEG + 100 * MiB, "size": 2 * MiB, "state": "inactive"}]}
    large = {"device": 0, "address": SEG, "total_size": 20 * MiB, "stream": 0,
             "segment_type": "large", "blocks": [
                 {"address": SEG, "size": 5 * MiB, "state": "inactive"},
                 {"address": SEG + 5 * MiB, "size": 15 * MiB, "requested_size": int(14.5 * MiB),
                  "state": "active_allocated"}]}
    return {"segments": [small, large], "device_traces": [trace]}


def test_snapshot_conversion():
    ev, stacks = events_from_snapshot(synthetic_snapshot())
    # the small segment existed before the history: added at the first event's time
    first = ev.iloc[0]
    assert first["action"] == "segment_alloc" and first["address"] == SEG + 100 * MiB
    assert first["time_ns"] == 5000 and first["pool"] == "small"
    allocs = ev[ev["action"] == "alloc"].set_index("address")
    assert allocs.loc[SEG, "size"] == 5 * MiB and allocs.loc[SEG, "requested_size"] == 5 * MiB - 10
    assert allocs.loc[SEG + 5 * MiB, "size"] == 15 * MiB     # unsplit remainder kept
    assert (allocs["segment"].loc[[SEG, SEG + 5 * MiB]] == SEG).all()
    # the pre-existing small block is allocated at the start then freed
    pre = ev[ev["address"] == SEG + 100 * MiB]
    assert list(pre["action"]) == ["segment_alloc", "alloc", "free_completed"]
    mot = memory_over_time(ev)
    assert mot["reserved"].iat[-1] == 22 * MiB and mot["allocated"].iat[-1] == 15 * MiB
    f = fragmentation_over_time(ev)
    assert f["largest_free"].iat[-1] == 5 * MiB and f["free"].iat[-1] == 7 * MiB
    # stacks: outermost frame at depth 0, one stack per distinct frame list
    sid = allocs.loc[SEG, "stack_id"]
    rows = stacks[stacks["stack_id"] == sid].sort_values("depth")
    assert list(rows["filename"]) == ["/home/u/train.py",
                                      "/usr/lib/python3/site-packages/torch/nn/modules/linear.py"]
    assert stacks["stack_id"].nunique() == 3


def test_pickle_needs_explicit_opt_in(tmp_path):
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(synthetic_snapshot()))
    with pytest.raises(PermissionError):
        load_snapshot(p)
    with pytest.warns(UserWarning, match="trust"):
        snap = load_snapshot(p, allow_pickle=True)
    assert snap["segments"][0]["segment_type"] == "small"


def test_json_snapshot_needs_no_opt_in(tmp_path):
    import json
    p = tmp_path / "snap.json"
    p.write_text(json.dumps(synthetic_snapshot()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_snapshot(p)["device_traces"][0]) == 7


def test_recorders_are_inert_without_torch_or_cupy(monkeypatch):
    # the capture's calls must be harmless no-ops when neither library was imported
    import sys
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert torch_history.start() is False
    assert torch_history.start(stacks=False) is False
    assert torch_history.stop() is None
    assert cupy_hook.start() is False
    assert cupy_hook.stop() is None


def test_cupy_callbacks_to_events():
    clock = iter(range(0, 10_000, 10)).__next__
    log = PoolEventLog(clock=clock, with_stacks=True)
    log.alloc_postprocess(device_id=0, mem_size=4096, mem_ptr=1 << 20)          # pool miss
    log.malloc_postprocess(device_id=0, size=1000, mem_size=1024, mem_ptr=1 << 20, pmem_id=1)
    log.malloc_postprocess(device_id=0, size=3000, mem_size=3072, mem_ptr=(1 << 20) + 1024,
                           pmem_id=1)
    log.free_postprocess(device_id=0, mem_size=1024, mem_ptr=1 << 20, pmem_id=1)
    # pool released the first allocation silently; the device hands the range out again
    log.alloc_postprocess(device_id=0, mem_size=8192, mem_ptr=1 << 20)
    ev = log.events()
    assert list(ev["action"]) == ["segment_alloc", "alloc", "alloc", "free_requested",
                                  "free_completed", "segment_free", "segment_alloc"]
    assert (ev.loc[ev["action"] == "alloc", "segment"] == 1 << 20).all()
    assert ev.loc[ev["action"] == "free_completed", "requested_size"].iat[0] == 1000
    assert (ev["source"] == "cupy").all()
    assert ev.loc[1, "stack_id"] >= 0 and len(log.stacks.table())
    assert memory_over_time(ev)["reserved"].iat[-1] == 8192


def test_allocator_events_round_trip_through_a_trace_file(tmp_path):
    import hookmagic
    from hookmagic.trace import Trace

    ev, stacks = events_from_snapshot(synthetic_snapshot())
    path = Trace({"allocator_events": ev, "stacks": stacks}, {"recorded_on": "SYNTHETIC"}).save(
        tmp_path / "rec.hmtrace")
    back = hookmagic.load(path)
    pd.testing.assert_frame_equal(back.allocator_events, ev)
    pd.testing.assert_frame_equal(back.stacks, stacks)
    assert back.meta["recorded_on"] == "SYNTHETIC"


#: A file of the retired allocator-recording format, as memory_model_fidelity.py wrote it on an
#: H100 on 2026-11-22 (the recording notebook 02 shows, before it was converted to a Trace).
OLD_FORMAT = Path(__file__).parent / "data" / "fragmenting_churn.allocator-recording.zip"


def test_retired_allocator_recording_loads_as_a_trace():
    import hookmagic

    with zipfile.ZipFile(OLD_FORMAT) as zf:       # read the file independently of hookmagic
        head = json.loads(zf.read("meta.json"))
        events = pd.read_parquet(io.BytesIO(zf.read("allocator_events.parquet")))
        stacks = pd.read_parquet(io.BytesIO(zf.read("stacks.parquet")))
    assert head["format"] == "hookmagic-allocator-recording"
    trace = hookmagic.load(OLD_FORMAT)
    assert len(trace.allocator_events) == len(events) > 0
    for col in ("time_ns", "action", "address", "size", "requested_size", "stack_id"):
        assert list(trace.allocator_events[col]) == list(events[col]), col
    assert len(trace.stacks) == len(stacks)
    old = head["meta"]
    assert {k: trace.meta[k] for k in old} == old          # every old key kept
    assert trace.meta["recorded_on"] == f"{old['gpu']}, driver {old['driver']}, {old['date']}"
    assert trace.meta["description"] == old["workload"]
    # notebook 02 ships a later recording of the same workload (the fidelity benchmark's run of
    # 2026-11-26): the program asked for exactly the same blocks in the same order
    from hookmagic.memory.replay import requests_from_events
    shipped = hookmagic.load(Path(__file__).parents[1] / "notebooks" / "recordings"
                             / "fragmenting_churn.hmtrace")
    cols = ["op", "handle", "size"]
    pd.testing.assert_frame_equal(requests_from_events(shipped.allocator_events)[cols],
                                  requests_from_events(trace.allocator_events)[cols])


def test_retired_format_without_its_events_table_is_reported_damaged(tmp_path):
    from hookmagic.trace.io import TraceFileError, load_trace

    path = tmp_path / "broken.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("meta.json", json.dumps({"format": "hookmagic-allocator-recording",
                                             "meta": {}}))
    with pytest.raises(TraceFileError, match="allocator_events.parquet"):
        load_trace(path)


def test_segment_freed_then_reallocated_at_the_same_address_existed_before():
    # the history starts after SEG was allocated: its free comes first, then the driver hands
    # the same address out again; reserved memory must never go below zero
    trace = [
        {"action": "segment_free", "addr": SEG, "size": 20 * MiB, "stream": 0, "time_us": 1},
        {"action": "segment_alloc", "addr": SEG, "size": 20 * MiB, "stream": 0, "time_us": 2},
    ]
    ev, _ = events_from_snapshot({"device_traces": [trace], "segments": []})
    assert list(ev["action"]) == ["segment_alloc", "segment_free", "segment_alloc"]
    assert ev["time_ns"].iat[0] == 1000                 # put at the first event's time
    reserved = memory_over_time(ev)["reserved"].tolist()
    assert reserved == [20 * MiB, 0, 20 * MiB]


def expandable_snapshot(empty_cache_at_end: bool) -> dict:
    """SYNTHETIC, in PyTorch's layout, derived by hand from its expandable-segment rules: a
    large-pool segment at SEG already has its first 20 MiB page mapped (an 8 MiB block alive in
    it) and a small-pool 2 MiB page at SMALL holds a 1 MiB block, before the history starts. A
    30 MiB request then finds the 12 MiB free tail of page 0, maps one more 20 MiB page right
    after it (``segment_map`` SEG + 20 MiB, 20 MiB) and takes [SEG + 8 MiB, SEG + 38 MiB); both
    large blocks are freed. The snapshot reports one 40 MiB range at SEG (what is mapped at the
    end), or, after ``empty_cache`` unmapped the 40 free MiB, no large range at all."""
    small = SEG + 4096 * MiB
    trace = [
        {"action": "segment_map", "addr": SEG + 20 * MiB, "size": 20 * MiB, "stream": 0,
         "time_us": 10, "frames": frame(3)},
        {"action": "alloc", "addr": SEG + 8 * MiB, "size": 30 * MiB, "stream": 0,
         "time_us": 10, "frames": frame(3)},
        {"action": "free_requested", "addr": SEG, "size": 8 * MiB, "stream": 0, "time_us": 11},
        {"action": "free_completed", "addr": SEG, "size": 8 * MiB, "stream": 0, "time_us": 11},
        {"action": "free_requested", "addr": SEG + 8 * MiB, "size": 30 * MiB, "stream": 0,
         "time_us": 12},
        {"action": "free_completed", "addr": SEG + 8 * MiB, "size": 30 * MiB, "stream": 0,
         "time_us": 12},
    ]
    segments = [{"device": 0, "address": small, "total_size": 2 * MiB, "stream": 0,
                 "segment_type": "small", "is_expandable": True, "blocks": [
                     {"address": small, "size": MiB, "requested_size": MiB,
                      "state": "active_allocated"},
                     {"address": small + MiB, "size": MiB, "state": "inactive"}]}]
    if empty_cache_at_end:
        trace.append({"action": "segment_unmap", "addr": SEG, "size": 40 * MiB, "stream": 0,
                      "time_us": 13})
    else:
        segments.append({"device": 0, "address": SEG, "total_size": 40 * MiB, "stream": 0,
                         "segment_type": "large", "is_expandable": True, "blocks": [
                             {"address": SEG, "size": 40 * MiB, "state": "inactive"}]})
    return {"segments": segments, "device_traces": [trace]}


@pytest.mark.parametrize("empty_cache_at_end", [False, True])
def test_expandable_range_mapped_before_the_history_starts_at_its_size_then(empty_cache_at_end):
    ev, _ = events_from_snapshot(expandable_snapshot(empty_cache_at_end))
    maps = ev[ev["action"] == "segment_map"]
    # at the start: page 0 of the large segment (20 MiB, not the 40 MiB mapped at the end) and
    # the small page; then the one page the history mapped
    assert list(zip(maps["address"] - SEG, maps["size"] // MiB, maps["pool"])) == [
        (0, 20, "large"), (4096 * MiB, 2, "small"), (20 * MiB, 20, "large")]
    assert (maps["time_ns"].iloc[:2] == 10_000).all()
    reserved = memory_over_time(ev)["reserved"]
    assert reserved.max() == 42 * MiB
    assert reserved.iat[-1] == (2 if empty_cache_at_end else 42) * MiB
    # the block alive at the start is allocated at the start, in the range mapped then
    pre = ev[(ev["address"] == SEG) & (ev["action"] == "alloc")]
    assert pre["size"].tolist() == [8 * MiB] and pre["time_ns"].tolist() == [10_000]
