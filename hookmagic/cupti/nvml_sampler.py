"""GPU utilisation, memory, clocks, power and temperature sampled with NVML during a capture.

The sampling thread is native (``hookmagic._native.nvml_start``): it never needs the GIL the
cell runs under, and NVML stays initialised between captures (start ~0.1 ms, not an nvmlInit of
~2 ms per capture). NVML's device order is matched to CUDA's by PCI address.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class NvmlSampler:
    """Samples every GPU visible to CUDA each ``interval_s``, plus once at start and once at
    stop so that even a short cell has a before and an after.

    ``native`` is ``hookmagic._native``; ``devices`` its ``device_properties()``, used to give
    each sample the CUDA device ordinal of the other tables (NVML counts every GPU on the host,
    in its own order; they are matched by PCI address).
    """

    def __init__(self, native: Any, interval_s: float = 0.02,
                 devices: list[dict] | None = None) -> None:
        self.native = native
        self.interval_s = interval_s
        self.devices = devices or []
        self.error = ""
        self._running = False

    def start(self) -> None:
        self.error = self.native.nvml_start(self.interval_s)
        self._running = not self.error
        if self.error:
            self.error = f"NVML unavailable: {self.error}"

    def stop(self) -> dict[str, np.ndarray]:
        """The samples as columns of the ``samples`` table (empty if NVML was unavailable)."""
        if not self._running:
            return {}
        self._running = False
        columns = self.native.nvml_stop()
        nvml_index = columns.pop("nvml_index")
        pci = self.native.nvml_pci()
        ordinal = np.full(len(pci), -1, dtype=np.int32)
        for i, d in _cuda_ordinals(pci, self.devices).items():
            ordinal[i] = d
        device = ordinal[nvml_index]
        keep = device >= 0
        return {"device": device[keep], **{name: col[keep] for name, col in columns.items()}}


def _cuda_ordinals(nvml_pci: list, devices: list[dict]) -> dict[int, int]:
    """NVML index -> CUDA ordinal, by PCI address. GPUs CUDA cannot see are left out; where
    PCI addresses are unknown (some Jetson releases) NVML's order is taken as CUDA's."""
    by_pci = {tuple(d["pci"]): d["index"] for d in devices if min(d.get("pci", (-1,))) >= 0}
    out = {}
    for i, pci in enumerate(nvml_pci):
        if tuple(pci) in by_pci:
            out[i] = by_pci[tuple(pci)]
        elif not by_pci:
            out[i] = i
    return out
