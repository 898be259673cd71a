// Tensor Core GEMMs: C = act(A @ B + bias) + residual, FP16/BF16 inputs with FP32 accumulate
// (WMMA, and mma.sync with ldmatrix and a 3-stage cp.async pipeline), and INT8 with INT32
// accumulate (mma.sync m16n8k32). A is M x K row-major; B is K x N row-major for FP16/BF16 and
// given transposed (N x K row-major, i.e. a column-major K x N) for INT8, as cuBLAS's int8 GEMM wants.
// Block tile 128 x 128, 8 warps of 64 x 32. Any M, N, K: edge tiles are zero-filled.
#include "tc_common.cuh"
#if !defined(I8_BK) || !defined(I8_LD)
#error "compile with the -D tile constants of hookmagic/kernels/constants.py (hookmagic.kernels.build does)"
#endif

// ---- INT8: mma.sync m16n8k32 s8 x s8 -> s32; A M x K, Bt N x K (both K-contiguous) ----
#define I8_STAGE (TC_BM * I8_LD)

__device__ __noinline__ void hm_chunk8_slow(signed char* dst, const signed char* __restrict__ src, int row, int col, int rows, int cols, int ld) {
#pragma unroll 1
  for (int i = 0; i < 16; ++i) dst[i] = (row < rows && col + i < cols) ? src[(size_t)row * ld + col + i] : 0;
}
__device__ __forceinline__ void hm_chunk8(signed char* dst, const signed char* __restrict__ src, int row, int col,
                                          int rows, int cols, int ld, bool vec) {
  if (vec) {
    bool ok = row < rows && col < cols;
    hm_cp_async16(dst, ok ? (const void*)(src + (size_t)row * ld + col) : (const void*)src, ok);
  } else {
    hm_chunk8_slow(dst, src, row, col, rows, cols, ld);
  }
}

extern "C" __global__ void __launch_bounds__(TC_NT) gemm_mma_s8(const signed char* __restrict__ A,
    const signed char* __restrict__ Bt, int* __restrict__ C, int M, int N, int K, int vec) {
  extern __shared__ __align__(128) unsigned char hm_smem[];
  signed char* As = reinterpret_cast<signed char*>(hm_smem);
  signed char* Bs = As + TC_STAGES * I8_STAGE;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = TC_WARP_M(warp), wn = TC_WARP_N(warp);
  const int m0 = blockIdx.y * TC_BM, n0 = blockIdx.x * TC_BN;
  int acc[4][4][4];
  hm_zero_acc(acc);
  auto load = [&](int stage, int k0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // 128 rows x 4 chunks of 16 bytes, for A and for Bt
      int u = tid + i * TC_NT, r = u / 4, c = (u % 4) * 16;
      hm_chunk8(&As[stage * I8_STAGE + r * I8_LD + c], A, m0 + r, k0 + c, M, K, K, vec);
      hm_chunk8(&Bs[stage * I8_STAGE + r * I8_LD + c], Bt, n0 + r, k0 + c, N, K, K, vec);
    }
  };
  hm_cp_pipeline<I8_BK>((K + I8_BK - 1) / I8_BK, load, [&](int stage) {
    const signed char* as = As + stage * I8_STAGE;
    const signed char* bs = Bs + stage * I8_STAGE;
#pragma unroll
    for (int kk = 0; kk < I8_BK; kk += 32) {
      unsigned fa[4][4], fb[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        hm_ldmatrix_x4(fa[i], &as[(wm + i * 16 + (lane % 16)) * I8_LD + kk + (lane / 16) * 16]);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        unsigned r[4];
        int mtx = lane / 8;
        hm_ldmatrix_x4(r, &bs[(wn + j * 16 + (mtx / 2) * 8 + lane % 8) * I8_LD + kk + (mtx % 2) * 16]);
        fb[2 * j][0] = r[0]; fb[2 * j][1] = r[1]; fb[2 * j + 1][0] = r[2]; fb[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                       "{%0,%1,%2,%3};\n"
                       : "+r"(acc[i][j][0]), "+r"(acc[i][j][1]), "+r"(acc[i][j][2]), "+r"(acc[i][j][3])
                       : "r"(fa[i][0]), "r"(fa[i][1]), "r"(fa[i][2]), "r"(fa[i][3]), "r"(fb[j][0]), "r"(fb[j][1]));
    }
  });
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int r = m0 + wm + i * 16 + g + h * 8, c = n0 + wn + j * 8 + 2 * t;
        if (r >= M) continue;
        if (c < N) C[(size_t)r * N + c] = acc[i][j][2 * h];
        if (c + 1 < N) C[(size_t)r * N + c + 1] = acc[i][j][2 * h + 1];
      }
}
