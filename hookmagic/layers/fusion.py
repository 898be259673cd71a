"""Fusion report (which source nodes each engine layer fused) and Myelin/ForeignNode aggregates."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ._frame import layers_of


def fusion_report(layers: Any, min_nodes: int = 2) -> pd.DataFrame:
    """Engine layers that fused at least ``min_nodes`` source (ONNX) nodes, in execution order.

    Columns: order, name, type, precision, nodes (count), source_nodes (joined with ' | '),
    mean_ms. Source nodes come from TensorRT's Metadata when the export has it (TensorRT >= 8.6
    with detailed verbosity), else from the layer name. A Myelin layer lists its first and last
    node only: the nodes in between are hidden by TensorRT.
    """
    frame = layers_of(layers)
    counts = frame["source_nodes"].map(len)
    sel = frame[counts >= min_nodes]
    return pd.DataFrame({
        "order": sel["order"].to_numpy(),
        "name": sel["name"].to_numpy(),
        "type": sel["type"].to_numpy(),
        "precision": sel["precision"].to_numpy(),
        "nodes": counts[counts >= min_nodes].to_numpy(),
        "source_nodes": [" | ".join(n) for n in sel["source_nodes"]],
        "mean_ms": sel["mean_ms"].to_numpy(),
    })


def node_to_layer(layers: Any) -> pd.DataFrame:
    """One row per (source node, engine layer): look up where an ONNX node went."""
    frame = layers_of(layers)
    rows = [{"node": node, "layer": name, "order": order}
            for name, order, nodes in zip(frame["name"], frame["order"], frame["source_nodes"])
            for node in nodes]
    return pd.DataFrame(rows, columns=["node", "layer", "order"])


def myelin_report(layers: Any) -> dict[str, Any]:
    """Myelin/ForeignNode layers: count, their summed time and share, and the layers themselves.

    Their inner kernels are invisible to TensorRT's profiler; a live capture attributes them
    (see :func:`hookmagic.layers.attribution.kernels_by_layer`).
    """
    frame = layers_of(layers)
    sel = frame[frame["is_myelin"]]
    total = frame["mean_ms"].sum()
    ms = float(sel["mean_ms"].sum())
    return {
        "layers": int(len(sel)),
        "mean_ms": ms,
        "pct": ms / total * 100.0 if total > 0 else float("nan"),
        "table": sel[["order", "name", "layer_type", "precision", "mean_ms", "pct"]]
        .reset_index(drop=True),
    }
