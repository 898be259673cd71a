// Row-wise inference kernels over the last dimension of a row-major tensor (rows x cols):
// softmax (online: max and sum in one pass), LayerNorm (Welford statistics in one pass),
// RMSNorm, and bias + GELU. FP32 / FP16 / BF16 storage, FP32 arithmetic. One block per row
// (grid-stride over rows); 16-byte vector loads when `vec` (row length a multiple of the vector
// width and aligned pointers), scalar loads otherwise.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "common.cuh"

#define HM_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float hm_ld(const float* p) { return *p; }
__device__ __forceinline__ float hm_ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float hm_ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void hm_st(float* p, float v) { *p = v; }
__device__ __forceinline__ void hm_st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void hm_st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// N elements of T in one 16-byte access
template <typename T> struct HmVec { static constexpr int N = 16 / sizeof(T); };

template <typename T>
__device__ __forceinline__ void hm_ld_vec(const T* p, float* out) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < HmVec<T>::N; ++i) out[i] = hm_ld(e + i);
}
template <typename T>
__device__ __forceinline__ void hm_st_vec(T* p, const float* v) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < HmVec<T>::N; ++i) hm_st(e + i, v[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// ---- block reductions (blockDim.x a multiple of 32, at most 1024) ----
__device__ __forceinline__ float hm_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float hm_block_sum(float v) {
  __shared__ float part[32];
  v = hm_warp_sum(v);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
  __syncthreads();
  if (l == 0) part[w] = v;
  __syncthreads();
  v = l < nw ? part[l] : 0.f;
  return hm_warp_sum(v);
}
// online-softmax pair (max m, sum s of exp(x - m))
__device__ __forceinline__ void hm_ms_merge(float& m, float& s, float m2, float s2) {
  float mm = fmaxf(m, m2);
  s = (m == HM_NEG_INF ? 0.f : s * expf(m - mm)) + (m2 == HM_NEG_INF ? 0.f : s2 * expf(m2 - mm));
  m = mm;
}
__device__ void hm_block_max_sum(float& m, float& s) {
  __shared__ float pm[32], ps[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) hm_ms_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
  __syncthreads();
  if (l == 0) { pm[w] = m; ps[w] = s; }
  __syncthreads();
  m = l < nw ? pm[l] : HM_NEG_INF;
  s = l < nw ? ps[l] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) hm_ms_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}
// Welford triple (count n, mean, M2), combined by Chan's formula
__device__ __forceinline__ void hm_welford_merge(float& n, float& mean, float& m2, float nb, float meanb, float m2b) {
  float nn = n + nb;
  if (nn == 0.f) return;
  float d = meanb - mean, f = nb / nn;
  mean += d * f;
  m2 += m2b + d * d * n * f;
  n = nn;
}
__device__ void hm_block_welford(float& n, float& mean, float& m2) {
  __shared__ float pn[32], pmean[32], pm2[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    hm_welford_merge(n, mean, m2, __shfl_xor_sync(0xffffffffu, n, o), __shfl_xor_sync(0xffffffffu, mean, o),
                     __shfl_xor_sync(0xffffffffu, m2, o));
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
  __syncthreads();
  if (l == 0) { pn[w] = n; pmean[w] = mean; pm2[w] = m2; }
  __syncthreads();
  n = l < nw ? pn[l] : 0.f;
  mean = l < nw ? pmean[l] : 0.f;
  m2 = l < nw ? pm2[l] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    hm_welford_merge(n, mean, m2, __shfl_xor_sync(0xffffffffu, n, o), __shfl_xor_sync(0xffffffffu, mean, o),
                     __shfl_xor_sync(0xffffffffu, m2, o));
}

// Visit every element of row `r` in order of vectors: f(index, value) for reads.
#define HM_ROW_FOR(T, row, cols, vec, BODY)                                                        \
  if (vec) {                                                                                       \
    constexpr int NV = HmVec<T>::N;                                                                \
    for (int c0 = threadIdx.x * NV; c0 < cols; c0 += blockDim.x * NV) {                            \
      float v_[NV];                                                                                \
      hm_ld_vec(row + c0, v_);                                                                     \
      _Pragma("unroll") for (int i_ = 0; i_ < NV; ++i_) { const int c = c0 + i_; const float v = v_[i_]; (void)c; BODY } \
    }                                                                                              \
  } else {                                                                                         \
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { const float v = hm_ld(row + c); BODY }  \
  }

// ---- softmax ----
template <typename T>
__device__ void hm_softmax(const T* __restrict__ x, T* __restrict__ y, int rows, int cols, int vec) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + (size_t)r * cols;
    T* yr = y + (size_t)r * cols;
    float m = HM_NEG_INF, s = 0.f;
    HM_ROW_FOR(T, xr, cols, vec, {
      if (v > m) { s = (m == HM_NEG_INF ? 0.f : s * expf(m - v)) + 1.f; m = v; }
      else s += (v == HM_NEG_INF) ? 0.f : expf(v - m);
    })
    hm_block_max_sum(m, s);
    const float inv = 1.f / s;
    if (vec) {
      constexpr int NV = HmVec<T>::N;
      for (int c0 = threadIdx.x * NV; c0 < cols; c0 += blockDim.x * NV) {
        float v[NV];
        hm_ld_vec(xr + c0, v);
#pragma unroll
        for (int i = 0; i < NV; ++i) v[i] = expf(v[i] - m) * inv;
        hm_st_vec(yr + c0, v);
      }
    } else {
      for (int c = threadIdx.x; c < cols; c += blockDim.x) hm_st(yr + c, expf(hm_ld(xr + c) - m) * inv);
    }
  }
}

