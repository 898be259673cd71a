"""Adaptive batch size under a latency SLO and a device-memory budget.

    infer = AdaptiveBatch(model_fn, slo_ms=30, memory_budget=20 * 2**30, max_batch=64)
    Pipeline([..., Stage("infer", infer, batch=64, device="cuda"), ...])
    infer.decisions        # every change of batch size, with its reason

The stage hands the controller up to ``max_batch`` queued frames; the controller runs them in
chunks of its current size. After every ``window`` chunks it grows the size (doubling, never to
or past a size that ran out of memory) while the chunks' p99 time stays under
``slo_ms × (1 - headroom)`` and peak device memory stays under ``memory_budget × (1 -
headroom)``, and halves it when the p99 goes over the SLO or memory over the budget. On CUDA
out-of-memory the failed chunk is split in two and each half retried (no frame is lost), the
size drops to half the failed one, and the failed size becomes a ceiling. A chunk of one frame
that still runs out of memory fails its frame (the pipeline records it).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument


def is_out_of_memory(err: BaseException) -> bool:
    """True for torch.cuda.OutOfMemoryError, CuPy's OutOfMemoryError and 'out of memory'
    RuntimeErrors."""
    return (type(err).__name__ == "OutOfMemoryError"
            or (isinstance(err, (RuntimeError, MemoryError)) and "out of memory" in str(err)))


def torch_memory() -> tuple[Callable[[], int], Callable[[], None]] | None:
    """(peak bytes since last reset, reset) from the torch caching allocator, or None."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    return torch.cuda.max_memory_reserved, torch.cuda.reset_peak_memory_stats


class AdaptiveBatch:
    """A batch stage function whose effective batch size adapts (see the module).

    ``memory`` is ``(peak_bytes, reset)``: a function giving peak device memory since the last
    ``reset()``; default: the torch allocator's reserved peak when CUDA is available, else
    memory is not watched. ``on_oom`` runs after an out-of-memory (default: empty the torch
    cache when torch is imported). ``clock`` (seconds) times the chunks.
    """

    def __init__(self, fn: Callable[[list], Sequence[Any]], slo_ms: float,
                 memory_budget: int | None = None, start: int = 1, max_batch: int = 64,
                 window: int = 8, headroom: float = 0.1,
                 memory: tuple[Callable[[], int], Callable[[], None]] | None | str = "auto",
                 on_oom: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not callable(fn):
            raise InvalidArgument("AdaptiveBatch needs a callable fn")
        if not (slo_ms > 0):
            raise InvalidArgument(f"slo_ms must be > 0, got {slo_ms!r}")
        if not (isinstance(max_batch, int) and max_batch >= 1 and isinstance(start, int)
                and 1 <= start <= max_batch):
            raise InvalidArgument("need 1 <= start <= max_batch (ints)")
        if memory_budget is not None and not memory_budget > 0:
            raise InvalidArgument("memory_budget must be None or > 0 bytes")
        if not (isinstance(window, int) and window >= 1) or not (0 <= headroom < 1):
            raise InvalidArgument("window must be an int >= 1 and 0 <= headroom < 1")
        self.fn, self.slo_ms, self.budget = fn, float(slo_ms), memory_budget
        self.size, self.max_batch, self.window, self.headroom = start, max_batch, window, headroom
        self.memory = torch_memory() if memory == "auto" else memory
        self.on_oom = on_oom
        self.clock = clock
        self.ceiling = max_batch  # the largest size not known to run out of memory
        self._times: list[float] = []
        self._rows: list[dict] = []
        self.chunks: list[tuple[int, float]] = []  # (size, ms) of every chunk that ran
        if self.memory is not None:
            self.memory[1]()

    @property
    def decisions(self) -> pd.DataFrame:
        """Every change: t_s, action (grow, shrink, oom_split), size_from, size_to, reason,
        p99_ms and peak_bytes of the window it was decided on."""
        return pd.DataFrame(self._rows, columns=["t_s", "action", "size_from", "size_to",
                                                 "reason", "p99_ms", "peak_bytes"])

    def _decide(self, action: str, new: int, reason: str, p99: float, peak: int | None) -> None:
        self._rows.append({"t_s": time.time(), "action": action, "size_from": self.size,
                           "size_to": new, "reason": reason, "p99_ms": p99,
                           "peak_bytes": peak})
        self.size = new

    def _run_chunk(self, chunk: list) -> list:
        t = self.clock()
        try:
            out = self.fn(chunk)
        except Exception as err:  # noqa: BLE001 - only out-of-memory is handled here
            if not is_out_of_memory(err) or len(chunk) == 1:
                raise
            if self.on_oom is not None:
                self.on_oom()
            else:
                _empty_torch_cache()
            half = len(chunk) // 2
            self.ceiling = min(self.ceiling, len(chunk) - 1)
            self._decide("oom_split", max(1, half), f"out of memory at batch {len(chunk)}: "
                         f"split into {half} + {len(chunk) - half} and retried", np.nan, None)
            self._times.clear()
            return self._run_chunk(chunk[:half]) + self._run_chunk(chunk[half:])
        ms = (self.clock() - t) * 1e3
        outs = list(out[j] for j in range(len(chunk))) if out is not None else [None] * len(chunk)
        if len(outs) != len(chunk):
            raise InvalidArgument(f"fn returned {len(outs)} results for {len(chunk)} frames")
        self.chunks.append((len(chunk), ms))
        if len(chunk) == self.size:  # only full chunks speak for the current size
            self._times.append(ms)
            if len(self._times) >= self.window:
                self._adapt()
        return outs

    def _adapt(self) -> None:
        p99 = float(np.percentile(self._times, 99))
        peak = None
        if self.memory is not None:
            peak = int(self.memory[0]())
            self.memory[1]()
        self._times.clear()
        over_mem = self.budget is not None and peak is not None and peak > self.budget
        if p99 > self.slo_ms or over_mem:
            if self.size > 1:
                why = (f"p99 {p99:.2f} ms over the {self.slo_ms:g} ms SLO" if p99 > self.slo_ms
                       else f"peak memory {peak} over the {self.budget} byte budget")
                self._decide("shrink", max(1, self.size // 2), why, p99, peak)
            return
        room_t = p99 < self.slo_ms * (1 - self.headroom)
        room_m = (self.budget is None or peak is None
                  or peak < self.budget * (1 - self.headroom))
        new = min(self.size * 2, self.max_batch, self.ceiling)
        if room_t and room_m and new > self.size:
            self._decide("grow", new, f"p99 {p99:.2f} ms under the SLO"
                         + (f", peak memory {peak} under the budget" if peak is not None else ""),
                         p99, peak)

    def __call__(self, batch: list) -> list:
        out: list = []
        i = 0
        while i < len(batch):
            n = self.size
            out.extend(self._run_chunk(list(batch[i:i + n])))
            i += n
        return out


def _empty_torch_cache() -> None:
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
