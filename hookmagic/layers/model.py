"""`LayerProfile`: one engine's (or one module's) layers with their timing, precision and memory.

Every backend (trtexec exports, live TensorRT, PyTorch modules, ONNX Runtime) produces this same
object, so every analysis and view works on all of them.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hookmagic.common.accessors import accepts_methods
from hookmagic.common.errors import InvalidArgument
from hookmagic.common.format import MiB
from hookmagic.common.results import SAVED_KIND_KEY, Headline

from .errors import LayerFileError

#: ordered {column: meaning} of ``LayerProfile.layers``; one row per engine layer in execution order
LAYER_COLUMNS: dict[str, str] = {
    "order": "execution index (0-based)",
    "name": "layer name as the engine reports it",
    "type": "layer kind: TensorRT ParameterType if present, else LayerType (module class for PyTorch)",
    "layer_type": "the backend's raw layer type (e.g. CaskConvolution, Myelin, Conv2d)",
    "precision": "precision the layer ran in: that of its first input (TREx's rule)",
    "in_precision": "precision of the first input tensor",
    "out_precision": "precision of the first output tensor",
    "in_format": "format/datatype phrase of the first input",
    "out_format": "format/datatype phrase of the first output",
    "tactic": "kernel/tactic name chosen by the builder ('' if not reported)",
    "mean_ms": "mean time per iteration, ms",
    "median_ms": "median time per iteration, ms (NaN if not reported)",
    "p90_ms": "90th percentile per iteration, ms (NaN if not reported)",
    "gap_ms": ("launch gaps charged to this layer: GPU idle time just before its work, mean per "
               "iteration, ms; not part of mean_ms (live PyTorch captures; NaN otherwise)"),
    "pct": "share of total_ms, percent",
    "weight_bytes": "bytes of weights (bias excluded, as TREx counts)",
    "bias_bytes": "bytes of bias",
    "activation_bytes": "bytes of all input plus output tensors (NaN if a shape is dynamic)",
    "in_shapes": "input shapes, e.g. '1x3x224x224, 1x64'",
    "out_shapes": "output shapes",
    "source_nodes": "source (ONNX) nodes this layer fused, from Metadata or the name",
    "folded": "names of NoOp layers folded into this one",
    "is_myelin": "Myelin/ForeignNode subgraph: its inner time is hidden from the profiler",
    "origin": "why a Reformat exists (QDQ, REFORMAT, ...), '' otherwise",
    "details": "the layer's raw record as JSON text (for the details panel)",
}

_FLOAT_COLS = ("mean_ms", "median_ms", "p90_ms", "gap_ms", "pct", "weight_bytes", "bias_bytes",
               "activation_bytes")
_STR_COLS = ("name", "type", "layer_type", "precision", "in_precision", "out_precision",
             "in_format", "out_format", "tactic", "in_shapes", "out_shapes", "origin", "details")
_LIST_COLS = ("source_nodes", "folded")

_FORMAT = "hookmagic.LayerProfile"
_VERSION = 1
MIB = MiB  # the layer tables' unit (kept public: compare and users import it)


def make_layers(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Build a ``layers`` DataFrame with every column of :data:`LAYER_COLUMNS`, in order.

    Missing values get neutral defaults (NaN times, '' strings, [] lists); ``order`` and ``pct``
    are (re)computed from the row order and ``mean_ms``.
    """
    frame = pd.DataFrame(rows)
    n = len(frame)
    out: dict[str, Any] = {}
    for col in LAYER_COLUMNS:
        if col in frame.columns:
            values = frame[col]
        elif col in _FLOAT_COLS:
            values = pd.Series(np.full(n, math.nan))
        elif col in _LIST_COLS:
            values = pd.Series([[] for _ in range(n)], dtype=object)
        elif col == "is_myelin":
            values = pd.Series(np.zeros(n, dtype=bool))
        else:
            values = pd.Series([""] * n)
        out[col] = values.to_numpy() if col not in _LIST_COLS else list(values)
    layers = pd.DataFrame(out, columns=list(LAYER_COLUMNS))
    layers["order"] = np.arange(n, dtype="int64")
    for col in _FLOAT_COLS:
        layers[col] = pd.to_numeric(layers[col], errors="coerce").astype("float64")
    for col in _STR_COLS:
        layers[col] = layers[col].fillna("").astype(str)
    for col in _LIST_COLS:
        layers[col] = pd.Series([list(v) if v is not None and not _isnan(v) else []
                                 for v in layers[col]], dtype=object)
    layers["is_myelin"] = layers["is_myelin"].fillna(False).astype(bool)
    total = layers["mean_ms"].sum(min_count=1)
    layers["pct"] = layers["mean_ms"] / total * 100.0 if total and total > 0 else math.nan
    return layers


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


