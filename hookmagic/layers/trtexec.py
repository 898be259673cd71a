"""Import trtexec's JSON exports (``--exportProfile``, ``--exportLayerInfo``, ``--exportTimes``).

Handles the TensorRT 8.2-10.x layer-info form (``Layers`` + ``Bindings``, one
``Format/Datatype`` phrase per tensor) and the 11.x form (``I/O Tensors``, separate format and
data-type keys). Keys that are not understood are listed in ``meta["warnings"]``, never dropped
silently.
"""
from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from .dtypes import UNKNOWN, precision_of, tensor_bytes
from hookmagic.common import files, limits
from hookmagic.common.errors import HookmagicError, InvalidArgument

from .errors import LayerFileError, LayerNumbersError
from .model import LayerProfile, make_layers
from .names import is_myelin, nodes_from_name, parse_metadata

PathLike = str | Path

_TOP_KEYS = {"Layers", "Bindings", "I/O Tensors"}
_TENSOR_KEYS = {"Name", "Location", "Dimensions", "Format/Datatype"}
# TensorRT 11 splits "Format/Datatype"; accept the spellings its inspector may use.
_DTYPE_KEYS = ("DataType", "Datatype", "Data Type", "Type")
_FORMAT_KEYS = ("Format", "TensorFormat", "Format/Datatype")
_PROFILE_FIELDS = {"name", "timeMs", "averageMs", "medianMs", "percentage"}
_TIMES_RENAME = {
    "startEnqMs": "start_enq_ms", "endEnqMs": "end_enq_ms",
    "startH2dMs": "start_h2d_ms", "endH2dMs": "end_h2d_ms",
    "startComputeMs": "start_compute_ms", "endComputeMs": "end_compute_ms",
    "startD2hMs": "start_d2h_ms", "endD2hMs": "end_d2h_ms",
    "h2dMs": "h2d_ms", "computeMs": "compute_ms", "d2hMs": "d2h_ms", "latencyMs": "latency_ms",
}


def from_trtexec(profile: PathLike | None = None, layers: PathLike | None = None,
                 times: PathLike | None = None, *, name: str | None = None,
                 meta: dict[str, Any] | None = None) -> LayerProfile:
    """Build a :class:`LayerProfile` from trtexec's JSON exports.

    Parameters
    ----------
    profile : path, optional
        ``--exportProfile`` file: per-layer times (mean, median, total) over ``count`` iterations.
    layers : path, optional
        ``--exportLayerInfo`` file (best with ``--profilingVerbosity=detailed``): layer types,
        tensors, precisions, tactics, weights, Metadata.
    times : path, optional
        ``--exportTimes`` file: per-iteration end-to-end timings (fills ``meta["latency_ms"]``).
    name : str, optional
        Label for this engine (default: the file name without its export suffixes).
    meta : dict, optional
        Extra per-engine facts (device, build options) merged into ``meta``. When absent, the
        ``<engine>.build.metadata.json`` / ``<engine>.profile.metadata.json`` files that
        TREx's scripts write beside the exports are read if present (device name, build
        options; see :func:`load_logged_metadata`).

    Layers are joined to profile records by name. NoOp layers are folded into the layer that
    produces their input; Constant layers go to ``.constants``. Raises :class:`LayerFileError`
    with a one-line reason when a file is missing, not JSON, or not the expected export.
    """
    if profile is None and layers is None:
        raise InvalidArgument("from_trtexec needs profile=, layers= or both")
    try:
        with files.gc_paused():
            return _from_trtexec(profile, layers, times, name, meta)
    except HookmagicError:
        raise
    except (ValueError, TypeError, OverflowError, KeyError, AttributeError) as exc:
        # a backstop: whatever a hand-edited or hostile export trips, the user gets one line
        files_ = ", ".join(str(f) for f in (profile, layers, times) if f is not None)
        raise LayerFileError(f"trtexec export(s) {files_} hold a value this importer cannot "
                             f"use ({type(exc).__name__}: {exc})") from None


