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
pp = importlib.import_module("hookmagic.kernels.preprocess")

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
    monkeypatch.setattr(rw, "_calls", {})
    monkeypatch.setattr(pp, "_calls", {})
    monkeypatch.setattr(runtime, "_drv", False)   # prepared launches fall back to (the faked) runtime.launch
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


def test_a_repeated_rowwise_call_takes_its_call_plan_with_the_same_launch(fake):
    x = torch.randn(8, 4096)
    w, b = torch.nn.Parameter(torch.randn(4096)), torch.randn(4096)
    hk.layer_norm(x, w, b)
    assert len(rw._calls) == 1 and len(fake["get_kernel"]) == 1
    n_plans = len(rw._plans)
    x2 = torch.randn(8, 4096)
    hk.layer_norm(x2, w, b)                    # the call plan: no new plan, one more launch
    assert len(rw._plans) == n_plans and len(fake["launch"]) == 2
    first, second = fake["launch"]
    assert first == second                     # kernel, grid, block, smem and argument count
    hk.layer_norm(x2, w, b, eps=1e-3)          # another option: the full path once more
    assert len(rw._calls) == 2


def test_call_plans_need_contiguous_tensors_and_plain_options(fake):
    x = torch.randn(16, 256)
    hk.softmax(x[:, ::2])                      # a strided view: copied first, never a call plan
    hk.rms_norm(x, torch.ones(256), eps=torch.tensor(1e-6))   # a tensor eps may change in place
    assert rw._calls == {}
    hk.softmax(x)
    hk.softmax(x[:8])                          # another shape: another call plan
    assert len(rw._calls) == 2


def test_a_repeated_preprocess_call_launches_what_the_full_path_launches(fake, monkeypatch):
    args = []
    monkeypatch.setattr(runtime, "launch", lambda kern, ref, grid, block, a, smem=0: args.append((kern, grid, a)))
    frames = torch.randint(0, 256, (2, 36, 64, 3), dtype=torch.uint8)
    out1 = hk.preprocess(frames, (16, 16), (0.4, 0.4, 0.4), (0.2, 0.2, 0.2), letterbox=True)
    out2 = hk.preprocess(frames, (16, 16), (0.4, 0.4, 0.4), (0.2, 0.2, 0.2), letterbox=True)
    assert len(pp._calls) == 1 and out1.shape == out2.shape == (2, 3, 16, 16) and out2.dtype == torch.float16
    (k1, g1, a1), (k2, g2, a2) = args
    # identical but for the output pointer (argument 7: after base, table, stride and 4 head scalars)
    assert (k1, g1) == (k2, g2) and a1[:7] == a2[:7] and a1[8:] == a2[8:] and a2[7] == out2.data_ptr()
    hk.preprocess(frames, [16, 16], (0.4, 0.4, 0.4), (0.2, 0.2, 0.2))   # a list: the full path, no plan
    hk.preprocess(frames, (16, 16), torch.tensor([0.4, 0.4, 0.4]), 0.2)  # a tensor mean may change in place
    assert len(pp._calls) == 1 and len(args) == 4


def test_driver_arguments_land_in_cuLaunchKernelEx_layout():
    """The packed buffer read back through ctypes as the driver reads it: a CUlaunchConfig
    (declared here from cuda.h's fields) followed by one parameter per pointer of the array."""
    import ctypes

    import numpy as np

    class CUlaunchConfig(ctypes.Structure):
        _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                    ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                    ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                    ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]

    args = (0x7F0012345600, np.int32(-3), np.float32(1.5), 2.25, True, np.int64(-7), np.uint64(2**63 + 5),
            np.float16(0.5), np.int8(-2))
    fmt = runtime._format(args)
    tl = runtime._thread_buffers()
    buf, params = tl[0], tl[3]
    fmt.pack_into(buf, 0, 3, 2, 1, 128, 1, 1, 4096, 0xABC0, *args)
    cfg = CUlaunchConfig.from_buffer(buf)
    assert ctypes.sizeof(CUlaunchConfig) <= runtime._CONFIG_BYTES
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.sharedMemBytes) == (3, 2, 1, 128, 4096)
    assert (cfg.hStream, cfg.attrs, cfg.numAttrs) == (0xABC0, None, 0)
    types = [ctypes.c_int64, ctypes.c_int32, ctypes.c_float, ctypes.c_double, ctypes.c_bool, ctypes.c_int64,
             ctypes.c_uint64, ctypes.c_uint16, ctypes.c_int8]
    got = [ctypes.cast(params[i], ctypes.POINTER(t))[0] for i, t in enumerate(types)]
    assert got[:7] == [0x7F0012345600, -3, 1.5, 2.25, True, -7, 2**63 + 5]
    assert got[7] == np.float16(0.5).view(np.uint16) and got[8] == -2
    assert runtime._format((object(),)) == 0          # not a scalar: the cuda-core path


def test_set_launcher_names_the_choices_and_returns_the_previous_one():
    before = runtime.set_launcher("cuda-core")
    try:
        assert runtime.LAUNCHER == "cuda-core" and before in runtime.LAUNCHERS
        with pytest.raises(hk.KernelArgumentError, match="driver, cuda-core"):
            runtime.set_launcher("native")
    finally:
        runtime.set_launcher(before)
    assert runtime.LAUNCHER == before
