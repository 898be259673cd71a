"""Where the time and memory go: top layers, time by type / precision, memory footprint."""
from __future__ import annotations

from typing import Any

import pandas as pd

from hookmagic.common.format import MiB

from ._frame import layers_of


def top_layers(layers: Any, n: int = 10, by: str = "mean_ms") -> pd.DataFrame:
    """The ``n`` layers with the largest ``by``, largest first, with their share of the total."""
    frame = layers_of(layers)
    cols = ["order", "name", "type", "precision", "mean_ms", "median_ms", "pct", "tactic"]
    return (frame.sort_values([by, "order"], ascending=[False, True], kind="stable")
            .head(n)[cols].reset_index(drop=True))


def time_by(layers: Any, column: str | list[str]) -> pd.DataFrame:
    """Layer count, summed mean time (ms) and share (%) per value of ``column``, largest first."""
    frame = layers_of(layers)
    keys = [column] if isinstance(column, str) else list(column)
    total = frame["mean_ms"].sum()
    out = (frame.groupby(keys, sort=False, dropna=False)
           .agg(layers=("name", "size"), mean_ms=("mean_ms", "sum"))
           .reset_index())
    out["pct"] = out["mean_ms"] / total * 100.0 if total > 0 else float("nan")
    return out.sort_values(["mean_ms"] + keys, ascending=[False] + [True] * len(keys),
                           kind="stable").reset_index(drop=True)


def time_by_type(layers: Any) -> pd.DataFrame:
    """:func:`time_by` the layer ``type`` (Convolution, Reformat, Pooling, Myelin, ...)."""
    return time_by(layers, "type")


def time_by_precision(layers: Any) -> pd.DataFrame:
    """:func:`time_by` the layer ``precision`` (that of its first input)."""
    return time_by(layers, "precision")


def memory_by_type(layers: Any) -> pd.DataFrame:
    """Weight and activation MiB per layer type, largest weights first."""
    frame = layers_of(layers)
    out = (frame.groupby("type", sort=False)
           .agg(layers=("name", "size"), weights_mib=("weight_bytes", "sum"),
                activations_mib=("activation_bytes", "sum"))
           .reset_index())
    out[["weights_mib", "activations_mib"]] /= MiB
    return out.sort_values(["weights_mib", "type"], ascending=[False, True],
                           kind="stable").reset_index(drop=True)


def filter_layers(layers: Any, types: Any = None, precisions: Any = None,
                  pattern: str | None = None, sort_by: str = "mean_ms",
                  n: int | None = None) -> pd.DataFrame:
    """Layers of the given types and precisions whose name matches ``pattern`` (a regular
    expression, case-insensitive; an invalid one matches literally), sorted by ``sort_by``
    (largest first; ``"order"`` keeps execution order) and cut to the first ``n``."""
    import re

    frame = layers_of(layers)
    keep = pd.Series(True, index=frame.index)
    if types:
        keep &= frame["type"].isin(list(types))
    if precisions:
        keep &= frame["precision"].isin(list(precisions))
    if pattern:
        try:
            rx = re.compile(pattern, re.I)
        except re.error:
            rx = re.compile(re.escape(pattern), re.I)
        keep &= frame["name"].map(lambda s: bool(rx.search(s)))
    out = frame[keep]
    if sort_by == "order":
        out = out.sort_values("order", kind="stable")
    else:
        out = out.sort_values([sort_by, "order"], ascending=[False, True], kind="stable")
    return (out.head(n) if n else out).reset_index(drop=True)
