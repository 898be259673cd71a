"""Allocator recorders' events join the capture's tables with one stack numbering (synthetic)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from hookmagic.cupti.allocators import merge_into
from hookmagic.trace import Trace
from hookmagic.trace.schema import conform


def _stacks(ids, function):
    return pd.DataFrame({"stack_id": ids, "depth": 0, "filename": "synthetic.py",
                         "function": function, "line": 1})


def _events(times, stack_ids, source):
    return pd.DataFrame({"time_ns": times, "action": "alloc",
                         "address": np.array([4096] * len(times), np.uint64), "size": 512,
                         "requested_size": 500, "segment": np.array([4096] * len(times), np.uint64),
                         "stream": 0, "device": 0, "pool": "small", "stack_id": stack_ids,
                         "source": source})


def test_stacks_are_renumbered_after_the_capture_s_own():
    tables = {"stacks": conform("stacks", _stacks([0, 1], "captured"))}
    merge_into(tables, [(_events([30, 10], [0, -1], "torch"), _stacks([0], "torch_frame")),
                        (_events([20], [1], "cupy"), _stacks([0, 1], "cupy_frame"))])
    trace = Trace(tables, {})
    events = trace.allocator_events
    assert events.time_ns.tolist() == [10, 20, 30]
    assert events.stack_id.tolist() == [-1, 4, 2]
    named = trace.stacks.set_index("stack_id").function
    assert named[2] == "torch_frame" and named[4] == "cupy_frame" and named[0] == "captured"


def test_nothing_recorded_leaves_tables_alone():
    tables = {"stacks": conform("stacks", {})}
    merge_into(tables, [])
    assert set(tables) == {"stacks"}