// ---- LayerNorm / RMSNorm (weight, bias optional: null) ----
template <typename T>
__device__ void hm_layer_norm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                              T* __restrict__ y, int rows, int cols, float eps, int vec, int rms) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + (size_t)r * cols;
    T* yr = y + (size_t)r * cols;
    float mean = 0.f, rstd;
    if (rms) {
      float ss = 0.f;
      HM_ROW_FOR(T, xr, cols, vec, { ss += v * v; })
      ss = hm_block_sum(ss);
      rstd = rsqrtf(ss / cols + eps);
    } else {
      float n = 0.f, m2 = 0.f;
      HM_ROW_FOR(T, xr, cols, vec, {
        n += 1.f;
        float d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
      })
      hm_block_welford(n, mean, m2);
      rstd = rsqrtf(m2 / cols + eps);
    }
    if (vec) {
      constexpr int NV = HmVec<T>::N;
      for (int c0 = threadIdx.x * NV; c0 < cols; c0 += blockDim.x * NV) {
        float v[NV], wv[NV], bv[NV];
        hm_ld_vec(xr + c0, v);
        if (w) hm_ld_vec(w + c0, wv);
        if (b) hm_ld_vec(b + c0, bv);
#pragma unroll
        for (int i = 0; i < NV; ++i) v[i] = (v[i] - mean) * rstd * (w ? wv[i] : 1.f) + (b ? bv[i] : 0.f);
        hm_st_vec(yr + c0, v);
      }
    } else {
      for (int c = threadIdx.x; c < cols; c += blockDim.x)
        hm_st(yr + c, (hm_ld(xr + c) - mean) * rstd * (w ? hm_ld(w + c) : 1.f) + (b ? hm_ld(b + c) : 0.f));
    }
  }
}

// ---- bias + GELU: y = gelu(x + bias[col]); elementwise, grid-stride over vectors ----
template <typename T>
__device__ void hm_bias_gelu(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y, long long n,
                             int cols, int act, int vec) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  if (vec) {
    constexpr int NV = HmVec<T>::N;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i * NV < n; i += stride) {
      float v[NV], bv[NV];
      hm_ld_vec(x + i * NV, v);
      int c = (int)((i * NV) % cols);
      if (bias) hm_ld_vec(bias + c, bv);
#pragma unroll
      for (int k = 0; k < NV; ++k) v[k] = hm_activate(v[k] + (bias ? bv[k] : 0.f), act);
      hm_st_vec(y + i * NV, v);
    }
  } else {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
      hm_st(y + i, hm_activate(hm_ld(x + i) + (bias ? hm_ld(bias + (int)(i % cols)) : 0.f), act));
  }
}

