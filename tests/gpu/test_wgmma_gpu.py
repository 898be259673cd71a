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