@accepts_methods("LayerProfile")
@dataclass
class LayerProfile:
    """Per-layer timing, precision and memory of one engine (or one PyTorch module).

    Attributes
    ----------
    layers : DataFrame
        One row per layer in execution order; columns are described in ``LAYER_COLUMNS``.
    meta : dict
        Per engine: ``name`` (label), ``source`` (trtexec, tensorrt, torch, onnxruntime),
        ``device``, ``tensorrt_version``, ``build_options``, ``iterations``, ``latency_ms``
        (end-to-end statistics when known; for PyTorch modules the runs without hooks, and
        ``latency_hooked_ms``, ``gpu_busy_ms``, ``launch_gap_ms`` for the hooked run),
        ``warnings`` (what could not be understood).
    times : DataFrame or None
        Per-iteration end-to-end timings (``latency_ms``, ``compute_ms``, ...), when known.
    constants : DataFrame
        Constant layers, kept apart from ``layers`` (they hold weights, not work).
    kernels : DataFrame or None
        GPU kernels attributed to layers (``layer``, ``kernel``, ``calls``, ``total_ms``,
        ``mean_ms``) when a live capture was available.

    Use ``.top(n)`` for the bottlenecks, ``.compare(other)`` to pair layers of two engines,
    ``.save(path)`` / ``LayerProfile.load(path)`` for Parquet or JSON files (never pickle).
    """

    layers: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    times: pd.DataFrame | None = None
    constants: pd.DataFrame = field(default_factory=pd.DataFrame)
    kernels: pd.DataFrame | None = None

    # ---- numbers -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The profile's label (file stem, model name, or what the caller gave)."""
        return str(self.meta.get("name", "profile"))

    @property
    def total_ms(self) -> float:
        """Sum of the layers' mean times, ms: the profiler's view of one inference."""
        return float(self.layers["mean_ms"].sum())

    @property
    def latency_ms(self) -> float | None:
        """Mean end-to-end latency measured beside the profile (ms), or None if unknown."""
        lat = self.meta.get("latency_ms") or {}
        value = lat.get("mean") if isinstance(lat, dict) else None
        return None if value is None else float(value)

    def number_warnings(self) -> list[str]:
        """What is wrong with the measured numbers: layers without a time (NaN), negative or
        infinite times and sizes. Shown by ``repr``, ``summary()`` and the CLI, so a layer sum
        over missing or impossible values is never presented as a plain total."""
        from hookmagic.common.checks import bad_numbers, describe_bad
        out = []
        n = len(self.layers)
        untimed = int(self.layers["mean_ms"].isna().sum()) if n else 0
        if untimed:
            out.append(f"{untimed} of {n} layer(s) have no time (NaN): the layer sum covers "
                       f"the other {n - untimed}")
        for col in ("mean_ms", "median_ms", "p90_ms", "weight_bytes", "bias_bytes",
                    "activation_bytes"):
            bad = bad_numbers(self.layers[col].dropna()) if n else {}
            if bad:
                out.append(describe_bad(bad, col))
        return out

    @property
    def weight_bytes(self) -> float:
        """Total weight bytes (bias excluded)."""
        return float(self.layers["weight_bytes"].sum())

    @property
    def activation_bytes(self) -> float:
        """Sum over layers of input plus output tensor bytes (TREx's activation footprint)."""
        return float(self.layers["activation_bytes"].sum())

    def __len__(self) -> int:
        return len(self.layers)

    def top(self, n: int = 10, by: str = "mean_ms") -> pd.DataFrame:
        """The ``n`` layers with the largest ``by`` (default: mean time), largest first."""
        from hookmagic.common.checks import choice, integer
        n = integer("n", n, minimum=1)
        by = choice("by", by, [c for c in ("mean_ms", "median_ms", "pct", "order")
                               if c in self.layers.columns])
        cols = ["order", "name", "type", "precision", "mean_ms", "median_ms", "pct", "tactic"]
        return (self.layers.sort_values([by, "order"], ascending=[False, True], kind="stable")
                .head(n)[cols].reset_index(drop=True))

    def summary(self) -> Headline:
        """Headline numbers: layers, layer sum, latency, weights, activations, time by layer
        type, precisions; the warnings as notes. ``.to_frame()`` gives them as a table,
        ``.to_dict()`` as what ``hookmagic trt summary --json`` prints."""
        values = self._summary_values()
        warnings = values.pop("warnings")
        return Headline(title=f"LayerProfile {self.name}", values=values, notes=warnings,
                        units={"total_ms": "ms", "weights_mib": "MiB", "activations_mib": "MiB",
                               "time_by_type_ms": "ms"})

    def _summary_values(self) -> dict[str, Any]:
        by_type = self.layers.groupby("type", sort=False)["mean_ms"].sum()
        return {
            "name": self.name,
            "source": self.meta.get("source", ""),
            "device": self.meta.get("device", ""),
            "layers": int(len(self.layers)),
            "total_ms": round(self.total_ms, 6),
            "latency_ms": self.meta.get("latency_ms"),
            "iterations": self.meta.get("iterations"),
            "weights_mib": round(self.weight_bytes / MIB, 3),
            "activations_mib": round(self.activation_bytes / MIB, 3),
            "myelin_layers": int(self.layers["is_myelin"].sum()),
            "time_by_type_ms": {str(k): round(float(v), 6) for k, v in by_type.items()},
            "precisions": sorted(set(self.layers["precision"])),
            "warnings": list(self.meta.get("warnings", [])) + [
                w for w in self.number_warnings() if w not in self.meta.get("warnings", [])],
        }

    # ---- display -------------------------------------------------------------------------
    def _latency_text(self) -> str:
        """', end-to-end X ms' (plus the launch gaps of a hooked run, medians), or ''."""
        lat = self.latency_ms
        if lat is None:
            return ""
        gap = self.meta.get("launch_gap_ms")
        if not (isinstance(gap, dict) and gap.get("median") is not None):
            return f", end-to-end {lat:.3f} ms"
        ref, sums = self.meta.get("latency_ms") or {}, self.meta.get("layer_sum_ms") or {}
        where = " without hooks" if "latency_clean_ms" in self.meta else ""
        return (f" (median {sums.get('median', math.nan):.3f}), end-to-end{where} "
                f"median {ref.get('median', lat):.3f} ms; hooked run's launch gaps "
                f"median {gap['median']:.3f} ms")

    def __repr__(self) -> str:
        problems = self.number_warnings()
        warn = f"; warning: {'; '.join(problems)}" if problems else ""
        return (f"<LayerProfile {self.name!r}: {len(self.layers)} layers, "
                f"layer sum {self.total_ms:.3f} ms{self._latency_text()}{warn}>")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return self.summary_bundle(top=5)

    def summary_bundle(self, top: int = 5) -> dict[str, str]:
        """The headline numbers and the ``top`` slowest layers as a display bundle (HTML and
        text): what ``%trtprofile --top N`` shows."""
        s = self._summary_values()
        head = (f"<b>{_esc(s['name'])}</b> ({_esc(s['source'])}"
                + (f", {_esc(s['device'])}" if s["device"] else "") + ")<br>"
                f"{s['layers']} layers, layer sum {s['total_ms']:.3f} ms"
                + _esc(self._latency_text())
                + f"; weights {s['weights_mib']:.1f} MiB, activations {s['activations_mib']:.1f} MiB"
                + "".join(f"<br>⚠ {_esc(w)}" for w in self.number_warnings()))
        cols = ["name", "type", "precision", "mean_ms", "pct"]
        if self.layers["gap_ms"].notna().any():
            cols.append("gap_ms")
        slow = (self.layers.sort_values(["mean_ms", "order"], ascending=[False, True], kind="stable")
                .head(max(int(top), 0))[cols])
        text = repr(self) + (f"\n{s['device']}" if s["device"] else "")
        if len(slow):
            text += f"\nslowest {len(slow)} layers:\n" + slow.to_string(
                index=False, float_format=lambda v: f"{v:.4f}")
        return {"text/plain": text,
                "text/html": head + slow.to_html(index=False, float_format=lambda v: f"{v:.4f}")}

    # ---- files ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write to ``.parquet`` (layers table; meta, times and the rest in its metadata) or
        ``.json`` (one document); a name without a suffix gets ``.parquet``. Returns the path
        written. Both are data only, safe to share; ``hookmagic.load(path)`` opens either."""
        from hookmagic.common import files
        path = Path(path)
        if path.suffix == "":
            path = path.with_suffix(".parquet")
        for source in (self.meta.get("files") or {}).values():   # the trtexec exports read
            if path.exists() and Path(str(source)).exists() and path.samefile(str(source)):
                raise InvalidArgument(f"{path} is an export this profile was read from; save "
                                      "it under another name")
        doc = self._aux_doc()
        if path.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq
            table = pa.Table.from_pandas(self.layers, preserve_index=False)
            extra = {b"hookmagic": json.dumps(doc, default=_json_default).encode()}
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **extra})
            files.atomic_write(path, lambda fh: pq.write_table(table, fh), "the layer profile")
        elif path.suffix == ".json":
            doc["layers"] = _records(self.layers)
            text = json.dumps(_finite(doc), default=_json_default, indent=1, allow_nan=False)
            files.atomic_write(path, text.encode("utf-8"), "the layer profile")
        else:
            raise InvalidArgument(f"{path}: use a .parquet or .json file name (or none: .parquet)")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LayerProfile":
        """Read a profile written by :meth:`save` (``.parquet`` or ``.json``)."""
        import os

        from hookmagic.common import files, limits
        from hookmagic.common.errors import HookmagicError
        path = Path(path)
        if not os.path.lexists(path):
            raise LayerFileError(f"{path}: no such file")
        try:
            # the content decides, not the name: a profile renamed x.hmtrace still opens
            raw_file = files.read_input(path, "layer profile", LayerFileError)
            if raw_file[:4] == b"PAR1":
                import pyarrow as pa
                import pyarrow.parquet as pq
                pf = pq.ParquetFile(pa.BufferReader(raw_file))
                limits.check(limits.MAX_ROWS, pf.metadata.num_rows, f"layer profile {path}")
                raw = (pf.schema_arrow.metadata or {}).get(b"hookmagic")
                if raw is None:
                    raise LayerFileError(f"{path}: not a hookmagic LayerProfile (no metadata)")
                doc = files.parse_json(raw, f"layer profile {path} (metadata)", LayerFileError)
                layers = pf.read().to_pandas()
            else:
                doc = files.parse_json(raw_file, f"layer profile {path}", LayerFileError)
                if not isinstance(doc, dict) or "layers" not in doc:
                    raise LayerFileError(f"{path}: not a hookmagic LayerProfile JSON document")
                if isinstance(doc["layers"], list):
                    limits.check(limits.MAX_ROWS, len(doc["layers"]), f"layer profile {path}")
                layers = pd.DataFrame(doc["layers"])
            if not isinstance(doc, dict):
                raise LayerFileError(f"{path}: not a hookmagic LayerProfile (metadata is not "
                                     "an object)")
        except HookmagicError:
            raise
        except Exception as exc:  # pyarrow/json raise many types; the user needs one message
            raise LayerFileError(f"{path}: cannot read LayerProfile: {exc}") from exc
        if doc.get("format") != _FORMAT:
            raise LayerFileError(f"{path}: not a hookmagic LayerProfile (format={doc.get('format')!r})")
        try:
            for col in _LIST_COLS:  # Parquet gives numpy arrays back for list columns
                if col in layers:
                    layers[col] = [list(v) if isinstance(v, (list, tuple, np.ndarray)) else []
                                   for v in layers[col]]
            for col in ("mean_ms", "median_ms", "p90_ms"):
                if col in layers and layers[col].dtype == object:
                    junk = [v for v in layers[col] if v is not None and (
                        isinstance(v, (bool, str)) or not isinstance(v, (int, float)))]
                    if junk:
                        from .errors import LayerNumbersError
                        raise LayerNumbersError(f"{path}: column {col} holds {len(junk)} "
                                                f"value(s) that are not numbers, e.g. "
                                                f"{str(junk[0])[:40]!r}")
            if "name" not in layers.columns:   # rows that were not layer objects
                raise LayerFileError(f"{path}: its layers are not layer records (no names)")
            for col in ("mean_ms", "median_ms", "p90_ms", "count"):
                # a saved time or count below zero was never measured (NaN is "no time")
                values = pd.to_numeric(layers[col], errors="coerce") if col in layers else None
                if values is not None and bool((values < 0).any()):
                    from .errors import LayerNumbersError
                    raise LayerNumbersError(f"{path}: column {col} holds {int((values < 0).sum())} "
                                            "negative value(s); measured times and counts are "
                                            "never negative")
            meta = doc.get("meta", {})
            if not isinstance(meta, dict):
                raise LayerFileError(f"{path}: not a readable LayerProfile (its meta is a "
                                     f"{type(meta).__name__}, not an object)")
            for key in ("count", "iterations"):   # how many times the engine ran
                v = meta.get(key)
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                      or not v >= 0):
                    from .errors import LayerNumbersError
                    raise LayerNumbersError(f"{path}: its meta {key} is {v!r}, not a count")
            return cls(layers=make_layers(layers.to_dict("records")), meta=meta,
                       times=_frame_or_none(doc.get("times")),
                       constants=_frame_or_none(doc.get("constants")) if doc.get("constants") else pd.DataFrame(),
                       kernels=_frame_or_none(doc.get("kernels")))
        except HookmagicError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise LayerFileError(f"{path}: not a readable LayerProfile ({type(exc).__name__}: "
                                 f"{exc})") from None

    def _aux_doc(self) -> dict[str, Any]:
        return {"format": _FORMAT, "version": _VERSION, SAVED_KIND_KEY: "layers",
                "meta": self.meta,
                "times": _records(self.times), "constants": _records(self.constants),
                "kernels": _records(self.kernels)}


def sniff(path: Path) -> bool:
    """True when ``path`` is a layer profile written by :meth:`LayerProfile.save` (looks only
    at the Parquet footer's key or the JSON document's first bytes; never raises)."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as fh:
            head = fh.read(4096)
            if head[:4] == b"PAR1":
                import pyarrow.parquet as pq
                metadata = pq.read_schema(path).metadata or {}
                return b"hookmagic" in metadata and _FORMAT.encode() in metadata[b"hookmagic"][:4096]
        return head.lstrip()[:1] == b"{" and f'"format": "{_FORMAT}"'.encode() in head
    except Exception:  # a sniff answers "not mine" for anything it cannot read
        return False


def load_profile(path: str | Path) -> "LayerProfile":
    """Read a profile written by :meth:`LayerProfile.save` (what ``hookmagic.load`` calls)."""
    return LayerProfile.load(path)


def _records(frame: pd.DataFrame | None) -> list[dict[str, Any]] | None:
    if frame is None:
        return None
    return json.loads(frame.to_json(orient="records"))


def _frame_or_none(records: Any) -> pd.DataFrame | None:
    return None if records is None else pd.DataFrame(records)


def _finite(obj: Any) -> Any:
    """``obj`` with every NaN/infinite float replaced by None (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)) and not math.isfinite(float(obj)):
        return None
    return obj


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return None if math.isnan(obj) else float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def _esc(text: Any) -> str:
    import html
    return html.escape(str(text))
