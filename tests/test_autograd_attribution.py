"""The backward wrappers (hookmagic.cupti.autograd) around a stand-in torch.autograd: each call
runs inside hookmagic.range("backward") with the native fallback set, and the originals come
back afterwards. The stand-in is synthetic; the native module is the real one (no GPU: the
fallback is set and cleared without a capture)."""
from __future__ import annotations

import sys
import types

import pytest

from hookmagic.cupti import autograd
from hookmagic.cupti.ranges import RECORDER

native = pytest.importorskip("hookmagic._native", reason="native extension not built")


@pytest.fixture
def standin_torch(monkeypatch):
    seen = []

    def backward(tensors, grad_tensors=None):
        seen.append(("backward", list(getattr(RECORDER.local, "stack", []))))
        return "b"

    def grad(outputs, inputs):
        seen.append(("grad", list(getattr(RECORDER.local, "stack", []))))
        raise RuntimeError("synthetic failure inside grad")

    torch = types.ModuleType("torch")
    torch.autograd = types.SimpleNamespace(backward=backward, grad=grad)
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch, seen, (backward, grad)


def test_calls_run_inside_a_backward_range_and_originals_return(standin_torch):
    torch, seen, (backward, grad) = standin_torch
    undo = autograd.install(native)
    assert undo is not None and torch.autograd.backward is not backward
    assert torch.autograd.backward("loss", grad_tensors=None) == "b"
    with pytest.raises(RuntimeError, match="synthetic failure"):
        torch.autograd.grad("y", "x")
    undo()
    assert torch.autograd.backward is backward and torch.autograd.grad is grad
    assert [name for name, _ in seen] == ["backward", "grad"]
    assert all(len(stack) == 1 for _, stack in seen)  # one range open during each call
    assert getattr(RECORDER.local, "stack", []) == []  # and closed after, even on error


def test_nothing_is_wrapped_without_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert autograd.install(native) is None


# -- "backward of <op>" on a real (CPU) autograd graph -----------------------------------------

def _real_torch():
    return pytest.importorskip("torch")


@pytest.fixture
def native_ranges(monkeypatch):
    """hookmagic.range on the real native module without CUPTI (its clock is then the host's)."""
    from hookmagic.cupti import ranges

    monkeypatch.setattr(ranges, "_native", lambda: native)


def _graph_reference(root) -> list:
    """Independent reference: every node reachable from ``root``, by plain recursion."""
    out: dict[int, object] = {}

    def visit(node):
        if node is None or id(node) in out:
            return
        out[id(node)] = node
        for nxt, _ in node.next_functions:
            visit(nxt)

    visit(root)
    return list(out.values())


def test_graph_walk_reaches_every_node_once():
    torch = _real_torch()
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    loss = layer(torch.randn(2, 5, 32)).square().mean()
    walked = list(autograd.graph_nodes(loss))
    assert len({id(n) for n in walked}) == len(walked)
    assert {id(n) for n in walked} == {id(n) for n in _graph_reference(loss.grad_fn)}
    assert len(list(autograd.graph_nodes([loss, loss], max_nodes=7))) == 7  # bounded
    assert list(autograd.graph_nodes(torch.zeros(2))) == []                  # no graph


def test_op_labels_name_the_forward_op():
    torch = _real_torch()

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    w = torch.randn(3, 3, requires_grad=True)
    y = torch.nn.functional.layer_norm(torch.addmm(torch.zeros(3), torch.ones(3, 3), w), (3,))
    labels = {n.name(): autograd.op_label(n) for n in autograd.graph_nodes(Twice.apply(y).sum())}
    assert labels["AddmmBackward0"] == "addmm"
    assert labels["NativeLayerNormBackward0"] == "native_layer_norm"
    assert labels["SumBackward0"] == "sum"
    assert labels["TwiceBackward"] == "Twice"  # a custom Function: its class name
    assert labels["torch::autograd::AccumulateGrad"] == "AccumulateGrad"


def test_each_node_backward_opens_a_backward_of_op_range(native_ranges):
    """The real wrapper on real torch (CPU): every node that runs opens one "backward of <op>"
    range inside the "backward" range; nothing is left hooked after backward() returns."""
    torch = _real_torch()
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    loss = layer(torch.randn(2, 5, 32)).square().mean()
    reference = _graph_reference(loss.grad_fn)
    RECORDER.start()
    undo = autograd.install(native)
    try:
        loss.backward(retain_graph=True)
    finally:
        undo()
    records = RECORDER.stop()
    outer = [r for r in records if r.name == "backward"]
    ops = [r for r in records if r.source == "module_backward"]
    assert len(outer) == 1
    assert all(r.parent_id == outer[0].range_id and r.name.startswith("backward of ") for r in ops)
    # every node ran once (each in the graph has a gradient to pass on here)
    assert sorted(r.name for r in ops) == sorted(f"backward of {autograd.op_label(n)}" for n in reference)
    assert {"backward of addmm", "backward of native_layer_norm"} <= {r.name for r in ops}
    RECORDER.start()
    loss.backward()  # outside the capture: the hooks are gone
    assert [r for r in RECORDER.stop() if r.source == "module_backward"] == []


def test_without_labels_no_node_is_hooked(native_ranges):
    torch = _real_torch()
    loss = (torch.ones(3, requires_grad=True) * 2).sum()
    RECORDER.start()
    undo = autograd.install(native, label_nodes=False)
    try:
        loss.backward()
    finally:
        undo()
    assert [r.name for r in RECORDER.stop()] == ["backward"]
