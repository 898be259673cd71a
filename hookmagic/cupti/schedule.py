"""Captures of long loops in windows: ``hookmagic.capture(schedule=hookmagic.schedule(...))``.

As torch.profiler's ``schedule``: the loop calls ``.step()`` once per iteration; steps cycle
through ``wait`` (nothing recorded, CUPTI detached: the loop runs at full speed), ``warmup``
(CUPTI attached and recording, results thrown away) and ``active`` (recorded), ``repeat``
times (0: for as long as the loop runs). Each active window gives one
:class:`~hookmagic.trace.Trace`::

    with hookmagic.capture(schedule=hookmagic.schedule(wait=5, warmup=1, active=3, repeat=2),
                           lite=True) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    first, second = prof.traces

How windows are cut: one capture runs from the first warm-up step to the end of the last
active step (CUPTI is on only then), and its records are then kept from the moment the first
active step began, by their start time on CUPTI's clock. Warm-up exists to absorb what
attaching CUPTI costs (re-attaching after the previous window's ``cuptiFinalize`` takes
~10-14 ms, and the first launches after it are slower), so none of that lands in the window;
filtering by start time rather than switching activity kinds on at the boundary keeps a
kernel that was launched in the active window whole, and is what Kineto does
(``captureWindowStartTime``). Work queued during warm-up that starts on the GPU after the
boundary counts as the window's.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

from hookmagic.cupti.errors import ScheduleError

NONE, WARMUP, RECORD, RECORD_AND_SAVE = "none", "warmup", "record", "record_and_save"


@dataclass(frozen=True)
class Schedule:
    """Which steps of a loop are recorded; make it with :func:`schedule`."""

    wait: int
    warmup: int
    active: int
    repeat: int = 0
    skip_first: int = 0

    def __post_init__(self) -> None:
        for name in ("wait", "warmup", "active", "repeat", "skip_first"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ScheduleError(f"schedule {name} must be a whole number >= 0, "
                                    f"not {value!r}")
        if self.active < 1:
            raise ScheduleError(f"schedule active must be at least 1 step, not {self.active!r}: "
                                "a schedule with no active steps records nothing")

    def action(self, step: int) -> str:
        """What step number ``step`` (0-based) does: "none", "warmup", "record", or
        "record_and_save" (the last active step of a window)."""
        if step < self.skip_first:
            return NONE
        step -= self.skip_first
        cycle = self.wait + self.warmup + self.active
        if self.repeat > 0 and step // cycle >= self.repeat:
            return NONE
        at = step % cycle
        if at < self.wait:
            return NONE
        if at < self.wait + self.warmup:
            return WARMUP
        return RECORD if at < cycle - 1 else RECORD_AND_SAVE


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0,
             skip_first: int = 0) -> Schedule:
    """Steps to record in a long loop, for ``hookmagic.capture(schedule=...)``.

    Parameters
    ----------
    wait:
        Steps at the start of each cycle with nothing recorded (CUPTI detached).
    warmup:
        Steps recorded and thrown away, so attaching CUPTI does not land in the window.
    active:
        Steps recorded; each cycle's active steps become one Trace. At least 1.
    repeat:
        Cycles to run (0: until the loop ends).
    skip_first:
        Steps to leave out before the first cycle.

    Each must be a whole number >= 0 (``active`` >= 1); anything else raises
    :class:`~hookmagic.cupti.errors.ScheduleError`, an ``InvalidArgument`` (a ``ValueError``).
    """
    return Schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                    skip_first=skip_first)


class ScheduledCapture:
    """What ``with hookmagic.capture(schedule=...) as prof`` gives: call ``prof.step()`` at the
    end of every loop iteration; ``prof.traces`` holds one Trace per finished active window
    (or, with ``on_trace_ready``, each is handed to it instead of being kept)."""

    def __init__(self, sched: Schedule, open_capture: Callable[[int], Any],
                 on_trace_ready: Callable[[Any], None] | None = None) -> None:
        self.schedule = sched
        self.traces: list[Any] = []
        self.step_num = 0
        self._open_capture = open_capture  # window number -> an entered-able capture
        self._on_ready = on_trace_ready
        self._capture: Any = None
        self._active_start_ns: int | None = None
        self._active_t0 = 0.0
        self._first_active = -1
        self._steps: list[list[int]] = []
        self._step_start_ns = 0
        self._windows = 0
        self._warmup_steps = 0

    # -- the loop's side ----------------------------------------------------------------------
    def step(self) -> None:
        """Mark the end of one loop iteration (and the start of the next)."""
        before = self.schedule.action(self.step_num)
        self._end_step(before)
        self.step_num += 1
        after = self.schedule.action(self.step_num)
        if before == RECORD_AND_SAVE or (before != NONE and after == NONE):
            self._close(save=before in (RECORD, RECORD_AND_SAVE))
        self._begin_step(after)

    def __repr__(self) -> str:
        return (f"<hookmagic scheduled capture: step {self.step_num}, "
                f"{self._windows} window(s) finished>")

    # -- driven by hookmagic.capture ----------------------------------------------------------
    def _start(self) -> None:
        self._begin_step(self.schedule.action(0))

    def _finish(self, exc_type: Any = None, exc: Any = None, tb: Any = None) -> None:
        """The ``with`` block ended: a window still open is closed (kept if it was in its
        active steps, as a partial window; thrown away if still warming up)."""
        action = self.schedule.action(self.step_num)
        if self._capture is not None:
            # Kept if in its active steps with at least one finished step (or if .step() was
            # never called: the whole block was the window).
            save = action in (RECORD, RECORD_AND_SAVE) and (bool(self._steps)
                                                              or self.step_num == 0)
            self._close(save=save, exc=(exc_type, exc, tb), complete=False)

    # -- windows ------------------------------------------------------------------------------
    def _begin_step(self, action: str) -> None:
        if action == NONE:
            return
        if self._capture is None:
            self._capture = self._open_capture(self._windows)
            self._capture.__enter__()
            self._warmup_steps = 0
        if action == WARMUP:
            self._warmup_steps += 1
            return
        now = _now_ns()
        if self._active_start_ns is None:
            self._active_start_ns = now
            self._active_t0 = time.perf_counter()
            self._first_active = self.step_num
        self._step_start_ns = now

    def _end_step(self, action: str) -> None:
        if action in (RECORD, RECORD_AND_SAVE) and self._active_start_ns is not None:
            self._steps.append([self.step_num, self._step_start_ns, _now_ns()])

    def _close(self, save: bool, exc: tuple = (None, None, None), complete: bool = True) -> None:
        from hookmagic.trace.window import window

        manager, self._capture = self._capture, None
        start_ns, self._active_start_ns = self._active_start_ns, None
        steps, self._steps = self._steps, []
        if manager is None:
            return
        wall_s = time.perf_counter() - self._active_t0
        manager.__exit__(*exc)
        if not save or start_ns is None:
            return
        trace = manager.trace
        info = {"window": self._windows, "first_step": self._first_active,
                "steps": len(steps), "warmup_steps": self._warmup_steps,
                "complete": complete and len(steps) == self.schedule.active,
                "schedule": asdict(self.schedule),
                "how": "CUPTI on from the first warm-up step; rows kept from the first active "
                       "step's start (CUPTI clock)"}
        if trace.status != "unavailable":
            trace = window(trace, start_ns, schedule=info, steps=steps, wall_s=wall_s)
        else:
            trace.meta.update(schedule=info, steps=steps)
        self._windows += 1
        if self._on_ready is not None:
            self._on_ready(trace)
        else:
            self.traces.append(trace)


def _now_ns() -> int:
    """Now on the capture's clock (CUPTI's), or the host clock when CUPTI is not loaded."""
    from hookmagic.cupti import native_module

    native = native_module()
    return int(native.timestamp()) if native is not None else time.time_ns()
