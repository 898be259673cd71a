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


# -- "backward of <module/op>" on a real (CPU) autograd graph -----------------------------------------

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
    # every node ran once (each in the graph has a gradient to pass on here); the layer is a
    # local of this function, which called backward(): its parameters' nodes name its modules
    from hookmagic.cupti.modules import parameter_owners

    owners = parameter_owners([{"layer": layer}])
    assert sorted(r.name for r in ops) == sorted(
        f"backward of {autograd.parameter_owner(n, owners) or autograd.op_label(n)}" for n in reference)
    assert {"backward of relu", "backward of linear1 (Linear)"} <= {r.name for r in ops}
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


def test_parameter_owners_are_named_as_named_parameters_says():
    torch = _real_torch()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.LayerNorm(4)))
    from hookmagic.cupti.modules import parameter_owners

    expected = {}
    for name, p in model.named_parameters():
        owner = name.rsplit(".", 1)[0]
        expected[id(p)] = f"{owner} ({type(model.get_submodule(owner)).__name__})"
    # the inner Sequential is held too, but names come from the outermost module holding it
    assert parameter_owners([{"model": model, "inner": model[1]}]) == expected
    assert parameter_owners([{"nothing": 1}]) == {}


def test_nodes_of_module_parameters_are_named_by_their_module(native_ranges):
    """A Linear's addmm and its parameters' AccumulateGrad open "backward of linear1 (Linear)";
    parameterless ops keep their op name."""
    torch = _real_torch()
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    loss = layer(torch.randn(2, 5, 32)).square().mean()
    reference = _graph_reference(loss.grad_fn)
    RECORDER.start()
    undo = autograd.install(native, namespaces=lambda: [{"layer": layer}])
    try:
        loss.backward()
    finally:
        undo()
    names = [r.name for r in RECORDER.stop() if r.source == "module_backward"]
    assert len(names) == len(reference)
    # independent reference: the AccumulateGrad of each parameter, from named_parameters()
    for pname in ("linear1.weight", "linear1.bias", "norm2.weight"):
        owner = pname.rsplit(".", 1)[0]
        label = f"backward of {owner} ({type(layer.get_submodule(owner)).__name__})"
        assert label in names, (label, sorted(set(names)))
    weight = layer.linear1.weight
    grad_acc = weight.view_as(weight).grad_fn.next_functions[0][0]
    assert autograd.parameter_owner(grad_acc, {id(weight): "linear1 (Linear)"}) == "linear1 (Linear)"
    assert names.count("backward of linear1 (Linear)") == 4  # addmm, t, weight and bias
    assert {"backward of relu", "backward of safe_softmax"} <= set(names)


def test_the_model_is_found_in_the_code_calling_backward(native_ranges):
    """The model is a local of the function that calls backward(), not of the capture's
    namespaces: the node names still come from its modules."""
    torch = _real_torch()

    def train_step():
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        model(torch.randn(2, 4)).sum().backward()

    RECORDER.start()
    undo = autograd.install(native, namespaces=lambda: [])
    try:
        train_step()
    finally:
        undo()
    names = {r.name for r in RECORDER.stop() if r.source == "module_backward"}
    assert {"backward of 0 (Linear)", "backward of relu"} <= names, names
