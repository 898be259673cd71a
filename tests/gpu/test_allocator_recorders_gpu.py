"""PyTorch's allocator history on a real GPU, with and without Python stacks.

The ``stacks`` option (``%%cudahook --no-stacks``, ``hookmagic.capture(stacks=False)``) reaches
the allocator recorders (``allocator_history=True``): without stacks the same allocations are recorded, none with a stack.
Checked against what this file allocates (sizes it chose, the function it allocates in), not
against hookmagic's own output. A few seconds on an H100.
"""
from __future__ import annotations

import pytest

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

from hookmagic.memory import torch_history  # noqa: E402

#: bytes of the float32 tensors allocate_here() makes; each is a multiple of 512, so PyTorch's
#: requested size is exactly this
SIZES = (4 << 10, 1 << 20, 16 << 20)


def allocate_here() -> None:
    tensors = [torch.empty(n // 4, dtype=torch.float32, device="cuda") for n in SIZES]
    del tensors
    torch.cuda.synchronize()


def _record(stacks: bool):
    torch.zeros(1, device="cuda")           # the recorder acts only once CUDA is initialised
    assert torch_history.start(stacks=stacks) is True
    try:
        allocate_here()
    finally:
        recorded = torch_history.stop()
    assert recorded is not None
    events, stack_table = recorded
    allocs = events[events["action"] == "alloc"]
    mine = allocs[allocs["requested_size"].isin(SIZES)]
    assert sorted(mine["requested_size"]) == sorted(SIZES)
    return mine, stack_table


def test_recorder_with_stacks_names_the_allocating_function():
    mine, stack_table = _record(stacks=True)
    assert (mine["stack_id"] >= 0).all()
    for sid in mine["stack_id"]:
        functions = stack_table.loc[stack_table["stack_id"] == sid, "function"].tolist()
        assert "allocate_here" in functions


def test_recorder_without_stacks_records_the_same_allocations_without_any():
    mine, stack_table = _record(stacks=False)
    assert (mine["stack_id"] == -1).all()
    assert len(stack_table) == 0


@pytest.mark.needs("native")
def test_capture_without_stacks_reaches_the_allocator_recorder():
    import hookmagic

    torch.zeros(1, device="cuda")
    with hookmagic.capture(stacks=False, allocator_history=True) as trace:
        allocate_here()
    assert trace.status == "complete", trace.meta.get("reason")
    ev = trace.allocator_events
    mine = ev[(ev["action"] == "alloc") & ev["requested_size"].isin(SIZES)]
    assert sorted(mine["requested_size"]) == sorted(SIZES)
    assert (mine["stack_id"] == -1).all()
