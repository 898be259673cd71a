"""The global nn.Module hooks (hookmagic.cupti.modules.install) on a real torchvision model:
every module call becomes one "module" range named by ``named_modules()``'s qualified name,
nested as the modules are, with the range-id stack the launch callbacks read left balanced.
Without a GPU there is no CUPTI clock: the native session's three calls used here
(push_range, pop_range, timestamp) are given by a counter clock, synthetic."""
from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from hookmagic.cupti import modules, ranges  # noqa: E402


class _SyntheticClock:
    """Stands in for the native session's range stack and clock (synthetic)."""

    def __init__(self) -> None:
        self.ticks = itertools.count(1)
        self.open: list[int] = []
        self.pushes = 0

    def timestamp(self) -> int:
        return next(self.ticks)

    def push_range(self, range_id: int) -> None:
        self.open.append(range_id)
        self.pushes += 1

    def pop_range(self) -> None:
        self.open.pop()


@pytest.fixture
def clock(monkeypatch):
    c = _SyntheticClock()
    monkeypatch.setattr(ranges, "_native", lambda: c)
    return c


def test_every_module_call_is_one_named_nested_range(clock):
    model = torchvision.models.resnet18().eval()
    calls = []  # the reference: torch's own per-module hooks, counting each call by name
    for name, m in model.named_modules():
        m.register_forward_pre_hook(lambda mod, args, name=name: calls.append(name))
    ranges.RECORDER.start()
    undo = modules.install(None)
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, 32, 32))
            model(torch.zeros(1, 3, 32, 32))
    finally:
        undo()
        records = ranges.RECORDER.stop()
    assert clock.open == [] and clock.pushes == len(records)
    assert all(r.source == "module" and r.start_ns < r.end_ns for r in records)
    named = sorted(r.name.rsplit(" (", 1)[0] if " (" in r.name else "" for r in records)
    assert named == sorted(calls)  # one range per call (BasicBlock calls its relu twice)
    by_id = {r.range_id: r for r in records}
    conv = next(r for r in records if r.name == "layer1.0.conv1 (Conv2d)")
    block = by_id[conv.parent_id]
    assert block.name == "layer1.0 (BasicBlock)" and block.depth == conv.depth - 1
    assert by_id[block.parent_id].name == "layer1 (Sequential)"
    root = by_id[by_id[block.parent_id].parent_id]
    assert root.name == "ResNet" and root.parent_id == -1
    assert root.start_ns < conv.start_ns < conv.end_ns < root.end_ns


def test_a_raising_forward_closes_its_ranges(clock):
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Boom())
    ranges.RECORDER.start()
    undo = modules.install(None)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            model(torch.zeros(1, 2))
    finally:
        undo()
        records = ranges.RECORDER.stop()
    assert clock.open == []
    assert {r.name for r in records} == {"Sequential", "0 (Linear)", "1 (Boom)"}
