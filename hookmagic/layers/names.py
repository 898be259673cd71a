"""Which source (ONNX) nodes an engine layer fused, read from its Metadata or its name."""
from __future__ import annotations

import re

# TensorRT 10 writes one "[ONNX Layer: <node>]" item per fused node, items separated by the
# ASCII unit (0x1F) and record (0x1E) separators; older builds concatenate the brackets.
_ONNX_ITEM = re.compile(r"\[ONNX Layer:\s*(.*?)\](?=\s*(?:\[|\x1f|\x1e|$))", re.S)
_FOREIGN = re.compile(r"\{ForeignNode\[(.*)\]\}", re.S)
_PWN = re.compile(r"^PWN\((.*)\)$", re.S)

# Layers TensorRT inserts itself: they fuse no source node.
_INSERTED_PREFIXES = ("Reformatting CopyNode for ", "copied_squeeze_after_", "reshape_after_",
                      "reshape_before_", "transpose_before_", "transpose_after_")

#: LayerType values produced by Myelin (TensorRT's graph compiler), whose inner time is hidden
MYELIN_TYPES = frozenset({"Myelin", "kgen", "gemm", "TrainStation"})


def parse_metadata(metadata: str | None) -> list[str]:
    """Source node names in an inspector ``Metadata`` string (TensorRT >= 8.6), in order.

    Items that are not ``[ONNX Layer: ...]`` are kept verbatim so that nothing is lost.
    """
    if not metadata:
        return []
    found = _ONNX_ITEM.findall(metadata)
    if found:
        return [n.strip() for n in found if n.strip()]
    return [p.strip() for p in re.split(r"[\x1e\x1f]", metadata) if p.strip()]


def nodes_from_name(name: str) -> list[str]:
    """Best guess at the source nodes of a layer from its name alone (no Metadata).

    ``"w + QuantizeLinear_8 + Conv_12 + PWN(Clip_16)"`` -> ``["w", "QuantizeLinear_8", "Conv_12",
    "Clip_16"]``; a Myelin ``{ForeignNode[A...B]}`` gives its first and last node ``["A", "B"]``;
    layers TensorRT inserted (reformat copies, squeezes) give ``[]``.
    """
    name = name.strip()
    if name.startswith(_INSERTED_PREFIXES):
        return []
    foreign = _FOREIGN.search(name)
    if foreign:
        return [p.strip() for p in foreign.group(1).split("...") if p.strip()]
    out: list[str] = []
    for part in _split_top_level(name, " + "):
        out.extend(_unwrap_pwn(part.strip()))
    return [n for n in out if n]


def is_myelin(name: str, layer_type: str) -> bool:
    """True for Myelin subgraphs (ForeignNode layers and Myelin's own layer types)."""
    return layer_type in MYELIN_TYPES or "{ForeignNode[" in name or name.startswith("__myl")


def _unwrap_pwn(part: str) -> list[str]:
    # PWN(...) is a fused pointwise subgraph; it nests, and lists its nodes with ", ".
    m = _PWN.match(part)
    if not m:
        return [part]
    out: list[str] = []
    for inner in _split_top_level(m.group(1), ", "):
        out.extend(_unwrap_pwn(inner.strip()))
    return out


def _split_top_level(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside parentheses and brackets."""
    if not any(ch in text for ch in "([{)]}"):
        return text.split(sep)   # the common case, without the character loop
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts
