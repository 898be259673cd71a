"""Module paths in stacks (hookmagic.cupti.modules.module_stacks) on synthetic tables: the k-th
Module._call_impl frame becomes the k-th enclosing module's name; plumbing frames go."""
from __future__ import annotations

import pandas as pd

from hookmagic.cupti.modules import MODULE_FILE, module_stacks

TORCH = "/site/torch/nn/modules/module.py"
RAW = [("cell.py", "<module>", 3), (TORCH, "_wrapped_call_impl", 1), (TORCH, "_call_impl", 2),
       ("resnet.py", "forward", 10), (TORCH, "_wrapped_call_impl", 1), (TORCH, "_call_impl", 2),
       ("conv.py", "forward", 20), ("conv.py", "_conv_forward", 21)]


def _tables(kernel_ranges: list[int]) -> dict[str, pd.DataFrame]:
    stacks = pd.DataFrame({"stack_id": 0, "depth": range(len(RAW)),
                           "filename": [f[0] for f in RAW], "function": [f[1] for f in RAW],
                           "line": [f[2] for f in RAW]})
    ranges = pd.DataFrame({"range_id": [1, 2, 3, 4], "name": ["ResNet", "user step",
                                                              "layer1.0.conv1 (Conv2d)", "fc"],
                           "parent_id": [-1, 1, 2, -1],
                           "source": ["module", "hookmagic", "module", "module"]})
    kernels = pd.DataFrame({"stack_id": [0] * len(kernel_ranges), "range_id": kernel_ranges})
    return {"kernels": kernels, "ranges": ranges, "stacks": stacks}


def test_call_impl_frames_become_module_names():
    tables = _tables([3, 3])
    assert module_stacks(tables) == 2
    (new_id,) = set(tables["kernels"].stack_id)
    frames = tables["stacks"][tables["stacks"].stack_id == new_id].sort_values("depth")
    assert list(zip(frames.filename, frames.function)) == [
        ("cell.py", "<module>"), (MODULE_FILE, "ResNet"), ("resnet.py", "forward"),
        (MODULE_FILE, "layer1.0.conv1 (Conv2d)"), ("conv.py", "forward"),
        ("conv.py", "_conv_forward")]
    # the raw stack is still there for anything that refers to it
    assert (tables["stacks"].stack_id == 0).sum() == len(RAW)


def test_stacks_that_do_not_line_up_are_left_alone():
    tables = _tables([4, 2, -1])  # one module for two _call_impl frames; a user range; none
    assert module_stacks(tables) == 0
    assert tables["kernels"].stack_id.tolist() == [0, 0, 0]
