"""Replay a captured sequence of allocation requests through allocator models.

The request sequence is what the program asked for (sizes before any rounding, and the order of
allocations and frees); every model answers it with its own rules, and the replay says how much
memory each would have reserved. Pure functions of their inputs: no I/O, no globals.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from hookmagic.memory.allocators import ModelBase, OutOfMemory, standard_models

def requests_from_events(events: pd.DataFrame) -> pd.DataFrame:
    """The program's requests behind an allocator-event table.

    Each ``alloc`` becomes an ``alloc`` request of ``requested_size`` bytes (``size`` when the
    source did not say); the block's end of life — ``free_completed``, or ``free_requested``
    where the source has no completions — becomes a ``free`` of the same handle. Frees of blocks
    allocated before the recording began are dropped (their sizes are unknown to the sequence).
    """
    ev = events
    act = ev["action"].to_numpy()
    has_completed = bool((act == "free_completed").any())
    end_action = "free_completed" if has_completed else "free_requested"
    keep = (act == "alloc") | (act == end_action)
    sub = ev.loc[keep]
    t = sub["time_ns"].to_numpy()
    a = sub["action"].to_numpy()
    addr = sub["address"].to_numpy()
    req = sub["requested_size"].to_numpy()
    size = sub["size"].to_numpy()
    stream = sub["stream"].to_numpy()
    stack = sub["stack_id"].to_numpy()
    open_handle: dict[int, int] = {}
    rows_op, rows_h, rows_i = [], [], []
    next_handle = 0
    for i in range(len(sub)):
        if a[i] == "alloc":
            open_handle[int(addr[i])] = next_handle
            rows_op.append("alloc")
            rows_h.append(next_handle)
            rows_i.append(i)
            next_handle += 1
        else:
            h = open_handle.pop(int(addr[i]), -1)
            if h >= 0:
                rows_op.append("free")
                rows_h.append(h)
                rows_i.append(i)
    idx = np.asarray(rows_i, dtype=np.int64)
    sizes = np.where(req[idx] > 0, req[idx], size[idx]) if len(idx) else np.zeros(0, np.int64)
    return pd.DataFrame({
        "time_ns": t[idx].astype(np.int64),
        "op": np.asarray(rows_op, dtype=object),
        "handle": np.asarray(rows_h, dtype=np.int64),
        "size": sizes.astype(np.int64),
        "stream": stream[idx].astype(np.int64),
        "stack_id": stack[idx].astype(np.int64),
    })


@dataclass
class ReplayResult:
    """What one model did with a request sequence."""

    name: str
    peak_reserved: int
    peak_allocated: int
    peak_requested: int
    final_reserved: int
    device_allocs: int
    ooms: int
    events: pd.DataFrame = field(repr=False)

    @property
    def waste_at_peak(self) -> float:
        """Fraction of the peak reservation never handed to the program at once."""
        return 1.0 - self.peak_requested / self.peak_reserved if self.peak_reserved else 0.0


def replay(requests: pd.DataFrame, model: ModelBase, placed: dict[int, int] | None = None,
           start: int = 0) -> ReplayResult:
    """Drive ``model`` through ``requests`` (see :func:`requests_from_events`).

    A request the model cannot satisfy within its capacity is logged as ``oom`` and skipped
    (its free too), as a program that caught the error would carry on. ``placed`` and
    ``start``: for a model already holding the program's blocks (e.g. seeded with a recorded
    state), handle -> address of those blocks, and the index of the first request to replay.
    """
    ops = requests["op"].to_numpy()
    handles = requests["handle"].to_numpy()
    sizes = requests["size"].to_numpy()
    streams = requests["stream"].to_numpy()
    times = requests["time_ns"].to_numpy()
    stacks = requests["stack_id"].to_numpy() if "stack_id" in requests else np.full(len(ops), -1)
    where: dict[int, int] = dict(placed or {})
    for i in range(start, len(ops)):
        model.now = int(times[i])
        model.current_stack = int(stacks[i])
        if ops[i] == "alloc":
            if sizes[i] <= 0:
                continue
            try:
                where[int(handles[i])] = model.malloc(int(sizes[i]), int(streams[i]))
            except OutOfMemory:
                pass
        else:
            addr = where.pop(int(handles[i]), None)
            if addr is not None:
                model.free(addr)
    return ReplayResult(model.name, model.peak_reserved, model.peak_allocated,
                        model.peak_requested, model.reserved, model.device_allocs, model.ooms,
                        model.events())


def what_if(requests: pd.DataFrame, models: dict[str, ModelBase] | None = None,
            baseline: str = "pytorch default") -> pd.DataFrame:
    """Replay ``requests`` through each model; one row per model, best first.

    Columns: ``model``, ``setting`` (the ``PYTORCH_CUDA_ALLOC_CONF`` value for PyTorch models),
    ``peak_reserved``, ``peak_allocated``, ``peak_requested``, ``waste_at_peak`` (1 - requested /
    reserved at their peaks), ``device_allocs``, ``ooms``, ``saved_bytes`` and ``saved_pct``
    against ``baseline``.
    """
    models = models if models is not None else standard_models()
    rows = []
    for key, m in models.items():
        r = replay(requests, m)
        conf = getattr(getattr(m, "config", None), "conf", None)
        rows.append({
            "model": r.name, "setting": conf() if conf else "",
            "peak_reserved": r.peak_reserved, "peak_allocated": r.peak_allocated,
            "peak_requested": r.peak_requested, "waste_at_peak": r.waste_at_peak,
            "device_allocs": r.device_allocs, "ooms": r.ooms,
        })
    table = pd.DataFrame(rows)
    base = table.loc[table["model"] == baseline, "peak_reserved"]
    ref = int(base.iloc[0]) if len(base) else int(table["peak_reserved"].max())
    table["saved_bytes"] = ref - table["peak_reserved"]
    table["saved_pct"] = 100.0 * table["saved_bytes"] / ref if ref else 0.0
    return table.sort_values(["ooms", "peak_reserved"], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class Recommendation:
    """The cheapest PyTorch setting for this workload and what it saves over the baseline."""

    setting: str
    saved_bytes: int
    saved_pct: float
    text: str


def recommend(table: pd.DataFrame, min_saving: float = 2.0) -> Recommendation:
    """Pick the PyTorch setting with the lowest peak from a :func:`what_if` table.

    Only PyTorch rows qualify (the others are not one environment variable away); a saving under
    ``min_saving`` percent is reported as "keep the default".
    """
    torch_rows = table[table["model"].str.startswith("pytorch") & (table["ooms"] == 0)]
    if torch_rows.empty:
        return Recommendation("", 0, 0.0, "no PyTorch model completed the replay")
    best = torch_rows.iloc[0]
    if best["setting"] == "" or best["saved_pct"] < min_saving:
        return Recommendation("", 0, 0.0,
                              "keep the default allocator settings: no setting saves "
                              f"{min_saving:g}% or more of peak reserved memory")
    saved = int(best["saved_bytes"])
    text = (f"PYTORCH_CUDA_ALLOC_CONF={best['setting']} would lower peak reserved memory by "
            f"{saved / 2**20:,.1f} MiB ({best['saved_pct']:.1f}%)")
    return Recommendation(str(best["setting"]), saved, float(best["saved_pct"]), text)
