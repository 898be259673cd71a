"""The host's speed over time: measured beside and inside the real driver, used by the simulator.

The real driver launches every batch from one host thread, so its launch and host times are
only as quick as its CPU. On a virtual machine that speed moves: on an H100 machine the
driver's CPU switched between two speeds ~2x apart within a 3 s run, pinned or
not (CPU 15 throughout; launch gap 24 -> 41 µs, launch call 32 -> 60 µs at 2.0 s),
and sometimes the whole machine stalled (a canary on another CPU 9-24x slower and
the driver's CUDA calls 7-9x, together, for 16-24 ms, one to seven times in 3 s, with no CPU
steal reported; ``lab/sched/sched_host_episodes.py``). The simulator cannot foresee either,
but given the speed over time, as it is given the arrivals, it reproduces what the scheduler
does through it:

- the prediction reads the host's speed off the driver's own launch calls
  (``calibrate.speed_from_calls``: each 20 ms of calls over the same calls in the probe), as
  neither separate meter below followed them;
- the driver also times a fixed unit of interpreter work (:func:`meter_pass`, ~1-3 µs) and its
  backend a CUDA event record and query about once a millisecond, stored as medians per
  :data:`METER_BIN_S` (``RunResult.meta["host_meter"]``, ``["backend_meter"]``);
  :func:`speed_windows` turns them into ``(start_s, end_s, factor)`` rows against a reference
  pass (the probe's), for comparison: on the H100 neither followed the launch calls closely;
- :class:`HostCanary` measures a second process on another CPU (a diagnostic of machine-wide
  stalls: its two speeds did not follow the driver's CPU);
- ``simulate(..., host_windows=...)`` stretches (factor > 1) or shrinks (< 1) every launch and
  host time that falls in a window (:func:`hookmagic.sched.pacing.stretched`), and a batch's GPU time by its model's
  ``call_share`` of the change in its launch call (the GPU waits for the graph's submission).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from hookmagic.common.errors import InvalidArgument

__all__ = ["HostCanary", "slow_windows", "check_windows", "cpu_cores",
           "canary_cpu",
           "meter_pass", "pass_bins", "speed_windows", "NO_WINDOWS", "METER_EVERY_S", "METER_BIN_S"]

#: no slow periods: the host runs at its calibrated speed throughout
NO_WINDOWS = np.zeros((0, 3))
#: the driver runs its host meter at most this often (s)
METER_EVERY_S = 1e-3
#: the driver's host meter is stored as medians per this many seconds of run time
METER_BIN_S = 0.05
#: iterations of the meter's unit of work (~1-3 µs on the H100 machines' CPUs)
METER_ITERS = 40


def meter_pass() -> float:
    """Seconds one fixed unit of interpreter work takes on the calling thread now: the host's
    speed as the driver's own thread sees it (``driver.run`` calls it about once a ms)."""
    pc = time.perf_counter
    a = pc()
    s = 0
    for i in range(METER_ITERS):
        s += i
    return pc() - a


def pass_bins(starts: np.ndarray, lengths: np.ndarray, t0: float = 0.0,
              width_s: float = 0.01) -> dict:
    """Timed passes of a fixed unit of work (their ``perf_counter`` starts, non-decreasing, and
    lengths in s) as what a run stores: the median pass (µs) overall and per ``width_s`` bin
    from ``t0`` on (None where a bin has no pass); a few kB."""
    starts = np.asarray(starts, dtype=float)
    lengths = np.asarray(lengths, dtype=float)
    if len(starts) == 0:
        return {"median_pass_us": None, "width_s": width_s, "bins_us": []}
    k = np.floor((starts - t0) / width_s).astype(np.int64)
    keep = k >= 0
    k, d = k[keep], lengths[keep]
    bins: list[float | None] = []
    if len(k):
        edges = np.searchsorted(k, np.arange(int(k[-1]) + 2))
        bins = [float(np.median(d[a:b]) * 1e6) if b > a else None
                for a, b in zip(edges[:-1], edges[1:])]
    return {"median_pass_us": float(np.median(lengths) * 1e6), "width_s": width_s,
            "bins_us": bins}


def speed_windows(meter: dict | None, reference_us: float | None, least: float = 0.25,
                  most: float = 20.0) -> np.ndarray:
    """The host's speed through a run as ``simulate(host_windows=...)`` rows: one
    ``(start_s, end_s, factor)`` row per bin of ``meter`` (:func:`pass_bins`' dict, as
    ``RunResult.meta["host_meter"]``), ``factor`` its median pass over ``reference_us`` (the
    pass of the run whose host times the simulator was given: > 1 slower, < 1 faster), held
    within ``least``..``most``. Bins without a pass, and a missing meter or reference, give no
    row (the reference speed)."""
    if not meter or not meter.get("bins_us") or not reference_us or reference_us <= 0:
        return NO_WINDOWS.copy()
    w = float(meter["width_s"])
    rows = [(k * w, (k + 1) * w, min(most, max(least, b / reference_us)))
            for k, b in enumerate(meter["bins_us"]) if b is not None and b > 0]
    return np.array(rows, dtype=float).reshape(-1, 3)

