// SGEMM (FP32, SIMT) as the steps of an optimisation journey: C = A @ B with A (M x K), B (K x N)
// and C (M x N) row-major. Every variant handles any M, N, K (edge tiles are guarded).
// The steps follow Simon Boehm's "How to optimize a CUDA matmul kernel" (siboehm/SGEMM_CUDA).
#include "common.cuh"

// Tile constants come from hookmagic/kernels/constants.py as -D values (their one source).
#if !defined(T1_BM) || !defined(T2_BM) || !defined(WT_BM) || !defined(WT_NT)
#error "compile with the -D tile constants of hookmagic/kernels/constants.py (hookmagic.kernels.build does)"
#endif

// 1. naive: one thread per C element; consecutive threads walk down a column of C, so their
//    loads of A are strided by K (uncoalesced). block (32, 32).
extern "C" __global__ void sgemm_naive(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K, int vec) {
  int row = blockIdx.x * 32 + threadIdx.x;
  int col = blockIdx.y * 32 + threadIdx.y;
  if (row < M && col < N) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
  }
}

// 2. coalesced: consecutive threads take consecutive columns, so loads of B and stores of C
//    coalesce and A is a broadcast. block (32, 32).
extern "C" __global__ void sgemm_coalesced(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K, int vec) {
  int col = blockIdx.x * 32 + threadIdx.x;
  int row = blockIdx.y * 32 + threadIdx.y;
  if (row < M && col < N) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
  }
}

// 3. smem_tiled: 32 x 32 tiles of A and B staged in shared memory. block (32, 32).
extern "C" __global__ void sgemm_smem_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                            float* __restrict__ C, int M, int N, int K, int vec) {
  __shared__ float As[32][33];
  __shared__ float Bs[32][32];
  int tx = threadIdx.x, ty = threadIdx.y;
  int col = blockIdx.x * 32 + tx, row = blockIdx.y * 32 + ty;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += 32) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 32; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
}