// =====================================================================================
// Register-resident row kernels ("reg"): the row is read from DRAM once into registers (K
// 16-byte vectors per thread), reduced with warp shuffles (and one shared-memory step per
// reduction when a block owns the row), then normalised and written from the registers. A group
// of threads owns a row: a warp (warp_mode: blockDim.x / 32 rows per block) for rows up to
// 32 * K vectors, else the whole block (up to 1024 threads) for rows up to blockDim.x * K
// vectors. Needs 16-byte aligned rows (cols a multiple of the vector width); longer or
// unaligned rows take the multi-pass kernels above.
// =====================================================================================
template <typename T> __device__ __forceinline__ void hm_unpack(const uint4& raw, float* f);
template <> __device__ __forceinline__ void hm_unpack<float>(const uint4& raw, float* f) {
  f[0] = __uint_as_float(raw.x); f[1] = __uint_as_float(raw.y); f[2] = __uint_as_float(raw.z); f[3] = __uint_as_float(raw.w);
}
template <> __device__ __forceinline__ void hm_unpack<__half>(const uint4& raw, float* f) {
  const unsigned int u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h = *reinterpret_cast<const __half2*>(&u[i]);
    float2 v = __half22float2(h);
    f[2 * i] = v.x; f[2 * i + 1] = v.y;
  }
}
template <> __device__ __forceinline__ void hm_unpack<__nv_bfloat16>(const uint4& raw, float* f) {
  const unsigned int u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // bf16 -> fp32 is a shift
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
template <typename T> __device__ __forceinline__ uint4 hm_pack(const float* f);
template <> __device__ __forceinline__ uint4 hm_pack<float>(const float* f) {
  return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
}
template <> __device__ __forceinline__ uint4 hm_pack<__half>(const float* f) {
  unsigned int u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
    u[i] = *reinterpret_cast<unsigned int*>(&h);
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}
template <> __device__ __forceinline__ uint4 hm_pack<__nv_bfloat16>(const float* f) {
  unsigned int u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    u[i] = *reinterpret_cast<unsigned int*>(&h);
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}

__device__ __forceinline__ float hm_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Group reduction: warp shuffles, then (block mode) one exchange through `part` (ping-pong
// buffers: one __syncthreads per reduction is enough, see hm_row_reg).
template <int MAX>
__device__ __forceinline__ float hm_group_reduce(float v, int warp_mode, float (*part)[32], int& phase) {
  v = MAX ? hm_warp_max(v) : hm_warp_sum(v);
  if (warp_mode) return v;
  float* p = part[phase];
  phase ^= 1;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) p[w] = v;
  __syncthreads();
  v = l < (int)(blockDim.x >> 5) ? p[l] : (MAX ? HM_NEG_INF : 0.f);
  return MAX ? hm_warp_max(v) : hm_warp_sum(v);
}

#define HM_OP_SOFTMAX 0
#define HM_OP_LAYER_NORM 1
#define HM_OP_RMS_NORM 2

// 16 bytes global -> shared without registers (cp.async on sm_80+); each thread later reads only
// the slots it wrote, so a wait (no barrier) makes them visible to it.
__device__ __forceinline__ void hm_cp16(uint4* dst_smem, const uint4* src) {
#if __CUDA_ARCH__ >= 800
  const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst_smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
#else
  *dst_smem = __ldg(src);
#endif
}
__device__ __forceinline__ void hm_cp_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Visit the thread's vectors of the row: register slots i < K (vector i*g + t), then, with
// SM, shared-memory slots j < s (vector (K + j)*g + t, kept at sm[j*g + t]). The visitor gets
// each vector by reference and may replace it (softmax's exp-once pass does).
template <int K, bool SM, typename F>
__device__ __forceinline__ void hm_each(uint4 (&raw)[K], uint4* sm, int s, int g, int t, int nvec, F f) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int v = i * g + t;
    if (v < nvec) f(v, raw[i]);
  }
  if (SM) {
    for (int j = 0; j < s; ++j) {
      const int v = (K + j) * g + t;
      if (v < nvec) f(v, sm[j * g + t]);
    }
  }
}

// LayerNorm of vector v of a row (both the block and the cluster kernels): (x - mean) * rstd,
// times the weight's vector v and plus the bias's where given (null: none).
template <typename T>
__device__ __forceinline__ uint4 hm_layer_norm_vec(const uint4& q, int v, float mean, float rstd,
                                                   const uint4* __restrict__ wr, const uint4* __restrict__ br) {
  constexpr int NV = HmVec<T>::N;
  float f[NV], wv[NV], bv[NV];
  hm_unpack<T>(q, f);
  if (wr) hm_unpack<T>(__ldg(wr + v), wv);
  if (br) hm_unpack<T>(__ldg(br + v), bv);
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    float o = (f[j] - mean) * rstd;
    if (wr) o *= wv[j];
    if (br) o += bv[j];
    f[j] = o;
  }
  return hm_pack<T>(f);
}

// SM: the row also spills into dynamic shared memory, s vectors a thread (block mode only):
// rows of up to (K + s) * blockDim.x vectors are still read from DRAM once.
template <typename T, int OP, int K, bool SM = false>
__device__ __forceinline__ void hm_row_reg(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                           T* __restrict__ y, int rows, int cols, float eps, int warp_mode, int s = 0) {
  constexpr int NV = HmVec<T>::N;
  __shared__ float part[2][32];
  extern __shared__ uint4 hm_row_smem[];
  int phase = 0;
  const int nvec = cols / NV;
  const int t = warp_mode ? (threadIdx.x & 31) : threadIdx.x;
  const int g = warp_mode ? 32 : blockDim.x;
  const int rpb = warp_mode ? (blockDim.x >> 5) : 1;
  const int sub = warp_mode ? (threadIdx.x >> 5) : 0;
  for (int r = blockIdx.x * rpb + sub; r < rows; r += gridDim.x * rpb) {
    const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)r * cols);
    uint4* yr = reinterpret_cast<uint4*>(y + (size_t)r * cols);
    uint4 raw[K];
    if (SM) {
      for (int j = 0; j < s; ++j) {
        const int v = (K + j) * g + t;
        if (v < nvec) hm_cp16(hm_row_smem + j * g + t, xr + v);
      }
    }
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int v = i * g + t;
      if (v < nvec) raw[i] = __ldg(xr + v);
    }
    if (SM) hm_cp_wait();
    if (OP == HM_OP_SOFTMAX) {
      float m = HM_NEG_INF;
      hm_each<K, SM>(raw, hm_row_smem, s, g, t, nvec, [&](int, const uint4& q) {
        float f[NV];
        hm_unpack<T>(q, f);
#pragma unroll
        for (int j = 0; j < NV; ++j) m = fmaxf(m, f[j]);
      });
      m = hm_group_reduce<1>(m, warp_mode, part, phase);
      // FP32 storage: accurate expf; 16-bit storage: exp2 of a pre-scaled argument (ex2.approx,
      // relative error ~2^-22, far below the output's rounding)
      const float L2E = 1.4426950408889634f, ms = m * L2E;
      float sum = 0.f;
      if (sizeof(T) == 4) {  // FP32: exp twice (recomputed when writing) keeps full precision
        hm_each<K, SM>(raw, hm_row_smem, s, g, t, nvec, [&](int, const uint4& q) {
          float f[NV];
          hm_unpack<T>(q, f);
#pragma unroll
          for (int j = 0; j < NV; ++j) sum += expf(f[j] - m);
        });
      } else {  // 16-bit storage: exp once; the held row is replaced by exp(x - max) in the storage type
        // (one more rounding of a value the output rounds to that type anyway: within one unit of
        // the output's rounding), which halves the exp work of this MUFU-heavy kernel
        hm_each<K, SM>(raw, hm_row_smem, s, g, t, nvec, [&](int, uint4& q) {
          float f[NV];
          hm_unpack<T>(q, f);
#pragma unroll
          for (int j = 0; j < NV; ++j) { f[j] = exp2f(fmaf(f[j], L2E, -ms)); sum += f[j]; }
          q = hm_pack<T>(f);
        });
      }
      sum = hm_group_reduce<0>(sum, warp_mode, part, phase);
      const float inv = 1.f / sum;
      hm_each<K, SM>(raw, hm_row_smem, s, g, t, nvec, [&](int v, const uint4& q) {
        float f[NV];
        hm_unpack<T>(q, f);
#pragma unroll
        for (int j = 0; j < NV; ++j) f[j] = (sizeof(T) == 4 ? expf(f[j] - m) : f[j]) * inv;
        yr[v] = hm_pack<T>(f);
      });
    } else {
      float mean = 0.f;
      if (OP == HM_OP_LAYER_NORM) {  // two passes over the held row: exact mean, then centred squares
        float sum = 0.f;
        hm_each<K, SM>(raw, hm_row_smem, s, g, t, nvec, [&](int, const uint4& q) {
          float f[NV];
          hm_unpack<T>(q, f);
#pragma unroll
          for (int j = 0; j < NV; ++j) sum += f[j];
        });
        mean = hm_group_reduce<0>(sum, warp_mode, part, phase) / (float)cols;
      }
      float ss = 0.f;
      hm_each<K, SM>(raw, hm_row_smem, s, g, t, nvec, [&](int, const uint4& q) {
        float f[NV];
        hm_unpack<T>(q, f);
#pragma unroll
        for (int j = 0; j < NV; ++j) { const float d = f[j] - mean; ss = fmaf(d, d, ss); }
      });
      const float rstd = rsqrtf(hm_group_reduce<0>(ss, warp_mode, part, phase) / (float)cols + eps);
      const uint4* wr = reinterpret_cast<const uint4*>(w);
      const uint4* br = reinterpret_cast<const uint4*>(b);
      hm_each<K, SM>(raw, hm_row_smem, s, g, t, nvec, [&](int v, const uint4& q) {
        yr[v] = hm_layer_norm_vec<T>(q, v, mean, rstd, wr, br);
      });
    }
    if (SM) __syncthreads();  // (grid-stride) the next row's copies must not overwrite slots still read
  }
}

