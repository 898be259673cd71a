"""Which variant a call runs when it does not name one, and why: the dispatch table.

Each :class:`Rule` says, for one operation, which architectures, dtypes and shape class it
covers, the variant it picks, and the measurement that justifies the pick. :func:`choose`
returns the first rule that matches (the table is ordered, most specific first);
:func:`hookmagic.kernels.explain` says in words what a call would run and why. A caller's ``variant=`` always
wins over the table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hookmagic.kernels.build import arch_number, normalize_arch
from hookmagic.kernels.errors import KernelArgumentError

#: a GEMM is "large" when M·N reaches this (a 2048 x 2048 output: 128 of wgmma's 128 x 256 tiles,
#: about one wave on an H100/H200's 132 SMs) and K this many columns; below it the 128 x 128
#: mma.sync tiles fill the SMs better. The boundary is set from the tile counts, not measured.
LARGE_GEMM_OUTPUT = 2048 * 2048
LARGE_GEMM_K = 256


@dataclass(frozen=True)
class Rule:
    """One row of the dispatch table."""
    op: str
    min_arch: int            # lowest architecture number the rule covers (80 = sm_80)
    max_arch: int            # highest, inclusive
    dtypes: tuple[str, ...]
    shape_class: str         # "large", "small" or "any"
    variant: str
    why: str                 # the measurement (or the reason, where none applies) behind the pick


TABLE: tuple[Rule, ...] = (
    Rule("gemm", 90, 90, ("float16", "bfloat16"), "large", "wgmma",
         "on an H200 (CUDA events, median of 20) wgmma reached 82 % of cuBLAS at 4096³ and 97 % at "
         "8192³ in FP16, while mma reached 33 % at 4096³"),
    Rule("gemm", 90, 90, ("float16", "bfloat16"), "small", "mma",
         "wgmma's 128 x 256 tiles leave SMs idle below about one wave of tiles (M·N < 2048²) or "
         "for short K; mma's 128 x 128 tiles fill them (not yet measured against wgmma there)"),
    Rule("gemm", 80, 999, ("float16", "bfloat16", "int8"), "any", "mma",
         "mma.sync + ldmatrix + 3-stage cp.async is the library's fastest Tensor Core GEMM before "
         "Hopper (wgmma exists on sm_90a only; wmma is the slower teaching variant)"),
    Rule("sgemm", 70, 999, ("float32",), "any", "warptile",
         "warptile is the fastest step of the SGEMM journey measured (73 % of cuBLAS at 4096³ on an H200)"),
)


def shape_class(op: str, shapes: tuple[tuple[int, ...], ...]) -> str:
    """``'large'`` or ``'small'`` for a GEMM given its operands' shapes ((M, K), (K, N))."""
    if op in ("gemm", "sgemm"):
        if len(shapes) != 2 or len(shapes[0]) != 2 or len(shapes[1]) != 2:
            raise KernelArgumentError(f"{op}: give the shapes of a and b, e.g. (4096, 4096), (4096, 4096); got {shapes}")
        (m, k), (_, n) = shapes
        return "large" if m * n >= LARGE_GEMM_OUTPUT and k >= LARGE_GEMM_K else "small"
    return "any"


def choose(op: str, arch: Any, dtype: str, shapes: tuple[tuple[int, ...], ...]) -> Rule:
    """The table's rule for ``op`` on ``arch`` with ``dtype`` operands of ``shapes``."""
    a = arch_number(normalize_arch(arch))
    cls = shape_class(op, shapes)
    for r in TABLE:
        if r.op == op and r.min_arch <= a <= r.max_arch and dtype in r.dtypes \
                and r.shape_class in ("any", cls):
            return r
    raise KernelArgumentError(f"{op}: no kernel for {dtype} on {normalize_arch(arch)} "
                              f"(the dispatch table covers: {_covered(op) or 'nothing'})")


def _covered(op: str) -> str:
    return "; ".join(f"sm_{r.min_arch}+ {'/'.join(r.dtypes)}" for r in TABLE if r.op == op)


def explain_gemm(op: str, shapes: tuple[tuple[int, ...], ...], dtype: str, arch: str) -> str:
    """In words: the variant the table picks for a GEMM of ``shapes`` and why."""
    r = choose(op, arch, dtype, shapes)
    (m, k), (_, n) = shapes
    span = "" if r.max_arch == r.min_arch else "+" if r.max_arch >= 999 else f"-{r.max_arch}"
    return (f"{op} {m}x{k} @ {k}x{n} {dtype} on {arch}: variant={r.variant!r} "
            f"(shape class {shape_class(op, shapes)}; rule sm_{r.min_arch}{span} {'/'.join(r.dtypes)} "
            f"{r.shape_class}). Why: {r.why}. Override with variant=.")


__all__ = ["Rule", "TABLE", "choose", "explain_gemm", "shape_class", "LARGE_GEMM_OUTPUT", "LARGE_GEMM_K"]