def _from_trtexec(profile, layers, times, name, meta) -> LayerProfile:
    warnings: list[str] = []
    records, count = read_profile(profile) if profile is not None else ([], None)
    info = read_layer_info(layers, warnings) if layers is not None else None
    rows = join_timing([_timing(r, profile) for r in records], info["layers"] if info else None,
                       warnings)
    if not rows:   # an empty profile would read as a model that takes no time
        files_ = ", ".join(str(f) for f in (profile, layers) if f is not None)
        raise LayerFileError(f"trtexec export(s) {files_} hold no layers")
    rows, constants = split_constants(rows, warnings)
    rows = fold_noops(rows)
    label = name or _label(profile or layers)
    out_meta: dict[str, Any] = {"name": label, "source": "trtexec", "iterations": count,
                                "files": {k: str(v) for k, v in
                                          (("profile", profile), ("layers", layers), ("times", times))
                                          if v is not None}}
    if info:
        out_meta["io_tensors"] = info["io"]
    times_df = None
    if times is not None:
        times_df = read_times(times)
        out_meta["latency_ms"] = latency_stats(times_df["latency_ms"])
        out_meta["compute_ms"] = latency_stats(times_df["compute_ms"])
        untimed = int(times_df["latency_ms"].isna().sum())
        if untimed:
            warnings.append(f"{untimed} iteration(s) of the --exportTimes file have no "
                            "latency (null/NaN); left out of the statistics")
    nan = sum(1 for r in records if _isnan(r.get("averageMs", r.get("timeMs"))))
    if nan:
        warnings.append(f"{nan} profile record(s) have a NaN/null time; they are left out of "
                        "the layer sum")
    out_meta.update(logged_metadata_beside(profile or layers) if meta is None else meta)
    out_meta["warnings"] = list(out_meta.get("warnings", [])) + warnings
    return LayerProfile(layers=make_layers(rows), meta=out_meta, times=times_df,
                        constants=pd.DataFrame(constants))


def _isnan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


# ---- readers --------------------------------------------------------------------------------

def read_json(path: PathLike, what: str) -> Any:
    """Parse a JSON file, or raise :class:`LayerFileError` saying which file and what is wrong."""
    path = Path(path)
    if not os.path.lexists(path):
        raise LayerFileError(f"{what} file {path} does not exist")
    # bounded (HOOKMAGIC_MAX_BYTES / _JSON_BYTES / _DEPTH); folders, FIFOs, devices refused;
    # gzip-compressed exports (e.g. ``t.json.gz``) are inflated within the same budget
    raw = files.read_input_maybe_gzip(path, f"{what} file", LayerFileError)
    return files.parse_json(raw, f"{what} file {path}", LayerFileError, errors="replace")


def read_profile(path: PathLike) -> tuple[list[dict[str, Any]], int | None]:
    """Records of a ``--exportProfile`` file and its iteration ``count``."""
    data = read_json(path, "--exportProfile")
    if isinstance(data, dict) and ("Layers" in data or "Bindings" in data):
        raise LayerFileError(f"{path} is a --exportLayerInfo file, not --exportProfile; "
                             "pass it as layers= (--layers)")
    if not isinstance(data, list) or not data:
        raise LayerFileError(f"--exportProfile file {path} should be a JSON array "
                             "[{\"count\": N}, {\"name\": ..., \"averageMs\": ...}, ...]")
    if isinstance(data[0], dict) and "startComputeMs" in data[0]:
        raise LayerFileError(f"{path} is a --exportTimes file, not --exportProfile; pass it as times= (--times)")
    limits.check(limits.MAX_ROWS, len(data), f"--exportProfile file {path}")
    count = None
    records = []
    for i, item in enumerate(data):
        if isinstance(item, dict) and set(item) == {"count"}:
            count = _number(item["count"], f"--exportProfile file {path}: count", integer=True)
            continue
        if not isinstance(item, dict) or "name" not in item or not (
                "averageMs" in item or "timeMs" in item):
            raise LayerFileError(f"--exportProfile file {path}: element {i} is not a layer record "
                                 f"(expected name and averageMs/timeMs, got {_short(item)})")
        records.append(item)
    if not records:
        raise LayerFileError(f"--exportProfile file {path} holds no layer records (only "
                             f"{'an iteration count' if count is not None else 'empty items'}): "
                             "was the engine run with --dumpProfile --exportProfile?")
    return records, count