// bias + GELU, 2-D: a thread owns one 16-byte column vector (its bias loaded once) for
// HM_BG_ROWS rows, all loads issued before any math. Needs cols a multiple of the vector width.
#define HM_BG_ROWS 4
template <typename T>
__device__ __forceinline__ void hm_bias_gelu_vec(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y,
                                                 int rows, int cols, int act) {
  constexpr int NV = HmVec<T>::N;
  const int nvc = cols / NV;
  const long long tasks = (long long)((rows + HM_BG_ROWS - 1) / HM_BG_ROWS) * nvc;
  for (long long task = (long long)blockIdx.x * blockDim.x + threadIdx.x; task < tasks;
       task += (long long)gridDim.x * blockDim.x) {
    const int rg = (int)(task / nvc), cv = (int)(task - (long long)rg * nvc);
    float bv[NV];
    if (bias) hm_unpack<T>(__ldg(reinterpret_cast<const uint4*>(bias) + cv), bv);
    else {
#pragma unroll
      for (int j = 0; j < NV; ++j) bv[j] = 0.f;
    }
    uint4 raw[HM_BG_ROWS];
#pragma unroll
    for (int k = 0; k < HM_BG_ROWS; ++k) {
      const int r = rg * HM_BG_ROWS + k;
      if (r < rows) raw[k] = __ldg(reinterpret_cast<const uint4*>(x + (size_t)r * cols) + cv);
    }
#pragma unroll
    for (int k = 0; k < HM_BG_ROWS; ++k) {
      const int r = rg * HM_BG_ROWS + k;
      if (r < rows) {
        float f[NV];
        hm_unpack<T>(raw[k], f);
#pragma unroll
        for (int j = 0; j < NV; ++j) f[j] = hm_activate(f[j] + bv[j], act);
        reinterpret_cast<uint4*>(y + (size_t)r * cols)[cv] = hm_pack<T>(f);
      }
    }
  }
}

