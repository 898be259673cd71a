"""How well the PyTorch allocator model reproduces a recording: one code path for the fidelity
benchmark (``benchmarks/memory_model_fidelity.py``) and the memory notebook.

The recording's requests (:func:`~hookmagic.memory.replay.requests_from_events`) are replayed
through :class:`~hookmagic.memory.torch_model.TorchCachingModel` with the recording's allocator
setting, and compared with the recording on

- the peak reserved bytes: against ``torch.cuda.max_memory_reserved()`` when the recorder
  stored it, else against the recording's own reserved curve (both are given);
- the device allocations, in order: each ``segment_alloc`` (one ``cudaMalloc``) or, with
  expandable segments, each ``segment_map`` (one growth of a segment by whole pages, its size
  the bytes mapped by that call), the recording's against the model's: count, bytes, and the
  share of allocations whose exact size both made.

Both sides include the state at the start of the recording: the recording's segments that
predate its history (see :mod:`~hookmagic.memory.torch_history`) and the model's allocations
for the blocks that were alive then. Pure functions of their inputs.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from hookmagic.memory.replay import ReplayResult, replay, requests_from_events
from hookmagic.memory.torch_model import TorchCachingModel, TorchConfig

#: The allocator actions that take memory from the device, and those that give it back.
DEVICE_ALLOC_ACTIONS = ("segment_alloc", "segment_map")
DEVICE_FREE_ACTIONS = ("segment_free", "segment_unmap")


def device_allocations(events: pd.DataFrame) -> np.ndarray:
    """Sizes of the device allocations in an allocator-event table, in order: ``segment_alloc``
    (cudaMalloc) and ``segment_map`` (cuMemMap of whole pages: the bytes of that one call)."""
    acts = events["action"].astype(str)
    return events.loc[acts.isin(DEVICE_ALLOC_ACTIONS), "size"].to_numpy(np.int64)


def peak_reserved(events: pd.DataFrame) -> int:
    """The highest reserved bytes along an allocator-event table (device allocations minus
    device frees, in event order)."""
    if events.empty:
        return 0
    acts = events["action"].astype(str)
    size = events["size"].to_numpy(np.int64)
    delta = np.where(acts.isin(DEVICE_ALLOC_ACTIONS), size,
                     np.where(acts.isin(DEVICE_FREE_ACTIONS), -size, 0))
    return int(max(0, np.cumsum(delta).max()))


def sequence_match(measured: np.ndarray, modelled: np.ndarray) -> dict:
    """How well the modelled device allocations reproduce the measured ones: count error,
    bytes error (total bytes allocated from the device), and the share of allocations whose
    exact size both made (multiset overlap, over the larger count)."""
    overlap = sum((Counter(measured.tolist()) & Counter(modelled.tolist())).values())
    n, m = len(measured), len(modelled)
    nb, mb = int(measured.sum()), int(modelled.sum())
    return {"measured_device_allocs": n, "model_device_allocs": m,
            "device_allocs_err_pct": 100.0 * (m - n) / n if n else 0.0,
            "measured_device_bytes": nb, "model_device_bytes": mb,
            "device_bytes_err_pct": 100.0 * (mb - nb) / nb if nb else 0.0,
            "sizes_matched_pct": 100.0 * overlap / max(n, m) if max(n, m) else 100.0}


@dataclass
class Fidelity:
    """The model against one recording (see the module docstring)."""

    setting: str
    requests: int
    recorded_peak_reserved: int
    measured_max_reserved: int | None
    predicted_peak_reserved: int
    error_pct: float
    measured_device_allocs: int
    model_device_allocs: int
    device_allocs_err_pct: float
    measured_device_bytes: int
    model_device_bytes: int
    device_bytes_err_pct: float
    sizes_matched_pct: float
    model_peak_allocated: int
    result: ReplayResult = field(repr=False)

    def passes(self, peak_pct: float = 5.0, sequence_pct: float = 10.0) -> bool:
        """Peak within ``peak_pct`` and device allocations (count and bytes) within
        ``sequence_pct`` percent."""
        return (abs(self.error_pct) <= peak_pct
                and abs(self.device_allocs_err_pct) <= sequence_pct
                and abs(self.device_bytes_err_pct) <= sequence_pct)

    def row(self) -> dict:
        """The numbers as a flat dict (no replay result), for tables."""
        d = asdict(self)
        d.pop("result")
        return d


def model_fidelity(events: pd.DataFrame, config: TorchConfig | None = None,
                   capacity: int | None = None,
                   measured_max_reserved: int | None = None) -> Fidelity:
    """Replay a PyTorch allocator recording through the model with ``config`` (the recording's
    ``PYTORCH_CUDA_ALLOC_CONF``) and compare (see the module docstring).

    ``measured_max_reserved``: ``torch.cuda.max_memory_reserved()`` of the recorded run, the
    reference for ``error_pct`` when given; otherwise the recording's own peak is.
    ``capacity``: the device's bytes (None: unlimited).
    """
    config = config or TorchConfig()
    req = requests_from_events(events)
    result = replay(req, TorchCachingModel(config, capacity=capacity))
    recorded = peak_reserved(events)
    ref = measured_max_reserved if measured_max_reserved else recorded
    predicted = int(result.peak_reserved)
    seq = sequence_match(device_allocations(events), device_allocations(result.events))
    return Fidelity(
        setting=config.conf() or "default", requests=int((req["op"] == "alloc").sum()),
        recorded_peak_reserved=recorded,
        measured_max_reserved=int(measured_max_reserved) if measured_max_reserved else None,
        predicted_peak_reserved=predicted,
        error_pct=100.0 * (predicted - ref) / ref if ref else 0.0,
        model_peak_allocated=int(result.peak_allocated), result=result, **seq)


def config_of(setting: str) -> TorchConfig:
    """The :class:`TorchConfig` of a ``PYTORCH_CUDA_ALLOC_CONF`` value the model replays
    ("" or "default": the defaults); other options are ignored."""
    kw: dict = {}
    for part in (setting or "").split(","):
        key, _, val = part.strip().partition(":")
        if key == "expandable_segments":
            kw["expandable_segments"] = val.strip().lower() == "true"
        elif key == "max_split_size_mb":
            kw["max_split_size_mb"] = int(val)
        elif key == "roundup_power2_divisions" and val.strip().isdigit():
            kw["roundup_power2_divisions"] = int(val)
    return TorchConfig(**kw)