def read_layer_info(path: PathLike, warnings: list[str] | None = None) -> dict[str, Any]:
    """Layers and I/O tensors of a ``--exportLayerInfo`` file (TensorRT 8.2-11.x forms)."""
    warnings = warnings if warnings is not None else []
    data = read_json(path, "--exportLayerInfo")
    return layer_info_from_doc(data, warnings, str(path))


def layer_info_from_doc(data: Any, warnings: list[str] | None = None,
                        path: str = "layer info") -> dict[str, Any]:
    """Layers and I/O tensors of a parsed layer-info document (a file's JSON, or what the
    engine inspector's ``get_engine_information`` returned)."""
    warnings = warnings if warnings is not None else []
    if isinstance(data, list):
        raise LayerFileError(f"{path} is a JSON array: a --exportProfile or --exportTimes file, "
                             "not --exportLayerInfo; pass it as profile= or times= (--profile, --times)")
    if not isinstance(data, dict) or not isinstance(data.get("Layers"), list):
        raise LayerFileError(f"--exportLayerInfo file {path} has no \"Layers\" list")
    limits.check(limits.MAX_ROWS, len(data["Layers"]), f"--exportLayerInfo file {path}")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        warnings.append(f"layer info: top-level keys not understood: {sorted(unknown)}")
    layers = [parse_layer(raw, warnings) for raw in data["Layers"]]
    if layers and all(not lay["detailed"] for lay in layers):
        warnings.append("layer info has names only: rebuild with --profilingVerbosity=detailed "
                        "for types, precisions and tactics")
    return {"layers": layers, "io": _io_tensors(data)}


def read_times(path: PathLike) -> pd.DataFrame:
    """Per-iteration timings of a ``--exportTimes`` file, columns in snake_case milliseconds."""
    data = read_json(path, "--exportTimes")
    if not isinstance(data, list) or not data or not all(
            isinstance(d, dict) and "latencyMs" in d for d in data):
        raise LayerFileError(f"--exportTimes file {path} should be a JSON array of per-iteration "
                             "objects with latencyMs, computeMs, ...")
    limits.check(limits.MAX_ROWS, len(data), f"--exportTimes file {path}")
    frame = pd.DataFrame(data).rename(columns=_TIMES_RENAME)
    for col in [c for c in frame.columns if c.endswith("_ms")]:
        for i, v in enumerate(frame[col]):
            if not _isnan(v):
                _number(v, f"--exportTimes file {path}: iteration {i} {col}",
                        negative_ok=col.startswith(("start_", "end_")))
    return frame.astype({c: "float64" for c in frame.columns if c.endswith("_ms")})


def latency_stats(values: Iterable[float]) -> dict[str, float]:
    """mean, median, p90, p99, min, max and n of a series of times (ms)."""
    s = pd.Series(list(values), dtype="float64").dropna()
    if s.empty:
        return {}
    return {"mean": float(s.mean()), "median": float(s.median()), "p90": float(s.quantile(0.9)),
            "p99": float(s.quantile(0.99)), "min": float(s.min()), "max": float(s.max()),
            "n": int(len(s))}


def load_logged_metadata(build: PathLike | None = None, profile: PathLike | None = None) -> dict[str, Any]:
    """Device and build facts from the ``*.build.metadata.json`` / ``*.profile.metadata.json``
    files that TREx scraped from trtexec's console log (not trtexec exports themselves)."""
    out: dict[str, Any] = {}
    if build is not None:
        b = read_json(build, "build metadata")
        out["build_options"] = b.get("build_options", {})
        out["model_options"] = b.get("model_options", {})
        out["precision_mode"] = out["build_options"].get("Precision", "")
    if profile is not None:
        p = read_json(profile, "profile metadata")
        dev = p.get("device_information", {})
        out["device"] = dev.get("Selected Device", "")
        out["device_information"] = dev
        out["inference_options"] = p.get("inference_options", {})
        out["performance_summary"] = p.get("performance_summary", {})
    out["metadata_note"] = "scraped from trtexec's console log"
    return out


