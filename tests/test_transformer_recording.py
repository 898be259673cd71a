"""The ``transformer_training`` recording (a TransformerEncoderLayer fp16 training step recorded
on a GPU by ``python benchmarks/make_recordings.py --only transformer_training``): every kernel
attributed, backward kernels on the line that called backward(), module names (``<module>``
frames in the stacks) in the folded flame graph. References are plain-Python walks over the
recording's tables."""
from __future__ import annotations

import pytest

import hookmagic
from hookmagic.analysis.flame import flame_tree
from tests.test_lines import _library, reference


@pytest.fixture(scope="module")
def trace():
    return hookmagic.recordings.load("transformer_training")


def _module_stacks(stacks) -> set[int]:
    """Stacks carrying a module path: a ``<module>`` frame naming a module or its backward."""
    return set(stacks.loc[stacks["filename"] == "<module>", "stack_id"].tolist())


def test_recording_says_where_it_was_made(trace):
    assert "H100" in trace.meta["recorded_on"] or "H200" in trace.meta["recorded_on"]
    assert "TransformerEncoderLayer" in trace.meta["description"]


def test_at_least_99_percent_of_kernels_carry_a_stack_or_a_module_path(trace):
    k = trace.kernels
    assert len(k) > 100 and float((k["stack_id"] >= 0).mean()) >= 0.99
    # the forward and backward kernels (all but the optimiser's) carry a module path
    in_modules = k["stack_id"].isin(_module_stacks(trace.stacks))
    assert in_modules.mean() >= 0.5, in_modules.mean()
    table = trace.lines()
    assert table.attrs["attributed_kernels"] / table.attrs["kernels"] >= 0.99


def test_backward_kernels_are_charged_to_the_line_that_called_backward(trace):
    stacks = trace.stacks
    backward_stacks = set(stacks.loc[stacks["function"].str.startswith("backward of "), "stack_id"])
    k = trace.kernels
    backward = k[k["stack_id"].isin(backward_stacks)]
    assert len(backward) > 50
    ref = reference(trace)
    table = trace.lines()
    got = {(f, fn, ln): (ns, n) for f, ln, fn, ns, n in
           zip(table["file"], table["line"], table["function"], table["gpu_ns"], table["launches"]) if n}
    assert got == {key: tuple(v) for key, v in ref["launched"].items()}
    lines = {[f for f in trace.stack_frames(s) if not _library(f[0])][-1]
             for s in backward["stack_id"].unique()}
    assert len(lines) == 1
    ((file, function, line),) = lines
    assert function == "transformer_training" and file.endswith("benchmarks/make_recordings.py")
    row = table[(table["file"] == file) & (table["line"] == line)].iloc[0]
    assert row["launches"] >= len(backward)
    assert row["source"] in ("loss.backward()", "")   # the stored text when the recording has it


def test_lines_view_of_the_training_step(trace):
    view = trace.lines("transformer_training")
    (block,) = view.blocks
    attributed = trace.lines().attrs["attributed_ns"]
    assert 0.99 * attributed <= block.total_ns <= attributed
    rows = block.rows[block.rows["inclusive_ns"] > 0]
    assert int(rows["inclusive_ns"].sum()) == block.total_ns   # each kernel under one line


def test_folded_flame_graph_names_the_modules(trace):
    raw, folded = flame_tree(trace, fold=False), flame_tree(trace)
    labels = set(folded["label"])
    assert not labels & {"Module._call_impl", "Module._wrapped_call_impl", "_call_impl"}
    assert any(lab.endswith("(MultiheadAttention)") for lab in labels), sorted(labels)[:40]
    assert any(lab.startswith("backward of ") for lab in labels)
    assert folded["value"].iloc[0] == raw["value"].iloc[0]
