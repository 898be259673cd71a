"""Launch plans are cached (no GPU needed): a repeated call with the same shape, dtype and device
builds its plan (kernel lookup, grid, block, shared memory) once and afterwards only checks its
arguments and launches. The launcher is faked; CPU tensors stand in for device 0's."""
from __future__ import annotations

import ctypes
import dataclasses
import importlib
from collections import OrderedDict

import pytest

torch = pytest.importorskip("torch")

import hookmagic.kernels as hk  # noqa: E402
from hookmagic.kernels import constants, gemm_wgmma, runtime, tma  # noqa: E402
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
    monkeypatch.setattr(gemm_mod, "_calls", OrderedDict())
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


def _record_launches(monkeypatch):
    args = []
    monkeypatch.setattr(runtime, "launch", lambda kern, ref, grid, block, a, smem=0:
                        args.append((kern, grid, block, smem, a)))
    return args


def test_a_repeated_gemm_call_launches_what_the_full_path_launches(fake, monkeypatch):
    launches = _record_launches(monkeypatch)
    a, b = torch.zeros(200, 64, dtype=torch.float16), torch.nn.Parameter(torch.zeros(64, 296, dtype=torch.float16))
    bias, res = torch.zeros(296, dtype=torch.float16), torch.zeros(200, 296, dtype=torch.float16)
    c1 = hk.gemm(a, b, bias=bias, activation="gelu", residual=res, variant="mma")
    n_plans = len(gemm_mod._plans)
    c2 = hk.gemm(a, b, bias=bias, activation="gelu", residual=res, variant="mma")
    assert len(gemm_mod._calls) == 1 and len(gemm_mod._plans) == n_plans
    assert c1.shape == c2.shape == (200, 296) and c2.dtype == torch.float16
    (k1, g1, b1, s1, a1), (k2, g2, b2, s2, a2) = launches
    # identical but for the output pointer (argument 2): a, b, c, bias, residual, M, N, K, act, vec
    assert (k1, g1, b1, s1) == (k2, g2, b2, s2) and a1[:2] == a2[:2] and a1[3:] == a2[3:]
    assert a2[2] == c2.data_ptr() and a2[3:5] == (bias.data_ptr(), res.data_ptr())
    assert [int(v) for v in a2[5:]] == [200, 296, 64, constants.ACTIVATIONS["gelu"], 1]
    hk.gemm(a, b, bias=bias, activation="relu", residual=res, variant="mma")   # another option: a second plan
    hk.gemm(a, b, variant="mma")                                               # no epilogue: a third
    assert len(gemm_mod._calls) == 3 and launches[-1][4][3:5] == (0, 0)


def test_a_repeated_sgemm_call_takes_its_call_plan(fake, monkeypatch):
    launches = _record_launches(monkeypatch)
    a, b = torch.zeros(64, 36), torch.zeros(36, 64)
    hk.sgemm(a, b)
    hk.sgemm(torch.zeros(64, 36), torch.zeros(36, 64))      # other tensors of the same signature
    assert len(gemm_mod._calls) == 1 and launches[0][:4] == launches[1][:4]
    assert [int(v) for v in launches[1][4][3:]] == [64, 64, 36, 1]   # M, N, K, vec
    hk.sgemm(a, b, variant="naive")
    assert len(gemm_mod._calls) == 2 and launches[-1][0] == "sgemm_naive"


def test_gemm_call_plans_need_aligned_operands_read_as_they_are(fake):
    flat = torch.zeros(64 * 64 + 1, dtype=torch.float16)
    hk.gemm(flat[1:].view(64, 64), flat[:4096].view(64, 64), variant="mma")   # a 2-byte aligned a
    hk.gemm(flat[:4096].view(64, 64).t(), flat[:4096].view(64, 64), variant="mma")   # a copied first
    hk.sgemm(torch.zeros(64, 128)[:, ::2], torch.zeros(64, 64))             # a strided view: copied
    hk.gemm(torch.zeros(64, 64, dtype=torch.int8), torch.zeros(64, 64, dtype=torch.int8), variant="mma")
    assert gemm_mod._calls == {}
    a = torch.zeros(64, 64, dtype=torch.float16)
    hk.gemm(a, a, variant="mma")
    assert len(gemm_mod._calls) == 1
    c = hk.gemm(flat[1:].view(64, 64), a, variant="mma")   # the same signature, unaligned: the full path
    assert c.shape == (64, 64) and len(fake["launch"]) == 6 and len(gemm_mod._calls) == 1


def test_call_plans_are_bounded_least_recently_used_first(fake, monkeypatch):
    monkeypatch.setattr(gemm_mod, "_MAX_CALLS", 2)
    xs = [torch.zeros(32 * i, 32) for i in (1, 2, 3)]
    hk.sgemm(xs[0], xs[1].t().contiguous())
    hk.sgemm(xs[1], xs[1].t().contiguous())
    hk.sgemm(xs[0], xs[1].t().contiguous())          # used again: the most recent
    hk.sgemm(xs[2], xs[1].t().contiguous())          # a third: drops xs[1]'s
    assert [k[1][0] for k in gemm_mod._calls] == [32, 96]


