// Hopper GEMM (sm_90a), FP16/BF16: C = act(A @ B + bias) + residual with wgmma.mma_async m64n256k16,
// operands staged by TMA through a 4-stage mbarrier pipeline, producer + 2 consumer warpgroups, FP32
// accumulate. The machinery (pipeline, schedules, epilogues) is kernels/wgmma_gemm.cuh, shared with
// the FP8 GEMM (kernels/gemm_fp8.cu); this file holds the FP16/BF16 entry points.
#include "wgmma_gemm.cuh"

// One entry point: NAME runs schedule FN for element type T; BK 0 takes B as K x N row-major, 1 as
// N x K row-major (gemm_wgmma_<dtype>_bt...). Off sm_90a the bodies compile to empty stubs.
#ifdef HM_WGMMA_BODY
#define HM_WG_BODY(FN, T, BK) FN<T, T, BK>(&tmA, &tmB, C, bias, residual, M, N, K, act, vec, nullptr, nullptr)
#else
#define HM_WG_BODY(FN, T, BK) ((void)0)
#endif
#define HM_WG_ENTRY(NAME, FN, T, BK, ATTRS)                                                                   \
  extern "C" __global__ void ATTRS __launch_bounds__(WG_THREADS, 1) NAME(                                     \
      const __grid_constant__ HmTensorMap tmA, const __grid_constant__ HmTensorMap tmB, T* C, const T* bias,  \
      const T* residual, int M, int N, int K, int act, int vec) {                                             \
    HM_WG_BODY(FN, T, BK);                                                                                     \
  }
// Each schedule for FP16 and BF16, both layouts of B: "tiles" (one block per tile, no suffix),
// "persistent" (_p, one block per SM), clusters of 2 (_c2, grid 2 x ceil(tiles_m / 2) x tiles_n) and
// "persistent4" (_p4, 4-stage ring and per-warpgroup epilogues).
#define HM_WG_SCHEDULE(SUFFIX, FN, ATTRS)                                                                     \
  HM_WG_ENTRY(gemm_wgmma_f16##SUFFIX, FN, __half, 0, ATTRS)                                                   \
  HM_WG_ENTRY(gemm_wgmma_f16_bt##SUFFIX, FN, __half, 1, ATTRS)                                                \
  HM_WG_ENTRY(gemm_wgmma_bf16##SUFFIX, FN, __nv_bfloat16, 0, ATTRS)                                           \
  HM_WG_ENTRY(gemm_wgmma_bf16_bt##SUFFIX, FN, __nv_bfloat16, 1, ATTRS)
HM_WG_SCHEDULE(, hm_gemm_wgmma, )
HM_WG_SCHEDULE(_p, hm_gemm_wgmma_persistent, )
HM_WG_SCHEDULE(_c2, hm_gemm_wgmma_c2, HM_CLUSTER2)
HM_WG_SCHEDULE(_p4, hm_gemm_wgmma_persistent4, )
