"""Profile patterns and advice, after the TensorRT performance guide's three cases.

A profile is *convolution-dominated* (most time in convolutions/GEMMs: precision and tactics
matter most), *memory-transfer-dominated* (reformats, shuffles, copies, padding: fix layouts
and fusion), or *diverse* (many operator kinds: fusion, plugins or custom kernels). The rules
are heuristics over the layers table; every finding carries its evidence.
"""
from __future__ import annotations

import re
from typing import Any

import pandas as pd

from ._frame import layers_of

COMPUTE_TYPES = frozenset({"Convolution", "Deconvolution", "FullyConnected", "MatrixMultiply",
                           "Gemm", "gemm", "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d"})
TRANSFER_TYPES = frozenset({"Reformat", "Shuffle", "Slice", "Padding", "Concatenation", "Copy",
                            "Gather", "Scatter", "Resize", "TrainStation"})
# Tactic-name fragments of Tensor Core kernels (hmma/imma/xmma families, cuDNN's 1688/16816...).
_TENSOR_CORE = re.compile(r"hmma|imma|xmma|i8816|h1688|s1688|16816|1688|884|tensorop|_tc_|wgmma"
                          r"|gemm_f16|gemm_i8|f16f16|bf16", re.I)

DOMINANT_SHARE = 50.0   # percent of the layer sum that makes one kind "dominant"
REFORMAT_SHARE = 5.0    # percent of the layer sum spent in Reformat layers worth a finding
TINY_MS = 0.005         # layers shorter than this are launch-bound


def classify(layers: Any) -> dict[str, Any]:
    """Which of the three patterns this profile follows, with the shares that decided it."""
    frame = layers_of(layers)
    total = frame["mean_ms"].sum()
    if not total > 0:
        return {"pattern": "unknown", "compute_pct": float("nan"), "transfer_pct": float("nan"),
                "types": 0}
    compute = frame.loc[frame["type"].isin(COMPUTE_TYPES), "mean_ms"].sum() / total * 100
    transfer = frame.loc[frame["type"].isin(TRANSFER_TYPES), "mean_ms"].sum() / total * 100
    if compute >= DOMINANT_SHARE:
        pattern = "convolution-dominated"
    elif transfer >= DOMINANT_SHARE * 0.6:
        pattern = "memory-transfer-dominated"
    else:
        pattern = "diverse operators"
    return {"pattern": pattern, "compute_pct": float(compute), "transfer_pct": float(transfer),
            "types": int(frame["type"].nunique())}


_PATTERN_ADVICE = {
    "convolution-dominated": "Most time is in convolutions/GEMMs: try lower precision (FP16, INT8 "
    "with calibration or explicit Q/DQ), keep channel counts multiples of 8 (FP16) or 32 (INT8) "
    "so Tensor Core tactics apply, and give the builder enough workspace to try them.",
    "memory-transfer-dominated": "Most time moves data (reformats, shuffles, copies, padding): "
    "align the formats of neighbouring layers, avoid precision ping-pong between layers, and "
    "fold transposes into the model so TensorRT can fuse them.",
    "diverse operators": "Time is spread over many operator kinds: look for unfused chains that a "
    "plugin or custom kernel could merge, and check that pointwise ops fused into their producers.",
    "unknown": "No timing in this profile.",
}


def findings(layers: Any) -> pd.DataFrame:
    """Findings with severity (info, warn), what was found, the evidence, and advice."""
    frame = layers_of(layers)
    total = frame["mean_ms"].sum()
    rows: list[dict[str, str]] = []
    c = classify(frame)
    rows.append({"severity": "info", "finding": f"profile is {c['pattern']}",
                 "evidence": f"compute {c['compute_pct']:.1f}%, data movement "
                             f"{c['transfer_pct']:.1f}%, {c['types']} layer types",
                 "advice": _PATTERN_ADVICE[c["pattern"]]})
    if not total > 0:
        return pd.DataFrame(rows)
    ref = frame[frame["type"] == "Reformat"]
    ref_pct = ref["mean_ms"].sum() / total * 100
    if ref_pct >= REFORMAT_SHARE:
        rows.append({"severity": "warn", "finding": f"{len(ref)} Reformat layers take {ref_pct:.1f}%",
                     "evidence": _names(ref),
                     "advice": "Reformats convert layout or precision between layers; Q/DQ "
                               "placement and consistent precisions remove most of them."})
    my = frame[frame["is_myelin"]]
    if len(my):
        pct = my["mean_ms"].sum() / total * 100
        rows.append({"severity": "warn" if pct >= 20 else "info",
                     "finding": f"{len(my)} Myelin/ForeignNode layer(s) take {pct:.1f}%",
                     "evidence": _names(my),
                     "advice": "TensorRT reports these as one layer; capture the kernels inside "
                               "them with %%cudahook (no nsys needed) to see where the time goes."})
    lowp = frame["precision"].isin(["FP16", "BF16", "INT8", "FP8", "INT4", "FP4"])
    if lowp.any():
        fp32 = frame[frame["type"].isin(COMPUTE_TYPES) & (frame["precision"] == "FP32")]
        if len(fp32):
            pct = fp32["mean_ms"].sum() / total * 100
            rows.append({"severity": "warn",
                         "finding": f"{len(fp32)} compute layer(s) still run in FP32 ({pct:.1f}%)",
                         "evidence": _names(fp32),
                         "advice": "The builder fell back to FP32 here: check Q/DQ placement or "
                                   "precision constraints, and unsupported shapes."})
    conv = frame[frame["type"].isin(COMPUTE_TYPES)
                 & frame["precision"].isin(["FP16", "BF16", "INT8", "FP8"])
                 & (frame["tactic"] != "")]
    slow = conv[~conv["tactic"].str.contains(_TENSOR_CORE)]
    if len(slow):
        rows.append({"severity": "info",
                     "finding": f"{len(slow)} low-precision compute layer(s) with no Tensor Core "
                                "tactic (by tactic name, heuristic)",
                     "evidence": _names(slow),
                     "advice": "Channel counts that are not multiples of 8/32, depthwise or "
                               "grouped convolutions often rule Tensor Cores out."})
    i8f = frame[(frame["in_precision"] == "INT8") & frame["out_precision"].isin(["FP32", "FP16"])
                & frame["type"].isin(COMPUTE_TYPES)]
    if len(i8f):
        rows.append({"severity": "info",
                     "finding": f"{len(i8f)} INT8 layer(s) write float outputs",
                     "evidence": _names(i8f),
                     "advice": "An INT8 layer with float output usually means a missing Q/DQ "
                               "pair after it; the next layer then runs in float."})
    tiny = frame[frame["mean_ms"] < TINY_MS]
    if len(frame) >= 20 and len(tiny) >= 0.5 * len(frame):
        rows.append({"severity": "info",
                     "finding": f"{len(tiny)} of {len(frame)} layers take under "
                                f"{TINY_MS * 1000:.0f} us",
                     "evidence": f"together {tiny['mean_ms'].sum() / total * 100:.1f}% of the layer sum",
                     "advice": "Many tiny kernels are launch-bound: CUDA graphs, larger batches "
                               "or fusing them removes launch gaps."})
    return pd.DataFrame(rows, columns=["severity", "finding", "evidence", "advice"])


def _names(frame: pd.DataFrame, limit: int = 3) -> str:
    top = frame.sort_values("mean_ms", ascending=False)["name"].head(limit).tolist()
    more = len(frame) - len(top)
    text = "; ".join(n if len(n) <= 60 else n[:57] + "..." for n in top)
    return text + (f" (+{more} more)" if more > 0 else "")
