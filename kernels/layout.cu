// Data movement and row reductions:
//   transpose_b{1,2,4,8}: batched 2-D transpose (batch, R, C) -> (batch, C, R) of 1/2/4/8-byte
//     elements through a padded 32 x 33 shared-memory tile (both global sides coalesced). NCHW ->
//     NHWC is (N, C, H*W) -> (N, H*W, C); NHWC -> NCHW the reverse.
//   row_sum_*, row_max_*: reduce the last dimension (rows x cols, row-major) in FP32 for
//     FP32/FP16/BF16 storage; a warp per row for short rows, a block per row for long ones; 16-byte
//     vector loads when aligned. Max propagates NaN as torch.amax does.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define TR_TILE 32
#define TR_ROWS 8

template <typename T>
__device__ __forceinline__ void hm_transpose(const T* __restrict__ in, T* __restrict__ out, int R, int C) {
  __shared__ T tile[TR_TILE][TR_TILE + 1];
  const size_t plane = (size_t)R * C;
  in += blockIdx.z * plane;
  out += blockIdx.z * plane;
  const int r0 = blockIdx.x * TR_TILE, c0 = blockIdx.y * TR_TILE;
#pragma unroll
  for (int j = threadIdx.y; j < TR_TILE; j += TR_ROWS) {
    const int r = r0 + j, c = c0 + threadIdx.x;
    if (r < R && c < C) tile[j][threadIdx.x] = in[(size_t)r * C + c];
  }
  __syncthreads();
#pragma unroll
  for (int j = threadIdx.y; j < TR_TILE; j += TR_ROWS) {
    const int c = c0 + j, r = r0 + threadIdx.x;
    if (c < C && r < R) out[(size_t)c * R + r] = tile[threadIdx.x][j];
  }
}

#define HM_TRANSPOSE(SUFFIX, T)                                                                        \
  extern "C" __global__ void __launch_bounds__(TR_TILE * TR_ROWS) transpose_##SUFFIX(const T* in, T* out, \
                                                                                   int R, int C) {     \
    hm_transpose<T>(in, out, R, C);                                                                    \
  }
// 2-byte elements, R and C even (4-byte aligned rows): a 64 x 64 tile, each thread moving pairs
// of elements with 4-byte loads and stores (a warp reads / writes 128 contiguous bytes), 8 pairs
// per thread per side. Shared tile of 64 rows x 66 elements (33 words: conflict-free reads of
// pairs, two-way conflicts on the transposed side).
#define TR2_TILE 64
template <int DUMMY = 0>
__device__ __forceinline__ void hm_transpose2(const unsigned short* __restrict__ in, unsigned short* __restrict__ out,
                                              int R, int C) {
  __shared__ unsigned int tile[TR2_TILE][TR2_TILE / 2 + 1];   // word (j, p): elements (j, 2p), (j, 2p+1)
  const size_t plane = (size_t)R * C;
  in += blockIdx.z * plane;
  out += blockIdx.z * plane;
  const int r0 = blockIdx.x * TR2_TILE, c0 = blockIdx.y * TR2_TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;   // 32 x 8
  unsigned int v[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int r = r0 + ty + 8 * k, c = c0 + 2 * tx;
    v[k] = (r < R && c < C) ? __ldg(reinterpret_cast<const unsigned int*>(in + (size_t)r * C + c)) : 0u;
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) tile[ty + 8 * k][tx] = v[k];
  __syncthreads();
  // output row c (= input column c0 + j), elements r0 + 2 tx, r0 + 2 tx + 1
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int j = ty + 8 * k, c = c0 + j, r = r0 + 2 * tx;
    const unsigned int w0 = tile[2 * tx][j >> 1], w1 = tile[2 * tx + 1][j >> 1];
    const unsigned int sel = (j & 1) ? 0x7632u : 0x5410u;   // high or low halves of both words
    if (c < C && r < R) *reinterpret_cast<unsigned int*>(out + (size_t)c * R + r) = __byte_perm(w0, w1, sel);
  }
}
extern "C" __global__ void __launch_bounds__(256) transpose2_b2(const unsigned short* in, unsigned short* out, int R,
                                                                int C) {
  hm_transpose2<0>(in, out, R, C);
}
// 4-byte elements, R and C even (8-byte aligned rows): a 64 x 64 tile, each thread moving pairs
// of elements with 8-byte loads and stores (a warp reads / writes 256 contiguous bytes), 8 pairs
// per thread per side; shared tile of 64 x 65 words (two-way bank conflicts on both sides).
extern "C" __global__ void __launch_bounds__(256) transpose2_b4(const unsigned int* __restrict__ in,
                                                                unsigned int* __restrict__ out, int R, int C) {
  __shared__ unsigned int tile[TR2_TILE][TR2_TILE + 1];
  const size_t plane = (size_t)R * C;
  in += blockIdx.z * plane;
  out += blockIdx.z * plane;
  const int r0 = blockIdx.x * TR2_TILE, c0 = blockIdx.y * TR2_TILE;
  const int tx = threadIdx.x, ty = threadIdx.y;   // 32 x 8
  uint2 v[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int r = r0 + ty + 8 * k, c = c0 + 2 * tx;
    v[k] = (r < R && c < C) ? __ldg(reinterpret_cast<const uint2*>(in + (size_t)r * C + c)) : make_uint2(0u, 0u);
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    tile[ty + 8 * k][2 * tx] = v[k].x;
    tile[ty + 8 * k][2 * tx + 1] = v[k].y;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int j = ty + 8 * k, c = c0 + j, r = r0 + 2 * tx;
    if (c < C && r < R)
      *reinterpret_cast<uint2*>(out + (size_t)c * R + r) = make_uint2(tile[2 * tx][j], tile[2 * tx + 1][j]);
  }
}
HM_TRANSPOSE(b1, unsigned char)
HM_TRANSPOSE(b2, unsigned short)
HM_TRANSPOSE(b4, unsigned int)
HM_TRANSPOSE(b8, unsigned long long)

