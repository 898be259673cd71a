"""A live capture's tables built when first read: the Trace's deferred tables, the per-table
builders of the native hand-over, the stacks handed over as codes into their distinct texts,
and the count of kernels naming a module taken from those codes. Each is checked against the
eager path it replaces, on synthetic records pushed through the real decoder."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.synthetic_cupti import SyntheticBuffer, decode

native = pytest.importorskip("hookmagic._native", reason="native extension not built")
pytest.importorskip("tests.hookmagic_decoder_testing",
                    reason="decoder test extension not built (pip install -e .)")

from hookmagic.cupti.columns import build_tables, stack_columns, table_builders  # noqa: E402
from hookmagic.cupti.modules import MODULE_FILE, named_module_kernels  # noqa: E402
from hookmagic.trace import Trace, schema  # noqa: E402

# Synthetic stacks: 0 = cell.py:<module> > step; 1 = cell.py:<module> > a module frame
FRAMES = [(0, 0, "cell.py", "<module>", 3), (0, 1, "cell.py", "step", 7),
          (1, 0, "cell.py", "<module>", 3), (1, 1, MODULE_FILE, "fc (Linear)", 0)]


def _synthetic_stacks(coded: bool) -> dict:
    sid, depth, files, funcs, lines = (list(c) for c in zip(*FRAMES))
    columns = {"stack_id": np.array(sid, np.int64), "depth": np.array(depth, np.int32),
               "line": np.array(lines, np.int32)}
    if not coded:
        return {**columns, "filename": files, "function": funcs}
    text = list(dict.fromkeys(files + funcs))
    return {**columns, "filename": np.array([text.index(f) for f in files], np.int32),
            "function": np.array([text.index(f) for f in funcs], np.int32), "text": text}


def _synthetic_raw(enums: dict, coded_stacks: bool = True) -> dict:
    kinds = enums["activity_kind"]
    device = enums["memory_kind"].index("device")
    buf = SyntheticBuffer(kinds, 8)
    buf.kernel(start=100, end=150, name="_Z4stepPf", correlation=1)
    buf.kernel(start=200, end=260, name="gemm", correlation=2)
    buf.kernel(start=300, end=330, name="gemm", correlation=3)
    buf.memcpy(start=10, end=40, nbytes=4096, copy_kind=enums["memcpy_kind"].index("htod"),
               src_kind=enums["memory_kind"].index("pinned"), dst_kind=device, correlation=4)
    buf.memory(time=5, op=enums["memory_op"].index("alloc"), address=1 << 40, nbytes=1 << 20,
               memory_kind=device, correlation=5)
    buf.sync(start=400, end=410, sync_type=enums["sync_type"].index("stream"), correlation=6)
    raw = decode(buf)
    raw["launches"] = {"correlation": np.array([1, 2, 3, 4, 5], np.uint32),
                       "thread": np.full(5, 77, np.int64),
                       "stack_id": np.array([0, 1, 1, 0, 0], np.int32),
                       "range_id": np.full(5, -1, np.int64)}
    raw["stacks"] = _synthetic_stacks(coded_stacks)
    return raw


def _builders(enums: dict, raw: dict) -> dict:
    return table_builders(raw, enums, pd.DataFrame(), {}, lambda d, c: None)


def test_deferred_tables_equal_the_tables_built_at_once():
    enums = native.enum_names()
    eager = Trace(build_tables(_synthetic_raw(enums), enums, pd.DataFrame(), {},
                               lambda d, c: None), {})
    lazy = Trace()
    lazy._fill(_builders(enums, _synthetic_raw(enums)), {})
    assert not any(name in lazy.__dict__ for name in schema.TABLE_NAMES)  # nothing built yet
    for name in schema.TABLE_NAMES:
        pd.testing.assert_frame_equal(getattr(lazy, name), getattr(eager, name))
    assert lazy.kernels["name"].tolist() == ["step(float*)", "gemm", "gemm"]
    assert lazy.kernels["stack_id"].tolist() == [0, 1, 1]
    assert (lazy.memcpy["kind"].tolist(), lazy.sync["type"].tolist()) == (["htod"], ["stream"])
    assert lazy.stack_frames(1) == [("cell.py", "<module>", 3), (MODULE_FILE, "fc (Linear)", 0)]


def test_a_deferred_table_is_conformed_when_read_and_refilling_drops_it():
    trace = Trace()
    trace._fill({"kernels": lambda: {"start_ns": [5], "end_ns": [9], "duration_ns": [4]},
                 "memory": lambda: None}, {})
    assert "kernels" not in trace.__dict__
    kernels = trace.kernels
    assert list(kernels.columns) == list(schema.TABLES["kernels"])
    assert kernels["duration_ns"].tolist() == [4] and kernels["stack_id"].tolist() == [-1]
    assert trace.memory.empty and list(trace.memory.columns) == list(schema.TABLES["memory"])
    trace._fill({"sync": lambda: {"start_ns": [1], "end_ns": [2], "duration_ns": [1]}}, {})
    assert trace.kernels.empty and len(trace.sync) == 1


def test_stacks_handed_over_as_codes_equal_stacks_handed_over_as_texts():
    coded = schema.conform("stacks", stack_columns(_synthetic_stacks(coded=True)))
    texts = schema.conform("stacks", stack_columns(_synthetic_stacks(coded=False)))
    pd.testing.assert_frame_equal(coded, texts)
    assert coded["function"].tolist() == [f[3] for f in FRAMES]


def test_kernels_naming_a_module_counted_from_codes_as_from_the_table():
    kernels = pd.DataFrame({"stack_id": [0, 1, 1, -1, 1]})
    table = schema.conform("stacks", stack_columns(_synthetic_stacks(coded=False)))
    assert named_module_kernels(kernels, _synthetic_stacks(coded=True)) == 3
    assert named_module_kernels(kernels, table) == 3
    coded = _synthetic_stacks(coded=True)
    assert coded["text"][1] == MODULE_FILE  # the module frame's file, and cell.py's function
    no_modules = {**coded, "text": ["cell.py", "other.py", *coded["text"][2:]]}
    assert named_module_kernels(kernels, no_modules) == 0


def test_qualified_names_follow_named_modules():
    torch = pytest.importorskip("torch")
    from hookmagic.cupti.modules import _qualnames

    shared = torch.nn.Linear(2, 2)
    model = torch.nn.Sequential(torch.nn.Sequential(shared, torch.nn.ReLU()), shared,
                                torch.nn.Sequential(torch.nn.Sequential(shared)))
    expected: dict[int, tuple[str, str]] = {}
    for qualname, sub in model.named_modules(remove_duplicate=False):
        expected.setdefault(id(sub), (qualname, type(sub).__name__))
    assert _qualnames(model) == expected
