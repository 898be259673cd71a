"""gemm(variant="wgmma") (Hopper: wgmma + TMA, kernels/gemm_wgmma.cu) against PyTorch/cuBLAS.

Runs on an sm_90 GPU (H100/H200) only; elsewhere every test skips with the reason. Results are
compared with a float32 reference under the shared criterion of tests/gpu/accuracy.py (twice
torch's own error, one unit of output rounding, the sqrt(K) rounding bound of the FP32
accumulator). On a failure the message first lists the wrong elements (first indices, values,
and which 64 x 64 blocks of C they fall in), so one GPU run tells a layout bug from rounding.
"""
from __future__ import annotations

import math

import pytest

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

from tests.gpu.accuracy import ACCUMULATOR_EPS, EPS, TORCH_ACTIVATIONS, assert_within_rounding  # noqa: E402

import hookmagic.kernels as hk  # noqa: E402
from hookmagic.kernels import gemm_wgmma  # noqa: E402,F401

# without any GPU, conftest skips with its one reason; on another GPU, this one
pytestmark = pytest.mark.skipif(skip_reason() is None and torch.cuda.get_device_capability() != (9, 0),
                                reason="needs an sm_90 GPU (H100/H200): wgmma and TMA are sm_90a instructions")

SHAPES = [(1, 1, 1), (1, 8, 8), (17, 255, 33), (128, 256, 64), (128, 128, 128), (255, 17, 4095), (300, 257, 129),
          (64, 512, 1000), (1000, 1000, 1000), (129, 513, 200), (256, 1024, 4096), (4096, 4096, 4096)]