#define HM_ROW_REG(SUFFIX, T, K)                                                                                \
  extern "C" __global__ void __launch_bounds__(1024, 1) softmax_reg##K##_##SUFFIX(const T* x, T* y, int rows,       \
                                                                               int cols, int warp_mode) {        \
    hm_row_reg<T, HM_OP_SOFTMAX, K>(x, (const T*)0, (const T*)0, y, rows, cols, 0.f, warp_mode);              \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(K > 4 ? 512 : 1024, 1) layer_norm_reg##K##_##SUFFIX(                              \
      const T* x, const T* w, const T* b, T* y, int rows, int cols, float eps, int warp_mode) {                \
    hm_row_reg<T, HM_OP_LAYER_NORM, K>(x, w, b, y, rows, cols, eps, warp_mode);                                \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(1024, 1) rms_norm_reg##K##_##SUFFIX(                                \
      const T* x, const T* w, T* y, int rows, int cols, float eps, int warp_mode) {                            \
    hm_row_reg<T, HM_OP_RMS_NORM, K>(x, w, (const T*)0, y, rows, cols, eps, warp_mode);                        \
  }
// registers + shared memory: K = 4 vectors a thread in registers, s more in dynamic shared memory
#define HM_ROW_RS(SUFFIX, T)                                                                                   \
  extern "C" __global__ void __launch_bounds__(1024, 1) softmax_rs_##SUFFIX(const T* x, T* y, int rows, int cols, \
                                                                         int s) {                              \
    hm_row_reg<T, HM_OP_SOFTMAX, 4, true>(x, (const T*)0, (const T*)0, y, rows, cols, 0.f, 0, s);             \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(1024, 1) layer_norm_rs_##SUFFIX(                                 \
      const T* x, const T* w, const T* b, T* y, int rows, int cols, float eps, int s) {                        \
    hm_row_reg<T, HM_OP_LAYER_NORM, 4, true>(x, w, b, y, rows, cols, eps, 0, s);                               \
  }                                                                                                            \
  extern "C" __global__ void __launch_bounds__(1024, 1) rms_norm_rs_##SUFFIX(                                   \
      const T* x, const T* w, T* y, int rows, int cols, float eps, int s) {                                    \
    hm_row_reg<T, HM_OP_RMS_NORM, 4, true>(x, w, (const T*)0, y, rows, cols, eps, 0, s);                       \
  }
#define HM_ROWWISE_FAST(SUFFIX, T)                                                                             \
  HM_ROW_RS(SUFFIX, T)                                                                                         \
  HM_ROW_REG(SUFFIX, T, 4)                                                                                     \
  HM_ROW_REG(SUFFIX, T, 8)                                                                                     \
  extern "C" __global__ void __launch_bounds__(256) bias_gelu_vec_##SUFFIX(const T* x, const T* bias, T* y,     \
                                                                          int rows, int cols, int act) {        \
    hm_bias_gelu_vec<T>(x, bias, y, rows, cols, act);                                                          \
  }
HM_ROWWISE_FAST(f32, float)
HM_ROWWISE_FAST(f16, __half)
HM_ROWWISE_FAST(bf16, __nv_bfloat16)

// =====================================================================================
// Cluster rows (sm_90+): a thread-block cluster of HM_CL blocks owns a row, each block holding
// its 1/HM_CL share in registers (K = 4 vectors a thread); block partial results are exchanged
// through distributed shared memory. A 65,536-element row is then spread over 8 SMs' worth of
// blocks instead of one, so even 256 rows fill every SM several times over.
// =====================================================================================
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define HM_CL 8

