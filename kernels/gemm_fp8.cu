// Hopper FP8 GEMM (sm_90a): C = (scale_a * scale_b) * (A @ B) + bias, A and B in FP8 (e4m3 or e5m2,
// either combination), FP32 accumulate, FP16/BF16 out — what torch._scaled_mm computes with
// per-tensor scales. The pipeline and schedules are the FP16/BF16 GEMM's (kernels/wgmma_gemm.cuh):
// a stage row is the same 128 bytes, now 128 FP8 elements of K (WG8_BK), each wgmma m64n256k32.
//
// FP8 wgmma has no transpose flag: both operands are K-major in shared memory, so A is M x K
// row-major and B is N x K row-major (a column-major K x N, as torch._scaled_mm takes it).
// scale_a and scale_b are FP32 scalars in device memory; bias (N,) is of the output type or null.
#include "wgmma_gemm.cuh"

#ifdef HM_WGMMA_BODY
#define HM_F8_BODY(FN, OP, T) FN<OP, T, 1>(&tmA, &tmB, C, bias, nullptr, M, N, K, 0, vec, scale_a, scale_b)
#else
#define HM_F8_BODY(FN, OP, T) ((void)0)
#endif
#define HM_F8_ENTRY(NAME, FN, OP, T)                                                                          \
  extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) NAME(                                           \
      const __grid_constant__ HmTensorMap tmA, const __grid_constant__ HmTensorMap tmB, T* C, const T* bias,  \
      const float* scale_a, const float* scale_b, int M, int N, int K, int vec) {                             \
    HM_F8_BODY(FN, OP, T);                                                                                    \
  }
// gemm_fp8_<A type>_<B type>_<out type><schedule>: every FP8 pair, FP16 and BF16 out, for the schedules
// "tiles" (no suffix: one block per 128 x 256 tile) and "persistent4" (_p4: one block per SM, the
// 4-stage ring, each consumer warpgroup storing its rows while the other computes).
#define HM_F8_OUTS(PAIR, OP, SUFFIX, FN)                                                                      \
  HM_F8_ENTRY(gemm_fp8_##PAIR##_f16##SUFFIX, FN, OP, __half)                                                  \
  HM_F8_ENTRY(gemm_fp8_##PAIR##_bf16##SUFFIX, FN, OP, __nv_bfloat16)
#define HM_F8_SCHEDULE(SUFFIX, FN)                                                                            \
  HM_F8_OUTS(e4m3_e4m3, HmE4M3xE4M3, SUFFIX, FN)                                                              \
  HM_F8_OUTS(e4m3_e5m2, HmE4M3xE5M2, SUFFIX, FN)                                                              \
  HM_F8_OUTS(e5m2_e4m3, HmE5M2xE4M3, SUFFIX, FN)                                                              \
  HM_F8_OUTS(e5m2_e5m2, HmE5M2xE5M2, SUFFIX, FN)
HM_F8_SCHEDULE(, hm_gemm_wgmma)
HM_F8_SCHEDULE(_p4, hm_gemm_wgmma_persistent4)