@pytest.fixture(params=["tiles", "persistent", "persistent4", "cluster2"])
def schedule(request):
    """Every schedule of the kernel: a block per tile, a block per SM walking the tiles (two
    epilogue designs), and clusters of 2 blocks sharing B by TMA multicast."""
    return request.param


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _describe_mismatch(ours, theirs, ref, dtype, n, magnitude) -> str:
    """Where ``ours`` breaks the accuracy bound: count, the first few indices with values, and the
    64 x 64 blocks of C holding wrong elements (a descriptor or swizzle bug shows as a pattern)."""
    ref = ref.double()
    err = (ours.double() - ref).abs()
    terr = (theirs.double() - ref).abs().max().item()
    bound = 2 * terr + EPS[dtype] * max(ref.abs().max().item(), 1.0) + ACCUMULATOR_EPS * math.sqrt(max(n, 1)) * magnitude.double()
    bad = (err > bound).nonzero()
    if len(bad) == 0:
        return ""
    lines = [f"{len(bad)} of {ours.numel()} elements wrong (shape {tuple(ours.shape)}, K={n})"]
    for r, c in bad[:8].tolist():
        lines.append(f"  C[{r},{c}] = {ours[r, c].item():.5g}, reference {ref[r, c].item():.5g}")
    blocks = sorted({(r // 64, c // 64) for r, c in bad[:100000].tolist()})
    lines.append(f"  64x64 blocks (row block, col block) with wrong elements: {blocks[:24]}{' ...' if len(blocks) > 24 else ''}")
    cols_bad = sorted({c % 64 for _, c in bad[:100000].tolist()})
    rows_bad = sorted({r % 64 for r, _ in bad[:100000].tolist()})
    lines.append(f"  columns mod 64 affected: {cols_bad[:64]}")
    lines.append(f"  rows mod 64 affected: {rows_bad[:64]}")
    return "\n".join(lines)


def _within(ours, theirs, ref, dtype, a, b):
    magnitude = a.float().abs() @ b.float().abs() + ref.abs()
    detail = _describe_mismatch(ours, theirs, ref, dtype, a.shape[-1], magnitude)
    if detail:
        print(detail)
    assert_within_rounding(ours, theirs, ref, dtype, n=a.shape[-1], magnitude=magnitude)


@pytest.mark.parametrize("b_layout", ["row_major", "column_major"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_wgmma_matches_torch(m, n, k, dtype, b_layout, schedule):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = (torch.randn(k, n, device="cuda", dtype=dtype) if b_layout == "row_major"
         else torch.randn(n, k, device="cuda", dtype=dtype).t())
    c = hk.gemm(a, b, variant="wgmma", schedule=schedule)
    torch.cuda.synchronize()
    assert c.shape == (m, n) and c.dtype == dtype and c.is_contiguous()
    _within(c, a @ b, a.float() @ b.float(), dtype, a, b)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("m,n,k", [(17, 255, 33), (256, 384, 512), (300, 520, 136)])
def test_wgmma_fused_epilogues(activation, m, n, k, schedule):
    dtype = torch.float16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype) / math.sqrt(k)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    res = torch.randn(m, n, device="cuda", dtype=dtype)
    act = TORCH_ACTIVATIONS[activation]
    c = hk.gemm(a, b, bias=bias, activation=activation, residual=res, variant="wgmma", schedule=schedule)
    _within(c, act(a @ b + bias) + res, act(a.float() @ b.float() + bias.float()) + res.float(), dtype, a, b)
    c2 = hk.gemm(a, b, bias=bias, variant="wgmma", schedule=schedule)
    _within(c2, a @ b + bias, a.float() @ b.float() + bias.float(), dtype, a, b)


def test_wgmma_strided_misaligned_and_transposed_a():
    base = torch.randn(300, 402, device="cuda", dtype=torch.bfloat16)
    a = base[:, 1:201]                                   # strided, 2-byte aligned rows
    b = torch.randn(200, 150, device="cuda", dtype=torch.bfloat16)
    _within(hk.gemm(a, b, variant="wgmma"), a @ b, a.float() @ b.float(), torch.bfloat16, a, b)
    at = torch.randn(200, 300, device="cuda", dtype=torch.bfloat16).t()   # column-major a: copied
    _within(hk.gemm(at, b, variant="wgmma"), at @ b, at.float() @ b.float(), torch.bfloat16, at, b)
    flat = torch.randn(64 * 72 + 1, device="cuda", dtype=torch.float16)
    ah = flat[1:].view(64, 72)                            # address 2 bytes past an aligned one
    bh = torch.randn(72, 96, device="cuda", dtype=torch.float16)
    _within(hk.gemm(ah, bh, variant="wgmma"), ah @ bh, ah.float() @ bh.float(), torch.float16, ah, bh)


def test_wgmma_empty_and_k_zero():
    z = hk.gemm(torch.randn(0, 64, device="cuda").half(), torch.randn(64, 8, device="cuda").half(), variant="wgmma")
    assert z.shape == (0, 8)
    k0 = hk.gemm(torch.randn(4, 0, device="cuda").half(), torch.randn(0, 6, device="cuda").half(),
                 bias=torch.ones(6, device="cuda").half(), variant="wgmma")
    assert torch.equal(k0, torch.ones(4, 6, device="cuda").half())


def test_wgmma_runs_on_the_callers_stream_and_declares_its_work():
    s = torch.cuda.Stream()
    a = torch.randn(512, 768, device="cuda", dtype=torch.float16)
    b = torch.randn(768, 640, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    hk.launch_log(clear=True)
    with torch.cuda.stream(s):
        c = hk.gemm(a, b, variant="wgmma")
    s.synchronize()
    _within(c, a @ b, a.float() @ b.float(), torch.float16, a, b)
    (w,) = [x for x in hk.launch_log(clear=True) if x.kernel.startswith("gemm_wgmma")]
    assert w.kernel.startswith("gemm_wgmma_f16") and w.flops == 2 * 512 * 640 * 768


def test_wgmma_repeated_calls_are_deterministic(schedule):
    a = torch.randn(1024, 2048, device="cuda", dtype=torch.float16)
    b = torch.randn(2048, 1536, device="cuda", dtype=torch.float16)
    first = hk.gemm(a, b, variant="wgmma", schedule=schedule)
    for _ in range(5):
        assert torch.equal(hk.gemm(a, b, variant="wgmma", schedule=schedule), first)


# ---- gemm_fp8 (kernels/gemm_fp8.cu): FP8 e4m3/e5m2 with per-tensor scales, against torch._scaled_mm ----
# FP8 products are exact in FP32 (at most 4 x 4 significand bits, exponents far inside FP32's range),
# so two correct kernels differ only in how they accumulate and in the one rounding to FP16/BF16.
# Hopper's Tensor Cores sum FP8 products with a narrower adder than FP32 (about 14 bits kept: the
# DeepSeek-V3 report, section 3.3.2), which torch._scaled_mm avoids by default (use_fast_accum=False
# promotes partial sums to FP32 registers) and does like this kernel with use_fast_accum=True. Hence
# two tests: (1) small-integer data whose every partial sum is an integer of at most 12 bits, exact
# in any adder of >= 13 bits: the result must EQUAL torch._scaled_mm's (and the exact product rounded
# once); (2) Gaussian data: the accuracy criterion above, torch's error taken from the
# fast-accumulation form (the same adder).
from hookmagic.kernels.gemm import gemm_fp8  # noqa: E402

FP8_TYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_PAIRS = [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")]
# odd M and N (edge tiles), K multiples of 16 that are not of the 128-element stage (TMA zero-fills)
FP8_SHAPES = [(1, 1, 16), (17, 255, 32), (128, 256, 128), (300, 257, 144), (129, 513, 1008), (255, 520, 4096),
              (1000, 1000, 2048)]


@pytest.fixture(params=["tiles", "persistent4"])
def fp8_schedule(request):
    return request.param


def _pad16(x, rows):
    """``x`` (FP8, row-major) with zero rows appended up to ``rows`` (a zero byte is +0 in both formats)."""
    if x.shape[0] == rows:
        return x
    out = torch.zeros(rows, x.shape[1], dtype=torch.uint8, device=x.device)
    out[: x.shape[0]] = x.view(torch.uint8)
    return out.view(x.dtype)


def _scaled_mm(a, b, sa, sb, out_dtype, fast, bias=None):
    """torch._scaled_mm on the same operands; M and N padded to multiples of 16 with zero rows
    (cuBLASLt's FP8 needs them), which changes no element of the M x N result. None where
    cuBLASLt has no kernel (e5m2 x e5m2)."""
    m, n = a.shape[0], b.shape[1]
    mp, np_ = -(-m // 16) * 16, -(-n // 16) * 16
    bp = _pad16(b.t().contiguous(), np_).t()
    biasp = None if bias is None else torch.cat([bias, bias.new_zeros(np_ - n)])
    try:
        c = torch._scaled_mm(_pad16(a, mp), bp, sa, sb, bias=biasp, out_dtype=out_dtype, use_fast_accum=fast)
    except (RuntimeError, ValueError):   # torch 2.11: ValueError "Multiplication of two Float8_e5m2 matrices"
        return None
    return c[:m, :n]


def _fp8_operands(m, n, k, ta, tb, sample):
    a = sample((m, k)).to(FP8_TYPES[ta])
    b = sample((n, k)).to(FP8_TYPES[tb]).t()     # column-major K x N
    return a, b


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("ta,tb", FP8_PAIRS)
@pytest.mark.parametrize("m,n,k", FP8_SHAPES)
def test_fp8_equals_scaled_mm_on_exactly_summable_data(m, n, k, ta, tb, out_dtype, fp8_schedule):
    a, b = _fp8_operands(m, n, k, ta, tb, lambda s: torch.randint(-1, 2, s, device="cuda").float())
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")   # powers of two: exact
    c = gemm_fp8(a, b, sa, sb, out_dtype=out_dtype, schedule=fp8_schedule)
    torch.cuda.synchronize()
    assert c.shape == (m, n) and c.dtype == out_dtype and c.is_contiguous()
    exact = (a.double() @ b.double()) * 0.125       # |sum| <= K <= 4096: exact in FP32, rounded once below
    assert torch.equal(c, exact.float().to(out_dtype)), _describe_mismatch(c, exact, exact, out_dtype, k, exact.abs())
    theirs = _scaled_mm(a, b, sa, sb, out_dtype, fast=True)
    if theirs is not None:
        assert torch.equal(c, theirs)
    bias = torch.randint(-8, 9, (n,), device="cuda").to(out_dtype)       # small integers: the sum stays exact
    cb = gemm_fp8(a, b, sa, sb, out_dtype=out_dtype, bias=bias, schedule=fp8_schedule)
    assert torch.equal(cb, (exact + bias.double()).float().to(out_dtype))


@pytest.mark.parametrize("ta,tb", FP8_PAIRS[:3])        # the pairs torch._scaled_mm runs
@pytest.mark.parametrize("m,n,k", FP8_SHAPES[2:] + [(2048, 4096, 4096)])
def test_fp8_gaussian_within_rounding_of_scaled_mm(m, n, k, ta, tb, fp8_schedule):
    a, b = _fp8_operands(m, n, k, ta, tb, lambda s: 4 * torch.randn(s, device="cuda"))
    sa, sb = torch.tensor(0.37, device="cuda"), torch.tensor(1.0 / 96, device="cuda")
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    c = gemm_fp8(a, b, sa, sb, bias=bias, schedule=fp8_schedule)
    s = sa.double() * sb.double()
    ref = (a.double() @ b.double()) * s + bias.double()
    theirs = _scaled_mm(a, b, sa, sb, torch.bfloat16, fast=True, bias=bias)
    magnitude = (a.double().abs() @ b.double().abs()) * s
    print(f"max error: ours {(c.double() - ref).abs().max().item():.4g}, "
          f"torch fast {(theirs.double() - ref).abs().max().item():.4g}, "
          f"torch default {(_scaled_mm(a, b, sa, sb, torch.bfloat16, False, bias).double() - ref).abs().max().item():.4g}")
    assert_within_rounding(c, theirs, ref, torch.bfloat16, n=k, magnitude=magnitude)


def test_fp8_runs_on_the_callers_stream_declares_its_work_and_is_deterministic(fp8_schedule):
    a, b = _fp8_operands(512, 640, 768, "e4m3", "e4m3", lambda s: torch.randn(s, device="cuda"))
    sa = torch.tensor(1.0, device="cuda")
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    hk.launch_log(clear=True)
    with torch.cuda.stream(s):
        c = gemm_fp8(a, b, sa, sa, schedule=fp8_schedule)
    s.synchronize()
    (w,) = [x for x in hk.launch_log(clear=True) if x.kernel.startswith("gemm_fp8")]
    assert w.kernel.startswith("gemm_fp8_e4m3_e4m3_bf16") and w.flops == 2 * 512 * 640 * 768
    for _ in range(3):
        assert torch.equal(gemm_fp8(a, b, sa, sa, schedule=fp8_schedule), c)


def test_fp8_k_zero_and_empty():
    sa = torch.tensor(1.0, device="cuda")
    e = torch.float8_e4m3fn
    z = gemm_fp8(torch.zeros(0, 32, device="cuda").to(e), torch.zeros(8, 32, device="cuda").to(e).t(), sa, sa)
    assert z.shape == (0, 8) and z.dtype == torch.bfloat16
    bias = torch.arange(6, device="cuda").to(torch.bfloat16)
    k0 = gemm_fp8(torch.zeros(4, 0, device="cuda").to(e), torch.zeros(6, 0, device="cuda").to(e).t(), sa, sa, bias=bias)
    assert torch.equal(k0, bias.expand(4, 6))
