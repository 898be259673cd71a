"""Configuration search on the simulator: every combination of a grid, scored under limits.

Like Triton Model Analyzer's brute-force search, but on the simulator (the compiled fast path
whenever the policy allows), so a few dozen configurations take well under a second::

    table = sweep(models, workload,
                  grid={"max_batch": [1, 4, 8, 16], "max_delay_ms": [0, 1, 2, 5], "streams": [1, 2]},
                  limits={"p99_ms": 30, "min_throughput_rps": 400})
    policy = best_policy(table)
"""
from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from hookmagic.common.progress import progress

from .models import ModelSpec
from .policies import Batching, Policy, Stream
from .simulator import _as_specs, host_jitter, service_multipliers, simulate_raw
from .workloads import Workload

__all__ = ["sweep", "best_policy", "policy_from_row", "GRID_KEYS"]

#: grid keys understood by :func:`policy_from_row`
GRID_KEYS = ("order", "max_batch", "max_delay_ms", "preferred", "streams")


def policy_from_row(base: Policy, row: Mapping[str, Any]) -> Policy:
    """``base`` with the grid values of ``row`` applied (the same batching for every model)."""
    changes: dict[str, Any] = {}
    if "order" in row:
        changes["order"] = row["order"]
    if any(k in row for k in ("max_batch", "max_delay_ms", "preferred")):
        b0 = base.batching if isinstance(base.batching, Batching) else Batching()
        changes["batching"] = Batching(int(row.get("max_batch", b0.max_batch)),
                                       float(row.get("max_delay_ms", b0.max_delay_ms)),
                                       tuple(row.get("preferred", b0.preferred) or ()))
    if "streams" in row:
        k = int(row["streams"])
        changes["streams"] = tuple(Stream() for _ in range(k))
    return replace(base, **changes)


def _quick_metrics(raw, arrays, specs, duration_s: float) -> dict[str, float]:
    """Headline metrics straight from an engine's raw arrays (no DataFrames)."""
    status, _drop, b_model, b_stream, b_start, b_end, b_size, served = raw
    n = len(arrays["arrival"])
    end = np.full(n, np.nan)
    end[served] = np.repeat(b_end, b_size)
    lat = (end - arrays["arrival"]) * 1e3
    ok = ~np.isnan(lat)
    met = ok & (end <= arrays["deadline"])
    out = {"served": int(ok.sum()), "dropped": int(n - ok.sum()),
           "throughput_rps": ok.sum() / duration_s, "goodput_rps": met.sum() / duration_s,
           "slo_pct": 100.0 * met.mean() if n else np.nan,
           "p50_ms": float(np.percentile(lat[ok], 50)) if ok.any() else np.nan,
           "p99_ms": float(np.percentile(lat[ok], 99)) if ok.any() else np.nan,
           "batch_mean": float(b_size.mean()) if len(b_size) else np.nan}
    worst = -np.inf
    for k, s in enumerate(specs):
        sel = ok & (arrays["model"] == k)
        if sel.any():
            v = float(np.percentile(lat[sel], 99))
            out[f"p99_ms[{s.name}]"] = v
            worst = max(worst, v)
    out["worst_model_p99_ms"] = worst
    return out


def sweep(models: Sequence[ModelSpec] | Mapping[str, ModelSpec], workload: Workload,
          grid: Mapping[str, Sequence[Any]], *, base: Policy | None = None,
          limits: Mapping[str, float] | None = None, objective: str = "goodput_rps",
          seed: int = 0, engine: str = "auto") -> pd.DataFrame:
    """Simulate every combination of ``grid`` and score it.

    Parameters
    ----------
    grid : values to try for any of :data:`GRID_KEYS` ("order", "max_batch", "max_delay_ms",
        "preferred", "streams"), applied to ``base`` (default ``Policy()``) for every model.
    limits : constraints a configuration must meet to be ``feasible``: ``p99_ms`` (every
        model's p99 at most this), ``min_throughput_rps``, ``min_slo_pct``, ``max_memory_bytes``
        (models' ``memory_bytes`` times streams, as instance groups each hold a copy).
    objective : column to maximise among feasible rows (for a ``*_ms`` column, minimised).

    Returns one row per configuration, best first; ``feasible`` says which meet ``limits``.
    """
    specs = _as_specs(models)
    base = base or Policy()
    limits = dict(limits or {})
    names = [s.name for s in specs]
    arrays = workload.arrays(names)
    mult = service_multipliers(specs, arrays["model"], seed)
    jit = host_jitter(specs, arrays["model"], seed)  # as simulate() draws it
    if jit is not None:
        arrays = dict(arrays, launch_jitter=jit[0], host_jitter=jit[1])
    keys = list(grid)
    rows = []
    combos = list(itertools.product(*(list(grid[k]) for k in keys)))
    for values in progress(combos, desc="sweep", total=len(combos), unit="policy"):
        row = dict(zip(keys, values))
        pol = policy_from_row(base, row)
        raw, used = simulate_raw(specs, arrays, mult, pol, engine)
        m = _quick_metrics(raw, arrays, specs, workload.duration_s)
        m["memory_bytes"] = int(sum(s.memory_bytes for s in specs) * len(pol.streams))
        m["engine"] = used
        rows.append({**row, **m})
    table = pd.DataFrame(rows)
    feasible = pd.Series(True, index=table.index)
    if "p99_ms" in limits:
        feasible &= table["worst_model_p99_ms"] <= limits["p99_ms"]
    if "min_throughput_rps" in limits:
        feasible &= table["throughput_rps"] >= limits["min_throughput_rps"]
    if "min_slo_pct" in limits:
        feasible &= table["slo_pct"] >= limits["min_slo_pct"]
    if "max_memory_bytes" in limits:
        feasible &= table["memory_bytes"] <= limits["max_memory_bytes"]
    table["feasible"] = feasible
    ascending = objective.endswith("_ms")
    table = table.sort_values(["feasible", objective], ascending=[False, ascending], kind="stable")
    table.attrs["grid_keys"] = keys
    table.attrs["base"] = base
    return table.reset_index(drop=True)


def best_policy(table: pd.DataFrame, base: Policy | None = None) -> Policy | None:
    """The policy of the best feasible row of a :func:`sweep` table (None if none is feasible)."""
    ok = table[table["feasible"]]
    if ok.empty:
        return None
    keys = table.attrs.get("grid_keys", [k for k in GRID_KEYS if k in table.columns])
    return policy_from_row(base or table.attrs.get("base") or Policy(),
                           {k: ok.iloc[0][k] for k in keys})
