// Candidate configurations of the mma.sync GEMM (the "mma" variant's successor), one template:
// C = act(A @ B + bias) + residual, FP16/BF16 with FP32 accumulate, mma.sync m16n8k16 fed by
// ldmatrix from padded (bank-conflict-free) shared memory, a STAGES-deep cp.async pipeline, a 1-D
// grid walked in groups of 8 tile rows (L2 reuse). A is M x K row-major, B is K x N row-major.
// Block tile BM x BN x BK, WARPS_M x WARPS_N warps, each computing (BM/WARPS_M) x (BN/WARPS_N).
// Any M, N, K (edge tiles zero-filled). benchmarks/gpu/gemm_candidates.py measures the configurations
// against cuBLAS on the GPU machine; the best becomes gemm(variant="mma").
#include "tc_common.cuh"

#define MT_GROUP_M 8

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
__device__ __forceinline__ void hm_mma_tuned(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                             const T* __restrict__ bias, const T* __restrict__ residual,
                                             int M, int N, int K, int act, int vec) {
  constexpr int NT = WARPS_M * WARPS_N * 32;
  constexpr int ALD = BK + 8, BLD = BN + 8;            // padded rows: ldmatrix without bank conflicts
  constexpr int A_STAGE = BM * ALD, B_STAGE = BK * BLD;
  constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
  constexpr int MI = WTM / 16, NI = WTN / 8;
  static_assert(NI % 2 == 0, "warp tile N must be a multiple of 16");
  extern __shared__ __align__(128) unsigned char hm_smem[];
  T* As = reinterpret_cast<T*>(hm_smem);
  T* Bs = As + STAGES * A_STAGE;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = (warp / WARPS_N) * WTM, wn = (warp % WARPS_N) * WTN;
  // grouped 1-D tile order
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int bid = blockIdx.x, per_group = MT_GROUP_M * tiles_n;
  const int first_m = (bid / per_group) * MT_GROUP_M;
  const int gsize = min(tiles_m - first_m, MT_GROUP_M);
  const int m0 = (first_m + (bid % per_group) % gsize) * BM, n0 = ((bid % per_group) / gsize) * BN;

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  auto load = [&](int s, int k0) {
    T* as = As + s * A_STAGE;
    T* bs = Bs + s * B_STAGE;
#pragma unroll
    for (int u = tid; u < BM * BK / 8; u += NT) {
      const int r = u / (BK / 8), c = (u % (BK / 8)) * 8;
      hm_chunk(&as[r * ALD + c], A, m0 + r, k0 + c, M, K, K, vec);
    }
#pragma unroll
    for (int u = tid; u < BK * BN / 8; u += NT) {
      const int r = u / (BN / 8), c = (u % (BN / 8)) * 8;
      hm_chunk(&bs[r * BLD + c], B, k0 + r, n0 + c, K, N, N, vec);
    }
  };
  const int ktiles = (K + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load(s, s * BK);
    hm_cp_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    hm_cp_wait<STAGES - 2>();
    __syncthreads();
    const int nt = kt + STAGES - 1;
    if (nt < ktiles) load(nt % STAGES, nt * BK);
    hm_cp_commit();
    const T* as = As + (kt % STAGES) * A_STAGE;
    const T* bs = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned fa[MI][4], fb[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i)
        hm_ldmatrix_x4(fa[i], &as[(wm + i * 16 + (lane % 16)) * ALD + kk + (lane / 16) * 8]);
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        unsigned r[4];
        hm_ldmatrix_x4_trans(r, &bs[(kk + (lane % 16)) * BLD + wn + j * 16 + (lane / 16) * 8]);
        fb[2 * j][0] = r[0]; fb[2 * j][1] = r[1]; fb[2 * j + 1][0] = r[2]; fb[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) hm_mma16816(acc[i][j], fa[i], fb[j], T());
    }
  }
  hm_cp_wait<0>();
  const int g = lane / 4, t = lane % 4;
  const bool plain = !bias && !residual && act == 0;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = m0 + wm + i * 16 + g + h * 8, c = n0 + wn + j * 8 + 2 * t;
        if (r >= M) continue;
        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (!plain) {
          if (c < N) v0 = hm_epilogue(v0, r, c, N, bias, residual, act);
          if (c + 1 < N) v1 = hm_epilogue(v1, r, c + 1, N, bias, residual, act);
        }
        T* out = C + (size_t)r * N + c;
        if (vec && c + 1 < N) {   // N even and aligned: one 4-byte store of the pair
          if constexpr (sizeof(T) == 2) {
            __align__(4) T p[2] = {hm_from_f<T>(v0), hm_from_f<T>(v1)};
            *reinterpret_cast<unsigned*>(out) = *reinterpret_cast<const unsigned*>(p);
          }
        } else {
          if (c < N) out[0] = hm_from_f<T>(v0);
          if (c + 1 < N) out[1] = hm_from_f<T>(v1);
        }
      }
}

// name: gemm_mmat_<BM>x<BN>x<BK>_w<WARPS_M>x<WARPS_N>_s<STAGES>_<dtype>
#define HM_MMAT(BM, BN, BK, WM, WN, S, MINB)                                                                   \
  extern "C" __global__ void __launch_bounds__(WM * WN * 32, MINB) gemm_mmat_##BM##x##BN##x##BK##_w##WM##x##WN##_s##S##_f16( \
      const __half* A, const __half* B, __half* C, const __half* bias, const __half* residual, int M, int N, int K,  \
      int act, int vec) {                                                                                        \
    hm_mma_tuned<__half, BM, BN, BK, WM, WN, S>(A, B, C, bias, residual, M, N, K, act, vec);                     \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(WM * WN * 32, MINB) gemm_mmat_##BM##x##BN##x##BK##_w##WM##x##WN##_s##S##_bf16( \
      const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, const __nv_bfloat16* bias,              \
      const __nv_bfloat16* residual, int M, int N, int K, int act, int vec) {                                   \
    hm_mma_tuned<__nv_bfloat16, BM, BN, BK, WM, WN, S>(A, B, C, bias, residual, M, N, K, act, vec);              \
  }

HM_MMAT(128, 256, 32, 2, 4, 3, 1)   // warp tile 64x64, 256 threads
HM_MMAT(128, 256, 32, 2, 4, 4, 1)
HM_MMAT(256, 128, 32, 4, 2, 3, 1)   // warp tile 64x64, 256 threads
HM_MMAT(128, 128, 32, 2, 2, 4, 2)   // warp tile 64x64, 128 threads, 2 blocks per SM
HM_MMAT(128, 128, 64, 2, 4, 3, 1)   // warp tile 64x32 (the current one) with BK 64
HM_MMAT(128, 128, 32, 2, 4, 4, 2)   // the current kernel's shape, 4 stages, grouped order