// 4. tile_1d: each thread computes a column of TM = 8 results (block tile 64 x 64, BK = 8,
//    512 threads), reusing each B value from a register 8 times.
extern "C" __global__ void __launch_bounds__(512) sgemm_tile_1d(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K, int vec) {
  __shared__ float As[T1_BM * T1_BK];
  __shared__ float Bs[T1_BK * T1_BN];
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * T1_BM, col0 = blockIdx.x * T1_BN;
  const int threadCol = tid % T1_BN, threadRow = tid / T1_BN;
  const int aRow = tid / T1_BK, aCol = tid % T1_BK;
  const int bRow = tid / T1_BN, bCol = tid % T1_BN;
  float acc[T1_TM] = {0.f};
  for (int k0 = 0; k0 < K; k0 += T1_BK) {
    int gr = row0 + aRow, gk = k0 + aCol;
    As[aRow * T1_BK + aCol] = (gr < M && gk < K) ? A[(size_t)gr * K + gk] : 0.f;
    gk = k0 + bRow; int gc = col0 + bCol;
    Bs[bRow * T1_BN + bCol] = (gk < K && gc < N) ? B[(size_t)gk * N + gc] : 0.f;
    __syncthreads();
#pragma unroll
    for (int d = 0; d < T1_BK; ++d) {
      float b = Bs[d * T1_BN + threadCol];
#pragma unroll
      for (int i = 0; i < T1_TM; ++i) acc[i] += As[(threadRow * T1_TM + i) * T1_BK + d] * b;
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < T1_TM; ++i) {
    int r = row0 + threadRow * T1_TM + i, c = col0 + threadCol;
    if (r < M && c < N) C[(size_t)r * N + c] = acc[i];
  }
}

// 5. tile_2d: each thread computes an 8 x 8 block of results (block tile 128 x 128, BK = 8,
//    256 threads): 16 loads from shared memory feed 64 FMAs.
extern "C" __global__ void __launch_bounds__(T2_NT) sgemm_tile_2d(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K, int vec) {
  __shared__ float As[T2_BM * T2_BK];
  __shared__ float Bs[T2_BK * T2_BN];
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * T2_BM, col0 = blockIdx.x * T2_BN;
  const int threadRow = tid / (T2_BN / T2_TN), threadCol = tid % (T2_BN / T2_TN);
  const int aRow = tid / T2_BK, aCol = tid % T2_BK, strideA = T2_NT / T2_BK;
  const int bRow = tid / T2_BN, bCol = tid % T2_BN, strideB = T2_NT / T2_BN;
  float acc[T2_TM][T2_TN] = {{0.f}};
  float regM[T2_TM], regN[T2_TN];
  for (int k0 = 0; k0 < K; k0 += T2_BK) {
    for (int off = 0; off < T2_BM; off += strideA) {
      int gr = row0 + aRow + off, gk = k0 + aCol;
      As[(aRow + off) * T2_BK + aCol] = (gr < M && gk < K) ? A[(size_t)gr * K + gk] : 0.f;
    }
    for (int off = 0; off < T2_BK; off += strideB) {
      int gk = k0 + bRow + off, gc = col0 + bCol;
      Bs[(bRow + off) * T2_BN + bCol] = (gk < K && gc < N) ? B[(size_t)gk * N + gc] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int d = 0; d < T2_BK; ++d) {
#pragma unroll
      for (int i = 0; i < T2_TM; ++i) regM[i] = As[(threadRow * T2_TM + i) * T2_BK + d];
#pragma unroll
      for (int j = 0; j < T2_TN; ++j) regN[j] = Bs[d * T2_BN + threadCol * T2_TN + j];
#pragma unroll
      for (int i = 0; i < T2_TM; ++i)
#pragma unroll
        for (int j = 0; j < T2_TN; ++j) acc[i][j] += regM[i] * regN[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < T2_TM; ++i)
#pragma unroll
    for (int j = 0; j < T2_TN; ++j) {
      int r = row0 + threadRow * T2_TM + i, c = col0 + threadCol * T2_TN + j;
      if (r < M && c < N) C[(size_t)r * N + c] = acc[i][j];
    }
}

// 6. vectorized: tile_2d with 16-byte loads and stores (float4) and A stored transposed in
//    shared memory so the inner loop reads both operands as float4 too. `vec` = 1 when the
//    operands are 16-byte aligned with K % 4 == 0 and N % 4 == 0; otherwise edge-safe scalar loads.
extern "C" __global__ void __launch_bounds__(T2_NT) sgemm_vectorized(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K, int vec) {
  __shared__ __align__(16) float As[T2_BK * T2_BM];  // transposed: As[k][m]
  __shared__ __align__(16) float Bs[T2_BK * T2_BN];
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * T2_BM, col0 = blockIdx.x * T2_BN;
  const int threadRow = tid / (T2_BN / T2_TN), threadCol = tid % (T2_BN / T2_TN);
  const int aRow = tid / (T2_BK / 4), aCol4 = tid % (T2_BK / 4);   // 128 rows x 2 float4
  const int bRow = tid / (T2_BN / 4), bCol4 = tid % (T2_BN / 4);   // 8 rows x 32 float4
  float acc[T2_TM][T2_TN] = {{0.f}};
  float regM[T2_TM], regN[T2_TN];
  for (int k0 = 0; k0 < K; k0 += T2_BK) {
    float4 a = hm_load4(A, row0 + aRow, k0 + aCol4 * 4, M, K, K, vec);
    As[(aCol4 * 4 + 0) * T2_BM + aRow] = a.x;
    As[(aCol4 * 4 + 1) * T2_BM + aRow] = a.y;
    As[(aCol4 * 4 + 2) * T2_BM + aRow] = a.z;
    As[(aCol4 * 4 + 3) * T2_BM + aRow] = a.w;
    float4 b = hm_load4(B, k0 + bRow, col0 + bCol4 * 4, K, N, N, vec);
    *reinterpret_cast<float4*>(&Bs[bRow * T2_BN + bCol4 * 4]) = b;
    __syncthreads();
#pragma unroll
    for (int d = 0; d < T2_BK; ++d) {
#pragma unroll
      for (int i = 0; i < T2_TM; i += 4) {
        float4 t = *reinterpret_cast<const float4*>(&As[d * T2_BM + threadRow * T2_TM + i]);
        regM[i] = t.x; regM[i + 1] = t.y; regM[i + 2] = t.z; regM[i + 3] = t.w;
      }
#pragma unroll
      for (int j = 0; j < T2_TN; j += 4) {
        float4 t = *reinterpret_cast<const float4*>(&Bs[d * T2_BN + threadCol * T2_TN + j]);
        regN[j] = t.x; regN[j + 1] = t.y; regN[j + 2] = t.z; regN[j + 3] = t.w;
      }
#pragma unroll
      for (int i = 0; i < T2_TM; ++i)
#pragma unroll
        for (int j = 0; j < T2_TN; ++j) acc[i][j] += regM[i] * regN[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < T2_TM; ++i)
#pragma unroll
    for (int j = 0; j < T2_TN; j += 4)
      hm_store4(C, row0 + threadRow * T2_TM + i, col0 + threadCol * T2_TN + j, M, N, N, vec,
                make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
}

// 7. warptile: a block tile of WT_BM x WT_BN x WT_BK over warps of WT_WM x WT_WN, each warp's tile
//    walked in WT_WMITER x WT_WNITER sub-tiles where each thread holds WT_TM x WT_TN results
//    (hookmagic/kernels/constants.py: 256 x 128 x 8, 8 warps of 64 x 64 in 2 x 2 sub-tiles), with
//    double buffering: the next tiles are loaded from global memory into registers while the
//    current shared-memory buffer is consumed, then written to the other buffer (one
//    __syncthreads per step).
#define WT_WMITER ((WT_WM * WT_WN) / (32 * WT_TM * WT_TN * WT_WNITER))
#define WT_WSUBM (WT_WM / WT_WMITER)
#define WT_WSUBN (WT_WN / WT_WNITER)
#define WT_ALOADS (WT_BM * WT_BK / 4 / WT_NT)
#define WT_BLOADS (WT_BK * WT_BN / 4 / WT_NT)
extern "C" __global__ void __launch_bounds__(WT_NT) sgemm_warptile(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K, int vec) {
  __shared__ __align__(16) float As[2][WT_BK * WT_BM];  // transposed: As[k][m]
  __shared__ __align__(16) float Bs[2][WT_BK * WT_BN];
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * WT_BM, col0 = blockIdx.x * WT_BN;
  const int warp = tid / 32, lane = tid % 32;
  const int warpRow = warp / (WT_BN / WT_WN), warpCol = warp % (WT_BN / WT_WN);
  const int tRow = lane / (WT_WSUBN / WT_TN), tCol = lane % (WT_WSUBN / WT_TN);
  float acc[WT_WMITER * WT_TM * WT_WNITER * WT_TN] = {0.f};
  float regM[WT_WMITER * WT_TM], regN[WT_WNITER * WT_TN];
  float4 ra[WT_ALOADS], rb[WT_BLOADS];

  auto load = [&](int k0) {
#pragma unroll
    for (int i = 0; i < WT_ALOADS; ++i) {
      int u = tid + i * WT_NT, r = u / (WT_BK / 4), c4 = u % (WT_BK / 4);
      ra[i] = hm_load4(A, row0 + r, k0 + c4 * 4, M, K, K, vec);
    }
#pragma unroll
    for (int i = 0; i < WT_BLOADS; ++i) {
      int u = tid + i * WT_NT, r = u / (WT_BN / 4), c4 = u % (WT_BN / 4);
      rb[i] = hm_load4(B, k0 + r, col0 + c4 * 4, K, N, N, vec);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < WT_ALOADS; ++i) {
      int u = tid + i * WT_NT, r = u / (WT_BK / 4), c4 = u % (WT_BK / 4);
      As[buf][(c4 * 4 + 0) * WT_BM + r] = ra[i].x;
      As[buf][(c4 * 4 + 1) * WT_BM + r] = ra[i].y;
      As[buf][(c4 * 4 + 2) * WT_BM + r] = ra[i].z;
      As[buf][(c4 * 4 + 3) * WT_BM + r] = ra[i].w;
    }
#pragma unroll
    for (int i = 0; i < WT_BLOADS; ++i) {
      int u = tid + i * WT_NT, r = u / (WT_BN / 4), c4 = u % (WT_BN / 4);
      *reinterpret_cast<float4*>(&Bs[buf][r * WT_BN + c4 * 4]) = rb[i];
    }
  };

  load(0);
  store(0);
  __syncthreads();
  int buf = 0;
  for (int k0 = 0; k0 < K; k0 += WT_BK) {
    const bool more = k0 + WT_BK < K;
    if (more) load(k0 + WT_BK);
#pragma unroll
    for (int d = 0; d < WT_BK; ++d) {
#pragma unroll
      for (int wm = 0; wm < WT_WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < WT_TM; i += 4) {
          float4 t = *reinterpret_cast<const float4*>(
              &As[buf][d * WT_BM + warpRow * WT_WM + wm * WT_WSUBM + tRow * WT_TM + i]);
          regM[wm * WT_TM + i] = t.x; regM[wm * WT_TM + i + 1] = t.y;
          regM[wm * WT_TM + i + 2] = t.z; regM[wm * WT_TM + i + 3] = t.w;
        }
#pragma unroll
      for (int wn = 0; wn < WT_WNITER; ++wn) {
        float4 t = *reinterpret_cast<const float4*>(
            &Bs[buf][d * WT_BN + warpCol * WT_WN + wn * WT_WSUBN + tCol * WT_TN]);
        regN[wn * WT_TN] = t.x; regN[wn * WT_TN + 1] = t.y;
        regN[wn * WT_TN + 2] = t.z; regN[wn * WT_TN + 3] = t.w;
      }
#pragma unroll
      for (int wm = 0; wm < WT_WMITER; ++wm)
#pragma unroll
        for (int wn = 0; wn < WT_WNITER; ++wn)
#pragma unroll
          for (int i = 0; i < WT_TM; ++i)
#pragma unroll
            for (int j = 0; j < WT_TN; ++j)
              acc[(wm * WT_TM + i) * (WT_WNITER * WT_TN) + wn * WT_TN + j] +=
                  regM[wm * WT_TM + i] * regN[wn * WT_TN + j];
    }
    if (more) store(buf ^ 1);
    __syncthreads();
    buf ^= 1;
  }
#pragma unroll
  for (int wm = 0; wm < WT_WMITER; ++wm)
#pragma unroll
    for (int wn = 0; wn < WT_WNITER; ++wn)
#pragma unroll
      for (int i = 0; i < WT_TM; ++i) {
        int r = row0 + warpRow * WT_WM + wm * WT_WSUBM + tRow * WT_TM + i;
        int c = col0 + warpCol * WT_WN + wn * WT_WSUBN + tCol * WT_TN;
        const float* a = &acc[(wm * WT_TM + i) * (WT_WNITER * WT_TN) + wn * WT_TN];
        hm_store4(C, r, c, M, N, N, vec, make_float4(a[0], a[1], a[2], a[3]));
      }
}
