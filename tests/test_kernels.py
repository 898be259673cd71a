"""hookmagic.kernels without a GPU: NVRTC compiles, the cubin cache, argument checks, the CLI.

NVRTC runs on the CPU, so every kernel is really compiled here for the CI architectures; the
kernels' numerical results are checked against torch on the GPU machine (tests/gpu/test_kernels_gpu.py).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import textwrap

import pytest

pytest.importorskip("cuda.core", reason="needs the [kernels] extra (cuda-core)")

from hookmagic.common.errors import HookmagicError, InvalidArgument, Unavailable  # noqa: E402
from hookmagic.kernels import build, constants, registry, runtime  # noqa: E402
import hookmagic.kernels as hk  # noqa: E402
from tests import kernel_compiles  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("HOOKMAGIC_KERNEL_CACHE", str(d))
    return d


@pytest.fixture(scope="module")
def checks():
    """Every family compiled for every CI architecture (the shared user cache speeds reruns):
    first into that cache on every core, keeping the Hopper families' PTX for their own tests
    (tests/kernel_compiles.py), then checked by ``hk.check``, which reads what was compiled."""
    kernel_compiles.warm(hk.CI_ARCHS)
    return {arch: hk.check(arch) for arch in hk.CI_ARCHS}


def test_every_registered_kernel_compiles_for_every_ci_arch_without_spills(checks):
    entries = {e for s in registry.SPECS.values() for e in s.entries.values()}
    for arch, table in checks.items():
        assert entries <= set(table["kernel"]), (arch, entries - set(table["kernel"]))
        assert table["ok"].all(), table[~table["ok"]]
        assert (table["registers"] > 0).all() and (table["registers"] <= 255).all()


def test_resource_use_matches_the_sources(checks):
    t = checks["sm_90"].set_index("kernel")
    # static shared memory declared in the sources, byte for byte
    assert t.loc["sgemm_smem_tiled", "smem_bytes"] == (32 * 33 + 32 * 32) * 4
    assert t.loc["sgemm_tile_2d", "smem_bytes"] == (128 * 8 + 8 * 128) * 4
    wt = constants.SGEMM_WARPTILE   # two buffers of A (BK x BM) and B (BK x BN) tiles
    assert t.loc["sgemm_warptile", "smem_bytes"] == 2 * (wt["WT_BK"] * wt["WT_BM"] + wt["WT_BK"] * wt["WT_BN"]) * 4
    assert t.loc["gemm_wmma_f16", "smem_bytes"] == 2 * (128 * 40 + 32 * 136) * 2 + 8 * 256 * 4
    assert t.loc["gemm_mma_f16", "smem_bytes"] == 0          # dynamic only
    # launch bounds cap registers: 512 threads -> at most 128 per thread
    assert t.loc["sgemm_tile_1d", "registers"] <= 128


def test_ptxas_parser_keeps_device_function_properties_apart():
    log = textwrap.dedent("""\
        ptxas info    : Compiling entry function 'k1' for 'sm_90'
        ptxas info    : Function properties for k1
        ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
        ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 364 bytes cmem[0]
        ptxas info    : Function properties for _Z6helperv
        ptxas         .     99 bytes stack frame, 99 bytes spill stores, 99 bytes spill loads
        ptxas info    : Compiling entry function 'k2' for 'sm_90'
        ptxas info    : Function properties for k2
        ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 8 registers, 360 bytes cmem[0]
        """)
    info = build.parse_ptxas_info(log)
    assert info["k1"] == {"registers": 40, "smem_bytes": 2048, "stack_bytes": 16, "spill_store_bytes": 8,
                          "spill_load_bytes": 4, "barriers": 1}
    assert info["k2"]["registers"] == 8 and info["k2"]["smem_bytes"] == 0 and info["k2"]["spill_store_bytes"] == 0


@pytest.mark.parametrize("given, expected", [("sm_90a", "sm_90a"), ("90", "sm_90"), (87, "sm_87"),
                                             ((8, 0), "sm_80"), ("9.0", "sm_90"), ("compute_90", "sm_90")])
def test_normalize_arch(given, expected):
    assert build.normalize_arch(given) == expected


def test_bad_arch_is_an_invalid_argument():
    with pytest.raises(InvalidArgument, match="not an architecture"):
        build.normalize_arch("hopper")


#: the family the cache tests compile: the quickest to compile (0.2 s on two cores, sgemm 4 s). What
#: they test (keys, hits, corrupt entries rebuilt, concurrent writers) does not depend on what is cached.
CACHED_FAMILY = "detect"


def test_cache_hit_key_and_corruption(cache):
    first = build.compile_family(CACHED_FAMILY, "sm_80")
    assert not first.from_cache and first.cubin[:4] == b"\x7fELF"
    again = build.compile_family(CACHED_FAMILY, "sm_80")
    assert again.from_cache and again.cubin == first.cubin and again.kernels == first.kernels
    # the key covers arch, options and the NVRTC version
    assert build.cache_key(CACHED_FAMILY, "sm_80") != build.cache_key(CACHED_FAMILY, "sm_90")
    assert build.cache_key(CACHED_FAMILY, "sm_80") != build.cache_key(CACHED_FAMILY, "sm_80", ["-DX=1"])
    # a corrupted entry is rebuilt, not loaded, and repaired on disk
    (cubin_file,) = cache.glob(f"{CACHED_FAMILY}-sm_80-*.cubin")
    cubin_file.write_bytes(first.cubin[: len(first.cubin) // 2])
    rebuilt = build.compile_family(CACHED_FAMILY, "sm_80")
    # NVRTC's output is not reproducible here (a byte of the cubin, once even a kernel's register
    # count, differed between two compiles of the same source): the rebuilt entry is a whole cubin
    # of the same kernels, and it is what the cache now holds
    assert not rebuilt.from_cache and rebuilt.cubin[:4] == b"\x7fELF"
    assert set(rebuilt.kernels) == set(first.kernels)
    assert cubin_file.read_bytes() == rebuilt.cubin
    (meta_file,) = cache.glob(f"{CACHED_FAMILY}-sm_80-*.json")
    meta_file.write_text("{not json")
    assert not build.compile_family(CACHED_FAMILY, "sm_80").from_cache
    # an entry whose metadata lost the resource lines (kernels: {}) is rebuilt too: `kernels
    # check` would otherwise have nothing to report
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "kernels": {}}))
    fresh = build.compile_family(CACHED_FAMILY, "sm_80")
    assert not fresh.from_cache and set(fresh.kernels) == set(first.kernels)


def _compile_in_child(cache_dir: str, q, start) -> None:
    os.environ["HOOKMAGIC_KERNEL_CACHE"] = cache_dir
    from hookmagic.kernels import build as b
    b.nvrtc_version()     # NVRTC loaded: the compiles below start together, not a process start apart
    start.wait(timeout=300)
    c = b.compile_family(CACHED_FAMILY, "sm_87")
    q.put(c.cubin)


def test_concurrent_processes_share_one_valid_cache_entry(cache):
    # three processes compile the same entry at once: a barrier releases their compiles together
    # once each has started and loaded NVRTC, so their writes race however quick the compile is
    ctx = mp.get_context("spawn")
    q, start = ctx.Queue(), ctx.Barrier(3)
    procs = [ctx.Process(target=_compile_in_child, args=(str(cache), q, start)) for _ in range(3)]
    for p in procs:
        p.start()
    cubins = [q.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # NVRTC's cubins may differ in bytes between processes; each must be whole, and the one
    # entry left on disk must be one of them, intact (its recorded hash matches)
    assert all(c[:4] == b"\x7fELF" for c in cubins)
    (entry,) = cache.glob(f"{CACHED_FAMILY}-sm_87-*.cubin")
    assert not list(cache.glob(".tmp-*"))
    again = build.compile_family(CACHED_FAMILY, "sm_87")
    assert again.from_cache and again.cubin == entry.read_bytes() and again.cubin in cubins


def test_compile_error_carries_the_nvrtc_log(tmp_path, monkeypatch, cache):
    src = tmp_path / "src"
    src.mkdir()
    (src / "broken.cu").write_text('extern "C" __global__ void k(float* x) { x[0] = undeclared_name; }\n')
    monkeypatch.setattr(build, "source_dir", lambda: src)
    with pytest.raises(hk.KernelCompileError) as info:
        build.compile_family("broken", "sm_90")
    assert "undeclared_name" in str(info.value) and "undeclared_name" in info.value.log
    assert isinstance(info.value, HookmagicError) and isinstance(info.value, RuntimeError)
    with pytest.raises(InvalidArgument, match="no kernel family"):
        build.compile_family("missing", "sm_90")


def test_available_lists_every_variant():
    t = hk.available()
    assert set(t[t.op == "sgemm"].variant) == set(hk.SGEMM_VARIANTS)
    assert set(t[(t.op == "gemm") & (t.variant == "mma")].dtype) == {"float16", "bfloat16", "int8"}
    assert set(t[(t.op == "gemm") & (t.variant == "wmma")].dtype) == {"float16", "bfloat16"}
    assert (t.kernel.str.len() > 0).all()
    smem = t.set_index("kernel")["dynamic_smem"]
    assert smem["gemm_mma_s8"] == 3 * 2 * 128 * (64 + 16)        # 3 stages of A and Bt, 80-byte rows
    assert smem["gemm_mma_f16"] == 3 * (128 * 40 + 32 * 136) * 2  # 3 stages of A and B, padded rows


def test_gemm_work_formula():
    w = registry.gemm_work(3, 5, 7, "float16", "float16", extra_bytes=10)
    assert w == {"flops": 2 * 3 * 5 * 7, "dram_bytes": (3 * 7 + 7 * 5) * 2 + 3 * 5 * 2 + 10}
    registry.launch_log(clear=True)
    hk.record("my_kernel", 100, 200, n=4)
    (entry,) = hk.launch_log(clear=True)
    assert (entry.kernel, entry.flops, entry.dram_bytes, entry.args) == ("my_kernel", 100, 200, {"n": 4})


# --- argument checks (all happen before anything touches a GPU) ---------------------------------
try:
    import torch
except ImportError:  # pragma: no cover - the dev machines have CPU torch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch (CPU is enough) for tensors to check")


@needs_torch
def test_shape_mismatch_names_both_operands():
    a, b = torch.zeros(4, 5), torch.zeros(6, 3)
    with pytest.raises(hk.KernelArgumentError, match=r"a has 5 columns, b has 6 rows.*a is torch float32\[4, 5\].*b is torch float32\[6, 3\]"):
        hk.sgemm(a, b)


@needs_torch
def test_dtype_device_kind_and_variant_errors():
    a = torch.zeros(4, 5)
    with pytest.raises(hk.KernelArgumentError, match="share one dtype"):
        hk.sgemm(a, torch.zeros(5, 3, dtype=torch.float64))
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device.*cpu"):
        hk.sgemm(a, torch.zeros(5, 3))
    with pytest.raises(hk.KernelArgumentError, match="2-D"):
        hk.sgemm(a, torch.zeros(5))
    with pytest.raises(hk.KernelArgumentError, match="torch tensor or a CuPy array"):
        hk.sgemm([[1.0]], a)
    with pytest.raises(hk.KernelArgumentError, match="unknown variant"):
        hk.sgemm(a, torch.zeros(5, 3), variant="fastest")
    with pytest.raises(hk.KernelArgumentError, match="share one dtype of float16, bfloat16"):
        hk.gemm(a, torch.zeros(5, 3), variant="wmma")
    with pytest.raises(hk.KernelArgumentError, match="activation"):
        hk.gemm(a.half(), torch.zeros(5, 3).half(), activation="swish")
    assert issubclass(hk.KernelArgumentError, ValueError) and issubclass(hk.KernelArgumentError, HookmagicError)


@needs_torch
def test_rowwise_argument_errors():
    x = torch.zeros(4, 8)
    with pytest.raises(hk.KernelArgumentError, match="float32, float16 or bfloat16"):
        hk.softmax(x.to(torch.int64))
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device"):
        hk.layer_norm(x)
    with pytest.raises(hk.KernelArgumentError, match="dim 5 is out of range"):
        hk.softmax(x, dim=5)
    with pytest.raises(hk.KernelArgumentError, match="approximate must be"):
        hk.bias_gelu(x, approximate="fast")
    assert {"softmax", "layer_norm", "rms_norm", "bias_gelu"} <= set(hk.available().op)


@pytest.mark.skipif(torch is not None and torch.cuda.is_available(), reason="checks the no-GPU message")
def test_no_gpu_is_one_clear_unavailable_error():
    with pytest.raises(Unavailable, match="GPU"):
        runtime.device(0)


def test_cli_check_and_list(capsys):
    from hookmagic.cli import main
    assert main(["kernels", "check", "--arch", "sm_90a"]) == 0
    shown = capsys.readouterr()
    out = shown.out
    assert "sgemm_warptile" in out and "gemm_mma_s8" in out and "sm_90a" in out
    # progress goes to stderr (a cold compile takes tens of seconds), the table to stdout
    assert f"compiling {len(build.families())} kernel families for sm_90a" in shown.err
    assert main(["kernels", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"sgemm", "gemm", "softmax", "layer_norm"} <= {r["op"] for r in rows}
