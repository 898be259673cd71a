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
