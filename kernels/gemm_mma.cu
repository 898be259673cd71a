// Tensor Core GEMMs: C = act(A @ B + bias) + residual, FP16/BF16 inputs with FP32 accumulate
// (WMMA, and mma.sync with ldmatrix and a 3-stage cp.async pipeline), and INT8 with INT32
// accumulate (mma.sync m16n8k32). A is M x K row-major; B is K x N row-major for FP16/BF16 and
// given transposed (N x K row-major, i.e. a column-major K x N) for INT8, as cuBLAS's int8 GEMM wants.
// Block tile 128 x 128, 8 warps of 64 x 32. Any M, N, K: edge tiles are zero-filled.
#include "tc_common.cuh"

template <typename T>
__device__ __forceinline__ void hm_gemm_mma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                            const T* __restrict__ bias, const T* __restrict__ residual,
                                            int M, int N, int K, int act, int vec) {
  extern __shared__ __align__(128) unsigned char hm_smem[];
  T* As = reinterpret_cast<T*>(hm_smem);
  T* Bs = As + TC_STAGES * TC_A_STAGE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = TC_WARP_M(warp), wn = TC_WARP_N(warp);
  const int m0 = blockIdx.y * TC_BM, n0 = blockIdx.x * TC_BN;
  float acc[4][4][4];
  hm_zero_acc(acc);
  hm_cp_pipeline<TC_BK>(
      (K + TC_BK - 1) / TC_BK,
      [&](int s, int k0) { hm_load_tile(As + s * TC_A_STAGE, Bs + s * TC_B_STAGE, A, B, m0, n0, k0, M, N, K, vec); },
      [&](int s) { hm_warp_mma_tile(acc, As + s * TC_A_STAGE, Bs + s * TC_B_STAGE, wm, wn, lane); });
  hm_store_warp_tile(acc, C, m0 + wm, n0 + wn, M, N, bias, residual, act, lane);
}

extern "C" __global__ void __launch_bounds__(TC_NT) gemm_mma_f16(const __half* A, const __half* B, __half* C,
    const __half* bias, const __half* residual, int M, int N, int K, int act, int vec) {
  hm_gemm_mma<__half>(A, B, C, bias, residual, M, N, K, act, vec);
}
extern "C" __global__ void __launch_bounds__(TC_NT) gemm_mma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
    __nv_bfloat16* C, const __nv_bfloat16* bias, const __nv_bfloat16* residual, int M, int N, int K, int act, int vec) {
  hm_gemm_mma<__nv_bfloat16>(A, B, C, bias, residual, M, N, K, act, vec);
}

