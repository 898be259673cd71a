"""Theoretical occupancy against examples worked by hand with the CUDA occupancy calculator's rules.

Each case states its arithmetic: warps per block rounded up; registers per warp rounded up to
256 and allocated from each of 4 sub-partitions; shared memory plus the 1 KiB reserve (sm_80+)
rounded to 128 B (sm_80+) or 256 B (sm_7x); the smallest cap on resident blocks wins.
"""
from __future__ import annotations

import pytest

from hookmagic.analysis.occupancy import (
    device_limits,
    kernel_occupancy,
    limits_for,
    parse_compute_capability,
    theoretical_occupancy,
)
from tests.synthetic import synthetic


def occ(cc, threads, regs, smem):
    limits, _ = limits_for(cc)
    return theoretical_occupancy([threads], [regs], [smem], limits).iloc[0]


def test_a100_registers_limit():
    # 256 threads = 8 warps; 64 regs x 32 = 2048 regs/warp; 16384 per sub-partition / 2048
    # = 8 warps x 4 = 32 warps -> 4 blocks. Warps allow 64/8 = 8, blocks 32,
    # smem (0 + 1024 reserve) 167936/1024 = 164. Active 4 blocks = 32 warps = 50%.
    r = occ("8.0", 256, 64, 0)
    assert (r.warps_per_block, r.blocks_by_warps, r.blocks_by_registers, r.blocks_by_smem) == (8, 8, 4, 164)
    assert r.active_blocks == 4 and r.active_warps == 32
    assert r.occupancy == pytest.approx(0.5)
    assert r.limiter == "registers"


def test_turing_full_occupancy_limited_by_warps():
    # T4: 1024 threads/SM = 32 warps. 128 threads = 4 warps -> 8 blocks by warps;
    # regs 32 x 32 = 1024/warp -> 16 warps per partition -> 64 -> 16 blocks;
    # smem 4096 (256 B unit, no reserve) -> 65536/4096 = 16; max blocks 16. Active 8 = 100%.
    r = occ((7, 5), 128, 32, 4096)
    assert r.active_blocks == 8 and r.occupancy == pytest.approx(1.0)
    assert r.limiter == "warps"


def test_register_rounding_to_allocation_unit():
    # sm_86: 41 regs x 32 = 1312 -> rounded to 1536; 16384 // 1536 = 10 warps per partition
    # -> 40 warps -> 5 blocks of 8 warps = 40 of 48 warps. Without rounding it would be 6.
    r = occ("sm_86", 256, 41, 0)
    assert r.blocks_by_registers == 5 and r.blocks_by_warps == 6
    assert r.occupancy == pytest.approx(40 / 48)
    assert r.limiter == "registers"


def test_registers_allocated_per_sub_partition():
    # sm_80, one warp per block, 200 regs: 6400 regs/warp; 16384 // 6400 = 2 warps per
    # partition -> 8 warps -> 8 blocks (a single pooled file would give 65536 // 6400 = 10).
    r = occ("8.0", 32, 200, 0)
    assert r.blocks_by_registers == 8
    assert r.occupancy == pytest.approx(8 / 64)


def test_hopper_shared_memory_limit_with_reserve():
    # H100: 48 KiB + 1 KiB reserve = 50176 B (a multiple of 128); 233472 // 50176 = 4 blocks
    # of 4 warps = 16 of 64 warps = 25%.
    r = occ("9.0", 128, 32, 48 * 1024)
    assert r.blocks_by_smem == 4 and r.occupancy == pytest.approx(0.25)
    assert r.limiter == "shared memory"


def test_shared_memory_reserve_changes_the_answer():
    # A100: 32700 B + 1024 = 33724 -> rounded to 128: 33792; 167936 // 33792 = 4
    # (without the reserve it would be 167936 // 32700 = 5).
    assert occ("8.0", 64, 16, 32700).blocks_by_smem == 4


def test_jetson_orin_block_limit():
    # sm_87 Orin: one-warp blocks hit the 16-blocks-per-SM cap: 16 of 48 warps = 1/3.
    r = occ("8.7", 32, 16, 0)
    assert r.active_blocks == 16 and r.occupancy == pytest.approx(16 / 48)
    assert r.limiter == "blocks"


def test_ties_name_every_limiting_resource():
    # sm_80, 1024 threads, 32 regs: warps allow 2 blocks, registers (64 warps) allow 2.
    assert occ("8.0", 1024, 32, 0).limiter == "warps and registers"


def test_block_that_cannot_fit():
    # 32 warps x 72 regs x 32 = 73728 > 65536 registers per block: cannot launch.
    r = occ("8.0", 1024, 72, 0)
    assert r.active_blocks == 0 and r.occupancy == 0 and r.limiter == "does not fit"


def test_volta_uses_256_byte_smem_unit_and_no_reserve():
    # 1025 B -> 1280 B; 98304 // 1280 = 76 blocks (warps allow 64 one-warp blocks... capped by 32)
    limits, _ = limits_for("7.0")
    r = theoretical_occupancy([32], [0], [1025], limits).iloc[0]
    assert r.blocks_by_smem == 76 and r.blocks_by_registers > 1000  # 0 regs: no limit
    assert r.active_blocks == 32 and r.limiter == "blocks"


def test_parse_compute_capability_forms():
    for value in ([8, 7], (8, 7), "8.7", "sm_87", 87, "87"):
        assert parse_compute_capability(value) == (8, 7)
    assert parse_compute_capability("12.0") == (12, 0)
    assert parse_compute_capability("sm_120") == (12, 0)


def test_device_limits_from_meta_table_and_fallback():
    meta = {"devices": [{"index": 0, "name": "A", "compute_capability": [9, 0],
                         "multiprocessors": 132, "max_blocks_per_sm": 16},
                        {"index": 1, "compute_capability": "10.1"},
                        {"index": 2}]}
    d0 = device_limits(meta, 0)
    assert d0["max_blocks_per_sm"] == 16 and d0["max_threads_per_sm"] == 2048
    assert d0["limits_source"] == "meta + table sm_90" and d0["multiprocessors"] == 132
    d1 = device_limits(meta, 1)
    assert d1["limits_source"].startswith("assumed from sm_100")
    d2 = device_limits(meta, 2)
    assert d2["limits_source"].startswith("unknown") and d2["max_threads_per_sm"] is None


def test_kernel_occupancy_per_configuration_and_waves():
    k = {"start_ns": [0, 10, 20], "end_ns": [5, 15, 30], "duration_ns": [5, 5, 10],
         "device": 0, "stream": 7, "name": ["gemm", "gemm", "tiny"],
         "grid_x": [432, 432, 1], "grid_y": 1, "grid_z": 1, "block_x": [256, 256, 32],
         "block_y": 1, "block_z": 1, "registers": [64, 64, 16], "static_smem": 0}
    tr = synthetic({"devices": [{"index": 0, "compute_capability": [8, 0], "multiprocessors": 108}]},
                   kernels=k)
    out = kernel_occupancy(tr)
    assert list(out["name"]) == ["gemm", "tiny"]  # most time first
    gemm = out.iloc[0]
    assert gemm["count"] == 2 and gemm["total_ns"] == 10
    assert gemm["occupancy"] == pytest.approx(0.5)
    # 432 blocks / (4 blocks per SM x 108 SMs) = 1 wave
    assert gemm["waves"] == pytest.approx(1.0)
    assert out.iloc[1]["waves"] < 1
    unknown = kernel_occupancy(synthetic({}, kernels=k))
    assert unknown["occupancy"].isna().all() and (unknown["limiter"] == "unknown").all()
