"""How well the PyTorch allocator model reproduces a recording: one code path for the fidelity
benchmark (``lab/memory/memory_model_fidelity.py``) and the memory notebook.

The recording's requests (:func:`~hookmagic.memory.replay.requests_from_events`) are replayed
through :class:`~hookmagic.memory.torch_model.TorchCachingModel` with the recording's allocator
setting, and compared with the recording on

- the peak reserved bytes: against ``torch.cuda.max_memory_reserved()`` when the recorder
  stored it, else against the recording's own reserved curve (both are given);
- the device allocations, in order: each ``segment_alloc`` (one ``cudaMalloc``) or, with
  expandable segments, each ``segment_map`` (one growth of a segment by whole pages, its size
  the bytes mapped by that call), the recording's against the model's: count, bytes, and the
  share of allocations whose exact size both made.

By default the model starts *from* the recording's state at its start
(:func:`seed_recorded_state`): the segments (or, with expandable segments, the mapped ranges)
and the blocks alive when the history began, laid out at the recorded offsets, so that both
sides replay the same requests from the same memory; the device allocations are then compared
from there on (the start state is the same on both sides by construction), the peak over the
whole recording. ``from_recorded_state=False`` starts the model empty: it then allocates the
blocks alive at the start itself, its own way, and the device allocations are compared over the
whole recording, the recording's start state included. Pure functions of their inputs.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument
from hookmagic.memory import torch_rules as R
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
    start: str                     # "recorded": the model began from the recorded state; "empty"
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
                   measured_max_reserved: int | None = None,
                   from_recorded_state: bool = True) -> Fidelity:
    """Replay a PyTorch allocator recording through the model with ``config`` (the recording's
    ``PYTORCH_CUDA_ALLOC_CONF``) and compare (see the module docstring).

    ``measured_max_reserved``: ``torch.cuda.max_memory_reserved()`` of the recorded run, the
    reference for ``error_pct`` when given; otherwise the recording's own peak is.
    ``capacity``: the device's bytes (None: unlimited). ``from_recorded_state``: start the model
    from the recording's state at its first timestamp (:func:`seed_recorded_state`; when that
    state cannot be laid out, e.g. a block outside every recorded segment, the model starts
    empty and ``start`` says so).
    """
    config = config or TorchConfig()
    req = requests_from_events(events)
    model = TorchCachingModel(config, capacity=capacity)
    seeded = seed_recorded_state(model, events, req) if from_recorded_state else None
    if seeded is None:
        model = TorchCachingModel(config, capacity=capacity)
        result = replay(req, model)
        recorded_part, model_part = events, result.events
    else:
        placed, first_request, first_row = seeded
        seed_rows = len(model.events())
        result = replay(req, model, placed=placed, start=first_request)
        # the start state is the same on both sides by construction: compared after it
        recorded_part, model_part = events.iloc[first_row:], result.events.iloc[seed_rows:]
    recorded = peak_reserved(events)
    ref = measured_max_reserved if measured_max_reserved else recorded
    predicted = int(result.peak_reserved)
    seq = sequence_match(device_allocations(recorded_part), device_allocations(model_part))
    return Fidelity(
        setting=config.conf() or "default", requests=int((req["op"] == "alloc").sum()),
        recorded_peak_reserved=recorded,
        measured_max_reserved=int(measured_max_reserved) if measured_max_reserved else None,
        predicted_peak_reserved=predicted,
        error_pct=100.0 * (predicted - ref) / ref if ref else 0.0,
        model_peak_allocated=int(result.peak_allocated),
        start="empty" if seeded is None else "recorded", result=result, **seq)


def seed_recorded_state(model: TorchCachingModel, events: pd.DataFrame,
                        requests: pd.DataFrame) -> tuple[dict[int, int], int, int] | None:
    """Give ``model`` the recording's state at its start: its
    segments (or mapped ranges of expandable segments) and the blocks alive in them, at the
    recorded offsets (:meth:`TorchCachingModel.seed_segment`).

    That state is the recording's leading rows at its first time that have no stack: what
    :mod:`~hookmagic.memory.torch_history` adds for the segments and blocks that predate the
    history (in a recording taken without stacks, the history's first rows at that same
    time count as part of it). Returns (handle -> model address of the blocks alive then,
    index of the first request of ``requests`` after them, for
    :func:`~hookmagic.memory.replay.replay`; index of the first row of ``events`` after them);
    None when the
    state cannot be laid out (an unmap or segment free at that time, a block outside every
    segment, a mapped range that is not whole pages from the segment's base, overlapping
    blocks); ``model`` may then hold part of it: start a new one.

    An expandable segment's base is not in the recording: it is taken as the lowest page the
    recording ever maps in that pool and stream at or below its first range at the start
    (PyTorch maps at the lowest address with room, so pages below that were never used).
    """
    if events.empty or requests.empty:
        return None
    acts = events["action"].astype(str).to_numpy()
    times = events["time_ns"].to_numpy()
    t0 = times.min()
    addr = events["address"].to_numpy().astype(np.int64)
    size = events["size"].to_numpy(np.int64)
    reqd = events["requested_size"].to_numpy(np.int64)
    stream = events["stream"].to_numpy(np.int64)
    pool = events["pool"].astype(str).to_numpy()
    end_action = "free_completed" if (acts == "free_completed").any() else "free_requested"
    # the state before the history: the leading rows at the first time without a stack (the
    # history's own rows carry their stack when the recording took stacks)
    stacks = events["stack_id"].to_numpy(np.int64)
    initial = (times == t0) & (stacks == -1)
    n0 = len(events) if initial.all() else int(np.argmin(initial))
    segments: dict[int, tuple[int, bool, int]] = {}      # address -> (size, small, stream)
    maps: dict[tuple[bool, int], list[tuple[int, int]]] = {}   # (small, stream) -> ranges
    live: dict[int, tuple[int, int, int, int]] = {}       # address -> (handle, size, req, stream)
    handle, start = 0, 0
    for i in range(n0):
        a = int(addr[i])
        if acts[i] == "segment_alloc":
            segments[a] = (int(size[i]), pool[i] == "small"
                           or (pool[i] == "" and size[i] == R.SMALL_BUFFER), int(stream[i]))
        elif acts[i] == "segment_map":
            small = pool[i] == "small" or (pool[i] == "" and size[i] % R.LARGE_BUFFER != 0)
            maps.setdefault((small, int(stream[i])), []).append((a, int(size[i])))
        elif acts[i] in ("segment_free", "segment_unmap"):
            return None
        elif acts[i] == "alloc":
            live[a] = (handle, int(size[i]), int(reqd[i]), int(stream[i]))
            handle, start = handle + 1, start + 1
        elif acts[i] == end_action and a in live:
            live.pop(a)
            start += 1                  # requests_from_events keeps frees of known blocks
    if start > len(requests):
        return None
    layouts = _ordinary_layouts(segments, live)
    expandable = _expandable_layouts(model, maps, live, acts, addr, stream, pool, n0)
    if layouts is None or expandable is None:
        return None
    placed_blocks = {a for *_, blocks in layouts + expandable for a, _, _ in blocks}
    if placed_blocks != set(live):
        return None                                      # a block outside every segment
    placed: dict[int, int] = {}
    # in address order, as the recording lists the state (each expandable one by its first range)
    for base, seg_size, small, st, ranges, blocks in sorted(
            layouts + expandable, key=lambda lay: lay[4][0][0] if lay[4] else lay[0]):
        try:
            got = model.seed_segment(seg_size, small, st,
                                     [(a - base, n, r) for a, n, r in blocks],
                                     None if ranges is None else [(lo - base, n)
                                                                  for lo, n in ranges])
        except InvalidArgument:         # overlapping blocks, ranges off the pages
            return None
        for (a, _, _), model_addr in zip(blocks, got):
            placed[live[a][0]] = model_addr
    return placed, start, n0


_Layout = tuple[int, int, bool, int, "list[tuple[int, int]] | None", "list[tuple[int, int, int]]"]


def _blocks_in(live: dict[int, tuple[int, int, int, int]], lo: int,
               hi: int) -> list[tuple[int, int, int]]:
    return [(a, n, r) for a, (_, n, r, _) in sorted(live.items()) if lo <= a < hi]


def _ordinary_layouts(segments: dict[int, tuple[int, bool, int]],
                      live: dict[int, tuple[int, int, int, int]]) -> list[_Layout] | None:
    """(base, size, small, stream, None, blocks) of the cudaMalloc'd segments."""
    return [(a, n, small, st, None, _blocks_in(live, a, a + n))
            for a, (n, small, st) in sorted(segments.items())]


