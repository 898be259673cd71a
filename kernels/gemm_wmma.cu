// Tensor Core GEMMs: C = act(A @ B + bias) + residual, FP16/BF16 inputs with FP32 accumulate
// (WMMA, and mma.sync with ldmatrix and a 3-stage cp.async pipeline), and INT8 with INT32
// accumulate (mma.sync m16n8k32). A is M x K row-major; B is K x N row-major for FP16/BF16 and
// given transposed (N x K row-major, i.e. a column-major K x N) for INT8, as cuBLAS's int8 GEMM wants.
// Block tile 128 x 128, 8 warps of 64 x 32. Any M, N, K: edge tiles are zero-filled.
#include "tc_common.cuh"

// ---- WMMA (nvcuda::wmma 16x16x16 fragments), 2-stage cp.async ----
template <typename T>
__device__ __forceinline__ void hm_gemm_wmma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                             const T* __restrict__ bias, const T* __restrict__ residual,
                                             int M, int N, int K, int act, int vec) {
  using namespace nvcuda;
  __shared__ __align__(128) T As[2][TC_A_STAGE];
  __shared__ __align__(128) T Bs[2][TC_B_STAGE];
  __shared__ __align__(128) float scratch[8][16 * 16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int m0 = blockIdx.y * TC_BM, n0 = blockIdx.x * TC_BN;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  const int ktiles = (K + TC_BK - 1) / TC_BK;
  hm_load_tile(As[0], Bs[0], A, B, m0, n0, 0, M, N, K, vec);
  hm_cp_commit();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int s = kt & 1;
    if (kt + 1 < ktiles) hm_load_tile(As[s ^ 1], Bs[s ^ 1], A, B, m0, n0, (kt + 1) * TC_BK, M, N, K, vec);
    hm_cp_commit();
    hm_cp_wait<1>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TC_BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], &As[s][(wm + i * 16) * TC_ALD + kk], TC_ALD);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &Bs[s][kk * TC_BLD + wn + j * 16], TC_BLD);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
  const bool plain = !bias && !residual && act == 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(scratch[warp], acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
#pragma unroll
      for (int e = lane; e < 256; e += 32) {
        int r = m0 + wm + i * 16 + e / 16, c = n0 + wn + j * 16 + e % 16;
        if (r < M && c < N) C[(size_t)r * N + c] = hm_from_f<T>(plain ? scratch[warp][e] : hm_epilogue(scratch[warp][e], r, c, N, bias, residual, act));
      }
      __syncwarp();
    }
}

extern "C" __global__ void __launch_bounds__(TC_NT) gemm_wmma_f16(const __half* A, const __half* B, __half* C,
    const __half* bias, const __half* residual, int M, int N, int K, int act, int vec) {
  hm_gemm_wmma<__half>(A, B, C, bias, residual, M, N, K, act, vec);
}
extern "C" __global__ void __launch_bounds__(TC_NT) gemm_wmma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
    __nv_bfloat16* C, const __nv_bfloat16* bias, const __nv_bfloat16* residual, int M, int N, int K, int act, int vec) {
  hm_gemm_wmma<__nv_bfloat16>(A, B, C, bias, residual, M, N, K, act, vec);
}

