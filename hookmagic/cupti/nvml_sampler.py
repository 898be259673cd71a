"""GPU utilisation, memory, clocks, power and temperature sampled with NVML during a capture."""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

_FIELDS = ("time_ns", "device", "gpu_util", "mem_util", "memory_used", "memory_total",
           "sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c")


class NvmlSampler:
    """Samples every NVML device each ``interval_s`` on a daemon thread, plus once at start
    and once at stop so that even a short cell has a before and an after.

    ``clock`` gives the time in nanoseconds on the capture's clock. ``device_for_index`` maps
    NVML's index to the CUDA device ordinal used in the other tables.
    """

    def __init__(self, clock: Callable[[], int], interval_s: float = 0.02,
                 device_for_index: dict[int, int] | None = None) -> None:
        self.clock = clock
        self.interval_s = interval_s
        self.device_for_index = device_for_index or {}
        self.rows: list[tuple] = []
        self.error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list = []

    def start(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                             for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:
            self.error = f"NVML unavailable: {exc}"
            return
        self._sample()
        self._thread = threading.Thread(target=self._run, name="hookmagic-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, np.ndarray]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._sample()
        columns = list(zip(*self.rows)) if self.rows else [[] for _ in _FIELDS]
        return {name: np.asarray(col) for name, col in zip(_FIELDS, columns)}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        nvml = self._nvml
        for index, handle in enumerate(self._handles):
            now = self.clock()
            util = _read(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
            memory = _read(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
            self.rows.append((
                now, self.device_for_index.get(index, index),
                getattr(util, "gpu", np.nan), getattr(util, "memory", np.nan),
                getattr(memory, "used", -1), getattr(memory, "total", -1),
                _read(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM), np.nan),
                _read(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM), np.nan),
                _read(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, np.nan),
                _read(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
                      np.nan),
            ))


def _read(query: Callable, default=None):
    """One NVML query; fields a GPU does not report (Jetson has no power or memory info on
    some releases) become ``default`` instead of failing the sample."""
    try:
        return query()
    except Exception:
        return default