@pytest.fixture
def hopper(fake, monkeypatch):
    """The fake GPU as an sm_90 device: wgmma kernels, maps and TMA launches recorded."""
    calls = {"maps": [], "tma": []}
    monkeypatch.setattr(runtime, "device_arch", lambda ordinal, needs_arch_specific=False: "sm_90")
    monkeypatch.setattr(gemm_wgmma, "_arch_ok", {})
    monkeypatch.setattr(gemm_wgmma, "_sm_count", {0: 132})
    monkeypatch.setattr(gemm_wgmma, "_plans", OrderedDict())
    monkeypatch.setattr(gemm_wgmma, "_kernel", lambda name, ordinal, family=None: name)
    monkeypatch.setattr(tma, "encode_2d", lambda *a: calls["maps"].append(a) or a)
    monkeypatch.setattr(tma, "map_bytes", lambda m: b"")
    monkeypatch.setattr(runtime, "current_stream_handle", lambda ref: 0)
    monkeypatch.setattr(tma, "launch", lambda kern, dev, stream, grid, block, smem, maps, sc:
                        calls["tma"].append((kern, grid, smem, maps, (sc.c, sc.bias or 0, sc.residual or 0, sc.m, sc.n, sc.k,
                                                                      sc.act, sc.vec))))
    return calls


def test_wgmma_encodes_an_operands_map_once_and_plans_the_call(hopper):
    m, k, n = 300, 64, 512
    a, bt = torch.zeros(m, k, dtype=torch.bfloat16), torch.zeros(n, k, dtype=torch.bfloat16)
    b = bt.t()                                    # column-major: read K-major as it is
    bias = torch.zeros(n, dtype=torch.bfloat16)
    for _ in range(3):
        c = hk.gemm(a, b, bias=bias, activation="relu")   # auto: wgmma on sm_90
    assert c.shape == (m, n) and c.dtype == torch.bfloat16
    # A: M rows of K elements, 64 x 128 boxes; b's transpose: N rows of K, 64 x 256 boxes; once each
    assert hopper["maps"] == [(a.data_ptr(), "bfloat16", k, m, k * 2, (64, 128)),
                              (bt.data_ptr(), "bfloat16", k, n, k * 2, (64, 256))]
    assert len(gemm_mod._calls) == 1 and len(gemm_wgmma._plans) == 1
    first, *rest = hopper["tma"]
    assert first[0] == "gemm_wgmma_bf16_bt" and first[1] == (3 * 2, 1, 1) and first[2] == gemm_wgmma.SMEM_BYTES
    assert first[4][1:] == (bias.data_ptr(), 0, m, n, k, constants.ACTIVATIONS["relu"], 1)
    assert all(r[:4] == first[:4] and r[4][1:] == first[4][1:] for r in rest)
    a2 = torch.zeros(m, k, dtype=torch.bfloat16)  # another A of the same geometry: one more map, same plan
    hk.gemm(a2, b, bias=bias, activation="relu")
    assert hopper["maps"][-1][0] == a2.data_ptr() and len(hopper["maps"]) == 3 and len(gemm_wgmma._plans) == 1


def test_wgmma_operands_tma_cannot_read_take_the_full_path(hopper):
    a = torch.zeros(64, 36, dtype=torch.float16)  # rows of 72 bytes: copied zero-padded to 40 columns
    b = torch.zeros(36, 64, dtype=torch.float16)
    hk.gemm(a, b)
    hk.gemm(a, b)
    assert gemm_mod._calls == {} and len(hopper["tma"]) == 2
    assert hopper["maps"][0][2:4] == (40, 64) and hopper["maps"][1][2:4] == (64, 36)


def test_tma_launch_lands_maps_and_arguments_where_the_driver_reads_them(monkeypatch):
    """A prepared launch with two tensor maps, read back through ctypes as cuLaunchKernelEx
    reads it: the CUlaunchConfig, then each parameter at the address its array entry holds."""
    import numpy as np

    seen = {}

    class Driver:   # stands in for libcuda: decodes what it is handed
        def cuFuncSetAttribute(self, f, attr, n):
            seen["smem"] = n
            return 0

        def cuLaunchKernelEx(self, cfg, f, params, extra):
            conf = (ctypes.c_uint * 7).from_address(cfg.value)
            stream = ctypes.c_uint64.from_address(cfg.value + 32).value
            ptrs = (ctypes.c_void_p * 10).from_address(params.value)
            seen["cfg"], seen["stream"], seen["f"] = tuple(conf), stream, f.value
            seen["map_addr"] = [ptrs[0] % 64, ptrs[1] % 64]
            seen["maps"] = [ctypes.string_at(ptrs[i], 128) for i in (0, 1)]
            seen["ptrs"] = [ctypes.c_uint64.from_address(ptrs[i]).value for i in (2, 3, 4)]
            seen["ints"] = [ctypes.c_int32.from_address(ptrs[i]).value for i in range(5, 10)]
            return 0

    monkeypatch.setattr(runtime, "_drv", Driver())
    monkeypatch.setattr(runtime, "make_current", lambda ordinal: None)
    monkeypatch.setattr(runtime, "_handles", {})
    monkeypatch.setattr(runtime, "_handle", lambda kernel, ordinal: ctypes.c_void_p(0x1234))
    monkeypatch.setattr(runtime, "_func_smem", {})
    monkeypatch.setattr(runtime, "_raw_stream", lambda ordinal: 0xABC0)
    p = runtime.prepare_maps("kernel", 0, (6, 1, 1), (384, 1, 1), 2, (0, 0, 0, *[np.int32(0)] * 5), 200_000)
    map_a, map_b = bytes(range(128)), bytes(range(128, 256))
    runtime.launch_prepared_maps(p, "torch", 0, (map_a, map_b), (0x7F00_0000_1000, 0, 0x7F00_0000_2000, 300, 512,
                                                                  64, 1, 1))
    assert seen["cfg"] == (6, 1, 1, 384, 1, 1, 200_000) and seen["stream"] == 0xABC0 and seen["f"] == 0x1234
    assert seen["smem"] == 200_000 and seen["map_addr"] == [0, 0] and seen["maps"] == [map_a, map_b]
    assert seen["ptrs"] == [0x7F00_0000_1000, 0, 0x7F00_0000_2000] and seen["ints"] == [300, 512, 64, 1, 1]
