"""Call plans of gemm/sgemm on a real GPU: a call whose signature was seen before launches through
its call plan (no checks or planning beyond the key), and its results are what torch computes
for every new set of operands of that signature (new addresses: new tensor maps for wgmma), on
the caller's stream, with the epilogue's operands changed between calls. Tolerances as in
tests/gpu/test_kernels_gpu.py (tests/gpu/accuracy.py)."""
from __future__ import annotations

import pytest

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

from tests.gpu.accuracy import TORCH_ACTIVATIONS, assert_within_rounding  # noqa: E402

import hookmagic.kernels as hk  # noqa: E402
from hookmagic.kernels import registry  # noqa: E402

gemm_mod = __import__("importlib").import_module("hookmagic.kernels.gemm")

HOPPER = skip_reason() is None and torch.cuda.get_device_capability() == (9, 0)
VARIANTS = ["mma"] + (["wgmma"] if HOPPER else [])


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _within(ours, a, b, bias=None, residual=None, activation=None):
    ref = a.float() @ b.float()
    theirs = a @ b
    if bias is not None:
        ref, theirs = ref + bias.float(), theirs + bias
    if activation:
        ref, theirs = TORCH_ACTIVATIONS[activation](ref), TORCH_ACTIVATIONS[activation](theirs)
    if residual is not None:
        ref, theirs = ref + residual.float(), theirs + residual
    magnitude = a.float().abs() @ b.float().abs() + ref.abs()
    assert_within_rounding(ours, theirs, ref, a.dtype, n=a.shape[-1], magnitude=magnitude)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_repeated_gemm_calls_take_their_call_plan_and_match_torch(variant, b_layout):
    m, n, k = 300, 264, 136
    keys = set(gemm_mod._calls)
    stream = torch.cuda.Stream()
    for i in range(4):   # new operands each time, same signature; the last two on another stream
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        if b_layout == "col":
            b = b.t().contiguous().t()
        bias = torch.randn(n, device="cuda", dtype=torch.float16)
        res = torch.randn(m, n, device="cuda", dtype=torch.float16)
        stream.wait_stream(torch.cuda.current_stream())   # the operands were made on the current stream
        with torch.cuda.stream(stream if i >= 2 else torch.cuda.current_stream()):
            c = hk.gemm(a, b, bias=bias, activation="gelu", residual=res, variant=variant)
        torch.cuda.synchronize()
        _within(c, a, b, bias, res, "gelu")
        d = hk.gemm(a, b, variant=variant)
        _within(d, a, b)
    new = set(gemm_mod._calls) - keys
    # one call plan per signature (with and without the epilogue); mma copies a column-major b
    # to row-major first: no call plan
    assert len(new) == (0 if variant == "mma" and b_layout == "col" else 2), new


def test_repeated_sgemm_calls_take_their_call_plan_and_match_torch():
    keys = set(gemm_mod._calls)
    for _ in range(3):
        a, b = torch.randn(129, 64, device="cuda"), torch.randn(64, 200, device="cuda")
        c = hk.sgemm(a, b)
        ref = a.double() @ b.double()
        assert_within_rounding(c, a @ b, ref, torch.float32, n=64, magnitude=a.double().abs() @ b.double().abs())
    assert len(set(gemm_mod._calls) - keys) == 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_call_plans_declare_the_same_work_as_the_full_path(variant):
    a = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    registry.launch_log(clear=True)
    hk.gemm(a, b, variant=variant)
    hk.gemm(a, b, variant=variant)
    first, second = registry.launch_log(clear=True)[-2:]
    assert (first.kernel, first.flops, first.dram_bytes, first.args) == \
        (second.kernel, second.flops, second.dram_bytes, second.args)
    assert first.flops == 2 * 256 * 512 * 128 and first.args["dtype"] == "bfloat16"


def test_misaligned_operands_of_a_planned_signature_are_still_right():
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    hk.gemm(a, b)
    hk.gemm(a, b)                           # the call plan of this signature
    flat = torch.randn(64 * 64 + 1, device="cuda", dtype=torch.float16)
    a2 = flat[1:].view(64, 64)              # same shape, strides, dtype: 2-byte aligned
    _within(hk.gemm(a2, b), a2, b)
