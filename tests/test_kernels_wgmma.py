"""The Hopper GEMM (gemm(variant="wgmma"), kernels/gemm_wgmma.cu) without a GPU: it compiles with
NVRTC for sm_90a into wgmma/TMA/mbarrier code without spills, to empty stubs for other targets,
and its host side pads operands TMA cannot read. (On an H100: tests/gpu/test_wgmma_gpu.py.)"""
from __future__ import annotations

import pytest

import hookmagic.kernels as hk
from hookmagic.kernels import gemm_wgmma, runtime

cuda_core = pytest.importorskip("cuda.core")
from tests.kernel_compiles import assert_warpgroup_kernels_fit, compiled_with_ptx, family_ptx  # noqa: E402


def _ptx(arch: str) -> str:
    return family_ptx("gemm_wgmma", arch)


def test_compiles_for_sm90a_without_spills():
    c, _ = compiled_with_ptx("gemm_wgmma", "sm_90a")
    names = {f"gemm_wgmma_{t}{b}{p}" for t in ("f16", "bf16") for b in ("", "_bt") for p in ("", "_p", "_p4", "_c2")}
    assert set(c.kernels) == names
    assert_warpgroup_kernels_fit(c)


def test_sm90a_code_uses_wgmma_tma_and_mbarriers_and_other_targets_get_stubs():
    _, ptx = compiled_with_ptx("gemm_wgmma", "sm_90a")    # the PTX of the compile above
    for needle in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16",
                   "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                   "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                   "mbarrier.try_wait.parity", "setmaxnreg.inc.sync.aligned.u32 232"):
        assert needle in ptx, needle
    assert "wgmma.mma_async" not in _ptx("sm_90") and "cp.async.bulk" not in _ptx("sm_80")


def test_available_lists_wgmma_with_its_shared_memory():
    t = hk.available()
    w = t[(t.op == "gemm") & (t.variant == "wgmma")]
    assert set(w.dtype) == {"float16", "bfloat16"} and set(w.min_arch) == {"sm_90"}
    # 4 stages of a 128x64 A tile and a 256x64 B tile (FP16), 8 mbarriers, 1 KiB alignment slack
    assert set(w.dynamic_smem) == {1024 + 4 * (128 * 64 + 256 * 64) * 2 + 64}
    assert gemm_wgmma.SMEM_BYTES <= 227 * 1024      # the H100's per-block limit
    assert gemm_wgmma.SMEM_BYTES_PERSISTENT <= 227 * 1024
    assert gemm_wgmma.SMEM_BYTES_PERSISTENT4 <= 227 * 1024
    assert "wgmma" in hk.GEMM_VARIANTS


torch = pytest.importorskip("torch")


def test_operands_tma_cannot_read_are_copied_zero_padded():
    x = torch.arange(5 * 13, dtype=torch.float16).view(5, 13)
    p = gemm_wgmma._tma_ready(runtime.inspect_array(x, "a"))
    assert p.shape == (5, 16) and p.contiguous
    assert torch.equal(p.obj[:, :13], x) and not p.obj[:, 13:].any()
    ok = torch.zeros(4, 64, dtype=torch.bfloat16)
    assert gemm_wgmma._tma_ready(runtime.inspect_array(ok, "a")).obj is ok
    strided = torch.zeros(4, 128, dtype=torch.float16)[:, ::2]
    assert gemm_wgmma._tma_ready(runtime.inspect_array(strided, "b")).contiguous


def test_wgmma_argument_errors_before_any_gpu_work():
    a = torch.zeros(4, 5, dtype=torch.float16)
    with pytest.raises(hk.KernelArgumentError, match="share one dtype of float16, bfloat16"):
        hk.gemm(a.float(), torch.zeros(5, 3), variant="wgmma")
    with pytest.raises(hk.KernelArgumentError, match="CUDA device"):
        hk.gemm(a, torch.zeros(5, 3, dtype=torch.float16), variant="wgmma")
    with pytest.raises(hk.KernelArgumentError, match="a has 5 columns, b has 6 rows"):
        hk.gemm(a, torch.zeros(6, 3, dtype=torch.float16), variant="wgmma")
