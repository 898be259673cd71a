"""Per-kernel hardware counters through CUPTI's range profiler: the metric names, and turning
the native rows into the Trace's ``counters`` table.

The names are Nsight Compute's metric names for Hopper (sm_90); the constants below are the
one source for them (views and diagnoses import the constants, never the strings).
"""
from __future__ import annotations

#: Compute (SM) throughput, % of peak over the kernel's elapsed cycles (ncu "Compute (SM) Throughput").
SM_THROUGHPUT_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
#: DRAM throughput, % of peak over the kernel's elapsed cycles (ncu "DRAM Throughput").
DRAM_THROUGHPUT_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
#: Bytes read from / written to device memory (DRAM/HBM).
DRAM_BYTES_READ = "dram__bytes_read.sum"
DRAM_BYTES_WRITE = "dram__bytes_write.sum"
#: Achieved occupancy: active warps as % of the SM's warp slots, averaged over active cycles.
ACHIEVED_OCCUPANCY_PCT = "sm__warps_active.avg.pct_of_peak_sustained_active"
#: L1/TEX and L2 sector hit rates, %.
L1_HIT_RATE_PCT = "l1tex__t_sector_hit_rate.pct"
L2_HIT_RATE_PCT = "lts__t_sector_hit_rate.pct"
#: Tensor-pipe utilisation: % of active cycles the tensor pipe was busy.
TENSOR_PIPE_PCT = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
#: Warp-level instructions executed on the FP32 (FMA) pipe, the FP16 pipe and the tensor pipe.
FP32_INSTRUCTIONS = "smsp__inst_executed_pipe_fma.sum"
FP16_INSTRUCTIONS = "smsp__inst_executed_pipe_fp16.sum"
TENSOR_INSTRUCTIONS = "sm__inst_executed_pipe_tensor.sum"
#: Kernel duration on the GPU, ns.
DURATION_NS = "gpu__time_duration.sum"

#: The default counter set of ``hookmagic.capture(counters=True)`` and ``%%cudahook --counters``.
DEFAULT_COUNTERS: tuple[str, ...] = (
    SM_THROUGHPUT_PCT, DRAM_THROUGHPUT_PCT, DRAM_BYTES_READ, DRAM_BYTES_WRITE,
    ACHIEVED_OCCUPANCY_PCT, L1_HIT_RATE_PCT, L2_HIT_RATE_PCT, TENSOR_PIPE_PCT,
    FP32_INSTRUCTIONS, FP16_INSTRUCTIONS, TENSOR_INSTRUCTIONS, DURATION_NS,
)
