"""Backward frames (hookmagic.cupti.modules.module_stacks) on synthetic tables: kernels in a
"backward of" range get their stack plus a frame naming that range, once per distinct stack
and name; the count of kernels naming a module. The module frames themselves are written by
the native interner (tests/test_module_frames.py)."""
from __future__ import annotations

import pandas as pd

from hookmagic.cupti.modules import MODULE_FILE, module_stacks

# A stack as the native session writes it with module names (synthetic)
NAMED = [("cell.py", "<module>", 3), (MODULE_FILE, "ResNet", 0), ("resnet.py", "ResNet.forward", 10),
         (MODULE_FILE, "layer1.0.conv1 (Conv2d)", 0), ("conv.py", "Conv2d.forward", 20)]
PLAIN = [("cell.py", "<module>", 3), ("cell.py", "step", 7)]


def _tables(kernel_stacks: list[int], kernel_ranges: list[int]) -> dict[str, pd.DataFrame]:
    rows = [(sid, d, *f) for sid, frames in ((0, NAMED), (1, PLAIN)) for d, f in enumerate(frames)]
    stacks = pd.DataFrame(rows, columns=["stack_id", "depth", "filename", "function", "line"])
    kernels = pd.DataFrame({"stack_id": kernel_stacks, "range_id": kernel_ranges})
    ranges = pd.DataFrame({"range_id": [5, 6, 7], "name": ["backward of addmm", "user",
                                                           "backward of fc (Linear)"],
                           "parent_id": -1, "source": ["module_backward", "hookmagic", "module_backward"]})
    return {"kernels": kernels, "ranges": ranges, "stacks": stacks}


def test_backward_kernels_get_a_backward_of_frame():
    tables = _tables([1, 1, 0, -1], [5, 6, -1, 5])
    assert module_stacks(tables) == 2  # the backward kernel and the kernel in a module
    ids = tables["kernels"].stack_id.tolist()
    assert ids[1:] == [1, 0, -1] and ids[0] not in (0, 1)
    frames = tables["stacks"][tables["stacks"].stack_id == ids[0]].sort_values("depth")
    assert list(zip(frames.filename, frames.function)) == [
        (f, fn) for f, fn, _ in PLAIN] + [(MODULE_FILE, "backward of addmm")]


def test_repeated_backward_kernels_share_one_stack():
    """Twenty backward kernels of one stack and name give one new stack, not one per kernel
    (building one per kernel made a ResNet-50 capture 40x slower on an H200)."""
    tables = _tables([1] * 20 + [1] * 5, [7] * 20 + [5] * 5)
    assert module_stacks(tables) == 25
    assert tables["kernels"].stack_id.nunique() == 2
    assert tables["stacks"].stack_id.nunique() == 4  # the two stacks and two backward copies


def test_without_backward_ranges_nothing_changes():
    tables = _tables([0, 1, 0], [-1, -1, 6])
    before = tables["stacks"].copy()
    assert module_stacks(tables) == 2
    pd.testing.assert_frame_equal(tables["stacks"], before)
    del tables["ranges"]
    assert module_stacks(tables) == 2


def test_no_kernels_is_fine():
    tables = _tables([], [])
    assert module_stacks(tables) == 0
