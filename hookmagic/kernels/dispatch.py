"""Which variant a call runs when it does not name one, and why: the dispatch table.

Each :class:`Rule` says, for one operation, which architectures and dtypes it covers, the
variant it picks, and the measurement that justifies the pick. :func:`choose`
returns the first rule that matches (the table is ordered, most specific first);
:func:`hookmagic.kernels.explain` says in words what a call would run and why. A caller's ``variant=`` always
wins over the table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hookmagic.kernels.build import arch_number, normalize_arch
from hookmagic.kernels.errors import KernelArgumentError

#: the measurements behind the Hopper rule (kernel time alone: cold L2, host launch cost hidden)
HOPPER_GEMM_RESULTS = "benchmarks/results/kernels-gemm-dispatch-h200.md"
#: the measurements behind the FP8 rule's schedule (against torch._scaled_mm, same timer)
HOPPER_FP8_RESULTS = "benchmarks/results/kernels-fp8-h200.md"


@dataclass(frozen=True)
class Rule:
    """One row of the dispatch table."""
    op: str
    min_arch: int            # lowest architecture number the rule covers (80 = sm_80)
    max_arch: int            # highest, inclusive
    dtypes: tuple[str, ...]
    variant: str
    why: str                 # the measurement (or the reason, where none applies) behind the pick
    schedule: str = ""       # the variant's tile schedule, where it has several (wgmma's)


TABLE: tuple[Rule, ...] = (
    Rule("gemm", 90, 90, ("float16", "bfloat16"), "wgmma",
         "on an H200 wgmma's kernels ran 1.47-3.0x faster than mma's at every shape measured, from "
         "512³ and 8 x 4096 x 4096 to 8192³ (FP16 and BF16; 96 % of cuBLAS at 4096³, 98 % at 8192³; "
         f"3 fresh processes, {HOPPER_GEMM_RESULTS})"),
    Rule("gemm_fp8", 90, 90, ("float8_e4m3fn", "float8_e5m2"), "wgmma",
         "FP8 wgmma (m64n256k32) exists on sm_90a only; on an H200 (kernel time, cold L2, 3 processes) the "
         "persistent4 schedule ran 4096³ 4 % and 8192³ 3 % faster than tiles and level with it at 1024 x 4096 x "
         "4096: 102-104 % of torch._scaled_mm's speed (97-100 % of its use_fast_accum=True form, the same "
         f"accumulation) ({HOPPER_FP8_RESULTS})", schedule="persistent4"),
    Rule("gemm", 80, 999, ("float16", "bfloat16", "int8"), "mma",
         "mma.sync + ldmatrix + 3-stage cp.async is the library's fastest Tensor Core GEMM before "
         "Hopper and its only INT8 one (wgmma exists on sm_90a only; wmma is the slower teaching variant)"),
    Rule("sgemm", 70, 999, ("float32",), "warptile",
         "warptile is the fastest step of the SGEMM journey measured (87 % of cuBLAS FP32 at 4096³, 90 % at 8192³, on an H200: benchmarks/results/kernels-sgemm-h200.md)"),
)


# --- conv2d ----------------------------------------------------------------------------------------
#: the measurements behind the conv2d rules (kernel time, CUDA events, against cuDNN in the same process)
HOPPER_CONV_RESULTS = "benchmarks/results/kernels-conv-h200.md"
#: SMs assumed by explain() where no device is asked (H100 SXM and H200 have 132)
EXPLAIN_SMS = 132


@dataclass(frozen=True)
class ConvRule:
    """One row of conv2d's dispatch table: the variant for a class of convolutions on some architectures."""
    min_arch: int
    max_arch: int
    dtypes: tuple[str, ...]
    filters: str             # "gemm-shaped" (see gemm_shaped) or "any"
    variant: str
    why: str


