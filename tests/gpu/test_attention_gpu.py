"""attention(variant="wgmma") (Hopper: wgmma + TMA, kernels/attention_wgmma.cu) against torch SDPA.

Runs on an sm_90 GPU (H100/H200) only; elsewhere every test skips with the reason. The criterion is
FlashAttention's, as for the mma kernel (tests/gpu/test_infer_gpu.py): against an FP64 SDPA of the
same inputs, at most twice the error of torch's own SDPA in the same dtype, plus one unit of output
rounding and the sqrt(n) bound of FP32 sums (tests/gpu/accuracy.py).

    timeout 200 python3 -m pytest -q tests/gpu/test_attention_gpu.py
"""
from __future__ import annotations

import pytest

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

from tests.gpu.accuracy import assert_within_rounding  # noqa: E402

import hookmagic.kernels as hk  # noqa: E402

pytestmark = pytest.mark.skipif(skip_reason() is None and torch.cuda.get_device_capability() != (9, 0),
                                reason="needs an sm_90 GPU (H100/H200): wgmma and TMA are sm_90a instructions")
F = torch.nn.functional


def _check(ours, q, k, v, causal, scale=None):
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    assert ours.dtype == q.dtype and ours.shape == q.shape
    assert_within_rounding(ours, theirs, ref, q.dtype, n=k.shape[-2], magnitude=v.double().abs().amax())


def _kernels_run(fn) -> list[str]:
    hk.launch_log(clear=True)
    out = fn()
    return out, [w.kernel for w in hk.launch_log(clear=True)]


@pytest.mark.parametrize("schedule", ["overlap", "pingpong"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b, h, s, d", [(2, 3, 1, 64), (1, 2, 17, 128), (2, 4, 256, 64), (2, 2, 384, 128),
                                        (1, 2, 1000, 128), (1, 1, 4097, 64), (1, 2, 2048, 128)])
def test_wgmma_matches_sdpa(b, h, s, d, causal, dtype, schedule):
    torch.manual_seed(s + d)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
    out, ran = _kernels_run(lambda: hk.attention(q, k, v, causal=causal, variant="wgmma", schedule=schedule))
    suffix = "_pp" if schedule == "pingpong" else ""
    assert ran == [f"attention_wgmma_{'f16' if dtype == torch.float16 else 'bf16'}_d{d}{suffix}"]
    _check(out, q, k, v, causal)


@pytest.mark.parametrize("schedule", ["overlap", "pingpong"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq, sk", [(100, 300), (300, 100), (129, 1), (1, 257), (70, 50)])
def test_other_key_length_strided_and_scale(sq, sk, causal, schedule):
    # q a (B, S, H, D) tensor viewed as (B, H, S, D): TMA reads the strides as they are
    q = torch.randn(2, sq, 4, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(2, 4, sk, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, sk, 4, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    _check(hk.attention(q, k, v, causal=causal, variant="wgmma", schedule=schedule), q, k, v, causal)
    _check(hk.attention(q, k, v, causal=causal, scale=0.3, variant="wgmma", schedule=schedule), q, k, v, causal,
           scale=0.3)


def test_large_scores_and_broadcast_heads():
    # scores far from 0 exercise the running max; k and v broadcast over heads (stride 0) are copied first
    q = 8 * torch.randn(1, 4, 600, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 1, 600, 64, device="cuda", dtype=torch.float16).expand(1, 4, 600, 64)
    v = torch.randn(1, 1, 600, 64, device="cuda", dtype=torch.float16).expand(1, 4, 600, 64)
    for causal in (False, True):
        _check(hk.attention(q, k, v, causal=causal, variant="wgmma"), q, k, v, causal)


def test_auto_runs_wgmma_for_fixed_length_and_mma_for_offsets():
    q, k, v = (torch.randn(1, 2, 200, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out, ran = _kernels_run(lambda: hk.attention(q, k, v, causal=True))
    assert ran == ["attention_wgmma_f16_d64_pp"]                               # schedule "pingpong"
    _check(out, q, k, v, True)
    out, ran = _kernels_run(lambda: hk.attention(q, k, v, causal=True, variant="mma"))
    assert ran == ["attention_f16_d64"]
    _check(out, q, k, v, True)
    off = torch.tensor([0, 50, 200], dtype=torch.int32, device="cuda")
    packed = [x[0].transpose(0, 1).contiguous() for x in (q, k, v)]           # (200 tokens, 2 heads, 64)
    out, ran = _kernels_run(lambda: hk.attention(*packed, offsets=off))
    assert ran == ["attention_f16_d64"]
    for a, e in ((0, 50), (50, 200)):
        per = [x[a:e].transpose(0, 1)[None] for x in packed]
        _check(out[a:e].transpose(0, 1)[None], *per, False)
    with pytest.raises(hk.KernelArgumentError, match="variant='wgmma' takes fixed-length"):
        hk.attention(*packed, offsets=off, variant="wgmma")
    empty = torch.zeros(1, 2, 0, 64, device="cuda", dtype=torch.float16)
    assert torch.equal(hk.attention(q, empty, empty), torch.zeros_like(q))   # no keys: zeros (mma kernel)
