"""Module paths in stacks (hookmagic.cupti.modules.module_stacks) on synthetic tables: each
Module._call_impl frame the native walker tied to a module becomes a frame naming that module;
the plumbing frames of those stacks go; backward kernels get one more frame. The module
addresses here are made up (synthetic): none is live, so every module is named by its class."""
from __future__ import annotations

import pandas as pd
import pytest

from hookmagic.cupti.modules import _CALL, _PLUMBING, MODULE_FILE, module_stacks

TORCH = "/site/torch/nn/modules/module.py"
# As the native walker names frames on Python >= 3.11 (co_qualname)...
RAW = [("cell.py", "<module>", 3), (TORCH, "Module._wrapped_call_impl", 1), (TORCH, "Module._call_impl", 2),
       ("resnet.py", "ResNet.forward", 10), (TORCH, "Module._wrapped_call_impl", 1),
       (TORCH, "Module._call_impl", 2), (TORCH, "Module._call_impl.<locals>.inner", 3),
       ("conv.py", "Conv2d.forward", 20), ("conv.py", "Conv2d._conv_forward", 21)]
# ... and on 3.10 (co_name).
RAW_310 = [(f, fn.rsplit(".", 1)[-1] if fn != "<module>" else fn, ln) for f, fn, ln in RAW]
ADDRESSES = (0x7F0000001000, 0x7F0000002000)  # synthetic: no live object has these ids


def test_the_frames_matched_are_the_ones_torch_has():
    """Both spellings of torch's own call path are recognised (the first GPU run matched only
    co_name, while the walker reports co_qualname, and no module was ever named)."""
    torch = pytest.importorskip("torch")
    for fn, names in ((torch.nn.Module._call_impl, _CALL), (torch.nn.Module._wrapped_call_impl, _PLUMBING)):
        assert {fn.__code__.co_name, getattr(fn.__code__, "co_qualname", fn.__code__.co_name)} <= names
    inner = next(c for c in torch.nn.Module._call_impl.__code__.co_consts
                 if getattr(c, "co_name", None) == "inner")
    assert getattr(inner, "co_qualname", "Module._call_impl.<locals>.inner") in _PLUMBING  # 3.10's plain "inner" is matched with torch's file
    assert inner.co_filename.replace("\\", "/").endswith("torch/nn/modules/module.py")


def _tables(raw: list = RAW, kernel_stacks=(0, 0)) -> tuple[dict[str, pd.DataFrame], dict]:
    stacks = pd.DataFrame({"stack_id": 0, "depth": range(len(raw)),
                           "filename": [f[0] for f in raw], "function": [f[1] for f in raw],
                           "line": [f[2] for f in raw]})
    calls = [d for d, f in enumerate(raw) if f[1] in _CALL]
    stack_modules = {"stack_id": [0] * len(calls), "depth": calls, "module": list(ADDRESSES),
                     "module_type": ["ResNet", "torch.nn.Conv2d"]}
    kernels = pd.DataFrame({"stack_id": list(kernel_stacks), "range_id": -1})
    return {"kernels": kernels, "stacks": stacks}, stack_modules


@pytest.mark.parametrize("raw", [RAW, RAW_310], ids=["qualname", "py310"])
def test_call_impl_frames_become_module_names(raw):
    tables, stack_modules = _tables(raw)
    assert module_stacks(tables, stack_modules) == 2
    frames = tables["stacks"].sort_values("depth")
    assert frames.depth.tolist() == list(range(len(frames)))
    user = [(f, fn) for f, fn, _ in raw if f != TORCH]
    # unresolvable addresses: class names only (tp_name's module prefix dropped)
    assert list(zip(frames.filename, frames.function)) == [
        user[0], (MODULE_FILE, "ResNet"), user[1], (MODULE_FILE, "Conv2d"), user[2], user[3]]
    assert tables["kernels"].stack_id.tolist() == [0, 0]  # rewritten in place


def test_stacks_without_module_frames_are_left_alone():
    tables, _ = _tables()
    before = tables["stacks"].copy()
    assert module_stacks(tables, None) == 0
    assert module_stacks(tables, {"stack_id": [], "depth": [], "module": [], "module_type": []}) == 0
    pd.testing.assert_frame_equal(tables["stacks"], before)


def test_backward_kernels_get_a_backward_of_frame():
    tables, stack_modules = _tables(kernel_stacks=(0,))
    tables["kernels"] = pd.DataFrame({"stack_id": [0, 0, -1], "range_id": [5, 6, 5]})
    tables["ranges"] = pd.DataFrame({"range_id": [5, 6], "name": ["backward of addmm", "user"],
                                     "parent_id": [-1, -1], "source": ["module_backward", "hookmagic"]})
    assert module_stacks(tables, stack_modules) == 2 + 1  # two named, one of them backward
    backward_id = tables["kernels"].stack_id.iloc[0]
    assert backward_id != 0 and tables["kernels"].stack_id.tolist()[1:] == [0, -1]
    frames = tables["stacks"][tables["stacks"].stack_id == backward_id].sort_values("depth")
    assert (frames.filename.iloc[-1], frames.function.iloc[-1]) == (MODULE_FILE, "backward of addmm")
    assert (MODULE_FILE, "Conv2d") in set(zip(frames.filename, frames.function))


def test_repeated_backward_kernels_share_one_stack():
    """Twenty backward kernels of one stack and op give one new stack, not one per kernel
    (building one per kernel made a ResNet-50 capture 40x slower on an H200)."""
    tables, stack_modules = _tables(kernel_stacks=())
    tables["kernels"] = pd.DataFrame({"stack_id": [0] * 20, "range_id": list(range(1, 21))})
    tables["ranges"] = pd.DataFrame({"range_id": list(range(1, 21)), "name": "backward of mm",
                                     "parent_id": -1, "source": "module_backward"})
    assert module_stacks(tables, stack_modules) == 40
    assert tables["kernels"].stack_id.nunique() == 1
    assert tables["stacks"].stack_id.nunique() == 2  # the named stack and its backward copy


def test_no_kernels_is_fine():
    tables, stack_modules = _tables(kernel_stacks=())
    assert module_stacks(tables, stack_modules) == 0
    assert MODULE_FILE in set(tables["stacks"].filename)  # the stacks are named all the same