def logged_metadata_beside(export: PathLike) -> dict[str, Any]:
    """:func:`load_logged_metadata` of the ``*.build.metadata.json`` / ``*.profile.metadata.json``
    files next to a trtexec export (``X.engine.profile.json`` -> ``X.engine.*.metadata.json``);
    ``{}`` when there are none."""
    export = Path(export)
    stem = export.name
    for suffix in (".json", ".profile", ".graph", ".layers", ".timing", ".times"):
        stem = stem.removesuffix(suffix)
    build = export.with_name(f"{stem}.build.metadata.json")
    profile = export.with_name(f"{stem}.profile.metadata.json")
    if not (build.is_file() or profile.is_file()):
        return {}
    return load_logged_metadata(build=build if build.is_file() else None,
                                profile=profile if profile.is_file() else None)


def engine_labels(paths: list[PathLike]) -> list[str]:
    """Labels for engines named by their export files: the file name without export suffixes,
    with as many parent folders as it takes to tell them apart (``fp16/resnet``,
    ``fp32/resnet``)."""
    parts = [Path(p).resolve().parts[:-1] + (_label(p),) for p in paths]
    depth = 1
    while depth < max(len(p) for p in parts):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
        depth += 1
    return ["/".join(p[-depth:]) for p in parts]


# ---- one layer ----------------------------------------------------------------------------

def parse_layer(raw: Any, warnings: list[str] | None = None) -> dict[str, Any]:
    """One inspector layer record (a dict, or a bare name without detailed verbosity) -> row."""
    warnings = warnings if warnings is not None else []
    if isinstance(raw, str):
        return {"name": raw, "type": UNKNOWN, "layer_type": UNKNOWN, "detailed": False,
                "source_nodes": nodes_from_name(raw), "is_myelin": is_myelin(raw, ""),
                "details": json.dumps(raw)}
    if not isinstance(raw, dict) or "Name" not in raw:
        raise LayerFileError(f"--exportLayerInfo: a layer record has no Name: {_short(raw)}")
    name = str(raw["Name"])
    layer_type = str(raw.get("LayerType", UNKNOWN))
    inputs = [_tensor(t, warnings) for t in raw.get("Inputs", []) or []]
    outputs = [_tensor(t, warnings) for t in raw.get("Outputs", []) or []]
    first_in = inputs[0] if inputs else {"precision": UNKNOWN, "format": ""}
    first_out = outputs[0] if outputs else {"precision": UNKNOWN, "format": ""}
    nodes = parse_metadata(raw.get("Metadata")) or nodes_from_name(name)
    return {
        "name": name,
        "type": str(raw.get("ParameterType") or layer_type),
        "layer_type": layer_type,
        "precision": first_in["precision"],
        "in_precision": first_in["precision"],
        "out_precision": first_out["precision"],
        "in_format": first_in["format"],
        "out_format": first_out["format"],
        "tactic": str(raw.get("TacticName") or ""),
        "weight_bytes": _param_bytes(raw.get("Weights")),
        "bias_bytes": _param_bytes(raw.get("Bias")),
        "activation_bytes": sum(t["bytes"] for t in inputs + outputs) if inputs + outputs else math.nan,
        "in_shapes": ", ".join(t["shape"] for t in inputs),
        "out_shapes": ", ".join(t["shape"] for t in outputs),
        "in_tensors": [t["name"] for t in inputs],
        "out_tensors": [t["name"] for t in outputs],
        "source_nodes": nodes,
        "is_myelin": is_myelin(name, layer_type),
        "origin": str(raw.get("Origin") or ""),
        "details": json.dumps(raw),
        "detailed": True,
    }


