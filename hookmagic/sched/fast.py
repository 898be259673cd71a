"""Compiled single-pass simulator for the common policies (numba).

Handles fifo and strict-priority order across models, dynamic batching per model (max batch,
max queue delay from the oldest request, preferred sizes), model-switch, launch and host times
(``ModelSpec.switch_ms``, ``launch_ms``, ``host_ms``) and any number of plain streams, sharing
the GPU with the general engine's slowdown model (``ModelSpec.share_slowdown`` and
``share_by_size``). It
follows the decision epochs of :mod:`.simulator` step for step, so on the same workload and seed
it yields the same per-request results as the general engine (the tests hold them to that).

Queues need no lists here: requests of one (model, priority) queue arrive in order, so each
queue is a window ``[head, tail)`` into that queue's precomputed id list.
"""
from __future__ import annotations

import math
from typing import Sequence

import numba
import numpy as np

from .host_speed import NO_WINDOWS
from .pacing import paced, stretched
from .models import MAX_SHARE, ModelSpec
from .policies import Policy

__all__ = ["supports", "run_fast"]


def supports(policy: Policy, specs: Sequence[ModelSpec], interference: float = 0.0) -> bool:
    """Whether the fast path can run ``policy`` exactly."""
    return (policy.order in ("fifo", "priority")
            and all(policy.adaptive_for(s.name) is None for s in specs)
            and all(policy.queue_for(s.name) == type(policy.queue_for(s.name))()
                    for s in specs)
            and policy.fairness is None
            and not policy.limits
            and all(st.models is None for st in policy.streams))


