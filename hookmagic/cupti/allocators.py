"""Allocator-level memory events recorded alongside the CUPTI capture.

CUPTI sees the driver: segments taken and returned. PyTorch's caching allocator and CuPy's pool
carve those into blocks and cache freed ones; their own records (PyTorch's memory history,
CuPy's MemoryHook, in :mod:`hookmagic.memory`) say which block sat where and which line asked
for it. Each recorder acts only if its library is already in use: a capture never imports
torch or CuPy, nor creates a CUDA context.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import pandas as pd

from hookmagic.trace import schema


class AllocatorRecorders:
    """Starts and stops the PyTorch and CuPy recorders for one capture."""

    def __init__(self, clock: Callable[[], int], stacks: bool) -> None:
        from hookmagic.memory import cupy_hook, torch_history

        self._torch, self._cupy = torch_history, cupy_hook
        # PyTorch stamps events with the wall clock; the capture uses CUPTI's.
        self.offset_ns = int(clock()) - time.time_ns()
        self.torch_on = torch_history.start(stacks=stacks)
        self.cupy_on = cupy_hook.start(stacks=stacks, clock=clock)

    def stop(self) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
        """(events, stacks) from each recorder that ran; each numbers its stacks from 0."""
        parts = []
        if self.torch_on:
            parts.append(self._torch.stop(time_offset_ns=self.offset_ns))
        if self.cupy_on:
            parts.append(self._cupy.stop())
        return [p for p in parts if p is not None]


def merge_into(tables: dict[str, pd.DataFrame],
               parts: list[tuple[pd.DataFrame, pd.DataFrame]]) -> None:
    """Add the recorders' events to ``tables`` in place, renumbering their stacks after the
    capture's own so that every ``stack_id`` points into the one ``stacks`` table."""
    if not parts:
        return
    if "stacks" not in tables:  # a capture without stacks (--no-stacks) builds no stacks table
        tables["stacks"] = schema.empty_table("stacks")
    stacks = [tables["stacks"]]
    events = []
    next_id = int(tables["stacks"]["stack_id"].max()) + 1 if len(tables["stacks"]) else 0
    for part_events, part_stacks in parts:
        shift = next_id
        if len(part_stacks):
            next_id += int(part_stacks["stack_id"].max()) + 1
            stacks.append(part_stacks.assign(stack_id=part_stacks["stack_id"] + shift))
        ids = part_events["stack_id"].to_numpy()
        events.append(part_events.assign(stack_id=np.where(ids >= 0, ids + shift, -1)))
    tables["stacks"] = pd.concat([s for s in stacks if len(s)] or [tables["stacks"]],
                                 ignore_index=True)
    merged = pd.concat(events, ignore_index=True)
    tables["allocator_events"] = merged.sort_values("time_ns", kind="stable", ignore_index=True)