// Cluster primitives in PTX (no cooperative_groups: its headers need libcu++, which NVRTC's
// include path may lack).
__device__ __forceinline__ unsigned int hm_cluster_rank() {
  unsigned int r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void hm_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float hm_cluster_ld(const float* smem_ptr, unsigned int rank) {
  const unsigned int a = (unsigned int)__cvta_generic_to_shared(smem_ptr);
  unsigned int ra;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
  return v;
}

// Reduce a block-reduced value (equal in every thread) across the cluster: each block posts it
// in its slot (ping-pong by phase), cluster barrier, every thread reads all HM_CL slots.
template <int MAX>
__device__ __forceinline__ float hm_cluster_reduce(float v, float* slots, int& cphase) {
  float* slot = slots + cphase;
  cphase ^= 1;
  if (threadIdx.x == 0) *slot = v;
  hm_cluster_sync();
  float r = MAX ? HM_NEG_INF : 0.f;
#pragma unroll
  for (int i = 0; i < HM_CL; ++i) {
    const float o = hm_cluster_ld(slot, (unsigned int)i);
    r = MAX ? fmaxf(r, o) : r + o;
  }
  return r;
}

template <int K, typename F>
__device__ __forceinline__ void hm_each_range(const uint4 (&raw)[K], int v0, int v1, int g, int t, F f) {
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int v = v0 + i * g + t;
    if (v < v1) f(v, raw[i]);
  }
}

template <typename T, int OP>
__device__ __forceinline__ void hm_row_cluster(const T* __restrict__ x, const T* __restrict__ w,
                                               const T* __restrict__ b, T* __restrict__ y, int rows, int cols,
                                               float eps) {
  constexpr int NV = HmVec<T>::N;
  constexpr int K = 4;
  __shared__ float part[2][32];
  __shared__ float slots[2];
  int phase = 0, cphase = 0;
  const int nvec = cols / NV;
  const int chunk = (nvec + HM_CL - 1) / HM_CL;
  const int rank = (int)hm_cluster_rank();
  const int v0 = rank * chunk, v1 = min(nvec, v0 + chunk);
  const int t = threadIdx.x, g = blockDim.x;
  for (int r = blockIdx.x / HM_CL; r < rows; r += gridDim.x / HM_CL) {
    const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)r * cols);
    uint4* yr = reinterpret_cast<uint4*>(y + (size_t)r * cols);
    uint4 raw[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const int v = v0 + i * g + t;
      if (v < v1) raw[i] = __ldg(xr + v);
    }
    if (OP == HM_OP_SOFTMAX) {
      float m = HM_NEG_INF;
      hm_each_range<K>(raw, v0, v1, g, t, [&](int, const uint4& q) {
        float f[NV];
        hm_unpack<T>(q, f);
#pragma unroll
        for (int j = 0; j < NV; ++j) m = fmaxf(m, f[j]);
      });
      m = hm_cluster_reduce<1>(hm_group_reduce<1>(m, 0, part, phase), slots, cphase);
      const float L2E = 1.4426950408889634f, ms = m * L2E;
      float sum = 0.f;
      hm_each_range<K>(raw, v0, v1, g, t, [&](int, const uint4& q) {
        float f[NV];
        hm_unpack<T>(q, f);
#pragma unroll
        for (int j = 0; j < NV; ++j) sum += sizeof(T) == 4 ? expf(f[j] - m) : exp2f(fmaf(f[j], L2E, -ms));
      });
      sum = hm_cluster_reduce<0>(hm_group_reduce<0>(sum, 0, part, phase), slots, cphase);
      const float inv = 1.f / sum;
      hm_each_range<K>(raw, v0, v1, g, t, [&](int v, const uint4& q) {
        float f[NV];
        hm_unpack<T>(q, f);
#pragma unroll
        for (int j = 0; j < NV; ++j) f[j] = (sizeof(T) == 4 ? expf(f[j] - m) : exp2f(fmaf(f[j], L2E, -ms))) * inv;
        yr[v] = hm_pack<T>(f);
      });
    } else {
      float mean = 0.f;
      if (OP == HM_OP_LAYER_NORM) {
        float sum = 0.f;
        hm_each_range<K>(raw, v0, v1, g, t, [&](int, const uint4& q) {
          float f[NV];
          hm_unpack<T>(q, f);
#pragma unroll
          for (int j = 0; j < NV; ++j) sum += f[j];
        });
        mean = hm_cluster_reduce<0>(hm_group_reduce<0>(sum, 0, part, phase), slots, cphase) / (float)cols;
      }
      float ss = 0.f;
      hm_each_range<K>(raw, v0, v1, g, t, [&](int, const uint4& q) {
        float f[NV];
        hm_unpack<T>(q, f);
#pragma unroll
        for (int j = 0; j < NV; ++j) { const float d = f[j] - mean; ss = fmaf(d, d, ss); }
      });
      const float rstd =
          rsqrtf(hm_cluster_reduce<0>(hm_group_reduce<0>(ss, 0, part, phase), slots, cphase) / (float)cols + eps);
      const uint4* wr = reinterpret_cast<const uint4*>(w);
      const uint4* br = reinterpret_cast<const uint4*>(b);
      hm_each_range<K>(raw, v0, v1, g, t, [&](int v, const uint4& q) {
        yr[v] = hm_layer_norm_vec<T>(q, v, mean, rstd, wr, br);
      });
    }
  }
  hm_cluster_sync();  // no block leaves while others may still read its slots
}

