"""Module paths in stacks (hookmagic.cupti.modules.module_stacks) on synthetic tables: the k-th
Module._call_impl frame becomes the k-th enclosing module's name; plumbing frames go."""
from __future__ import annotations

import pandas as pd
import pytest

from hookmagic.cupti.modules import _CALL, _PLUMBING, MODULE_FILE, module_stacks

TORCH = "/site/torch/nn/modules/module.py"
# As the native walker names frames on Python >= 3.11 (co_qualname)...
RAW = [("cell.py", "<module>", 3), (TORCH, "Module._wrapped_call_impl", 1), (TORCH, "Module._call_impl", 2),
       ("resnet.py", "ResNet.forward", 10), (TORCH, "Module._wrapped_call_impl", 1),
       (TORCH, "Module._call_impl", 2), ("conv.py", "Conv2d.forward", 20), ("conv.py", "Conv2d._conv_forward", 21)]
# ... and on 3.10 (co_name).
RAW_310 = [(f, fn.rsplit(".", 1)[-1] if fn != "<module>" else fn, ln) for f, fn, ln in RAW]


def test_the_frames_matched_are_the_ones_torch_has():
    """Both spellings of torch's own call path are recognised (the first GPU run matched only
    co_name, while the walker reports co_qualname, and no module was ever named)."""
    torch = pytest.importorskip("torch")
    for fn, names in ((torch.nn.Module._call_impl, _CALL), (torch.nn.Module._wrapped_call_impl, _PLUMBING)):
        assert {fn.__code__.co_name, fn.__code__.co_qualname} <= names


def _tables(kernel_ranges: list[int], raw: list = RAW) -> dict[str, pd.DataFrame]:
    stacks = pd.DataFrame({"stack_id": 0, "depth": range(len(raw)),
                           "filename": [f[0] for f in raw], "function": [f[1] for f in raw],
                           "line": [f[2] for f in raw]})
    ranges = pd.DataFrame({"range_id": [1, 2, 3, 4], "name": ["ResNet", "user step",
                                                              "layer1.0.conv1 (Conv2d)", "fc"],
                           "parent_id": [-1, 1, 2, -1],
                           "source": ["module", "hookmagic", "module", "module"]})
    kernels = pd.DataFrame({"stack_id": [0] * len(kernel_ranges), "range_id": kernel_ranges})
    return {"kernels": kernels, "ranges": ranges, "stacks": stacks}


@pytest.mark.parametrize("raw", [RAW, RAW_310], ids=["qualname", "py310"])
def test_call_impl_frames_become_module_names(raw):
    tables = _tables([3, 3], raw)
    assert module_stacks(tables) == 2
    (new_id,) = set(tables["kernels"].stack_id)
    frames = tables["stacks"][tables["stacks"].stack_id == new_id].sort_values("depth")
    user = [(f, fn) for f, fn, _ in raw if f != TORCH]
    assert list(zip(frames.filename, frames.function)) == [
        user[0], (MODULE_FILE, "ResNet"), user[1], (MODULE_FILE, "layer1.0.conv1 (Conv2d)"), user[2], user[3]]
    # the raw stack is still there for anything that refers to it
    assert (tables["stacks"].stack_id == 0).sum() == len(RAW)


def test_stacks_that_do_not_line_up_are_left_alone():
    tables = _tables([4, 2, -1])  # one module for two _call_impl frames; a user range; none
    assert module_stacks(tables) == 0
    assert tables["kernels"].stack_id.tolist() == [0, 0, 0]


def test_backward_kernels_get_a_backward_of_module_frame():
    tables = _tables([5])
    tables["ranges"] = pd.concat([tables["ranges"], pd.DataFrame({
        "range_id": [5], "name": ["backward of layer1.0.conv1 (Conv2d)"], "parent_id": [-1],
        "source": ["module_backward"]})], ignore_index=True)
    assert module_stacks(tables) == 1
    (new_id,) = set(tables["kernels"].stack_id)
    frames = tables["stacks"][tables["stacks"].stack_id == new_id].sort_values("depth")
    assert len(frames) == len(RAW) + 1
    assert (frames.filename.iloc[-1], frames.function.iloc[-1]) == (
        MODULE_FILE, "backward of layer1.0.conv1 (Conv2d)")


def test_repeated_calls_share_one_rewritten_stack():
    """Twenty iterations of the same call path give one rewritten stack, not one per kernel
    (building one per kernel made a ResNet-50 capture 40x slower on an H200)."""
    rid, names, parents, kernel_ranges = [], [], [], []
    for it in range(20):
        outer, inner = 2 * it + 1, 2 * it + 2
        rid += [outer, inner]
        names += ["ResNet", "layer1.0.conv1 (Conv2d)"]
        parents += [-1, outer]
        kernel_ranges += [inner, inner]
    tables = _tables([])
    tables["ranges"] = pd.DataFrame({"range_id": rid, "name": names, "parent_id": parents,
                                     "source": "module"})
    tables["kernels"] = pd.DataFrame({"stack_id": [0] * len(kernel_ranges), "range_id": kernel_ranges})
    assert module_stacks(tables) == 40
    assert tables["kernels"].stack_id.nunique() == 1
    assert tables["stacks"].stack_id.nunique() == 2  # the raw stack and its one rewrite


def test_no_kernels_is_fine():
    tables = _tables([])
    assert module_stacks(tables) == 0
