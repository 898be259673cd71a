"""hookmagic.kernels on a real GPU, against PyTorch/cuBLAS.

Tolerances: every result is compared with a float64 (FP32 kernels) or float32 (FP16/BF16
kernels) reference under the criterion of tests/gpu/accuracy.py (twice torch's own error, one
unit of output rounding, and the sqrt(K) rounding bound of the FP32 accumulator: both cuBLAS and
these kernels sum K in the thousands in different orders). INT8 is exact.
"""
from __future__ import annotations

import math

import pytest

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

from tests.gpu.accuracy import TORCH_ACTIVATIONS, assert_within_rounding  # noqa: E402

import hookmagic.kernels as hk  # noqa: E402
from hookmagic.kernels import build, registry, runtime  # noqa: E402

SHAPES = [(1, 1, 1), (17, 255, 33), (128, 128, 128), (255, 17, 4095), (300, 257, 129), (64, 512, 1000),
          (1000, 1000, 1000)]
#: sm_80+ variants; "wgmma" (sm_90 only) is tested in tests/gpu/test_wgmma_gpu.py
GEMM_VARIANTS = [v for v in hk.GEMM_VARIANTS if v != "wgmma"]


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _within(ours, torch_result, ref, dtype, a, b):
    """``ours`` is as close to ``ref`` (an epilogue of ``a @ b`` in a wider type) as rounding allows.

    The magnitude of the sum is |a| @ |b| plus |ref| for the epilogue's bias, residual and
    activation (criterion in tests/gpu/accuracy.py)."""
    wide = ref.dtype
    magnitude = a.to(wide).abs() @ b.to(wide).abs() + ref.abs()
    assert_within_rounding(ours, torch_result, ref, dtype, n=a.shape[-1], magnitude=magnitude)


@pytest.mark.parametrize("variant", hk.SGEMM_VARIANTS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_sgemm_matches_torch(variant, m, n, k):
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(k, n, device="cuda")
    c = hk.sgemm(a, b, variant=variant)
    assert c.shape == (m, n) and c.dtype == torch.float32 and c.device == a.device
    _within(c, a @ b, a.double() @ b.double(), torch.float32, a, b)


@pytest.mark.parametrize("variant", GEMM_VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_tensor_core_gemm_matches_torch(variant, dtype, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    c = hk.gemm(a, b, variant=variant)
    assert c.shape == (m, n) and c.dtype == dtype
    _within(c, a @ b, a.float() @ b.float(), dtype, a, b)


@pytest.mark.parametrize("variant", GEMM_VARIANTS)
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("m,n,k", [(17, 255, 33), (256, 384, 512)])
def test_fused_epilogues(variant, activation, m, n, k):
    dtype = torch.float16
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype) / math.sqrt(k)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    res = torch.randn(m, n, device="cuda", dtype=dtype)
    act = TORCH_ACTIVATIONS[activation]
    c = hk.gemm(a, b, bias=bias, activation=activation, residual=res, variant=variant)
    ref = act(a.float() @ b.float() + bias.float()) + res.float()
    _within(c, act(a @ b + bias) + res, ref, dtype, a, b)
    c2 = hk.gemm(a, b, bias=bias, variant=variant)
    _within(c2, a @ b + bias, a.float() @ b.float() + bias.float(), dtype, a, b)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 255, 33), (256, 256, 256), (300, 200, 4096), (129, 1000, 100)])
@pytest.mark.parametrize("b_layout", ["column_major", "row_major"])
def test_int8_is_exact(m, n, k, b_layout):
    a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
    if b_layout == "column_major":
        b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8).t()
    else:
        b = torch.randint(-128, 128, (k, n), device="cuda", dtype=torch.int8)
    c = hk.gemm(a, b)
    assert c.dtype == torch.int32 and c.shape == (m, n)
    ref = (a.double() @ b.double())           # exact: |sums| < 2**53
    assert torch.equal(c.double(), ref)


def test_non_contiguous_and_transposed_operands():
    base = torch.randn(300, 400, device="cuda")
    a = base[:, ::2]                 # 300 x 200, strided
    b = torch.randn(150, 200, device="cuda").t()   # 200 x 150, column-major
    for variant in ("tile_2d", "warptile"):
        _within(hk.sgemm(a, b, variant=variant), a @ b, a.double() @ b.double(), torch.float32, a, b)
    ah, bh = a.half(), b.half()
    _within(hk.gemm(ah.t().contiguous().t(), bh), ah @ bh, ah.float() @ bh.float(), torch.float16, ah, bh)


def test_misaligned_views_take_the_scalar_path():
    base = torch.randn(129 * 65 + 1, device="cuda")
    a = base[1:].view(129, 65)       # 4-byte aligned only
    b = torch.randn(65, 64, device="cuda")
    for variant in ("vectorized", "warptile"):
        _within(hk.sgemm(a, b, variant=variant), a @ b, a.double() @ b.double(), torch.float32, a, b)
    hb = torch.randn(64 * 64 + 1, device="cuda", dtype=torch.float16)
    ah = hb[1:].view(64, 64)
    bh = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    _within(hk.gemm(ah, bh), ah @ bh, ah.float() @ bh.float(), torch.float16, ah, bh)