def _tensor(t: Any, warnings: list[str]) -> dict[str, Any]:
    if not isinstance(t, dict):
        return {"name": str(t), "precision": UNKNOWN, "format": "", "shape": "?", "bytes": math.nan}
    dtype_text = next((t[k] for k in _DTYPE_KEYS if k in t), None)
    fmt_text = next((t[k] for k in _FORMAT_KEYS if k in t), "")
    precision = precision_of(dtype_text) if dtype_text is not None else precision_of(fmt_text)
    if precision == UNKNOWN and dtype_text is None and fmt_text:
        precision = precision_of(fmt_text)
    extra = set(t) - _TENSOR_KEYS - set(_DTYPE_KEYS) - set(_FORMAT_KEYS)
    if extra:
        msg = f"tensor keys not understood: {sorted(extra)}"
        if msg not in warnings:
            warnings.append(msg)
    dims = t.get("Dimensions")
    shape = "x".join(str(d) for d in dims) if isinstance(dims, list) else "?"
    if "Format/Datatype" in t:
        fmt = str(t["Format/Datatype"])
    else:
        fmt = " ".join(str(x) for x in (t.get("Format"), dtype_text) if x)
    return {"name": str(t.get("Name", "")), "precision": precision, "format": fmt,
            "shape": shape, "bytes": tensor_bytes(dims, precision)}


def _param_bytes(param: Any) -> float:
    if not isinstance(param, dict) or "Count" not in param:
        return 0.0
    count = _number(param["Count"], "--exportLayerInfo: a layer's weight Count", integer=True)
    if _isnan(count):
        return 0.0
    b = tensor_bytes([count], precision_of(param.get("Type")))
    return 0.0 if math.isnan(b) else b


