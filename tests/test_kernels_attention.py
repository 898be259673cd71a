"""The Hopper attention kernel (attention(variant="wgmma"), kernels/attention_wgmma.cu) without a GPU:
it compiles with NVRTC for sm_90a into wgmma/TMA/mbarrier code without spills, to empty stubs for
other targets, and ``variant="auto"`` / ``kernels.explain`` pick it on sm_90 for fixed-length
operands only. (On an H100/H200: tests/gpu/test_attention_gpu.py.)"""
from __future__ import annotations

import pytest

import hookmagic.kernels as hk

cuda_core = pytest.importorskip("cuda.core")

from tests.kernel_compiles import assert_warpgroup_kernels_fit, compiled_with_ptx, family_ptx  # noqa: E402

attention_mod = __import__("hookmagic.kernels.attention", fromlist=["attention"])   # the package's name is the function
NAMES = {f"attention_wgmma_{t}_d{d}" for t in ("f16", "bf16") for d in (64, 128)}
PINGPONG = {n + "_pp" for n in NAMES}
BIG = ((4, 16, 4096, 128), (4, 16, 4096, 128))


def test_compiles_for_sm90a_without_spills():
    c, _ = compiled_with_ptx("attention_wgmma", "sm_90a")
    assert set(c.kernels) == NAMES | PINGPONG
    assert_warpgroup_kernels_fit(c)


def test_sm90a_code_uses_wgmma_tma_and_register_a_and_other_targets_get_stubs():
    _, ptx = compiled_with_ptx("attention_wgmma", "sm_90a")    # the PTX of the compile above
    for t in ("f16", "bf16"):
        assert f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{t}.{t}" in ptx   # Q K^T and P V at d 128
        assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{t}.{t}" in ptx    # P V at d 64
    # P V takes P from registers: a brace-enclosed list of four .b32 registers as its A operand
    assert any("m64n64k16" in line and "}, {%r" in line for line in ptx.splitlines())
    for needle in ("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes",
                   "mbarrier.try_wait.parity", "setmaxnreg.inc.sync.aligned.u32 240",
                   "setmaxnreg.dec.sync.aligned.u32 24", "bar.arrive"):   # bar.arrive: the pingpong turns
        assert needle in ptx, needle
    for arch in ("sm_90", "sm_80"):
        other = family_ptx("attention_wgmma", arch)
        assert "wgmma.mma_async" not in other and "cp.async.bulk" not in other


def test_available_lists_the_wgmma_kernels_with_their_shared_memory():
    t = hk.available()
    w = t[(t.op == "attention") & t.variant.str.startswith("wgmma")]
    assert set(w.kernel) == PINGPONG and set(w.min_arch) == {"sm_90"} and set(w.block) == {384}
    smem = w.set_index("kernel")["dynamic_smem"]
    for d in (64, 128):
        # 1 KiB alignment slack, Q (128 x d), 2 stages of K and of V (128 x d each), 9 mbarriers
        assert smem[f"attention_wgmma_f16_d{d}_pp"] == 1024 + 128 * d * 2 * 5 + 8 * 9
    assert smem.max() <= 227 * 1024      # the H100's per-block limit


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128])
def test_explain_picks_wgmma_on_hopper_for_fixed_length(dtype, d):
    q = (2, 8, 1000, d)
    text = hk.explain("attention", q, q, dtype=dtype, arch="sm_90")
    suffix = "f16" if dtype == "float16" else "bf16"
    assert "variant='wgmma'" in text and f"attention_wgmma_{suffix}_d{d}_pp, schedule='pingpong'" in text
    assert attention_mod.HOPPER_ATTENTION_RESULTS in text and "variant='mma'" in text
    assert "variant='wgmma'" in hk.explain("attention", q, q, dtype=dtype, arch="sm_90a")


@pytest.mark.parametrize("arch", ["sm_80", "sm_87", "sm_89"])
def test_explain_picks_mma_before_hopper(arch):
    text = hk.explain("attention", *BIG, dtype="float16", arch=arch)
    assert "variant='mma'" in text and "attention_f16_d128" in text and "sm_90a only" in text


def test_explain_picks_mma_for_packed_offsets_and_empty_keys_on_hopper():
    text = hk.explain("attention", (300, 8, 64), (500, 8, 64), dtype="bfloat16", arch="sm_90")
    assert "variant='mma'" in text and "offsets" in text and "variant='wgmma'" not in text
    text = hk.explain("attention", (2, 8, 10, 64), (2, 8, 0, 64), dtype="float16", arch="sm_90")
    assert "variant='mma'" in text and "empty operand" in text


def test_explain_errors():
    with pytest.raises(hk.KernelArgumentError, match="shapes of q and k"):
        hk.explain("attention", (2, 8, 10, 64))
    with pytest.raises(hk.KernelArgumentError, match="no kernel for float32"):
        hk.explain("attention", *BIG, dtype="float32")
    with pytest.raises(hk.KernelArgumentError, match="head dimension 96"):
        hk.explain("attention", (1, 1, 8, 96), (1, 1, 8, 96))
    with pytest.raises(hk.KernelArgumentError, match="no kernel for sm_75"):
        hk.explain("attention", *BIG, arch="sm_75")


torch = pytest.importorskip("torch")


def test_variant_argument_is_checked_before_any_gpu_work():
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(hk.KernelArgumentError, match=r"variant must be one of \('auto', 'wgmma', 'mma'\)"):
        hk.attention(q, q, q, variant="fastest")
    with pytest.raises(hk.KernelArgumentError, match=r"schedule must be one of \('pingpong', 'overlap'\)"):
        hk.attention(q, q, q, schedule="tiles")
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device"):
        hk.attention(q, q, q, variant="wgmma")
