"""Launch plans of the memory-bound kernels (no GPU needed): every plan the row-wise wrappers can
pick covers the whole row exactly once with the resources its kernel is compiled for, and the
benchmark's memory table (synthetic rows) carries kernel time, host time and the ratios."""
from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import hookmagic.kernels.rowwise as rw
from hookmagic.kernels import build, registry

ROOT = Path(__file__).resolve().parents[1]
#: launch-bound thread limits of the compiled entry points (kernels/rowwise.cu)
_MAX_THREADS = {"reg4": 1024, "reg8": 1024, "rs": 1024, "cl": 1024, "vec": 256}


def _k(name: str) -> tuple[str, int]:
    """(kind, vectors a thread in registers) of a plan's kernel name."""
    for kind, k in (("reg4", 4), ("reg8", 8), ("rs", 4), ("cl", 4), ("vec", 4)):
        if name.endswith("_" + kind):
            return kind, k
    raise AssertionError(name)


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(["softmax", "layer_norm", "rms_norm"]), rows=st.integers(1, 100_000),
       nvec=st.integers(1, 40_000), nv=st.sampled_from([4, 8]),
       impl=st.sampled_from(["auto", "rs", "k8"]), smem_limit=st.sampled_from([99 * 1024, 162 * 1024, 226 * 1024]))
def test_row_plans_cover_every_vector_once(op, rows, nvec, nv, impl, smem_limit):
    plan = rw._fast_plan(op, rows, nvec * nv, nv, smem_limit, impl)
    if plan is None:   # only rows too long for registers + shared memory go multi-pass
        assert (-(-nvec // 1024) - 4) * 1024 * 16 > smem_limit
        return
    name, grid, threads, last, smem = plan
    kind, k = _k(name)
    assert threads % 32 == 0 and 32 <= threads <= _MAX_THREADS[kind]
    if name == "layer_norm_reg8":
        assert threads <= 512                               # its launch bound
    assert 1 <= grid <= rw._MAX_GRID
    if kind in ("reg4", "reg8") and last == 1:              # warp per row
        assert nvec <= 32 * k and grid * (threads // 32) >= min(rows, rw._MAX_GRID)
    elif kind in ("reg4", "reg8"):                          # block per row
        assert nvec <= threads * k and smem == 0
    else:                                                   # registers + shared memory
        assert nvec <= threads * (k + last) and smem == last * threads * 16 and smem <= smem_limit


@settings(max_examples=200, deadline=None)
@given(op=st.sampled_from(["softmax", "layer_norm", "rms_norm"]), rows=st.integers(1, 100_000),
       nvec=st.integers(2048, 40_000))
def test_cluster_plan_splits_rows_over_eight_blocks(op, rows, nvec):
    plan = rw._cluster_plan(op, rows, nvec)
    if plan is None:
        assert -(-nvec // 8) > 4 * 1024
        return
    name, grid, threads, _, smem = plan
    assert name == f"{op}_cl" and grid % 8 == 0 and grid // 8 <= rows and smem == 0
    assert 8 * 4 * threads >= nvec and threads <= 1024


def test_every_plan_kernel_is_registered():
    entries = {e for s in registry.SPECS.values() for e in s.entries.values()}
    for name in ("softmax_reg4", "softmax_reg8", "softmax_rs", "softmax_cl", "layer_norm_reg8", "rms_norm_rs",
                 "bias_gelu_vec"):
        for suffix in ("f32", "f16", "bf16"):
            assert f"{name}_{suffix}" in entries
    assert {"transpose2_b2", "transpose2_b4", "preprocess4_f16"} <= entries


def test_plan_kernels_compile_without_spills():
    info = build.compile_family("rowwise", "sm_90").kernels
    for name, k in info.items():
        if "_reg" in name or "_rs_" in name or "_cl_" in name or "_vec_" in name:
            assert k["spill_store_bytes"] == 0 and k["spill_load_bytes"] == 0, name

def test_preprocess_scalar_arguments():
    """The cached scalar arguments of the preprocess kernel, against the formulas they implement."""
    import numpy as np

    from hookmagic.kernels import preprocess as pp_mod   # noqa: F401  (the package exports a function too)
    pp = sys.modules["hookmagic.kernels.preprocess"]
    mean, std, pad = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), (114.0, 114.0, 114.0)
    col = pp.yuv_coefficients("bt601", False)
    head, tail = pp._scalars(1080, 1920, 5760, "BGR", "RGB", "NHWC", 640, 640, True, mean, std, pad, col)
    assert [int(v) for v in head] == [5760, 1080, 1920, pp.FORMATS.index("BGR")]
    oh, ow, nhwc, bx, by, bw, bh, sx, sy = tail[:9]
    assert (int(oh), int(ow), int(nhwc)) == (640, 640, 1)
    assert (int(bx), int(by), int(bw), int(bh)) == (0, 140, 640, 360)   # 1920x1080 into 640: 640x360, centred
    assert float(sx) == 3.0 and float(sy) == 3.0
    a, b, p = tail[9:12], tail[12:15], tail[15:18]
    for c in range(3):
        assert np.isclose(float(a[c]), 1 / (255 * std[c]), rtol=1e-6)
        assert np.isclose(float(b[c]), -mean[c] / std[c], rtol=1e-6)
        assert np.isclose(float(p[c]), (114 / 255 - mean[c]) / std[c], rtol=1e-6)
    assert int(tail[18]) == 1                                           # BGR frames to RGB output: swap
    assert [float(v) for v in tail[19:]] == [float(np.float32(v)) for v in col]
    _, plain = pp._scalars(1080, 1920, 5760, "RGB", "RGB", "NCHW", 640, 640, False, mean, std, pad, col)
    assert [int(v) for v in plain[3:7]] == [0, 0, 640, 640] and int(plain[18]) == 0 and int(plain[2]) == 0
