"""Row-wise kernels (softmax, LayerNorm, RMSNorm, bias + GELU) against torch on a GPU.

Criterion as for the GEMMs (tests/gpu/accuracy.py): against a float64 reference, within twice
torch's own error, one unit of output rounding and the sqrt(n) rounding bound of the FP32 row sum."""
from __future__ import annotations

import pytest

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

from tests.gpu.accuracy import assert_within_rounding  # noqa: E402
F = torch.nn.functional

import hookmagic.kernels as hk  # noqa: E402

SHAPES = [(1, 1), (3, 17), (5, 4097), (64, 1024), (8, 65536), (2, 3, 4096)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _within(ours, theirs, ref, dtype, n=None):
    """Row reductions of length ``n`` (default: the last dimension); criterion in tests/gpu/accuracy.py."""
    assert ours.dtype == dtype
    assert_within_rounding(ours, theirs, ref, dtype, n=ours.shape[-1] if n is None else n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax(shape, dtype):
    x = (torch.randn(shape, device="cuda") * 4).to(dtype)
    _within(hk.softmax(x), torch.softmax(x, -1), torch.softmax(x.double(), -1), dtype)


def test_softmax_other_dim_and_infinities():
    x = torch.randn(33, 7, 5, device="cuda")
    _within(hk.softmax(x, dim=1), torch.softmax(x, 1), torch.softmax(x.double(), 1), torch.float32, n=7)
    y = torch.randn(4, 300, device="cuda")
    y[:, :100] = float("-inf")
    y[1, 150:] = float("-inf")
    _within(hk.softmax(y), torch.softmax(y, -1), torch.softmax(y.double(), -1), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm(shape, dtype):
    c = shape[-1]
    x = (torch.randn(shape, device="cuda") * 3 + 5).to(dtype)
    w = torch.randn(c, device="cuda").to(dtype)
    b = torch.randn(c, device="cuda").to(dtype)
    ref = F.layer_norm(x.double(), (c,), w.double(), b.double(), 1e-5)
    _within(hk.layer_norm(x, w, b), F.layer_norm(x, (c,), w, b, 1e-5), ref, dtype)
    _within(hk.layer_norm(x), F.layer_norm(x, (c,)), F.layer_norm(x.double(), (c,)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm(shape, dtype):
    c = shape[-1]
    x = torch.randn(shape, device="cuda").to(dtype)
    w = torch.randn(c, device="cuda").to(dtype)
    ref = F.rms_norm(x.double(), (c,), w.double(), 1e-6)
    _within(hk.rms_norm(x, w), F.rms_norm(x, (c,), w, 1e-6), ref, dtype)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (64, 4096), (2, 5, 1000)])
def test_bias_gelu(shape, dtype, approximate):
    c = shape[-1]
    x = torch.randn(shape, device="cuda").to(dtype)
    b = torch.randn(c, device="cuda").to(dtype)
    ref = F.gelu(x.double() + b.double(), approximate=approximate)
    _within(hk.bias_gelu(x, b, approximate), F.gelu(x + b, approximate=approximate), ref, dtype)
    _within(hk.bias_gelu(x, approximate=approximate), F.gelu(x, approximate=approximate),
            F.gelu(x.double(), approximate=approximate), dtype)


def test_non_contiguous_misaligned_and_empty():
    base = torch.randn(64, 2 * 1024 + 1, device="cuda")
    x = base[:, 1:1025]                      # strided rows
    _within(hk.softmax(x), torch.softmax(x, -1), torch.softmax(x.double(), -1), torch.float32)
    flat = torch.randn(8 * 256 + 1, device="cuda")[1:].view(8, 256)   # misaligned: scalar path
    _within(hk.rms_norm(flat), F.rms_norm(flat, (256,)), F.rms_norm(flat.double(), (256,)), torch.float32)
    assert hk.softmax(torch.randn(0, 5, device="cuda")).shape == (0, 5)
    assert hk.layer_norm(torch.randn(3, 0, device="cuda")).shape == (3, 0)


def test_parameter_errors_name_both():
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(hk.KernelArgumentError, match=r"weight must be a torch float32\[8\].*weight is .*\[7\]"):
        hk.layer_norm(x, torch.ones(7, device="cuda"))
    with pytest.raises(hk.KernelArgumentError, match="float32, float16 or bfloat16"):
        hk.softmax(x.to(torch.int32))


@pytest.mark.needs("cupy")
def test_cupy_softmax():
    import cupy
    x = cupy.random.standard_normal((16, 1000), dtype=cupy.float32)
    y = hk.softmax(x)
    e = cupy.exp(x - x.max(axis=1, keepdims=True))
    assert isinstance(y, cupy.ndarray) and float(cupy.abs(y - e / e.sum(axis=1, keepdims=True)).max()) < 1e-6


@pytest.mark.parametrize("impl", ["reg", "k8", "rs", "multipass", "cluster"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(64, 4096), (8, 65536), (3, 32768)])
def test_every_row_design_matches_torch(shape, dtype, impl):
    """The designs the benchmark compares (``impl=`` of the row-wise functions) are all correct, not
    just the default: registers only, 8 vectors a thread, registers + shared memory with two
    blocks an SM, multi-pass, and (sm_90+) a cluster of 8 blocks a row."""
    if impl == "cluster" and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("cluster kernels need sm_90")
    c = shape[-1]
    x = (torch.randn(shape, device="cuda") * 3 + 1).to(dtype)
    w = torch.randn(c, device="cuda").to(dtype)
    b = torch.randn(c, device="cuda").to(dtype)
    _within(hk.softmax(x, impl=impl), torch.softmax(x, -1), torch.softmax(x.double(), -1), dtype)
    _within(hk.layer_norm(x, w, b, impl=impl), F.layer_norm(x, (c,), w, b, 1e-5),
            F.layer_norm(x.double(), (c,), w.double(), b.double(), 1e-5), dtype)
    _within(hk.rms_norm(x, w, impl=impl), F.rms_norm(x, (c,), w, 1e-6),
            F.rms_norm(x.double(), (c,), w.double(), 1e-6), dtype)


# --- the per-call path: call plans and the driver launcher ------------------------------------------

def test_repeated_calls_through_call_plans_stay_correct_when_alignment_and_data_change():
    """The second and later calls of a signature take the call plan (rowwise._calls); a
    contiguous but misaligned view of the same shape is another signature (the multi-pass kernel)."""
    from hookmagic.kernels import rowwise
    w = torch.nn.Parameter(torch.randn(4096, device="cuda"))
    b = torch.randn(4096, device="cuda")
    store = torch.randn(8 * 4096 + 1, device="cuda")
    for i in range(3):
        x = torch.randn(8, 4096, device="cuda") * (i + 1)
        off = store[1:].view(8, 4096)            # 4 bytes past a 16-byte boundary
        for xx in (x, off):
            ref = F.layer_norm(xx.double(), (4096,), w.double(), b.double(), 1e-5)
            _within(hk.layer_norm(xx, w, b), F.layer_norm(xx, (4096,), w, b, 1e-5), ref, torch.float32)
            _within(hk.softmax(xx), torch.softmax(xx, -1), torch.softmax(xx.double(), -1), torch.float32)
    keys = [k for k in rowwise._calls if k[0] == "layer_norm" and k[1] == (8, 4096)]
    assert sorted(k[-1] for k in keys) == [False, True]   # aligned and misaligned: two call plans


def test_launches_go_to_the_callers_stream_and_work_from_a_new_thread():
    import threading
    x = torch.randn(64, 1000, device="cuda")
    x2 = torch.zeros_like(x)
    hk.softmax(x2)                                 # the call plan exists before the stream test
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)              # holds s
        x2.copy_(x)                                # on s, after the sleep
        y = hk.softmax(x2)                         # on s, it reads x; anywhere else, zeros
    s.synchronize()
    _within(y, torch.softmax(x, -1), torch.softmax(x.double(), -1), torch.float32)
    out = {}

    def work():
        try:
            out["y"] = hk.rms_norm(x)
        except BaseException as exc:   # reported by the assertion below
            out["err"] = exc
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert "err" not in out, out.get("err")
    torch.cuda.synchronize()
    _within(out["y"], F.rms_norm(x, (1000,)), F.rms_norm(x.double(), (1000,)), torch.float32)


def test_cuda_core_launcher_gives_the_same_results():
    from hookmagic.kernels import runtime
    x = torch.randn(16, 2048, device="cuda", dtype=torch.float16)
    w = torch.randn(2048, device="cuda", dtype=torch.float16)
    fast = hk.layer_norm(x, w, w)
    before = runtime.set_launcher("cuda-core")
    try:
        slow = hk.layer_norm(x, w, w)
    finally:
        runtime.set_launcher(before)
    assert torch.equal(fast, slow)
