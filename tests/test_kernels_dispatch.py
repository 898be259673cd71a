"""The dispatch table (no GPU needed): which variant a call without ``variant=`` runs on
sm_80/87/90, what ``kernels.explain`` says, the ``impl=``/``schedule=`` arguments that replaced
environment variables, and the progress callback of ``kernels.check``."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import hookmagic.kernels as hk
from hookmagic.kernels import dispatch, rowwise

gemm_mod = importlib.import_module("hookmagic.kernels.gemm")   # the package's ``gemm`` is the function

ROOT = Path(__file__).resolve().parents[1]
BIG = ((4096, 4096), (4096, 4096))
SMALL = ((64, 64), (64, 64))


def _measured_gemm_times() -> dict[tuple[str, str], dict[str, float]]:
    """(shape label, dtype) -> {variant: median µs} from the H200 dispatch measurement."""
    import json
    res = json.loads((ROOT / dispatch.HOPPER_GEMM_RESULTS).with_suffix(".json").read_text())
    assert res["gpu"]["name"].startswith("NVIDIA H") and res["params"]["timer"] == "device"
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, m in res["metrics"].items():
        if key.endswith("_us"):
            kind, variant, label = key[:-3].split("|")
            out.setdefault((label, kind), {})[variant] = m["max"] if variant == "wgmma" else m["min"]
    return out


def test_the_hopper_rule_picks_the_variant_measured_fastest_at_every_shape():
    times = _measured_gemm_times()
    from benchmarks.bench_kernels import PLAN
    shapes = {label.replace(" ", "_"): (m, n, k) for label, (m, n, k), _ in PLAN}
    assert len(times) >= 20   # 11 shapes x FP16/BF16
    for (label, kind), t in times.items():
        m, n, k = shapes[label]
        dtype = {"f16": "float16", "bf16": "bfloat16"}[kind]
        picked = dispatch.choose("gemm", "sm_90", dtype, ((m, k), (k, n))).variant
        # the slowest process of the pick against the fastest of the other: no overlap
        assert picked == "wgmma" and t["wgmma"] < t["mma"], (label, kind, t)


@pytest.mark.parametrize("arch", ["sm_80", "sm_87"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8"])
def test_ampere_and_orin_run_mma_whatever_the_shape(arch, dtype):
    # wgmma does not exist before sm_90a: a table that picked it there would fail at launch
    for shapes in (BIG, SMALL):
        assert dispatch.choose("gemm", arch, dtype, shapes).variant == "mma"


def test_hopper_int8_gemms_run_mma():
    assert dispatch.choose("gemm", "sm_90", "int8", BIG).variant == "mma"   # wgmma kernels are FP16/BF16 only


def test_every_rule_names_a_registered_variant_and_a_reason():
    for r in dispatch.TABLE:
        assert (r.op, r.variant) in hk.registry.SPECS, r
        assert r.why and r.min_arch <= r.max_arch
        for d in r.dtypes:   # the variant has a kernel for every dtype its rule sends to it
            assert d in hk.registry.SPECS[(r.op, r.variant)].entries, (r, d)


def test_unsupported_dtype_or_arch_is_a_project_error():
    with pytest.raises(hk.KernelArgumentError, match="no kernel for float32"):
        dispatch.choose("gemm", "sm_90", "float32", BIG)
    with pytest.raises(hk.KernelArgumentError, match="no kernel"):
        dispatch.choose("gemm", "sm_75", "float16", BIG)
    with pytest.raises(hk.KernelArgumentError, match="shapes of a and b"):
        hk.explain("gemm", (4096, 4096))
    with pytest.raises(hk.KernelArgumentError, match="no dispatch for op"):
        hk.explain("fft", (8, 8))


def test_explain_gemm_names_variant_and_measurement():
    text = hk.explain("gemm", *SMALL, dtype="float16", arch="sm_90")
    assert "variant='wgmma'" in text and dispatch.HOPPER_GEMM_RESULTS in text and "64x64 @ 64x64" in text
    text = hk.explain("gemm", *BIG, dtype="bfloat16", arch="sm_80")
    assert "variant='mma'" in text and "sm_90a only" in text
    assert "variant='warptile'" in hk.explain("sgemm", *BIG, dtype="float32", arch="sm_87")


@pytest.mark.parametrize("arch", ["sm_80", "sm_87", "sm_90"])
def test_explain_rowwise_names_the_planned_kernel(arch):
    # 4096 fp16 columns = 512 16-byte vectors: a block per row with 4 vectors a thread (128 threads)
    text = hk.explain("softmax", (64, 4096), dtype="float16", arch=arch)
    assert "softmax_reg4_f16" in text and "128 threads" in text
    # 65,536 fp16 columns = 8,192 vectors (> 2,048): registers + shared memory, 512-thread blocks
    text = hk.explain("layer_norm", (8, 65536), dtype="float16", arch=arch)
    assert "layer_norm_rs_f16" in text and "512 threads" in text
    # a row that is not a whole number of 16-byte vectors takes the multi-pass kernel
    assert "multi-pass kernel (rms_norm_f32)" in hk.explain("rms_norm", (3, 1001), dtype="float32", arch=arch)


def test_gemm_auto_asks_the_table_per_device_arch(monkeypatch):
    from hookmagic.kernels.runtime import ArrayInfo

    def info(dtype, shape, device=0):   # synthetic operand descriptions: no GPU here
        return ArrayInfo("a", "torch", shape, (shape[1], 1), dtype, device, 0, None)

    big, small = info("float16", (4096, 4096)), info("float16", (32, 32))
    monkeypatch.setattr(gemm_mod, "_auto_cache", {})
    monkeypatch.setattr(gemm_mod.runtime, "device_arch", lambda ordinal, needs_arch_specific=False: "sm_90")
    assert gemm_mod._auto(big, big) == "wgmma" and gemm_mod._auto(small, small) == "wgmma"
    f32 = info("float32", (4096, 4096))
    assert gemm_mod._auto(f32, f32) == "mma"   # the operand check names it
    cpu = info("float16", (32, 32), device=-1)
    assert gemm_mod._auto(cpu, cpu) == "mma"   # likewise: not on a GPU
    monkeypatch.setattr(gemm_mod, "_auto_cache", {})
    monkeypatch.setattr(gemm_mod.runtime, "device_arch", lambda ordinal, needs_arch_specific=False: "sm_80")
    assert gemm_mod._auto(big, big) == "mma"


def test_variant_arguments_are_checked():
    torch = pytest.importorskip("torch")
    x = torch.zeros(4, 8)
    for call in (lambda: hk.softmax(x, impl="fastest"), lambda: hk.layer_norm(x, impl="fastest"),
                 lambda: hk.rms_norm(x, impl="x"), lambda: hk.bias_gelu(x, impl="x"),
                 lambda: hk.transpose(x, impl="x"), lambda: hk.gemm(x, x.t(), variant="fastest")):
        with pytest.raises(hk.KernelArgumentError, match="impl must be one of|unknown variant"):
            call()
    with pytest.raises(hk.KernelArgumentError, match="impl must be one of"):
        hk.preprocess(torch.zeros(1, 8, 8, 3, dtype=torch.uint8), 4, impl="w9")


def test_no_environment_read_under_kernels_but_the_cache_location():
    # variants are arguments: the only os.environ reads say where the compiled-kernel cache lives
    allowed = {"HOOKMAGIC_KERNEL_CACHE", "XDG_CACHE_HOME"}
    for path in (ROOT / "hookmagic" / "kernels").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("get", "getenv") and "environ" in ast.unparse(node.func) + ast.unparse(node):
                assert isinstance(node.args[0], ast.Constant) and node.args[0].value in allowed, \
                    f"{path.name}:{node.lineno} {ast.unparse(node)}"
            if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
                raise AssertionError(f"{path.name}:{node.lineno} {ast.unparse(node)}")


def test_no_builtin_exception_raised_under_kernels():
    builtin = {"ValueError", "TypeError", "RuntimeError", "KeyError", "AssertionError", "OSError",
               "PermissionError", "IndexError", "NotImplementedError", "Exception"}
    for path in (ROOT / "hookmagic" / "kernels").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                f = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                assert not (isinstance(f, ast.Name) and f.id in builtin), f"{path.name}:{node.lineno}"


def test_check_reports_progress(monkeypatch):
    seen = []

    class _Fake:
        kernels = {"k": {"registers": 1, "smem_bytes": 0, "stack_bytes": 0, "spill_store_bytes": 0,
                         "spill_load_bytes": 0, "barriers": 0}}
        nvrtc, from_cache, log = "0.0", False, ""

    monkeypatch.setattr(hk, "families", lambda: ["a", "b", "c"])
    monkeypatch.setattr(hk, "compile_family", lambda fam, arch, use_cache=True: _Fake())
    df = hk.check("sm_87", use_cache=False, progress=lambda *a: seen.append(a))
    assert seen == [(0, 3, "a", "sm_87"), (1, 3, "b", "sm_87"), (2, 3, "c", "sm_87"), (3, 3, "", "sm_87")]
    assert list(df.family) == ["a", "b", "c"]


def test_rowwise_impls_are_all_planned():
    # every impl value is accepted by the planner (no silent fall-through to an unknown design)
    for impl in rowwise.IMPLS:
        assert rowwise._fast_plan("softmax", 8, 4096, 8, 99 * 1024, impl) is not None