def test_empty_operands():
    z = hk.sgemm(torch.randn(0, 5, device="cuda"), torch.randn(5, 3, device="cuda"))
    assert z.shape == (0, 3)
    k0 = hk.gemm(torch.randn(4, 0, device="cuda").half(), torch.randn(0, 6, device="cuda").half(),
                 bias=torch.ones(6, device="cuda").half())
    assert torch.equal(k0, torch.ones(4, 6, device="cuda").half())
    assert torch.equal(hk.sgemm(torch.randn(4, 0, device="cuda"), torch.randn(0, 6, device="cuda")),
                       torch.zeros(4, 6, device="cuda"))


def test_runs_on_the_callers_stream():
    s = torch.cuda.Stream()
    a = torch.randn(512, 512, device="cuda")
    b = torch.randn(512, 512, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        c = hk.sgemm(a, b)
        d = hk.gemm(a.half(), b.half())
    s.synchronize()
    _within(c, a @ b, a.double() @ b.double(), torch.float32, a, b)
    _within(d, a.half() @ b.half(), a.half().float() @ b.half().float(), torch.float16, a.half(), b.half())


@pytest.mark.needs("cupy")
def test_cupy_arrays_in_and_out():
    import cupy
    a = cupy.random.standard_normal((200, 300), dtype=cupy.float32)
    b = cupy.random.standard_normal((300, 100), dtype=cupy.float32)
    with cupy.cuda.Stream(non_blocking=True) as st:
        c = hk.sgemm(a, b)
        st.synchronize()
    assert isinstance(c, cupy.ndarray)
    assert float(cupy.abs(c - a @ b).max()) < 1e-3
    ah, bh = a.astype(cupy.float16), b.astype(cupy.float16)
    ch = hk.gemm(ah, bh)
    assert isinstance(ch, cupy.ndarray) and ch.dtype == cupy.float16
    assert float(cupy.abs(ch.astype(cupy.float32) - ah.astype(cupy.float32) @ bh.astype(cupy.float32)).max()) < 0.1


def test_mixed_kinds_and_devices_are_refused():
    a = torch.randn(4, 4, device="cuda")
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device"):
        hk.sgemm(a, torch.randn(4, 4))
    with pytest.raises(hk.KernelArgumentError, match="no epilogue"):
        hk.gemm(a.to(torch.int8), a.to(torch.int8), activation="relu")
    with pytest.raises(hk.KernelArgumentError, match="bias must have shape"):
        hk.gemm(a.half(), a.half(), bias=torch.ones(5, device="cuda").half())


def test_driver_agrees_with_nvrtc_resource_use_and_hookmagic_occupancy():
    """Registers and shared memory the driver reports for each loaded kernel equal NVRTC's
    ptxas report, and hookmagic's occupancy calculator gives the driver's resident blocks."""
    from hookmagic.analysis.occupancy import limits_for, theoretical_occupancy

    dev = runtime.device(0)
    cc = dev.compute_capability
    limits, _ = limits_for((cc.major, cc.minor))
    arch = runtime.device_arch(0)
    for spec in registry.SPECS.values():
        for dtype, name in spec.entries.items():
            fam = spec.family_for(dtype)
            info = build.compile_family(fam, arch).kernels[name]
            kern = runtime.get_kernel(fam, name, 0)
            assert kern.attributes.num_regs == info["registers"], name
            assert kern.attributes.shared_size_bytes == info["smem_bytes"], name
            threads = spec.block[0] * spec.block[1] * spec.block[2]
            dyn = spec.smem_for(dtype)
            runtime.set_dynamic_smem(kern, dyn, 0)
            driver_blocks = kern.occupancy.max_active_blocks_per_multiprocessor(threads, dyn)
            ours = theoretical_occupancy(threads, info["registers"], info["smem_bytes"] + dyn, limits)
            assert int(ours["active_blocks"].iloc[0]) == driver_blocks, (name, ours.to_dict("records"), driver_blocks)


def test_launches_declare_their_work():
    registry.launch_log(clear=True)
    hk.sgemm(torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda"), variant="naive")
    (w,) = hk.launch_log(clear=True)
    assert w.kernel == "sgemm_naive" and w.flops == 2 * 64 * 32 * 16
    assert w.dram_bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4


def test_default_gemm_runs_what_explain_names():
    """gemm() without variant= runs the dispatch table's pick for this GPU (on an H100/H200:
    wgmma for FP16 GEMMs large and small), and the result is the named variant's."""
    cc = torch.cuda.get_device_capability()
    arch = f"sm_{cc[0]}{cc[1]}"
    for m, n, k in ((2048, 2048, 512), (64, 64, 64)):
        a = torch.randn(m, k, device="cuda").half()
        b = torch.randn(k, n, device="cuda").half()
        text = hk.explain("gemm", (m, k), (k, n), dtype="float16", arch=arch)
        variant = text.split("variant='")[1].split("'")[0]
        registry.launch_log(clear=True)
        c = hk.gemm(a, b)
        (w,) = hk.launch_log(clear=True)
        assert w.kernel.startswith(f"gemm_{variant}_f16"), (text, w.kernel)
        assert torch.equal(c, hk.gemm(a, b, variant=variant))
        if cc == (9, 0):
            assert variant == "wgmma"