CONV_TABLE: tuple[ConvRule, ...] = (
    ConvRule(90, 90, ("float16", "bfloat16"), "gemm-shaped", "gemm",
             "a 1x1 filter with stride 1 and no padding is a plain GEMM on NHWC; with >= 256 output channels, "
             ">= 1 MiB of FP16 weights (C x K >= 2^19) and at least a quarter of the SMs' worth of 128 x 256 "
             "tiles the wgmma GEMM's larger tiles ran ResNet-50's 1024->512 and 512->2048 layers 1.2-1.3x faster "
             f"than the wgmma convolution (82-88 % of cuDNN), which won the smaller 1x1 layers ({HOPPER_CONV_RESULTS})"),
    ConvRule(90, 90, ("float16", "bfloat16"), "any", "wgmma",
             "wgmma with TMA im2col activations (64-channel multiples; else gathered by the producer warpgroup) is "
             "the library's fastest convolution on sm_90: 2.3-4.4x the mma.sync implicit GEMM and 58-108 % of "
             f"cuDNN on ResNet-50's layers, 84-86 % over the whole network at batch 32 ({HOPPER_CONV_RESULTS})"),
    ConvRule(80, 999, ("float16", "bfloat16"), "any", "implicit_gemm",
             "mma.sync implicit GEMM is the library's Tensor Core convolution before Hopper "
             "(wgmma exists on sm_90a only)"),
)


