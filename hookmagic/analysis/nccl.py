"""NCCL kernels recognised by name: which collective, reduction, data type, algorithm, protocol.

NCCL's device kernels are named after what they do, in three generations::

    ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)   # NCCL >= 2.19
    ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)  # 2.9-2.18
    ncclAllReduceRingLLKernel_sum_f32(ncclColl)                                 # before 2.9

A kernel named ``ncclDevKernel_Generic*`` runs whatever work NCCL queued (its collective is
``"generic"``); ``SendRecv`` carries point-to-point traffic (pipeline parallelism, all-to-all).
Message sizes and peers are not in the name nor in CUPTI's kernel record (they are launch
arguments CUPTI does not decode), so they are not reported; wrap a collective in
``hookmagic.range("allreduce 64MB")`` to name it yourself.

The patterns are RE2-compatible, so the same expressions run inside DuckDB
(:data:`COLLECTIVE_SQL`) and in pandas (:func:`classify_nccl`).
"""
from __future__ import annotations

import re

import pandas as pd

#: any NCCL device kernel
NCCL_PREFIX = r"^nccl"
_COLL = r"AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv|AllToAll|Generic"
_OPS = r"Sum|Prod|Min|Max|PreMulSum|SumPostDiv|Avg"
_ALGO = r"RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT"
_PROTO = r"LL128|LL|SIMPLE"

#: the collective's name in any of the three generations (group 1 or 2)
COLLECTIVE_PATTERN = rf"^nccl(?:Dev)?Kernel_({_COLL})|^nccl({_COLL})(?:Ring|Tree|CollNet)"

_PATTERNS = {
    "reduce_op": rf"_({_OPS})_|_({_OPS})$|Kernel_({_OPS.lower()})_",
    "algorithm": rf"_({_ALGO})(?:_|\(|$)|nccl[A-Za-z]+?(Ring|Tree|CollNet)",
    "protocol": rf"_({_PROTO})(?:_|\(|$)|(?:Ring|Tree|CollNet)(LL128|LL|Simple)Kernel",
    "dtype": (r"_(i8|u8|i32|u32|i64|u64|f16|f32|f64|bf16|f8e4m3|f8e5m2|int8_t|uint8_t|int32_t|"
              r"uint32_t|int64_t|uint64_t|half|float|double|__nv_bfloat16|"
              r"__nv_fp8_e4m3|__nv_fp8_e5m2)(?:_|\(|$)"),
}

_COLL_NAMES = {"AllReduce": "all_reduce", "AllGather": "all_gather",
               "ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "Reduce": "reduce",
               "SendRecv": "send_recv", "Send": "send", "Recv": "recv",
               "AllToAll": "all_to_all", "Generic": "generic"}
_DTYPES = {"int8_t": "i8", "uint8_t": "u8", "int32_t": "i32", "uint32_t": "u32",
           "int64_t": "i64", "uint64_t": "u64", "half": "f16", "float": "f32", "double": "f64",
           "__nv_bfloat16": "bf16", "__nv_fp8_e4m3": "f8e4m3", "__nv_fp8_e5m2": "f8e5m2"}

#: DuckDB expression: the collective of a kernel ``name`` in snake case, '' for non-NCCL kernels
COLLECTIVE_SQL = (
    "CASE WHEN NOT regexp_matches(name, '^nccl') THEN '' ELSE coalesce(nullif(lower("
    "regexp_replace(regexp_extract(name, '" + COLLECTIVE_PATTERN + "', 1) || "
    "regexp_extract(name, '" + COLLECTIVE_PATTERN + "', 2), '([a-z])([A-Z])', '\\1_\\2', "
    "'g')), ''), 'other') END"
)


def is_nccl(name: str) -> bool:
    """True for an NCCL device kernel."""
    return name.startswith("nccl")


def _first_group(pattern: str, name: str) -> str:
    m = re.search(pattern, name)
    if not m:
        return ""
    return next((g for g in m.groups() if g), "")


def parse_nccl_kernel(name: str) -> dict[str, str]:
    """``{collective, reduce_op, dtype, algorithm, protocol}`` of one kernel name.

    Every value is lower case ("" where the name does not say); ``collective`` is "" for a
    kernel that is not NCCL's and ``"other"`` for an NCCL kernel of an unknown kind.
    """
    if not is_nccl(name):
        return {"collective": "", "reduce_op": "", "dtype": "", "algorithm": "", "protocol": ""}
    coll = _first_group(COLLECTIVE_PATTERN, name)
    dtype = _first_group(_PATTERNS["dtype"], name)
    return {
        "collective": _COLL_NAMES.get(coll, "other"),
        "reduce_op": _first_group(_PATTERNS["reduce_op"], name).lower(),
        "dtype": _DTYPES.get(dtype, dtype),
        "algorithm": _first_group(_PATTERNS["algorithm"], name).lower(),
        "protocol": _first_group(_PATTERNS["protocol"], name).lower(),
    }


def classify_nccl(names: pd.Series | list[str]) -> pd.DataFrame:
    """:func:`parse_nccl_kernel` for a column of names (each distinct name parsed once).

    Returns a DataFrame aligned with ``names`` with columns ``collective, reduce_op, dtype,
    algorithm, protocol``.
    """
    names = pd.Series(names, dtype=object).astype(str)
    uniq = names.unique()
    parsed = pd.DataFrame([parse_nccl_kernel(n) for n in uniq], index=uniq,
                          columns=["collective", "reduce_op", "dtype", "algorithm", "protocol"])
    out = parsed.reindex(names.to_numpy())
    out.index = names.index
    return out
