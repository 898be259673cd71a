"""The one controller that carries out a :class:`~hookmagic.sched.policies.Policy`.

Both the discrete-event simulator (virtual time) and the real driver (wall-clock time) call the
same :class:`Dispatcher`, so a policy is implemented exactly once:

- ``admit(i)`` / ``admit_range(lo, hi)``: requests arrive (queue size limits, stale-frame drops);
- ``next_batch(now, stream)``: a free stream asks for work; returns ``(model, ids)`` or ``None``
  (then ``wake`` says when a batching timer would make a batch ready);
- ``finished(model, start, end)``: a batch completed (adaptive batch caps, concurrency limits).

Requests are integer ids into plain arrays; queues are lists with a moving head, one per
(model, priority level[, camera]). Every removal happens at a queue head: queues are in arrival
order, so the oldest request is the first to time out and (with one SLO per queue) the first to
miss its deadline.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from typing import Sequence

import numpy as np

from .models import ModelSpec
from .policies import Policy

__all__ = ["Dispatcher", "STATUS_NAMES", "PENDING", "DONE", "REJECTED", "TIMEOUT", "LATE",
           "STALE"]

PENDING, DONE, REJECTED, TIMEOUT, LATE, STALE = range(6)
#: request status codes -> names used in result tables
STATUS_NAMES = ("pending", "done", "rejected", "timeout", "late", "stale")

_DELAYED = 1 << 40  # level offset for requests moved behind the rest by a DELAY timeout
_INF = math.inf


class _Fifo:
    __slots__ = ("ids", "head", "key", "level", "camera")

    def __init__(self, key: tuple[int, int]) -> None:
        self.ids: list[int] = []
        self.head = 0
        self.key = key
        self.level, self.camera = key


class _Model:
    """Queue state and per-model settings of one model."""
    __slots__ = ("index", "name", "fifos", "flist", "n", "level_n", "max_batch", "delay",
                 "preferred", "q_max", "q_timeout", "q_delay", "lat1", "aimd", "cap",
                 "slo_s", "limits", "rr_last", "expiry", "by_level")


class Dispatcher:
    """Carries out ``policy`` over requests given as arrays (see :meth:`Workload.arrays`).

    ``arrays`` holds ``arrival`` and ``deadline`` (seconds), ``model`` (index into ``specs``),
    ``priority`` and ``camera``. After the run, ``status`` and ``drop_s`` hold, per request,
    its fate (codes in :data:`STATUS_NAMES`; the engine marks served requests ``DONE``) and
    when it was dropped.
    """

    def __init__(self, policy: Policy, specs: Sequence[ModelSpec],
                 arrays: dict[str, np.ndarray]) -> None:
        self.policy = policy
        self.specs = list(specs)
        self.arrival: list[float] = arrays["arrival"].tolist()
        self.deadline: list[float] = arrays["deadline"].tolist()
        self.model_of: list[int] = arrays["model"].tolist()
        self.prio_of: list[int] = arrays["priority"].tolist()
        self.camera_of: list[int] = arrays["camera"].tolist()
        n = len(self.arrival)
        self.status = np.zeros(n, dtype=np.int8)
        self.drop_s = np.full(n, np.nan)
        self.wake = _INF
        self.order = policy.order
        self.edf_drop = policy.order == "edf" and policy.drop_late
        fair = policy.fairness
        self.fair = fair
        self.per_camera = fair.per_camera if fair else 0
        self.max_frames = fair.max_frames if fair and fair.max_frames else 0

        names = [s.name for s in self.specs]
        self.limit_max = [lim.max_concurrent for lim in policy.limits]
        self.limit_used = [0] * len(policy.limits)
        self.models: list[_Model] = []
        model_arr = arrays["model"]
        for k, spec in enumerate(self.specs):
            ms = _Model()
            ms.index, ms.name = k, spec.name
            ms.fifos, ms.flist, ms.n, ms.level_n, ms.rr_last = {}, [], 0, {}, -1
            # earliest time any queue head could time out or turn late (a lower bound)
            ms.expiry = _INF
            ms.by_level = {}
            b = policy.batching_for(spec.name)
            ms.max_batch = max(1, min(b.max_batch, spec.max_batch))
            ms.delay = b.max_delay_ms / 1e3
            ms.preferred = tuple(p for p in b.preferred if p <= ms.max_batch)
            q = policy.queue_for(spec.name)
            ms.q_max = q.max_size or 0
            ms.q_timeout = q.timeout_ms / 1e3 if q.timeout_ms is not None else 0.0
            ms.q_delay = q.action == "delay"
            ms.lat1 = float(spec.latency(1)) / 1e3
            a = policy.adaptive_for(spec.name)
            ms.aimd = a
            ms.cap = max(1, min(a.start, a.max_batch)) if a else ms.max_batch
            if a is not None:
                if a.slo_ms is not None:
                    ms.slo_s = a.slo_ms / 1e3
                else:
                    first = np.flatnonzero(model_arr == k)
                    ms.slo_s = (float(arrays["deadline"][first[0]] - arrays["arrival"][first[0]])
                                if len(first) else _INF)
            else:
                ms.slo_s = _INF
            ms.limits = [j for j, lim in enumerate(policy.limits) if spec.name in lim.models]
            self.models.append(ms)
        self.stream_models: list[set[int] | None] = [
            None if st.models is None else {names.index(m) for m in st.models if m in names}
            for st in policy.streams]
        # Every request's queue, made up front: admission is then one append.
        cams = arrays["camera"] if fair is not None else np.full(n, -1, dtype=np.int64)
        levels, lv_idx = np.unique(arrays["priority"], return_inverse=True)
        cam_ids, cam_idx = np.unique(cams, return_inverse=True)
        code = (model_arr.astype(np.int64) * max(1, len(levels)) + lv_idx) * max(1, len(cam_ids)) \
            + cam_idx
        uniq, inverse = np.unique(code, return_inverse=True)
        made = []
        for c in uniq.tolist():
            c, ci = divmod(c, max(1, len(cam_ids)))
            m, li = divmod(c, max(1, len(levels)))
            made.append(self._fifo(self.models[m], (int(levels[li]), int(cam_ids[ci]))))
        self.fifo_of: list[_Fifo] = [made[j] for j in np.asarray(inverse).ravel().tolist()]
        # EDF needs admission to note new queue heads (their deadlines bound the next drop)
        self.simple_admit = not (self.max_frames or self.edf_drop
                                 or any(ms.q_max or ms.q_timeout for ms in self.models))

    # -- arrivals ---------------------------------------------------------------------------
    def admit_range(self, lo: int, hi: int) -> None:
        """Admit requests ``lo..hi-1`` (in arrival order)."""
        if self.simple_admit:
            fifo_of, models, model_of = self.fifo_of, self.models, self.model_of
            for i in range(lo, hi):
                fifo_of[i].ids.append(i)
                models[model_of[i]].n += 1
        else:
            for i in range(lo, hi):
                self.admit(i)

    def admit(self, i: int) -> None:
        """Request ``i`` arrives."""
        ms = self.models[self.model_of[i]]
        f = self.fifo_of[i]
        level = f.level
        if ms.q_max or ms.q_timeout:
            now = self.arrival[i]
            if ms.q_timeout and now >= ms.expiry:
                self._expire(ms, now)
            if ms.q_max and ms.level_n[level] >= ms.q_max:
                self.status[i] = REJECTED
                self.drop_s[i] = now
                return
        if self.max_frames and f.camera >= 0 and len(f.ids) - f.head >= self.max_frames:
            old = f.ids[f.head]
            f.head += 1
            self.status[old] = STALE
            self.drop_s[old] = self.arrival[i]
            ms.n -= 1
            ms.level_n[level] -= 1
        if f.head == len(f.ids):  # i becomes a head: it may expire before the others
            t = self._expiry_of(ms, i, level)
            if t < ms.expiry:
                ms.expiry = t
        f.ids.append(i)
        ms.n += 1
        ms.level_n[level] += 1

    def _expiry_of(self, ms: _Model, i: int, level: int) -> float:
        t = _INF
        if ms.q_timeout and level < _DELAYED:
            t = self.arrival[i] + ms.q_timeout
        if self.edf_drop:
            # a hair early: the drop test is "now + lat1 > deadline", evaluated in floats
            t = min(t, self.deadline[i] - ms.lat1 - 1e-12)
        return t

    # -- removals at queue heads ---------------------------------------------------------------
    def _expire(self, ms: _Model, now: float) -> None:
        """Apply queue timeouts and (EDF) early drops at ``now`` to model ``ms``."""
        timeout, edf = ms.q_timeout, self.edf_drop
        arrival, deadline = self.arrival, self.deadline
        for f in list(ms.flist):
            ids, h, end = f.ids, f.head, len(f.ids)
            if h == end:
                continue
            level = f.level
            if timeout and level < _DELAYED:
                while h < end and arrival[ids[h]] + timeout <= now:
                    i = ids[h]
                    h += 1
                    ms.level_n[level] -= 1
                    if ms.q_delay:
                        self._fifo(ms, (level + _DELAYED, f.camera)).ids.append(i)
                    else:
                        self.status[i] = TIMEOUT
                        self.drop_s[i] = arrival[i] + timeout
                        ms.n -= 1
            if edf:
                late = now + ms.lat1
                while h < end and late > deadline[ids[h]]:
                    i = ids[h]
                    h += 1
                    self.status[i] = LATE
                    self.drop_s[i] = now
                    ms.n -= 1
                    if level < _DELAYED:
                        ms.level_n[level] -= 1
            f.head = h
        bound = _INF
        for f in ms.flist:
            if f.head < len(f.ids):
                t = self._expiry_of(ms, f.ids[f.head], f.level)
                if t < bound:
                    bound = t
        ms.expiry = bound

    @staticmethod
    def _fifo(ms: _Model, key: tuple[int, int]) -> _Fifo:
        """The queue of ``ms`` for ``key`` = (level, camera), made if new; queues stay sorted."""
        f = ms.fifos.get(key)
        if f is None:
            f = ms.fifos[key] = _Fifo(key)
            ms.flist.append(f)
            ms.flist.sort(key=lambda x: x.key)
            group = sorted((g for g in ms.flist if g.level == key[0]), key=lambda g: g.camera)
            ms.by_level[key[0]] = (group, [g.camera for g in group])
            if key[0] < _DELAYED:
                ms.level_n.setdefault(key[0], 0)
        return f

    # -- decisions ------------------------------------------------------------------------------
    def next_batch(self, now: float, stream: int) -> tuple[int, list[int]] | None:
        """Choose the batch stream ``stream`` runs next at ``now``, or None (see ``wake``)."""
        self.wake = _INF
        allowed = self.stream_models[stream]
        order = self.order
        arrival, deadline = self.arrival, self.deadline
        best = None
        best_key = None
        best_size = 0
        for ms in self.models:
            if ms.n == 0 or (allowed is not None and ms.index not in allowed):
                continue
            if ms.limits and any(self.limit_used[j] >= self.limit_max[j] for j in ms.limits):
                continue
            if (ms.q_timeout or self.edf_drop) and now >= ms.expiry:
                self._expire(ms, now)
                if ms.n == 0:
                    continue
            # One pass over the queue heads: oldest overall, best level and its oldest, and
            # the earliest deadline.
            oldest = _INF
            top_level = None
            top_oldest = _INF
            first_deadline = _INF
            for f in ms.flist:
                if f.head == len(f.ids):
                    continue
                i = f.ids[f.head]
                a = arrival[i]
                if a < oldest:
                    oldest = a
                if top_level is None:
                    top_level = f.level
                    top_oldest = a
                elif f.level == top_level and a < top_oldest:
                    top_oldest = a
                if deadline[i] < first_deadline:
                    first_deadline = deadline[i]
            cap = ms.cap
            n = ms.n
            if n >= cap:
                size = cap
            else:
                size = 0
                for p in reversed(ms.preferred):
                    if p <= n and p <= cap:
                        size = p
                        break
                if size == 0:
                    ready_at = oldest + ms.delay
                    if now >= ready_at:
                        size = n
                    else:
                        if ready_at < self.wake:
                            self.wake = ready_at
                        continue
            if order == "fifo":
                key = (oldest, ms.index)
            elif order == "priority":
                key = (top_level, top_oldest, ms.index)
            else:
                key = (first_deadline, ms.index)
            if best_key is None or key < best_key:
                best, best_key, best_size = ms, key, size
        if best is None:
            return None
        ids = self._take(best, best_size)
        for j in best.limits:
            self.limit_used[j] += 1
        return best.index, ids

    def _take(self, ms: _Model, size: int) -> list[int]:
        """Remove ``size`` requests from ``ms``: best level first, oldest first (or camera round robin)."""
        out: list[int] = []
        if size == 1 and self.fair is None:
            # The common unbatched case, kept short.
            for f in ms.flist:
                h = f.head
                ids = f.ids
                if h < len(ids):
                    i = ids[h]
                    h += 1
                    ms.n -= 1
                    if f.level < _DELAYED:
                        ms.level_n[f.level] -= 1
                    if h > 4096 and 2 * h > len(ids):
                        del ids[:h]
                        h = 0
                    f.head = h
                    return [i]
        if self.fair is None:
            level_n = ms.level_n
            for f in ms.flist:
                h = f.head
                ids = f.ids
                k = len(ids) - h
                need = size - len(out)
                if k > need:
                    k = need
                if k <= 0:
                    continue
                if k == 1:
                    out.append(ids[h])
                else:
                    out.extend(ids[h:h + k])
                h += k
                # Drop the consumed prefix now and then so long runs keep lists short.
                if h > 4096 and 2 * h > len(ids):
                    del ids[:h]
                    h = 0
                f.head = h
                ms.n -= k
                if f.level < _DELAYED:
                    level_n[f.level] -= k
                if len(out) == size:
                    break
        else:
            for level in sorted(ms.by_level):
                group, cam_ids = ms.by_level[level]
                # rotate so the camera after the one served last comes first
                start = bisect_right(cam_ids, ms.rr_last) % len(group)
                cams = group[start:] + group[:start]
                while len(out) < size:
                    took = False
                    for f in cams:
                        k = min(self.per_camera, size - len(out), len(f.ids) - f.head)
                        if k <= 0:
                            continue
                        out.extend(f.ids[f.head:f.head + k])
                        f.head += k
                        self._account(ms, level, k)
                        self._compact(f)
                        ms.rr_last = f.camera
                        took = True
                        if len(out) == size:
                            break
                    if not took:
                        break
                if len(out) == size:
                    break
        return out

    @staticmethod
    def _account(ms: _Model, level: int, k: int) -> None:
        ms.n -= k
        if level < _DELAYED:
            ms.level_n[level] -= k

    @staticmethod
    def _compact(f: _Fifo) -> None:
        # Drop the consumed prefix now and then so long runs keep lists short.
        if f.head > 4096 and 2 * f.head > len(f.ids):
            del f.ids[:f.head]
            f.head = 0

    def finished(self, model: int, start: float, end: float) -> None:
        """A batch of ``model`` that started at ``start`` finished at ``end``."""
        ms = self.models[model]
        for j in ms.limits:
            self.limit_used[j] -= 1
        a = ms.aimd
        if a is not None:
            if end - start > a.budget * ms.slo_s:
                ms.cap = max(1, int(ms.cap * a.backoff))
            else:
                ms.cap = min(min(a.max_batch, self.specs[model].max_batch), ms.cap + a.step)

    @property
    def queued(self) -> int:
        """Requests waiting right now, all models."""
        return sum(ms.n for ms in self.models)
