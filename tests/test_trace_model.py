"""Trace: conforming tables, empty traces, filling in place, stacks, delegations."""
from __future__ import annotations

import sys
import types

import pandas as pd
import pytest

from hookmagic.trace import schema
from hookmagic.trace.model import FORMAT_VERSION, Trace


def test_every_table_conforms_to_schema(synthetic_trace):
    for name, columns in schema.TABLES.items():
        frame = getattr(synthetic_trace, name)
        assert list(frame.columns) == list(columns), name
        for col, dtype in columns.items():
            assert frame[col].dtype == pd.Series(dtype=dtype).dtype, (name, col)
    assert synthetic_trace.memory["address"].dtype == "uint64"
    assert len(synthetic_trace.kernels) == 3


def test_missing_tables_are_empty_and_missing_columns_neutral():
    trace = Trace({"kernels": pd.DataFrame({"start_ns": [5], "end_ns": [9], "name": ["k"]})})
    assert trace.memcpy.empty and list(trace.memcpy.columns) == list(schema.TABLES["memcpy"])
    row = trace.kernels.iloc[0]
    assert row["stack_id"] == -1 and row["grid_x"] == 0 and row["name"] == "k"
    assert trace.meta["format_version"] == FORMAT_VERSION
    assert trace.meta["status"] == "complete"


def test_unknown_table_name_is_an_error():
    with pytest.raises(ValueError, match="kernel"):
        Trace({"kernel": pd.DataFrame()})


def test_empty_trace_says_why():
    trace = Trace.empty("no NVIDIA driver found", label="x")
    assert trace.meta["status"] == "unavailable"
    assert trace.meta["reason"] == "no NVIDIA driver found"
    assert trace.meta["label"] == "x"
    assert all(frame.empty for frame in trace.tables.values())
    assert "no NVIDIA driver found" in repr(trace)
    bundle = trace._repr_mimebundle_()
    assert bundle == {"text/plain": "hookmagic: nothing captured — no NVIDIA driver found"}


def test_fill_replaces_tables_and_meta_in_place(synthetic_trace):
    handed_out = Trace()
    assert handed_out.kernels.empty
    handed_out._fill(synthetic_trace.tables, {"status": "partial", "reason": "synthetic stop"})
    assert len(handed_out.kernels) == 3 and len(handed_out.memory) == 7
    assert handed_out.meta["status"] == "partial"
    assert handed_out.meta["reason"] == "synthetic stop"


def test_stack_frames_outermost_first(synthetic_trace):
    assert synthetic_trace.stack_frames(0) == [("synthetic_train.py", "<module>", 10),
                                               ("synthetic_model.py", "forward", 42)]
    assert synthetic_trace.stack_frames(-1) == []
    assert synthetic_trace.stack_frames(99) == []


def test_repr_is_short(synthetic_trace):
    text = repr(synthetic_trace)
    assert text.startswith("<hookmagic.Trace 'synthetic' complete: 3 kernels, 2 copies")
    assert "\n" not in text


def test_mimebundle_delegates_to_summary(synthetic_trace):
    bundle = synthetic_trace._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    assert "synthetic_gemm" in bundle["text/html"]
    assert bundle["text/plain"] == repr(synthetic_trace.summary())


@pytest.mark.parametrize("method, module, func, args", [
    ("flame", "hookmagic.views.flame", "flame_figure", ()),
    ("timeline", "hookmagic.views.timeline", "timeline_figure", ()),
    ("memory_map", "hookmagic.views.memory_map", "memory_map_figure", ()),
    ("diagnose", "hookmagic.analysis.diagnose", "diagnose", ()),
    ("fragmentation", "hookmagic.analysis.fragmentation", "fragmentation_over_time", ()),
])
def test_delegations_call_their_modules(monkeypatch, synthetic_trace, method, module, func, args):
    calls = []
    fake = types.ModuleType(module)
    setattr(fake, func, lambda *a, **kw: calls.append((a, kw)) or "fake result")
    monkeypatch.setitem(sys.modules, module, fake)
    kw = {"top": 3} if method in ("flame", "timeline", "memory_map") else {}
    assert getattr(synthetic_trace, method)(**kw) == "fake result"
    assert calls == [((synthetic_trace,), kw)]


def test_diff_delegates_with_both_traces(monkeypatch, synthetic_trace):
    fake = types.ModuleType("hookmagic.views.flame")
    fake.diff_figure = lambda a, b, **kw: (a, b, kw)
    monkeypatch.setitem(sys.modules, "hookmagic.views.flame", fake)
    other = Trace()
    assert synthetic_trace.diff(other, normalize=True) == (synthetic_trace, other,
                                                           {"normalize": True})


def test_allocator_actions_are_validated_in_one_place():
    events = {"time_ns": [1, 2], "action": ["alloc", "allocate"], "address": [16, 32],
              "size": [512, 512]}
    with pytest.raises(schema.SchemaError, match="allocate"):
        Trace({"allocator_events": pd.DataFrame(events)})
    with pytest.raises(ValueError, match="allocate"):   # SchemaError is a ValueError too
        schema.conform("allocator_events", events)
    ok = schema.conform("allocator_events", {**events, "action": ["alloc", "free_completed"]})
    # an already-conforming table is checked too, not only one that needed converting
    bad = ok.assign(action=["alloc", "oops"])
    with pytest.raises(schema.SchemaError, match="oops"):
        schema.validate("allocator_events", bad)
    with pytest.raises(schema.SchemaError, match="oops"):
        Trace({"allocator_events": bad})


def test_allocator_requested_size_defaults_to_size():
    rows = pd.DataFrame({"time_ns": [1, 2], "action": ["alloc", "segment_alloc"],
                         "address": [16, 0], "size": [1024, 4096]})
    table = schema.conform("allocator_events", rows)
    assert list(table["requested_size"]) == [1024, 4096]
    assert list(table["stack_id"]) == [-1, -1]
