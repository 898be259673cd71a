"""What each kernel is: its family (source file), entry points, launch shape, and the work of
one launch (FLOPs and DRAM bytes as formulas of its arguments).

The DRAM bytes are the compulsory traffic (each operand read once, the output written once):
the lower bound a perfect cache would reach, which is what a roofline places a kernel by.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

#: bytes per element of the dtypes the kernels take
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1}


@dataclass(frozen=True)
class KernelSpec:
    """One callable variant of an operation."""
    op: str                      # "sgemm", "gemm", ...
    variant: str                 # "naive", "wmma", ...
    family: str                  # kernels/<family>.cu
    entries: dict[str, str]      # dtype -> extern "C" kernel name
    block: tuple[int, int, int]
    tile: tuple[int, int]        # (rows, cols) of C per block: grid = ceil(N/cols), ceil(M/rows)
    smem: int = 0                # dynamic shared memory per block, bytes
    grid_order: str = "nm"       # "nm": grid.x walks N; "mn": grid.x walks M (the naive kernel)
    arch_specific: bool = False  # needs sm_90a-style arch-specific features (wgmma/TMA)
    min_arch: int = 70
    expected_spills: bool = False
    description: str = ""
    family_by_dtype: dict[str, str] = field(default_factory=dict)  # where one dtype lives elsewhere
    smem_by_dtype: dict[str, int] = field(default_factory=dict)    # dynamic shared memory where it differs

    def smem_for(self, dtype: str) -> int:
        """Dynamic shared memory per block of this variant's kernel for ``dtype``, bytes."""
        return self.smem_by_dtype.get(dtype, self.smem)

    def family_for(self, dtype: str) -> str:
        """The source family holding this variant's kernel for ``dtype``."""
        return self.family_by_dtype.get(dtype, self.family)


SPECS: dict[tuple[str, str], KernelSpec] = {}


def register(spec: KernelSpec) -> KernelSpec:
    SPECS[(spec.op, spec.variant)] = spec
    return spec


def gemm_work(m: int, n: int, k: int, in_dtype: str, out_dtype: str, extra_bytes: int = 0) -> dict[str, int]:
    """FLOPs (2·M·N·K) and compulsory DRAM bytes of C = A @ B."""
    return {"flops": 2 * m * n * k,
            "dram_bytes": (m * k + k * n) * ITEMSIZE[in_dtype] + m * n * ITEMSIZE[out_dtype] + extra_bytes}


# --- launch log: every launch through hookmagic.kernels declares its work here ---------------

@dataclass(slots=True)
class LaunchWork:
    """The declared work of one launch (joined to captured kernels by name and order)."""
    kernel: str
    flops: int
    dram_bytes: int
    args: dict[str, Any] = field(default_factory=dict)


_log: deque[LaunchWork] = deque(maxlen=100_000)
_log_lock = threading.Lock()
_listeners: list[Callable[[LaunchWork], None]] = []


def record(kernel: str, flops: int, dram_bytes: int, **args: Any) -> LaunchWork:
    """Declare the work of one launch (user code may call this for its own kernels too)."""
    return record_work(LaunchWork(kernel, int(flops), int(dram_bytes), args))   # args: a fresh dict per call


def record_work(w: LaunchWork) -> LaunchWork:
    """Declare one launch whose work was worked out before (a launch plan's own
    :class:`LaunchWork`, shared by every launch of that plan: treat log entries as read-only)."""
    with _log_lock:
        _log.append(w)
    if _listeners:
        for fn in list(_listeners):
            fn(w)
    return w


def launch_log(clear: bool = False) -> list[LaunchWork]:
    """The launches declared since the start (or the last ``clear``), oldest first (at most 100,000)."""
    with _log_lock:
        out = list(_log)
        if clear:
            _log.clear()
    return out
