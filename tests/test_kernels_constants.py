"""The tile constants have one source (hookmagic/kernels/constants.py): the CUDA sources do not
define them, NVRTC gets them as -D values, and the launch code reads the same numbers."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("cuda.core", reason="needs the [kernels] extra (cuda-core)")

from hookmagic.kernels import build, constants, registry  # noqa: E402
import hookmagic.kernels as hk  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKMAGIC_KERNEL_CACHE", str(tmp_path / "cache"))


def test_sources_do_not_define_the_python_constants():
    names = set(constants._ALL)
    for path in (ROOT / "kernels").glob("*.cu*"):
        defined = set(re.findall(r"^\s*#define\s+(\w+)", path.read_text(), flags=re.M))
        assert not defined & names, (path.name, defined & names)


def test_a_source_compiled_without_the_constants_stops_naming_their_module(cache, monkeypatch):
    monkeypatch.setattr(constants, "defines", lambda family: ())
    with pytest.raises(hk.KernelCompileError, match="constants.py"):
        build.compile_family("sgemm", "sm_80", use_cache=False)


def test_a_changed_constant_reaches_nvrtc(cache, monkeypatch):
    # tile_1d's static shared memory is (BM*BK + BK*BN) floats: BK 8 -> 4096 bytes, BK 16 -> 8192
    base = build.compile_family("sgemm", "sm_80", use_cache=False).kernels["sgemm_tile_1d"]["smem_bytes"]
    assert base == (64 * 8 + 8 * 64) * 4
    real = constants.defines
    monkeypatch.setattr(constants, "defines",
                        lambda family: tuple(o.replace("-DT1_BK=8", "-DT1_BK=16") for o in real(family)))
    bigger = build.compile_family("sgemm", "sm_80", use_cache=False).kernels["sgemm_tile_1d"]["smem_bytes"]
    assert bigger == (64 * 16 + 16 * 64) * 4


def test_launch_shapes_read_the_same_constants():
    warptile = registry.SPECS[("sgemm", "warptile")]
    # a 256 x 128 block tile of 64 x 64 warp tiles: 8 warps, 256 threads
    assert warptile.tile == (256, 128) and warptile.block == (256, 1, 1)
    assert registry.SPECS[("sgemm", "tile_1d")].block == (512, 1, 1)     # 64 x 64 outputs, 8 a thread
    mma = registry.SPECS[("gemm", "mma")]
    # 3 stages of a 128 x (32 + 8) A tile and a 32 x (128 + 8) B tile of halves; INT8: 2 x 128 x 80 bytes
    assert mma.smem == 3 * (128 * 40 + 32 * 136) * 2 and mma.smem_for("int8") == 3 * 2 * 128 * 80
    assert registry.SPECS[("gemm", "wgmma")].tile == (128, 256)
