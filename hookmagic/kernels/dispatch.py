"""Which variant a call runs when it does not name one, and why: the dispatch table.

Each :class:`Rule` says, for one operation, which architectures, dtypes and shape class it
covers, the variant it picks, and the measurement that justifies the pick. :func:`choose`
returns the first rule that matches (the table is ordered, most specific first);
:func:`explain` says in words what a call would run and why. A caller's ``variant=`` always
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


def explain(op: str, *shapes: tuple[int, ...], dtype: str = "float16", arch: Any = "sm_90") -> str:
    """What ``op`` would run for operands of ``shapes`` and ``dtype`` on ``arch``, and why.

    ``explain("gemm", (4096, 4096), (4096, 4096), dtype="float16", arch="sm_90")`` names the
    variant, the shape class and the measurement behind the choice. GEMMs go through the
    dispatch table; the row-wise operations (softmax, layer_norm, rms_norm, bias_gelu) name the
    kernel their launch plan picks for the row length.
    """
    shapes = tuple(tuple(int(v) for v in s) for s in shapes)
    arch = normalize_arch(arch)
    if op in ("gemm", "sgemm"):
        r = choose(op, arch, dtype, shapes)
        (m, k), (_, n) = shapes
        return (f"{op} {m}x{k} @ {k}x{n} {dtype} on {arch}: variant={r.variant!r} "
                f"(shape class {shape_class(op, shapes)}; rule sm_{r.min_arch}"
                f"{'' if r.max_arch == r.min_arch else '+' if r.max_arch >= 999 else f'-{r.max_arch}'}"
                f" {'/'.join(r.dtypes)} {r.shape_class}). Why: {r.why}. Override with variant=.")
    from hookmagic.kernels import rowwise
    if op in ("softmax", "layer_norm", "rms_norm", "bias_gelu"):
        if len(shapes) != 1 or not shapes[0]:
            raise KernelArgumentError(f"{op}: give the shape of x, e.g. (8, 4096); got {shapes}")
        if dtype not in rowwise._DTYPES:
            raise KernelArgumentError(f"{op}: dtype must be one of {', '.join(rowwise._DTYPES)}, got {dtype!r}")
        cols = shapes[0][-1]
        rows = 1
        for v in shapes[0][:-1]:
            rows *= v
        nv = 16 // rowwise.ITEMSIZE[dtype]
        plan = rowwise._fast_plan(op, rows, cols, nv, _SMEM_OPTIN.get(arch_number(arch), 99 * 1024) - 1024) \
            if cols % nv == 0 else None
        if plan is None:
            return (f"{op} of {rows} rows x {cols} {dtype} on {arch}: the multi-pass kernel "
                    f"({op}_{rowwise._SUFFIX[dtype]}): the row is not a whole number of 16-byte vectors "
                    f"or does not fit registers + shared memory (16-byte aligned rows take the "
                    f"register-resident kernels). Override with impl=.")
        name, grid, threads, _last, smem = plan
        return (f"{op} of {rows} rows x {cols} {dtype} on {arch}: {name}_{rowwise._SUFFIX[dtype]} "
                f"(grid {grid}, {threads} threads, {smem} B dynamic shared memory) when x is 16-byte "
                f"aligned: the row is read from DRAM once into registers"
                f"{' and shared memory' if smem else ''} (91-99 % of a device copy's bandwidth on an "
                f"H100 for 4096-wide rows). Override with impl=.")
    raise KernelArgumentError(f"explain: no dispatch for op {op!r}; one of gemm, sgemm, softmax, "
                              f"layer_norm, rms_norm, bias_gelu")


#: per-block opt-in shared memory by architecture number (CUDA programming guide, compute
#: capabilities table), for explaining without a GPU
_SMEM_OPTIN = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}


__all__ = ["Rule", "TABLE", "choose", "explain", "shape_class", "LARGE_GEMM_OUTPUT", "LARGE_GEMM_K"]