@numba.njit(cache=True, nogil=True)
def _kernel(arrival, qid, qorder, qstart, mult, tables, switch, launch, host, max_batch, delay,
            preferred, n_pref, n_levels, stream_order, order_code, slow, sharing, by_size, sized,
            max_share, ljit, hjit, jittered, windows, share):
    n = arrival.shape[0]
    M = max_batch.shape[0]
    L = n_levels
    S = stream_order.shape[0]
    inf = np.inf
    head = qstart[:-1].copy()
    tail = qstart[:-1].copy()
    n_m = np.zeros(M, np.int64)
    busy = np.zeros(S, np.bool_)
    s_end = np.full(S, inf)
    s_prev = np.full(S, -1, np.int64)  # last model per stream: a different one pays switch
    b_model = np.empty(n, np.int64)
    b_stream = np.empty(n, np.int64)
    b_start = np.empty(n)
    b_end = np.empty(n)
    b_size = np.empty(n, np.int64)
    served = np.empty(n, np.int64)
    nb = 0
    ns = 0
    idle = S
    p = 0
    wake = inf
    host_free = -inf  # the driver's host thread launches a batch until then
    # sharing (as the general engine): GPU work left as of s_mark, current slowdown, launching
    s_work = np.zeros(S)
    s_mark = np.zeros(S)
    s_slow = np.ones(S)
    s_launch = np.zeros(S, np.bool_)
    s_rec = np.zeros(S, np.int64)
    s_model = np.zeros(S, np.int64)
    s_size = np.zeros(S)  # sqrt of the requests in each stream's running batch (share_by_size)
    while True:
        t_done = inf
        for s in range(S):
            if busy[s] and s_end[s] < t_done:
                t_done = s_end[s]
        if idle > 0:
            t = t_done
            if p < n and arrival[p] < t:
                t = arrival[p]
            if wake < t:
                t = wake
        else:
            t = t_done
        if t == inf:
            break
        if sharing:  # progress of every computing batch up to t, at the slowdown it had
            for s in range(S):
                if busy[s] and not s_launch[s]:
                    s_work[s] -= (t - s_mark[s]) / s_slow[s]
                    s_mark[s] = t
        changed = False
        for s in range(S):
            if busy[s] and s_end[s] <= t:
                changed = True
                if s_launch[s]:  # its launch is over: from now on it computes
                    s_launch[s] = False
                    s_mark[s] = t
                    continue
                if sharing:
                    b_end[s_rec[s]] = s_end[s]
                busy[s] = False
                s_end[s] = inf
                idle += 1
        while p < n and arrival[p] <= t:
            q = qid[p]
            tail[q] += 1
            n_m[q // L] += 1
            p += 1
        wake = inf
        if idle > 0 and t < host_free:
            wake = host_free
        elif idle > 0:
            for si in range(S):
                s = stream_order[si]
                if busy[s]:
                    continue
                # -- next_batch: same rules as Dispatcher.next_batch --
                d_wake = inf
                best = -1
                best_size = 0
                bk0 = inf
                bk1 = inf
                for m in range(M):
                    if n_m[m] == 0:
                        continue
                    oldest = inf
                    top_level = -1
                    top_oldest = inf
                    for lv in range(L):
                        q = m * L + lv
                        if head[q] < tail[q]:
                            a = arrival[qorder[head[q]]]
                            if a < oldest:
                                oldest = a
                            if top_level < 0:
                                top_level = lv
                                top_oldest = a
                    cap = max_batch[m]
                    nm = n_m[m]
                    size = 0
                    if nm >= cap:
                        size = cap
                    else:
                        for j in range(n_pref[m] - 1, -1, -1):
                            pz = preferred[m, j]
                            if pz <= nm and pz <= cap:
                                size = pz
                                break
                        if size == 0:
                            ready_at = oldest + delay[m]
                            if t >= ready_at:
                                size = nm
                            else:
                                if ready_at < d_wake:
                                    d_wake = ready_at
                                continue
                    if order_code == 0:
                        k0 = oldest
                        k1 = -inf
                    else:
                        k0 = float(top_level)
                        k1 = top_oldest
                    # lexicographic (k0, k1, m); m ascending so ties keep the first
                    if best < 0 or k0 < bk0 or (k0 == bk0 and k1 < bk1):
                        best = m
                        bk0 = k0
                        bk1 = k1
                        best_size = size
                if best < 0:
                    if d_wake < wake:
                        wake = d_wake
                    break
                m = best
                first = -1
                taken = 0
                for lv in range(L):
                    q = m * L + lv
                    k = min(best_size - taken, tail[q] - head[q])
                    if k <= 0:
                        continue
                    for j in range(k):
                        i = qorder[head[q] + j]
                        if first < 0:
                            first = i
                        served[ns] = i
                        ns += 1
                    head[q] += k
                    taken += k
                    if taken == best_size:
                        break
                n_m[m] -= best_size
                dur = tables[m, best_size] * mult[first]
                if s_prev[s] != m:
                    dur += switch[m]
                    s_prev[s] = m
                lm = launch[m]
                hm = host[m]
                if jittered:  # this batch's draw (its first request's), as the general engine
                    lm += ljit[first]
                    if lm < 0.0:
                        lm = 0.0
                    hm += hjit[first]
                    if hm < lm:
                        hm = lm
                start = stretched(t, lm, windows)  # t + lm unless the host was slow then
                dur = paced(dur, share[m], start, hm - lm, windows)  # GPU waits through the call
                end = start + dur
                if sharing:
                    s_rec[s] = nb
                    s_work[s] = dur
                    s_mark[s] = start
                    if start > t:
                        s_launch[s] = True
                        end = start  # the next event of this stream: its launch ends
                    changed = True
                b_model[nb] = m
                b_stream[nb] = s
                b_start[nb] = start
                b_end[nb] = start + dur
                b_size[nb] = best_size
                s_size[s] = math.sqrt(best_size)
                nb += 1
                busy[s] = True
                s_end[s] = end
                s_model[s] = m
                idle -= 1
                if hm > 0.0:
                    host_free = stretched(t, hm, windows)
                    if idle > 0:
                        wake = host_free
                    break
                if idle == 0:
                    break
        if sharing and changed:  # who computes beside whom changed: new slowdowns and ends
            others = -1
            weight = 0.0
            for s in range(S):
                if busy[s] and not s_launch[s]:
                    others += 1
                    weight += s_size[s]
            for s in range(S):
                if busy[s] and not s_launch[s]:
                    sl = slow[s_model[s], others]
                    if sized and others > 0:
                        e = by_size[s_model[s], others]
                        if e > 0.0:  # as ModelSpec.shared_slowdown
                            c = 1.0 - 1.0 / sl + e * (weight - s_size[s])
                            if c > max_share:
                                c = max_share
                            sl = 1.0 / (1.0 - c)
                    s_slow[s] = sl
                    s_end[s] = t + s_work[s] * s_slow[s]
                    b_end[s_rec[s]] = s_end[s]
    return b_model[:nb], b_stream[:nb], b_start[:nb], b_end[:nb], b_size[:nb], served[:ns]


def run_fast(specs: Sequence[ModelSpec], arrays: dict[str, np.ndarray], mult: np.ndarray,
             policy: Policy, interference: float = 0.0, windows: np.ndarray = NO_WINDOWS):
    """Run the compiled path; returns the raw arrays :func:`.result.assemble` takes.
    ``interference``: the sharing slowdown of specs without their own (as :func:`.simulate`);
    ``windows``: the host's slow periods (``host_speed.check_windows`` rows)."""
    M = len(specs)
    levels, level_idx = np.unique(arrays["priority"], return_inverse=True)
    L = max(1, len(levels))
    qid = arrays["model"].astype(np.int64) * L + level_idx.astype(np.int64)
    qorder = np.argsort(qid, kind="stable").astype(np.int64)
    qstart = np.zeros(M * L + 1, dtype=np.int64)
    np.cumsum(np.bincount(qid, minlength=M * L), out=qstart[1:])
    batchings = [policy.batching_for(s.name) for s in specs]
    max_batch = np.array([max(1, min(b.max_batch, s.max_batch)) for b, s in zip(batchings, specs)],
                         dtype=np.int64)
    width = int(max(s.max_batch for s in specs))
    tables = np.zeros((M, width + 1))
    for k, s in enumerate(specs):
        tables[k, : s.max_batch + 1] = s.table_s(s.max_batch)
    delay = np.array([b.max_delay_ms / 1e3 for b in batchings])
    switch = np.array([s.switch_ms / 1e3 for s in specs], dtype=float)
    launch = np.array([s.launch_ms / 1e3 for s in specs], dtype=float)
    host = np.array([s.host_ms / 1e3 for s in specs], dtype=float)
    prefs = [tuple(p for p in b.preferred if p <= mb) for b, mb in zip(batchings, max_batch)]
    n_pref = np.array([len(p) for p in prefs], dtype=np.int64)
    preferred = np.zeros((M, max(1, int(n_pref.max(initial=0)))), dtype=np.int64)
    for k, p in enumerate(prefs):
        preferred[k, : len(p)] = p
    streams = policy.streams
    stream_order = np.array(sorted(range(len(streams)), key=lambda s: (streams[s].priority, s)),
                            dtype=np.int64)
    order_code = 0 if policy.order == "fifo" else 1
    S = len(streams)
    slow = np.array([[sp.slowdown(k, interference) for k in range(max(1, S))] for sp in specs],
                    dtype=float).reshape(M, max(1, S))
    by_size = np.array([[sp.by_size(k) for k in range(max(1, S))] for sp in specs],
                       dtype=float).reshape(M, max(1, S))
    sized = bool(S > 1 and (by_size > 0.0).any())
    sharing = sized or bool(S > 1 and (slow > 1.0).any())
    n_req = len(qid)
    jittered = "launch_jitter" in arrays
    ljit = (np.ascontiguousarray(arrays["launch_jitter"], dtype=float) if jittered
            else np.zeros(1))
    hjit = (np.ascontiguousarray(arrays["host_jitter"], dtype=float) if jittered
            else np.zeros(1))
    assert not jittered or (len(ljit) == n_req and len(hjit) == n_req)
    out = _kernel(np.ascontiguousarray(arrays["arrival"], dtype=float), qid, qorder, qstart,
                  np.ascontiguousarray(mult, dtype=float), tables, switch, launch, host, max_batch, delay,
                  preferred, n_pref, L, stream_order, order_code, slow, sharing, by_size, sized,
                  MAX_SHARE, ljit, hjit, jittered, np.ascontiguousarray(windows, dtype=float),
                  np.array([s.call_share for s in specs], dtype=float))
    n = len(qid)
    status = np.zeros(n, dtype=np.int8)
    drop_s = np.full(n, np.nan)
    return (status, drop_s) + tuple(out)