def gemm_shaped(filt: tuple[int, int], stride: int, padding: int, c: int, k: int, m: int, sms: int) -> bool:
    """A 1x1, stride 1, unpadded convolution whose GEMM (M = ``m`` pixels, N = ``k``, K = ``c``) suits the
    wgmma GEMM's 128 x 256 tiles: ``k`` >= 256, ``c * k`` >= 2^19 and at least ``sms`` / 4 tiles."""
    return (tuple(filt) == (1, 1) and stride == 1 and padding == 0 and k >= 256 and c * k >= 2 ** 19
            and -(-m // 128) * -(-k // 256) >= sms // 4)


def im2col_ok(c: int, r: int, s: int, stride: int, pad: int) -> bool:
    """Whether the wgmma convolution reads x by TMA im2col: whole 64-channel k-steps (``c`` % 64 == 0),
    a square filter, and padding, filter and stride within an im2col tensor map's ranges."""
    return c % 64 == 0 and r == s and 0 <= pad <= 127 and pad - (r - 1) >= -128 and stride <= 8


def conv_block_n(k: int, m: int, sms: int) -> int:
    """The wgmma convolution's tile width for ``k`` output channels and ``m`` output pixels: 64 for
    <= 64 channels or where 128-wide tiles would not cover half the SMs, else 128 (on an H200 the
    128-wide tile ran every ResNet-50 layer with more than 64 channels faster, even at 98 tiles on 132
    SMs, except the 7x7 ones with 52 tiles)."""
    return 64 if k <= 64 or 2 * -(-m // 128) * -(-k // 128) < sms else 128


#: the most ways auto splits the wgmma convolution's K loop (conv2d's split_k), and the fewest k-steps
#: (64 elements of R*S*C) a part keeps: the splits measured faster (CONV_SPLIT_K_WHY)
CONV_SPLIT_K_MAX = 2
CONV_SPLIT_K_MIN_STEPS = 24
#: the measurements behind conv_split_k (the split columns of the same benchmark, the layers it concerns)
HOPPER_CONV_SPLIT_RESULTS = "benchmarks/results/kernels-conv-splitk-h200.md"
#: why conv_split_k splits where it does
CONV_SPLIT_K_WHY = (
    "on an H200 ResNet-50's 3x3 layers with 7x7 outputs at batch 32 (13 x 4 = 52 tiles of 128 x 128, 72 k-steps) "
    "ran 25.8-26.1 us with the K loop in 2 parts (104 blocks) against 31.6-32.0 us unsplit on 104 tiles of "
    "128 x 64 (1.22x; 62-64 -> 75-78 % of cuDNN); 3 or 4 parts (156 or 208 blocks for 132 SMs) ran no faster than "
    "unsplit, 2 parts of the 98-tile layers at 14x14 ran slower, and the 1x1 2048->512 layer's 2 x 16 k-steps ran "
    f"level (17.1 against 17.1-17.3 us): hence tiles x parts within the SMs and >= {CONV_SPLIT_K_MIN_STEPS} k-steps "
    f"a part (3 fresh processes, {HOPPER_CONV_SPLIT_RESULTS})")


def conv_split_k(c: int, k: int, m: int, kg: int, sms: int) -> int:
    """How many ways the wgmma convolution splits its K loop (``kg`` = R*S*C) for ``c`` input and ``k``
    output channels and ``m`` output pixels on ``sms`` SMs (with 128-wide tiles; 1 = no split): where
    128 x 128 tiles would cover at most half the SMs, the largest split <= :data:`CONV_SPLIT_K_MAX`
    whose tiles x splits fit the SMs and whose parts keep >= :data:`CONV_SPLIT_K_MIN_STEPS` k-steps
    (:data:`CONV_SPLIT_K_WHY`). The split kernels read whole 16-byte chunks: ``c`` % 8 == 0."""
    tiles = -(-m // 128) * -(-k // 128)
    if c % 8 or k <= 64 or 2 * tiles > sms:
        return 1
    return max(1, min(CONV_SPLIT_K_MAX, sms // tiles, -(-kg // 64) // CONV_SPLIT_K_MIN_STEPS))


@dataclass(frozen=True)
class ConvPick:
    """What conv2d runs: the rule, the wgmma tile width (0 for the other variants) and how many
    ways the wgmma convolution splits its K loop (1: no split)."""
    rule: ConvRule
    block_n: int
    split_k: int = 1

    @property
    def variant(self) -> str:
        return self.rule.variant


def choose_conv(arch: Any, dtype: str, filt: tuple[int, int], stride: int, padding: int, c: int, k: int, m: int,
                sms: int = EXPLAIN_SMS) -> ConvPick:
    """conv2d's pick for a ``filt`` = (R, S) filter with ``stride`` and ``padding``, ``c`` input and
    ``k`` output channels and ``m`` output pixels on ``arch`` (``sms`` SMs)."""
    a = arch_number(normalize_arch(arch))
    for r in CONV_TABLE:
        if not (r.min_arch <= a <= r.max_arch and dtype in r.dtypes):
            continue
        if r.filters == "gemm-shaped" and not gemm_shaped(filt, stride, padding, c, k, m, sms):
            continue
        if r.variant == "implicit_gemm" and k % 8:
            continue
        if r.variant != "wgmma":
            return ConvPick(r, 0)
        split = conv_split_k(c, k, m, filt[0] * filt[1] * c, sms)
        return ConvPick(r, 128, split) if split > 1 else ConvPick(r, conv_block_n(k, m, sms))
    raise KernelArgumentError(f"conv2d: no kernel for {dtype} on {normalize_arch(arch)} with {k} output channels "
                              "(the dispatch table covers: "
                              + "; ".join(f"sm_{r.min_arch}{_span(r)} {'/'.join(r.dtypes)} {r.filters}"
                                          for r in CONV_TABLE) + ")")


def explain_conv(shapes: tuple[tuple[int, ...], ...], dtype: str, arch: str, stride: int, padding: int,
                 layout: str) -> str:
    """In words: what conv2d runs for x and w of ``shapes`` (in ``layout``'s convention) and why."""
    lay = str(layout).upper()
    if len(shapes) != 2 or len(shapes[0]) != 4 or len(shapes[1]) != 4 or lay not in ("NHWC", "NCHW"):
        raise KernelArgumentError("conv2d: give the shapes of x and w, e.g. (32, 56, 56, 64), (64, 3, 3, 64) for "
                                  f"layout='NHWC' (or NCHW + KCRS with layout='NCHW'); got {shapes}, layout {layout!r}")
    if lay == "NHWC":
        (n, h, w, c), (k, r, s, _) = shapes
    else:
        (n, c, h, w), (k, _, r, s) = shapes
    oh, ow = (h + 2 * padding - r) // stride + 1, (w + 2 * padding - s) // stride + 1
    if stride < 1 or padding < 0 or oh < 1 or ow < 1:
        raise KernelArgumentError(f"conv2d: a {r}x{s} filter with stride {stride} and padding {padding} does not fit "
                                  f"a {h}x{w} input")
    pick = choose_conv(arch, dtype, (r, s), stride, padding, c, k, n * oh * ow)
    tile = f", block_n={pick.block_n} (128 x {pick.block_n} tiles, {-(-n * oh * ow // 128) * -(-k // pick.block_n)} " \
           f"of them for {EXPLAIN_SMS} SMs; activations " \
           f"{'by TMA im2col' if im2col_ok(c, r, s, stride, padding) else 'gathered by the producer warpgroup'})" \
        if pick.block_n else ""
    if pick.split_k > 1:
        tile += f", split_k={pick.split_k} (the K loop of {-(-r * s * c // 64)} k-steps in {pick.split_k} parts: " \
                f"{CONV_SPLIT_K_WHY})"
    mult = 8 if pick.variant == "implicit_gemm" else 4
    pad_c = f"; the {c} input channels are zero-padded to {-(-c // mult) * mult}" if c % mult and pick.variant != "gemm" \
        else ""
    rr = pick.rule
    return (f"conv2d x {tuple(shapes[0])} w {tuple(shapes[1])} ({lay}) {r}x{s} stride {stride} padding {padding} "
            f"{dtype} on {arch}: variant={pick.variant!r}{tile}{pad_c} (rule sm_{rr.min_arch}{_span(rr)} "
            f"{'/'.join(rr.dtypes)} {rr.filters} filters). Why: {rr.why}. Override with variant= (and block_n=, split_k=).")


def _check_shapes(op: str, shapes: tuple[tuple[int, ...], ...]) -> None:
    if op in ("gemm", "sgemm", "gemm_fp8") and (len(shapes) != 2 or len(shapes[0]) != 2 or len(shapes[1]) != 2):
        raise KernelArgumentError(f"{op}: give the shapes of a and b, e.g. (4096, 4096), (4096, 4096); got {shapes}")


def choose(op: str, arch: Any, dtype: str, shapes: tuple[tuple[int, ...], ...]) -> Rule:
    """The table's rule for ``op`` on ``arch`` with ``dtype`` operands of ``shapes`` (checked: two 2-D shapes for a GEMM)."""
    _check_shapes(op, shapes)
    a = arch_number(normalize_arch(arch))
    for r in TABLE:
        if r.op == op and r.min_arch <= a <= r.max_arch and dtype in r.dtypes:
            return r
    raise KernelArgumentError(f"{op}: no kernel for {dtype} on {normalize_arch(arch)} "
                              f"(the dispatch table covers: {_covered(op) or 'nothing'})")


def _span(r: Rule) -> str:
    return "" if r.max_arch == r.min_arch else "+" if r.max_arch >= 999 else f"-{r.max_arch}"


def _covered(op: str) -> str:
    return "; ".join(f"sm_{r.min_arch}{_span(r)} {'/'.join(r.dtypes)}" for r in TABLE if r.op == op) \
        + _ELSEWHERE.get(op, "")


#: where an operation's table ends, what to use beyond it
_ELSEWHERE = {"gemm_fp8": " (H100, H200, GH200); FP8 on Ada (sm_89) or Blackwell: torch._scaled_mm"}


def explain_gemm(op: str, shapes: tuple[tuple[int, ...], ...], dtype: str, arch: str) -> str:
    """In words: the variant the table picks for a GEMM of ``shapes`` and why."""
    r = choose(op, arch, dtype, shapes)
    (m, k), (_, n) = shapes
    sched = f", schedule={r.schedule!r}" if r.schedule else ""
    override = "schedule=" if op == "gemm_fp8" else "variant="   # FP8 has one variant and two schedules
    return (f"{op} {m}x{k} @ {k}x{n} {dtype} on {arch}: variant={r.variant!r}{sched} "
            f"(rule sm_{r.min_arch}{_span(r)} {'/'.join(r.dtypes)}). Why: {r.why}. Override with {override}.")


__all__ = ["Rule", "TABLE", "choose", "explain_gemm", "HOPPER_GEMM_RESULTS", "HOPPER_FP8_RESULTS", "ConvRule",
           "CONV_TABLE", "ConvPick", "choose_conv", "conv_block_n", "conv_split_k", "CONV_SPLIT_K_MAX",
           "CONV_SPLIT_K_MIN_STEPS", "CONV_SPLIT_K_WHY", "HOPPER_CONV_SPLIT_RESULTS", "gemm_shaped", "im2col_ok", "explain_conv", "HOPPER_CONV_RESULTS"]
