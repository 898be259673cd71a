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
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int m0 = blockIdx.y * TC_BM, n0 = blockIdx.x * TC_BN;
  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  const int ktiles = (K + TC_BK - 1) / TC_BK;
#pragma unroll
  for (int s = 0; s < TC_STAGES - 1; ++s) {
    if (s < ktiles) hm_load_tile(As + s * TC_A_STAGE, Bs + s * TC_B_STAGE, A, B, m0, n0, s * TC_BK, M, N, K, vec);
    hm_cp_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    hm_cp_wait<TC_STAGES - 2>();
    __syncthreads();
    const int nt = kt + TC_STAGES - 1;
    if (nt < ktiles) {
      const int ns = nt % TC_STAGES;
      hm_load_tile(As + ns * TC_A_STAGE, Bs + ns * TC_B_STAGE, A, B, m0, n0, nt * TC_BK, M, N, K, vec);
    }
    hm_cp_commit();
    const T* as = As + (kt % TC_STAGES) * TC_A_STAGE;
    const T* bs = Bs + (kt % TC_STAGES) * TC_B_STAGE;
#pragma unroll
    for (int kk = 0; kk < TC_BK; kk += 16) {
      unsigned fa[4][4], fb[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        hm_ldmatrix_x4(fa[i], &as[(wm + i * 16 + (lane % 16)) * TC_ALD + kk + (lane / 16) * 8]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        unsigned r[4];
        hm_ldmatrix_x4_trans(r, &bs[(kk + (lane % 16)) * TC_BLD + wn + j * 16 + (lane / 16) * 8]);
        fb[2 * j][0] = r[0]; fb[2 * j][1] = r[1]; fb[2 * j + 1][0] = r[2]; fb[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) hm_mma16816(acc[i][j], fa[i], fb[j], T());
    }
  }
  hm_cp_wait<0>();
  const int g = lane / 4, t = lane % 4;
  const bool plain = !bias && !residual && act == 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int r = m0 + wm + i * 16 + g + h * 8, c = n0 + wn + j * 8 + 2 * t;
        if (r >= M) continue;
        if (c < N) C[(size_t)r * N + c] = hm_from_f<T>(plain ? acc[i][j][2 * h] : hm_epilogue(acc[i][j][2 * h], r, c, N, bias, residual, act));
        if (c + 1 < N)
          C[(size_t)r * N + c + 1] = hm_from_f<T>(plain ? acc[i][j][2 * h + 1] : hm_epilogue(acc[i][j][2 * h + 1], r, c + 1, N, bias, residual, act));
      }
}

extern "C" __global__ void __launch_bounds__(TC_NT) gemm_mma_f16(const __half* A, const __half* B, __half* C,
    const __half* bias, const __half* residual, int M, int N, int K, int act, int vec) {
  hm_gemm_mma<__half>(A, B, C, bias, residual, M, N, K, act, vec);
}
extern "C" __global__ void __launch_bounds__(TC_NT) gemm_mma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
    __nv_bfloat16* C, const __nv_bfloat16* bias, const __nv_bfloat16* residual, int M, int N, int K, int act, int vec) {
  hm_gemm_mma<__nv_bfloat16>(A, B, C, bias, residual, M, N, K, act, vec);
}

