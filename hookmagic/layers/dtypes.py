"""TensorRT tensor formats and data types: turn the inspector's strings into precisions.

The engine inspector writes a tensor's format and type as one phrase in TensorRT 8.x-10.x
(``"Thirty-two wide channel vectorized row major Int8 format"``, ``"Row major linear FP32"``,
or just ``"Half"`` for some Myelin tensors) and as separate keys in 11.x. Both end up here.
"""
from __future__ import annotations

import functools
import math
import re

# Token (lower case) -> canonical precision. Tokens are whole words, so "bfloat16" never reads
# as "float" (TREx labels BF16 tensors FP32; we do not) and "uint8" never as "int8".
_TOKENS: dict[str, str] = {
    "fp32": "FP32", "float": "FP32", "float32": "FP32", "kfloat": "FP32",
    "fp16": "FP16", "half": "FP16", "float16": "FP16", "khalf": "FP16",
    "bf16": "BF16", "bfloat16": "BF16", "kbf16": "BF16",
    "fp8": "FP8", "e4m3": "FP8", "e5m2": "FP8", "kfp8": "FP8",
    "fp4": "FP4", "e2m1": "FP4", "kfp4": "FP4",
    "int8": "INT8", "kint8": "INT8",
    "uint8": "UINT8", "kuint8": "UINT8",
    "int4": "INT4", "kint4": "INT4",
    "int32": "INT32", "kint32": "INT32",
    "int64": "INT64", "kint64": "INT64",
    "bool": "BOOL", "kbool": "BOOL",
}

#: bytes per element of each precision (sub-byte types as fractions)
BYTES_PER_ELEMENT: dict[str, float] = {
    "FP32": 4, "FP16": 2, "BF16": 2, "FP8": 1, "FP4": 0.5, "INT8": 1, "UINT8": 1,
    "INT4": 0.5, "INT32": 4, "INT64": 8, "BOOL": 1,
}

UNKNOWN = "Unknown"


def precision_of(text: str | None) -> str:
    """The precision named in a format/datatype phrase, e.g. ``"... Int8 format"`` -> ``"INT8"``.

    Returns ``"Unknown"`` when no known type word is present.
    """
    if not text:
        return UNKNOWN
    return _precision_of_text(str(text)[:200])


@functools.lru_cache(maxsize=4096)
def _precision_of_text(text: str) -> str:
    # a few dozen distinct phrases per engine, each seen thousands of times: cached
    for token in re.findall(r"[a-z0-9]+", text.lower()):
        if token in _TOKENS:
            return _TOKENS[token]
    return UNKNOWN


def tensor_bytes(dims, precision: str) -> float:
    """Bytes of a tensor with these dimensions, or NaN when a dimension is dynamic (-1) or unknown.

    Vectorized formats pad channels (e.g. 24 channels stored as 32); like TREx we count the
    logical size, so the totals match its published figures.
    """
    size = BYTES_PER_ELEMENT.get(precision)
    if size is None or dims is None:
        return math.nan
    try:
        dims = [int(d) for d in dims]
    except (TypeError, ValueError, OverflowError):
        return math.nan
    if any(d < 0 for d in dims):
        return math.nan
    try:
        return float(math.prod(dims) * size)
    except OverflowError:   # absurd dimensions (hand-edited or hostile files)
        return math.nan
