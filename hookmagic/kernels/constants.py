"""Tile and launch constants of the CUDA kernels: the one place they are written.

The sources in ``kernels/`` do not define these; :func:`defines` turns them into the ``-D``
values every family is compiled with (:func:`hookmagic.kernels.build.compile_family`), and the
Python launch code (grids, blocks, dynamic shared memory) reads the same dictionaries. A source
compiled without them stops with an ``#error`` naming this module.
"""
from __future__ import annotations

#: SGEMM tile_1d: 64 x 64 block tile, BK 8, a column of TM = 8 results a thread (512 threads)
SGEMM_TILE_1D = {"T1_BM": 64, "T1_BN": 64, "T1_BK": 8, "T1_TM": 8}
#: SGEMM tile_2d / vectorized: 128 x 128 block tile, BK 8, 8 x 8 results a thread, 256 threads
SGEMM_TILE_2D = {"T2_BM": 128, "T2_BN": 128, "T2_BK": 8, "T2_TM": 8, "T2_TN": 8, "T2_NT": 256}
#: SGEMM warptile: 256 x 128 x 8 block tile, 64 x 64 a warp in 2 x 2 sub-tiles of 32 x 32, 8 x 4
#: results a thread per sub-tile, 256 threads. Chosen on an H200 from 20 tilings of the same kernel
#: (4096³ and 8192³, against cuBLAS FP32 in the same process): 87 % of cuBLAS where the
#: 128 x 128 x 16, 4-sub-tile tiling reached 74-75 %
SGEMM_WARPTILE = {"WT_BM": 256, "WT_BN": 128, "WT_BK": 8, "WT_WM": 64, "WT_WN": 64, "WT_WNITER": 2,
                  "WT_TM": 8, "WT_TN": 4, "WT_NT": 256}
#: the mma.sync / WMMA GEMMs (kernels/tc_common.cuh): 128 x 128 x 32 tiles, 256 threads, 3 stages;
#: shared-memory rows padded by 8 halves (A: 80 bytes, B: 272 bytes) so ldmatrix is conflict-free
TC = {"TC_BM": 128, "TC_BN": 128, "TC_BK": 32, "TC_NT": 256, "TC_STAGES": 3}
TC["TC_ALD"] = TC["TC_BK"] + 8
TC["TC_BLD"] = TC["TC_BN"] + 8
#: the INT8 mma.sync GEMM: K tile of 64 bytes, rows padded by 16 bytes (80: ldmatrix conflict-free)
I8 = {"I8_BK": 64}
I8["I8_LD"] = I8["I8_BK"] + 16
#: the Hopper wgmma GEMM: 128 x 256 x 64 tiles (wgmma m64n256k16), 4 stages, producer + 2
#: consumer warpgroups (384 threads)
WG = {"WG_BM": 128, "WG_BN": 256, "WG_BK": 64, "WG_STAGES": 4, "WG_THREADS": 384}
#: the FP8 kernels on the same pipeline (kernels/gemm_fp8.cu): a stage's 128-byte swizzled row holds
#: twice as many 1-byte elements, so K advances 128 per stage (wgmma m64n256k32, 4 per stage)
WG["WG8_BK"] = WG["WG_BK"] * 2
#: the Hopper convolution (kernels/conv_wgmma.cu): 128 output pixels x block_n (128 or 64) output
#: channels a tile, 64 elements of R*S*C a k-step (one 128-byte swizzled row), producer + 2 consumer
#: warpgroups; as many k-steps in flight as fill the shared memory at each block_n
CV = {"CV_BM": 128, "CV_BK": 64, "CV_THREADS": 384, "CV_STAGES_N128": 5, "CV_STAGES_N64": 7}

#: the epilogue activation codes of kernels/common.cuh (hm_act), by the name callers pass
ACTIVATIONS = {None: 0, "none": 0, "relu": 1, "gelu_tanh": 2, "gelu": 3}

#: bytes of one pipeline stage (A and B tiles) of the FP16/BF16 mma.sync GEMM
TC_STAGE_BYTES = (TC["TC_BM"] * TC["TC_ALD"] + TC["TC_BK"] * TC["TC_BLD"]) * 2
#: bytes of one pipeline stage (A and Bt tiles) of the INT8 GEMM
I8_STAGE_BYTES = 2 * TC["TC_BM"] * I8["I8_LD"]

_ALL = {**SGEMM_TILE_1D, **SGEMM_TILE_2D, **SGEMM_WARPTILE, **TC, **I8, **WG, **CV}


def defines(family: str) -> tuple[str, ...]:
    """The ``-DNAME=value`` options ``kernels/<family>.cu`` is compiled with (every family gets
    every constant: the headers they share need theirs, and unused macros cost nothing)."""
    return tuple(f"-D{k}={v}" for k, v in sorted(_ALL.items()))


__all__ = ["ACTIVATIONS", "SGEMM_TILE_1D", "SGEMM_TILE_2D", "SGEMM_WARPTILE", "TC", "I8", "WG", "CV", "TC_STAGE_BYTES",
           "I8_STAGE_BYTES", "defines"]