def _expandable_layouts(model: TorchCachingModel,
                        maps: dict[tuple[bool, int], list[tuple[int, int]]],
                        live: dict[int, tuple[int, int, int, int]], acts: np.ndarray,
                        addr: np.ndarray, stream: np.ndarray, pool: np.ndarray,
                        first_row: int) -> list[_Layout] | None:
    """(base, 0, small, stream, mapped ranges, blocks) of the expandable segments: one per
    pool and stream (see :func:`seed_recorded_state` for the base)."""
    out: list[_Layout] = []
    va = model.expandable_va_size()
    for (small, st), ranges in sorted(maps.items()):
        ranges = sorted(ranges)
        first, last = ranges[0][0], max(lo + n for lo, n in ranges)
        page = R.SMALL_BUFFER if small else R.LARGE_BUFFER
        later = (acts == "segment_map") & (np.arange(len(acts)) >= first_row) & (stream == st) \
            & ((pool == ("small" if small else "large")) | (pool == ""))
        below = [int(a) for a in addr[later]
                 if last - va < a <= first and (first - int(a)) % page == 0]
        base = min([first] + below)
        if last - base > va or any((lo - base) % page or n % page for lo, n in ranges):
            return None
        out.append((base, 0, small, st, ranges, _blocks_in(live, base, last)))
    return out


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


def bare_snapshot(snap: dict) -> dict:
    """The parts of a ``torch.cuda.memory._snapshot()`` that
    :func:`~hookmagic.memory.torch_history.events_from_snapshot` reads, each trace entry with its
    innermost stack frame only: small enough to keep with a recording, JSON, and loadable with ``load_snapshot``
    (no pickle). The frame matters beyond the line it names: the history's own events carry a
    stack, the state that predates the history does not, and that is how
    :func:`~hookmagic.memory.fidelity.seed_recorded_state` tells them apart."""
    keep_e = ("action", "addr", "size", "stream", "time_us", "device_free")
    keep_s = ("device", "address", "total_size", "stream", "segment_type", "is_expandable")
    keep_b = ("address", "size", "requested_size", "state")
    keep_f = ("filename", "name", "line")
    return {"device_traces": [[{**{k: e[k] for k in keep_e if k in e},
                                "frames": [{k: f[k] for k in keep_f if k in f}
                                           for f in (e.get("frames") or [])[:1]]}
                               for e in trace]
                              for trace in snap.get("device_traces", [])],
            "segments": [{**{k: s[k] for k in keep_s if k in s},
                          "blocks": [{k: b[k] for k in keep_b if k in b}
                                     for b in s.get("blocks", [])]}
                         for s in snap.get("segments", [])]}
