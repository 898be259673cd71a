"""Reformat overhead: layers that only change a tensor's layout or precision."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ._frame import layers_of


def reformat_layers(layers: Any) -> pd.DataFrame:
    """Every Reformat layer with what it converts (precision change, layout only) and its cost."""
    frame = layers_of(layers)
    sel = frame[(frame["type"] == "Reformat") | (frame["layer_type"] == "Reformat")]
    out = sel[["order", "name", "origin", "in_precision", "out_precision", "in_format",
               "out_format", "mean_ms", "pct"]].reset_index(drop=True)
    out["conversion"] = [
        f"{a} -> {b}" if a != b else "layout only"
        for a, b in zip(out["in_precision"], out["out_precision"])]
    return out


def reformat_overhead(layers: Any) -> pd.DataFrame:
    """Reformat time grouped by origin (QDQ, REFORMAT, ...) and conversion, largest first.

    The last row, ``origin == "all"``, totals every reformat; ``pct`` is of the layer sum.
    """
    frame = layers_of(layers)
    total = frame["mean_ms"].sum()
    ref = reformat_layers(frame)
    out = (ref.groupby(["origin", "conversion"], sort=False)
           .agg(layers=("name", "size"), mean_ms=("mean_ms", "sum")).reset_index()
           .sort_values(["mean_ms", "origin"], ascending=[False, True], kind="stable"))
    all_row = pd.DataFrame([{"origin": "all", "conversion": "", "layers": len(ref),
                             "mean_ms": float(ref["mean_ms"].sum())}])
    out = pd.concat([out, all_row], ignore_index=True)
    out["pct"] = out["mean_ms"] / total * 100.0 if total > 0 else float("nan")
    return out