// ---- row reductions ----
__device__ __forceinline__ float rd_ld(const float* p) { return *p; }
__device__ __forceinline__ float rd_ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float rd_ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void rd_st(float* p, float v) { *p = v; }
__device__ __forceinline__ void rd_st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void rd_st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <int MAX>
__device__ __forceinline__ float rd_op(float a, float b) {
  if (MAX) return (a != a || a > b) ? a : b;  // NaN wins, as in torch.amax
  return a + b;
}

template <int MAX>
__device__ __forceinline__ float rd_warp(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = rd_op<MAX>(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduce `cols` elements of row `xr` over `n` threads numbered `t` (strided by n). Vector path:
// four independent 16-byte loads in flight per thread (read-only path), four accumulators.
template <typename T, int MAX>
__device__ __forceinline__ float rd_partial(const T* __restrict__ xr, int cols, int t, int n, int vec) {
  const float init = MAX ? __int_as_float(0xff800000) : 0.f;
  float acc = init;
  if (vec) {
    constexpr int NV = 16 / sizeof(T);
    const int nvec = cols / NV;
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    float a4[4] = {init, init, init, init};
    int v = t;
    for (; v + 3 * n < nvec; v += 4 * n) {
      uint4 raw[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) raw[k] = __ldg(xv + v + k * n);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const T* e = reinterpret_cast<const T*>(&raw[k]);
#pragma unroll
        for (int i = 0; i < NV; ++i) a4[k] = rd_op<MAX>(rd_ld(e + i), a4[k]);
      }
    }
    for (; v < nvec; v += n) {
      uint4 raw = __ldg(xv + v);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < NV; ++i) a4[0] = rd_op<MAX>(rd_ld(e + i), a4[0]);
    }
    acc = rd_op<MAX>(rd_op<MAX>(a4[0], a4[1]), rd_op<MAX>(a4[2], a4[3]));
  } else {
    for (int c = t; c < cols; c += n) acc = rd_op<MAX>(rd_ld(xr + c), acc);
  }
  return acc;
}

// warp_rows: each warp reduces one row (blockDim.x / 32 rows per block), else the block
// reduces one row. Grid-stride over rows.
template <typename T, int MAX>
__device__ __forceinline__ void hm_row_reduce(const T* __restrict__ x, T* __restrict__ y, int rows, int cols,
                                              int vec, int warp_rows) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (warp_rows) {
    for (int r = blockIdx.x * nw + warp; r < rows; r += gridDim.x * nw) {
      float v = rd_warp<MAX>(rd_partial<T, MAX>(x + (size_t)r * cols, cols, lane, 32, vec));
      if (lane == 0) rd_st(y + r, v);
    }
    return;
  }
  __shared__ float part[32];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    float v = rd_warp<MAX>(rd_partial<T, MAX>(x + (size_t)r * cols, cols, threadIdx.x, blockDim.x, vec));
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
      v = lane < nw ? part[lane] : (MAX ? __int_as_float(0xff800000) : 0.f);
      v = rd_warp<MAX>(v);
      if (lane == 0) rd_st(y + r, v);
    }
  }
}

#define HM_REDUCE(SUFFIX, T)                                                                               \
  extern "C" __global__ void __launch_bounds__(1024, 1) row_sum_##SUFFIX(const T* x, T* y, int rows, int cols,  \
                                                                   int vec, int warp_rows) {               \
    hm_row_reduce<T, 0>(x, y, rows, cols, vec, warp_rows);                                                 \
  }                                                                                                        \
  extern "C" __global__ void __launch_bounds__(1024, 1) row_max_##SUFFIX(const T* x, T* y, int rows, int cols,  \
                                                                   int vec, int warp_rows) {               \
    hm_row_reduce<T, 1>(x, y, rows, cols, vec, warp_rows);                                                 \
  }
HM_REDUCE(f32, float)
HM_REDUCE(f16, __half)
HM_REDUCE(bf16, __nv_bfloat16)
