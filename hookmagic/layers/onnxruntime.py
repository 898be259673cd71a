"""Import ONNX Runtime's profiler JSON (``SessionOptions.enable_profiling = True``).

The file is a Chrome-trace event list. Each node run leaves a ``"<node>_kernel_time"`` event
(``cat == "Node"``, ``dur`` in microseconds, ``args`` with ``op_name``, ``provider``,
``input_type_shape``, ``output_type_shape``, ``parameter_size``); each ``session.run`` leaves a
``model_run`` event (``cat == "Session"``) that brackets its node events and gives the
end-to-end time. Node times of GPU execution providers are measured on the host around the
launch, so treat them as launch-side costs unless the provider synchronises.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hookmagic.common import limits
from hookmagic.common.errors import HookmagicError

from .dtypes import UNKNOWN, precision_of
from .errors import LayerFileError
from .model import LayerProfile, make_layers
from .trtexec import _number, latency_stats, read_json

_SUFFIX = "_kernel_time"


def from_onnxruntime(path: str | Path, *, skip_first: bool = True,
                     name: str | None = None) -> LayerProfile:
    """A :class:`LayerProfile` from an ONNX Runtime profile: one row per graph node, times over
    the ``model_run`` calls (the first, a warm-up, skipped unless ``skip_first=False``).

    Raises :class:`LayerFileError` (``LayerNumbersError`` for negative, infinite or textual
    times) with one line naming the file."""
    try:
        return _from_onnxruntime(path, skip_first, name)
    except HookmagicError:
        raise
    except (ValueError, TypeError, OverflowError, KeyError, AttributeError) as exc:
        raise LayerFileError(f"ONNX Runtime profile {path} holds a value this importer cannot "
                             f"use ({type(exc).__name__}: {exc})") from None


def _from_onnxruntime(path: str | Path, skip_first: bool, name: str | None) -> LayerProfile:
    data = read_json(path, "ONNX Runtime profile")
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise LayerFileError(f"ONNX Runtime profile {path} should be a JSON array of trace events")
    limits.check(limits.MAX_ROWS, len(events), f"ONNX Runtime profile {path}")
    nodes = [e for e in events if isinstance(e, dict) and e.get("cat") == "Node"
             and str(e.get("name", "")).endswith(_SUFFIX)]
    runs = sorted((e for e in events if isinstance(e, dict) and e.get("cat") == "Session"
                   and e.get("name") == "model_run"), key=lambda e: e.get("ts", 0))
    if not nodes:
        raise LayerFileError(f"ONNX Runtime profile {path} has no '*{_SUFFIX}' node events; "
                             "was profiling enabled for a session.run()?")
    where = f"ONNX Runtime profile {path}"
    for e in nodes + runs:
        for key in ("ts", "dur"):
            _number(e.get(key, 0), f"{where}: event {str(e.get('name'))[:60]!r} {key}",
                    negative_ok=key == "ts")
    frame = pd.DataFrame({
        "node": [str(e["name"])[: -len(_SUFFIX)] for e in nodes],
        "ts": [float(e.get("ts", 0)) for e in nodes],
        "dur_us": [float(e.get("dur", 0)) for e in nodes],
    })
    if frame[["ts", "dur_us"]].isna().any().any():
        from .errors import LayerNumbersError
        raise LayerNumbersError(f"{where}: {int(frame[['ts', 'dur_us']].isna().sum().sum())} "
                                "node event(s) have a NaN ts or dur")
    frame["run"] = _run_index(frame["ts"], runs)
    if skip_first and len(runs) > 1:
        frame = frame[frame["run"] != 0]
        runs = runs[1:]
    n_runs = max(1, frame["run"].nunique())
    args = {}
    for e in nodes:
        args.setdefault(str(e["name"])[: -len(_SUFFIX)], e.get("args", {}) or {})
    per = frame.groupby(["node", "run"], sort=False)["dur_us"].sum().unstack(fill_value=0.0) / 1e3
    order = list(dict.fromkeys(frame.sort_values("ts")["node"]))
    rows = [_row(node, per.loc[node], args.get(node, {})) for node in order]
    meta: dict[str, Any] = {"name": name or Path(path).stem, "source": "onnxruntime",
                            "iterations": n_runs,
                            "providers": sorted({str(a.get("provider", "")) for a in args.values()} - {""})}
    if runs:
        meta["latency_ms"] = latency_stats(float(r.get("dur", 0)) / 1e3 for r in runs)
    return LayerProfile(layers=make_layers(rows), meta=meta)


def _run_index(ts: pd.Series, runs: list[dict[str, Any]]) -> list[int]:
    """The index of the ``model_run`` around each node time (-1: none); 0 for all without
    runs. Runs are sorted by start; a binary search per node keeps this linear-logarithmic."""
    if not runs:
        return [0] * len(ts)
    starts = np.array([float(r.get("ts", 0)) for r in runs])
    ends = starts + np.array([float(r.get("dur", 0)) for r in runs])
    t = np.asarray(ts, dtype=float)
    idx = np.searchsorted(starts, t, side="right") - 1
    ok = (idx >= 0) & (t <= ends[np.clip(idx, 0, None)])
    return np.where(ok, idx, -1).tolist()


def _tensors(items: Any) -> list[tuple[str, list[int]]]:
    out = []
    for item in items or []:
        if isinstance(item, dict):
            for dtype, shape in item.items():
                out.append((str(dtype), [int(d) for d in shape] if isinstance(shape, list) else []))
    return out


def _row(node: str, per_run: pd.Series, args: dict[str, Any]) -> dict[str, Any]:
    ins, outs = _tensors(args.get("input_type_shape")), _tensors(args.get("output_type_shape"))
    in_prec = precision_of(ins[0][0]) if ins else UNKNOWN
    out_prec = precision_of(outs[0][0]) if outs else UNKNOWN
    act = args.get("activation_size"), args.get("output_size")
    return {
        "name": node, "type": str(args.get("op_name", UNKNOWN)),
        "layer_type": str(args.get("op_name", UNKNOWN)),
        "precision": in_prec, "in_precision": in_prec, "out_precision": out_prec,
        "in_format": ins[0][0] if ins else "", "out_format": outs[0][0] if outs else "",
        "tactic": str(args.get("provider", "")),
        "mean_ms": float(per_run.mean()), "median_ms": float(per_run.median()),
        "p90_ms": float(per_run.quantile(0.9)),
        "weight_bytes": float(args.get("parameter_size", 0) or 0),
        "activation_bytes": float(act[0]) + float(act[1] or 0) if act[0] is not None else math.nan,
        "in_shapes": ", ".join("x".join(map(str, s)) for _, s in ins),
        "out_shapes": ", ".join("x".join(map(str, s)) for _, s in outs),
        "source_nodes": [node], "details": json.dumps(args),
    }
