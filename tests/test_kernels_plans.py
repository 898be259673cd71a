"""Launch plans are cached (no GPU needed): a repeated call with the same shape, dtype and device
builds its plan (kernel lookup, grid, block, shared memory) once and afterwards only checks its
arguments and launches. The launcher is faked; CPU tensors stand in for device 0's."""
from __future__ import annotations

import dataclasses
import importlib

import pytest

torch = pytest.importorskip("torch")

import hookmagic.kernels as hk  # noqa: E402
from hookmagic.kernels import constants, runtime  # noqa: E402
import hookmagic.kernels.rowwise as rw  # noqa: E402

gemm_mod = importlib.import_module("hookmagic.kernels.gemm")


@pytest.fixture
def fake(monkeypatch):
    """Counts kernel lookups and records launches instead of touching a GPU."""
    calls = {"get_kernel": [], "launch": []}
    real_inspect = runtime.inspect_array

    def inspect(x, name):   # a CPU tensor, described as if it were on cuda:0
        return dataclasses.replace(real_inspect(x, name), device=0)

    monkeypatch.setattr(runtime, "inspect_array", inspect)
    monkeypatch.setattr(runtime, "empty_like_kind",
                        lambda ref, shape, dtype: torch.empty(tuple(shape), dtype=getattr(torch, dtype)))
    monkeypatch.setattr(runtime, "get_kernel",
                        lambda family, name, ordinal, arch_specific=False: calls["get_kernel"].append(name) or name)
    monkeypatch.setattr(runtime, "set_dynamic_smem", lambda kernel, nbytes, ordinal: None)
    monkeypatch.setattr(runtime, "launch", lambda kern, ref, grid, block, args, smem=0:
                        calls["launch"].append((kern, grid, block, smem, len(args))))
    monkeypatch.setattr(runtime, "device_arch", lambda ordinal, needs_arch_specific=False: "sm_80")
    monkeypatch.setattr(gemm_mod, "_plans", {})
    monkeypatch.setattr(gemm_mod, "_auto_cache", {})
    monkeypatch.setattr(rw, "_plans", {})
    monkeypatch.setattr(rw, "_optin", {0: 99 * 1024})
    return calls


def test_gemm_builds_its_plan_once_per_shape(fake):
    a, b = torch.zeros(200, 64, dtype=torch.float16), torch.zeros(64, 300, dtype=torch.float16)
    for _ in range(5):
        hk.gemm(a, b)
    assert fake["get_kernel"] == ["gemm_mma_f16"]      # sm_80: the dispatch table's mma
    smem = constants.TC["TC_STAGES"] * constants.TC_STAGE_BYTES
    # 300 columns / 128 = 3 tiles across, 200 rows / 128 = 2 down; 256 threads
    assert fake["launch"] == [("gemm_mma_f16", (3, 2, 1), (256, 1, 1), smem, 10)] * 5
    hk.gemm(a[:100], b)                                  # another shape: a second plan (same kernel object)
    assert len(gemm_mod._plans) == 2 and fake["launch"][-1][1] == (3, 1, 1)


def test_sgemm_and_softmax_plans_are_cached(fake):
    a = torch.zeros(64, 64)
    for _ in range(3):
        hk.sgemm(a, a)
        hk.softmax(torch.zeros(8, 4096))
    assert fake["get_kernel"] == ["sgemm_warptile", "softmax_reg4_f32"]
    assert [c[0] for c in fake["launch"]] == ["sgemm_warptile", "softmax_reg4_f32"] * 3


def test_a_different_dtype_or_device_is_another_plan(fake):
    a16, a_bf = torch.zeros(32, 32, dtype=torch.float16), torch.zeros(32, 32, dtype=torch.bfloat16)
    hk.gemm(a16, a16)
    hk.gemm(a_bf, a_bf)
    assert fake["get_kernel"] == ["gemm_mma_f16", "gemm_mma_bf16"]