#endif  // sm_90+

// The entry points exist for every architecture (the registry's kernels all compile everywhere);
// below sm_90 they trap: the wrapper launches them only on sm_90+ devices.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define HM_CL_ATTR __cluster_dims__(HM_CL, 1, 1) __launch_bounds__(1024, 1)
#define HM_CL_BODY(...) __VA_ARGS__
#else
#define HM_CL_ATTR __launch_bounds__(1024, 1)
#define HM_CL_BODY(...) __trap()
#endif
#define HM_ROW_CLUSTER(SUFFIX, T)                                                                              \
  extern "C" __global__ void HM_CL_ATTR softmax_cl_##SUFFIX(const T* x, T* y, int rows, int cols) {            \
    HM_CL_BODY(hm_row_cluster<T, HM_OP_SOFTMAX>(x, (const T*)0, (const T*)0, y, rows, cols, 0.f));             \
  }                                                                                                            \
  extern "C" __global__ void HM_CL_ATTR layer_norm_cl_##SUFFIX(const T* x, const T* w, const T* b, T* y,       \
                                                              int rows, int cols, float eps) {                 \
    HM_CL_BODY(hm_row_cluster<T, HM_OP_LAYER_NORM>(x, w, b, y, rows, cols, eps));                              \
  }                                                                                                            \
  extern "C" __global__ void HM_CL_ATTR rms_norm_cl_##SUFFIX(const T* x, const T* w, T* y, int rows, int cols, \
                                                            float eps) {                                       \
    HM_CL_BODY(hm_row_cluster<T, HM_OP_RMS_NORM>(x, w, (const T*)0, y, rows, cols, eps));                      \
  }
HM_ROW_CLUSTER(f32, float)
HM_ROW_CLUSTER(f16, __half)
HM_ROW_CLUSTER(bf16, __nv_bfloat16)

#define HM_ROWWISE(SUFFIX, T)                                                                             \
  extern "C" __global__ void softmax_##SUFFIX(const T* x, T* y, int rows, int cols, int vec) {            \
    hm_softmax<T>(x, y, rows, cols, vec);                                                                 \
  }                                                                                                       \
  extern "C" __global__ void layer_norm_##SUFFIX(const T* x, const T* w, const T* b, T* y, int rows,      \
                                                 int cols, float eps, int vec) {                          \
    hm_layer_norm<T>(x, w, b, y, rows, cols, eps, vec, 0);                                                \
  }                                                                                                       \
  extern "C" __global__ void rms_norm_##SUFFIX(const T* x, const T* w, T* y, int rows, int cols, float eps, \
                                               int vec) {                                                 \
    hm_layer_norm<T>(x, w, (const T*)0, y, rows, cols, eps, vec, 1);                                      \
  }                                                                                                       \
  extern "C" __global__ void bias_gelu_##SUFFIX(const T* x, const T* bias, T* y, long long n, int cols,   \
                                                int act, int vec) {                                       \
    hm_bias_gelu<T>(x, bias, y, n, cols, act, vec);                                                       \
  }

HM_ROWWISE(f32, float)
HM_ROWWISE(f16, __half)
HM_ROWWISE(bf16, __nv_bfloat16)
