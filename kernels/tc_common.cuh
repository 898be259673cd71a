// Helpers shared by the Tensor Core kernels (the GEMMs, conv.cu, the attention kernels).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
#include "common.cuh"

// Tile constants come from hookmagic/kernels/constants.py as -D values (their one source).
#if !defined(TC_BM) || !defined(TC_BN) || !defined(TC_BK) || !defined(TC_NT) || !defined(TC_STAGES) \
    || !defined(TC_ALD) || !defined(TC_BLD)
#error "compile with the -D tile constants of hookmagic/kernels/constants.py (hookmagic.kernels.build does)"
#endif

#define TC_A_STAGE (TC_BM * TC_ALD)
#define TC_B_STAGE (TC_BK * TC_BLD)

__device__ __forceinline__ float hm_to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float hm_to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T hm_from_f(float x);
template <> __device__ __forceinline__ __half hm_from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 hm_from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
// Two floats rounded to T and packed into one 32-bit register: the A-operand fragment and the
// paired output stores of the attention kernels.
template <typename T> __device__ __forceinline__ unsigned hm_pack2(float a, float b);
template <> __device__ __forceinline__ unsigned hm_pack2<__half>(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}
template <> __device__ __forceinline__ unsigned hm_pack2<__nv_bfloat16>(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<unsigned*>(&h);
}

// A row's statistic across the four lanes of a quad, which hold its columns in an mma/wgmma
// accumulator fragment: the running max and the final sum of the attention kernels.
__device__ __forceinline__ float hm_quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float hm_quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__device__ __forceinline__ void hm_cp_async16(void* smem, const void* gmem, bool pred) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void hm_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void hm_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// One 16-byte chunk (8 elements) of row `row`, columns [col, col+8) of a row-major matrix into
// shared memory: cp.async when `vec` (aligned, ld % 8 == 0: a chunk is all in or all out),
// element by element otherwise. Out-of-range elements become zero.
template <typename T>
__device__ __noinline__ void hm_chunk_slow(T* dst, const T* __restrict__ src, int row, int col, int rows, int cols,
                                           int ld) {
#pragma unroll 1
  for (int i = 0; i < 8; ++i)
    dst[i] = (row < rows && col + i < cols) ? src[(size_t)row * ld + col + i] : hm_from_f<T>(0.f);
}
template <typename T>
__device__ __forceinline__ void hm_chunk(T* dst, const T* __restrict__ src, int row, int col, int rows, int cols,
                                         int ld, bool vec) {
  if (vec) {
    bool ok = row < rows && col < cols;
    hm_cp_async16(dst, ok ? (const void*)(src + (size_t)row * ld + col) : (const void*)src, ok);
  } else {
    hm_chunk_slow(dst, src, row, col, rows, cols, ld);
  }
}

template <typename T>
__device__ __forceinline__ void hm_load_tile(T* As, T* Bs, const T* __restrict__ A, const T* __restrict__ B,
                                             int m0, int n0, int k0, int M, int N, int K, bool vec) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // A: 128 rows x 4 chunks
    int u = tid + i * TC_NT, r = u / 4, c = (u % 4) * 8;
    hm_chunk(&As[r * TC_ALD + c], A, m0 + r, k0 + c, M, K, K, vec);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // B: 32 rows x 16 chunks
    int u = tid + i * TC_NT, r = u / 16, c = (u % 16) * 8;
    hm_chunk(&Bs[r * TC_BLD + c], B, k0 + r, n0 + c, K, N, N, vec);
  }
}

// Out of line: inlined into each of the 32 output pairs it made NVRTC ~10x slower; plain GEMMs skip it.
template <typename T>
__device__ __noinline__ float hm_epilogue(float acc, int r, int c, int N, const T* __restrict__ bias,
                                             const T* __restrict__ residual, int act) {
  if (bias) acc += hm_to_f(bias[c]);
  acc = hm_activate(acc, act);
  if (residual) acc += hm_to_f(residual[(size_t)r * N + c]);
  return acc;
}

// ---- mma.sync m16n8k16 with ldmatrix, 3-stage cp.async pipeline (dynamic shared memory) ----
__device__ __forceinline__ void hm_ldmatrix_x4(unsigned* r, const void* p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void hm_ldmatrix_x4_trans(unsigned* r, const void* p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void hm_mma16816(float* d, const unsigned* a, const unsigned* b, __half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void hm_mma16816(float* d, const unsigned* a, const unsigned* b, __nv_bfloat16) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}


// ---- pieces shared by the mma.sync kernels (gemm_mma.cu, gemm_int8.cu, conv.cu) ----
// Block tile 128 x 128, 8 warps of 64 x 32: warp `warp` owns rows wm ... wm + 63, columns wn ... wn + 31.
#define TC_WARP_M(warp) (((warp) / 4) * 64)
#define TC_WARP_N(warp) (((warp) % 4) * 32)

template <typename A>
__device__ __forceinline__ void hm_zero_acc(A (&acc)[4][4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;
}

// The cp.async pipeline over `ktiles` k tiles of depth BK: TC_STAGES - 1 tiles in flight;
// load(stage, k0) issues one tile's copies into a stage, compute(stage) consumes one.
template <int BK, typename Load, typename Compute>
__device__ __forceinline__ void hm_cp_pipeline(int ktiles, Load&& load, Compute&& compute) {
#pragma unroll
  for (int s = 0; s < TC_STAGES - 1; ++s) {
    if (s < ktiles) load(s, s * BK);
    hm_cp_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    hm_cp_wait<TC_STAGES - 2>();
    __syncthreads();
    const int nt = kt + TC_STAGES - 1;
    if (nt < ktiles) load(nt % TC_STAGES, nt * BK);
    hm_cp_commit();
    compute(kt % TC_STAGES);
  }
  hm_cp_wait<0>();
}

// One TC_BK-deep k tile of a warp's 64 x 32 FP16/BF16 block: A row-major in shared memory (rows of
// TC_ALD), B k-major rows (TC_BLD, read with ldmatrix .trans), 16 mma.sync m16n8k16 per 16 of k.
template <typename T>
__device__ __forceinline__ void hm_warp_mma_tile(float (&acc)[4][4][4], const T* as, const T* bs, int wm, int wn,
                                                 int lane) {
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

// A warp's 64 x 32 accumulators (mma.sync C fragments) into row-major C (M x N, rows of N), through
// the epilogue (bias, activation, residual) unless `plain`. r0, c0: the warp block's first row, column.
template <typename T>
__device__ __forceinline__ void hm_store_warp_tile(const float (&acc)[4][4][4], T* __restrict__ C, int r0, int c0,
                                                   int M, int N, const T* __restrict__ bias,
                                                   const T* __restrict__ residual, int act, int lane) {
  const int g = lane / 4, t = lane % 4;
  const bool plain = !bias && !residual && act == 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + i * 16 + g + h * 8, c = c0 + j * 8 + 2 * t;
        if (r >= M) continue;
        if (c < N) C[(size_t)r * N + c] = hm_from_f<T>(plain ? acc[i][j][2 * h] : hm_epilogue(acc[i][j][2 * h], r, c, N, bias, residual, act));
        if (c + 1 < N)
          C[(size_t)r * N + c + 1] = hm_from_f<T>(plain ? acc[i][j][2 * h + 1] : hm_epilogue(acc[i][j][2 * h + 1], r, c + 1, N, bias, residual, act));
      }
}