# The canary: a fixed unit of interpreter work per pass, each pass's start and length kept
# (float64 pairs, ~100k passes a second: ~2 MB a second, in memory until it stops).
_CANARY = r"""
import os, sys, time
from array import array
cpu, stop_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
if cpu != "-" and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(cpu)})
limit = time.perf_counter() + float(sys.argv[4])
pc = time.perf_counter
t, d = array("d"), array("d")
open(out + ".ready", "w").close()
k = 0
while True:
    a = pc()
    s = 0
    for i in range(200):
        s += i
    b = pc()
    t.append(a)
    d.append(b - a)
    k += 1
    if k % 2000 == 0 and (os.path.exists(stop_file) or b > limit):
        break
with open(out, "wb") as fh:
    t.tofile(fh)
    d.tofile(fh)
"""


def _cpu_list(text: str) -> list[int]:
    """'0-3,8' -> [0, 1, 2, 3, 8] (the kernel's CPU list format)."""
    out: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            a, b = part.split("-")
            out += range(int(a), int(b) + 1)
        elif part:
            out.append(int(part))
    return out


def cpu_cores(root: str | Path = "/sys/devices/system/cpu") -> list[tuple[int, ...]]:
    """The machine's online CPUs grouped by physical core (hardware threads that share one:
    ``topology/thread_siblings_list``), ordered by their first CPU; one CPU per group where the
    topology cannot be read (not Linux)."""
    root = Path(root)
    try:
        online = _cpu_list((root / "online").read_text())
    except (OSError, ValueError):
        online = list(range(os.cpu_count() or 1))
    cores: dict[tuple[int, ...], None] = {}
    for cpu in online:
        try:
            sib = tuple(sorted(_cpu_list(
                (root / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text())))
        except (OSError, ValueError):
            sib = (cpu,)
        cores[sib] = None
    return sorted(cores, key=lambda c: c[0])


def canary_cpu(cores: Sequence[Sequence[int]] | None = None,
               mine: set[int] | None = None) -> int | None:
    """A CPU for the canary on a core that the calling process does not run on: where the
    process is pinned (its affinity is not every CPU), the middle core of the others; else the
    middle core's first thread. None on a one-core machine. A canary on the driver's own core
    (its SMT sibling) would slow the driver it is there to watch."""
    cores = [tuple(c) for c in (cores if cores is not None else cpu_cores())]
    if mine is None:
        mine = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    every = {c for core in cores for c in core}
    free = cores if not mine or mine >= every else [c for c in cores if not mine & set(c)]
    if len(free) < (2 if free is cores else 1):
        return None
    return free[len(free) // 2][0]


class HostCanary:
    """Measure the host's speed while a block runs: ``with HostCanary() as c: ...``, then
    ``c.windows(t0)``.

    Starts a second Python process, pinned to ``cpu`` (default :func:`canary_cpu`: a core the
    calling process does not run on, away from CPU 0 that takes most interrupts), which repeats a fixed
    unit of work (~5-20 µs) and stamps every pass on ``time.perf_counter`` (the system's
    monotonic clock, the same in every process). It stops when the block ends, or after
    ``limit_s`` (its passes take ~1.6 MB a second until then). Where processes cannot be
    started the canary stays empty (``ok`` False, ``why`` says why) and the block still runs.
    """

    def __init__(self, cpu: int | None = None, limit_s: float = 120.0) -> None:
        self.cpu, self.limit_s = cpu, float(limit_s)
        self.starts = np.zeros(0)
        self.lengths = np.zeros(0)
        self.ok, self.why = False, "not run"
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> "HostCanary":
        cpu = self.cpu if self.cpu is not None else canary_cpu()
        self._dir = tempfile.TemporaryDirectory(prefix="hookmagic-canary-")
        d = Path(self._dir.name)
        self._stop, self._out = d / "stop", d / "passes.bin"
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CANARY, "-" if cpu is None else str(cpu),
                 str(self._stop), str(self._out), str(self.limit_s)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as exc:
            self.why = f"could not start the canary process: {exc}"
            return self
        # wait for its first passes, so the block is measured from its start
        ready, t_end = Path(f"{self._out}.ready"), time.perf_counter() + 10.0
        while not ready.exists() and self._proc.poll() is None and time.perf_counter() < t_end:
            time.sleep(0.005)
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is None:
            self._dir.cleanup()
            return
        self._stop.touch()
        try:
            _, err = self._proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, err = self._proc.communicate()
        try:
            raw = np.fromfile(self._out, dtype=np.float64) if self._out.exists() else np.zeros(0)
        finally:
            self._dir.cleanup()
        if self._proc.returncode != 0 or raw.size < 2:
            self.why = (f"the canary process failed (exit {self._proc.returncode}): "
                        f"{err.decode(errors='replace').strip()[-300:]}")
            return
        half = raw.size // 2
        self.starts, self.lengths = raw[:half], raw[half:2 * half]
        self.ok, self.why = True, ""

    def pass_times(self, t0: float = 0.0, width_s: float = 0.01) -> dict:
        """The canary's median pass (µs) overall and per ``width_s`` bin from ``t0`` (a
        ``perf_counter`` value) on: the host's speed through the block, to store with a run
        (a few kB) and compare between runs."""
        if not self.ok:
            return pass_bins(np.zeros(0), np.zeros(0), t0, width_s)
        return pass_bins(self.starts, self.lengths, t0, width_s)

    def windows(self, t0: float = 0.0, **kw) -> np.ndarray:
        """:func:`slow_windows` of the passes, with times relative to ``t0`` (a
        ``perf_counter`` value: the driver's run time 0 is ``RunResult.meta["host_t0"]``)."""
        return slow_windows(self.starts - t0, self.lengths, **kw)


def slow_windows(starts: np.ndarray, lengths: np.ndarray, factor: float = 5.0,
                 merge_s: float = 1e-3, min_s: float = 1e-3, min_passes: int = 5,
                 min_slowdown: float = 4.0) -> np.ndarray:
    """Periods in which the canary's passes ran slow: ``(start_s, end_s, slowdown)`` rows.

    A pass is slow when it took more than ``factor`` times the median pass. Slow passes less
    than ``merge_s`` apart form one period; periods shorter than ``min_s`` (one interrupt, one
    preemption of the canary itself) are dropped. A period's ``slowdown`` is its length over
    the time its passes would have taken at the median speed: the work the host got done in it,
    whatever the mix of slow and quick passes inside. A period of fewer than ``min_passes``
    passes is dropped too: one long pass is the canary put off its CPU, not a slow machine
    (in which every pass is slow: ~100 passes of 0.1-0.3 ms in 20 ms on an H100). So is a
    period whose ``slowdown`` is under ``min_slowdown``: with 3x a pass and no least slowdown
    H100 runs show 1-125 periods of 1.2-3.8x per scenario while the driver's launch calls
    never pass 0.5 ms, and given to the simulator they make 1 group of 18 worse and none
    better. The machine-wide stalls that do hold the driver up are 10-24x for the canary."""
    starts = np.asarray(starts, dtype=float)
    lengths = np.asarray(lengths, dtype=float)
    if starts.shape != lengths.shape or starts.ndim != 1:
        raise InvalidArgument("starts and lengths must be 1-d arrays of the same length")
    if starts.size < 10:
        return NO_WINDOWS.copy()
    typical = float(np.median(lengths))
    slow = np.flatnonzero(lengths > factor * typical)
    rows = []
    k = 0
    while k < len(slow):
        i = j = slow[k]
        while k + 1 < len(slow) and starts[slow[k + 1]] - (starts[j] + lengths[j]) < merge_s:
            k += 1
            j = slow[k]
        a, e = starts[i], starts[j] + lengths[j]
        slowdown = (e - a) / ((j - i + 1) * typical)
        if e - a >= min_s and j - i + 1 >= min_passes and slowdown >= min_slowdown:
            rows.append((a, e, slowdown))
        k += 1
    return np.array(rows, dtype=float).reshape(-1, 3)


def check_windows(windows: np.ndarray | Sequence[Sequence[float]] | None) -> np.ndarray:
    """``windows`` as a sorted ``(k, 3)`` float array of ``(start_s, end_s, factor)`` rows
    (``factor``: how many times longer host work takes in the window; under 1 the host is
    faster than calibrated); raises InvalidArgument for NaN, an end before its start, a factor
    not above 0 or overlaps."""
    if windows is None:
        return NO_WINDOWS.copy()
    w = np.asarray(windows, dtype=float)
    if w.size == 0:
        return NO_WINDOWS.copy()
    if w.ndim != 2 or w.shape[1] != 3:
        raise InvalidArgument(f"host_windows must be (start_s, end_s, slowdown) rows, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise InvalidArgument("host_windows must be finite")
    w = w[np.argsort(w[:, 0], kind="stable")]
    if (w[:, 1] <= w[:, 0]).any() or (w[:, 2] <= 0.0).any():
        raise InvalidArgument("host_windows: each needs end_s > start_s and a factor > 0")
    if (w[1:, 0] < w[:-1, 1]).any():
        raise InvalidArgument("host_windows must not overlap")
    return np.ascontiguousarray(w)