def _io_tensors(data: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(data.get("I/O Tensors"), list):  # TensorRT 11
        out = []
        for t in data["I/O Tensors"]:
            if isinstance(t, dict):
                out.append({"name": t.get("Name", ""), "mode": str(t.get("IOMode", "")).lower(),
                            "precision": precision_of(t.get("DataType")),
                            "shape": t.get("Dimensions")})
        return out
    return [{"name": str(b), "mode": "", "precision": UNKNOWN, "shape": None}
            for b in data.get("Bindings", []) or []]


# ---- joining -----------------------------------------------------------------------------

def join_timing(timing: list[dict[str, Any]], info: list[dict[str, Any]] | None,
                warnings: list[str]) -> list[dict[str, Any]]:
    """Rows in execution order: layer info joined to timing rows (``name, mean_ms, ...``) by
    name (k-th occurrence of a name pairs with the k-th occurrence, so repeated names join)."""
    if info is None:
        return [{"type": _guess_type(t["name"]), "layer_type": UNKNOWN,
                 "source_nodes": nodes_from_name(t["name"]),
                 "is_myelin": is_myelin(t["name"], ""), "details": json.dumps(t), **t}
                for t in timing]
    if not timing:
        return [dict(lay) for lay in info]
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    seen: dict[str, int] = {}
    for t in timing:
        k = seen.get(t["name"], 0)
        seen[t["name"]] = k + 1
        by_key[(t["name"], k)] = t
    rows, used = [], set()
    seen = {}
    for lay in info:
        k = seen.get(lay["name"], 0)
        seen[lay["name"]] = k + 1
        t = by_key.get((lay["name"], k))
        if t is not None:
            used.add((lay["name"], k))
        rows.append({**lay, **(t or {})})
    missing = [lay["name"] for lay, row in zip(info, rows) if "mean_ms" not in row]
    if missing:
        warnings.append(f"{len(missing)} layer(s) have no profile record (time unknown), e.g. "
                        f"{missing[0]!r}")
    extra = [t for key, t in by_key.items() if key not in used]
    if extra:
        warnings.append(f"{len(extra)} profile record(s) match no layer in the layer info, e.g. "
                        f"{extra[0]['name']!r}; kept with type Unknown")
        rows += [{"name": t["name"], "type": UNKNOWN, "layer_type": UNKNOWN,
                  "source_nodes": nodes_from_name(t["name"]), **t} for t in extra]
    return rows


def _number(value: Any, where: str, *, integer: bool = False, negative_ok: bool = False) -> Any:
    """A measured number from an export: finite, not negative (unless ``negative_ok``), a
    number and not text; else :class:`LayerNumbersError` naming ``where``. NaN passes (it
    means "not measured"; callers warn about it)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise LayerNumbersError(f"{where} is {_short(value, 40)}, not a number")
    x = float(value)
    if math.isnan(x):
        return x
    if math.isinf(x) or (x < 0 and not negative_ok):
        raise LayerNumbersError(f"{where} is {value}: a time or count must be finite and >= 0")
    if integer:
        if not x.is_integer():
            raise LayerNumbersError(f"{where} is {value}, not a whole number")
        return int(x)
    return x


#: the longest time one layer may report, in ms (a day): beyond it a time is not a measurement
MAX_LAYER_MS = 86_400_000.0


def _timing(r: dict[str, Any], path: Any = "profile") -> dict[str, Any]:
    if not isinstance(r["name"], str):
        raise LayerFileError(f"--exportProfile file {path}: a layer's name is "
                             f"{_short(r['name'], 40)}, not text")
    name = r["name"]
    where = f"--exportProfile file {path}: layer {name[:60]!r}"

    def ms(key: str) -> float:
        v = r.get(key)
        x = math.nan if v is None else float(_number(v, f"{where} {key}"))
        if x > MAX_LAYER_MS and key != "timeMs":   # timeMs sums every iteration
            raise LayerNumbersError(f"{where} {key} is {v}: over a day for one layer, not a "
                                    "measured time")
        return x

    return {"name": name, "mean_ms": ms("averageMs"), "median_ms": ms("medianMs"),
            "total_time_ms": ms("timeMs")}


def _guess_type(name: str) -> str:
    # Without layer info only the name is known; these two kinds are recognisable from it.
    if name.startswith("Reformatting CopyNode"):
        return "Reformat"
    if "{ForeignNode[" in name:
        return "Myelin"
    return UNKNOWN


def split_constants(rows: list[dict[str, Any]], warnings: list[str]):
    keep, constants = [], []
    for r in rows:
        if r.get("layer_type") == "Constant" or r.get("type") == "Constant":
            constants.append({"name": r["name"], "out_shapes": r.get("out_shapes", ""),
                              "precision": r.get("out_precision", UNKNOWN),
                              "mean_ms": r.get("mean_ms", math.nan)})
        else:
            keep.append(r)
    busy = [c for c in constants if c["mean_ms"] and not math.isnan(c["mean_ms"]) and c["mean_ms"] > 0]
    if busy:
        warnings.append(f"{len(busy)} Constant layer(s) report time; it is not in total_ms")
    return keep, constants


def fold_noops(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop NoOp layers, adding their (normally zero) time and name to a neighbour: the layer
    that produced their input if known, else the nearest kept layer before (or the first kept
    layer, for NoOps before any). Linear in the number of layers."""
    keep = [r for r in rows if r.get("layer_type") != "NoOp"]
    if len(keep) == len(rows) or not keep:
        return rows
    producer = {t: r for r in keep for t in r.get("out_tensors", [])}
    folded: dict[int, list[str]] = {}   # id(target) -> names folded into it, in order
    previous = None                     # the last kept layer seen, in execution order
    for r in rows:
        if r.get("layer_type") != "NoOp":
            previous = r
            continue
        target = next((producer[t] for t in r.get("in_tensors", []) if t in producer), None)
        if target is None:
            target = previous if previous is not None else keep[0]
        if id(target) not in folded:
            folded[id(target)] = list(target.get("folded", []))
        folded[id(target)].append(r["name"])
        for col in ("mean_ms", "median_ms"):
            extra = r.get(col, math.nan)
            if extra is not None and not math.isnan(extra) and extra > 0:
                target[col] = target.get(col, 0.0) + extra
        # a NoOp's output becomes its producer's output for any later NoOp in a chain
        for t in r.get("out_tensors", []):
            producer[t] = target
    for r in keep:
        if id(r) in folded:
            r["folded"] = folded[id(r)]
    return keep


def _label(path: PathLike) -> str:
    stem = Path(path).name
    suffixes = (".json", ".profile", ".graph", ".layers", ".timing", ".times", ".engine",
                ".onnx", ".plan")
    while stem.endswith(suffixes):
        stem = stem[: stem.rindex(".")]
    return stem


def _short(obj: Any, limit: int = 80) -> str:
    text = json.dumps(obj, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
