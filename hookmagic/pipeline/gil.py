"""The GIL as one shared resource of the pipeline model.

CPython runs Python code of one thread at a time. A thread that wants the GIL while another
holds it waits until the holder lets it go (a blocking call, a C call that releases it, the end
of its Python work) or until it has waited the interpreter's switch interval
(``sys.getswitchinterval()``, 5 ms by default), when the holder is made to drop it at its next
bytecode boundary and the waiter takes it; the holder then waits for it in turn. Many short
releases inside one call (an eager PyTorch model releases the GIL around every operator) rarely
let a waiting thread in — the releasing thread takes the GIL back before the waiter wakes — so
such a call holds the GIL, as the waiters see it, for its whole CPU time.

:class:`Gil` replays that: each stage execution's held part (its thread CPU time, see
:mod:`hookmagic.pipeline.model`) asks for the GIL; requests are served first come first served,
one at a time; a holder keeps it for at most the switch interval after a thread started waiting
(or after it took it over waiting threads), then goes to the back of the queue with what it has
left.
"""
from __future__ import annotations

from collections import deque
from typing import Callable


class Gil:
    """One GIL for a discrete-event simulation.

    ``push(t, kind, data)`` schedules an event; the simulation hands every ``"gil"`` event back
    to :meth:`event`. ``request(t, seconds, then, who, inside)`` holds the GIL for ``seconds``
    of held time (0: only waits for it, as a thread coming back from a GIL-free call does) and
    calls ``then(t_done)`` when they are over, still holding it: a request ``then`` makes for
    the same ``who`` at that instant continues the hold, as a thread that keeps running Python
    does. ``waited[who]`` sums the time each requester waited with ``inside`` set (or after
    being switched out): the waits its measured durations hold."""

    def __init__(self, switch_s: float, push: Callable[[float, str, object], None]) -> None:
        self.switch_s = switch_s
        self.push = push
        self.holder: list | None = None  # [left_s, then, who, since_t, inside]
        self.token = 0                   # the current hold's number: later events of older
        self.waiting: deque = deque()    # holds are stale
        self.releasing: int | None = None  # who may continue the hold that is ending
        self.waited: dict[int, float] = {}

    def request(self, t: float, seconds: float, then: Callable[[float], None],
                who: int, inside: bool = False) -> None:
        job = [max(seconds, 0.0), then, who, t, inside]
        # while a hold ends, only its thread may go on holding (it has not let the GIL go)
        if self.holder is None and (self.releasing == who
                                    or (self.releasing is None and not self.waiting)):
            self._grant(t, job)
            return
        self.waiting.append(job)
        if len(self.waiting) == 1:  # the first waiter asks the holder to drop it in time
            self.push(t + self.switch_s, "gil", (self.token, "switch"))

    def _grant(self, t: float, job: list) -> None:
        if job[4]:
            self.waited[job[2]] = self.waited.get(job[2], 0.0) + (t - job[3])
        job[3] = t
        self.holder = job
        self.token += 1
        self.push(t + job[0], "gil", (self.token, "end"))
        if self.waiting:
            self.push(t + self.switch_s, "gil", (self.token, "switch"))

    def event(self, t: float, data: tuple) -> None:
        token, what = data
        if token != self.token or self.holder is None:
            return  # an event of a hold that is over
        job = self.holder
        if what == "end":
            self.holder = None
            self.releasing = job[2]
            try:
                job[1](t)
            finally:
                self.releasing = None
            if self.holder is None and self.waiting:
                self._grant(t, self.waiting.popleft())
            return
        if not self.waiting:
            return
        job[0] -= t - job[3]  # the holder is switched out with what it has left
        job[3] = t
        job[4] = True         # and waits inside its execution from now
        self.holder = None
        self.waiting.append(job)
        self._grant(t, self.waiting.popleft())
