// Convolutions over NHWC FP16/BF16 activations with FP32 accumulation.
//
// conv_igemm_*: implicit GEMM on Tensor Cores. Output pixels are the GEMM's rows (M = N*OH*OW),
// output channels its columns (K), and the reduction runs over (r, s, c) of the filter (R*S*C),
// with the weights packed as a row-major (R*S*C) x K matrix. The A tile is gathered straight
// from the input (im2col on the fly): 8 consecutive channels of one input pixel are one 16-byte
// cp.async (C % 8 == 0), zero-filled where the filter hangs over the padding. Block tile
// 128 x 128 x 32, 8 warps of 64 x 32, mma.sync m16n8k16 with ldmatrix, 3-stage pipeline — the
// structure of gemm_mma.cu. Epilogue: + bias[k], activation, + residual (NHWC, same shape).
//
// depthwise3x3_*: direct depthwise 3x3 (groups = C), one thread per output element, channels
// fastest (coalesced), weights packed as (9, C).
#include "tc_common.cuh"

template <typename T>
__device__ __forceinline__ void hm_conv_igemm(const T* __restrict__ x, const T* __restrict__ wt, T* __restrict__ y,
    const T* __restrict__ bias, const T* __restrict__ residual, int H, int W, int C, int K, int S, int OH, int OW,
    int stride, int pad, int M, int Kg, int act) {
  extern __shared__ __align__(128) unsigned char hm_smem[];
  T* As = reinterpret_cast<T*>(hm_smem);
  T* Bs = As + TC_STAGES * TC_A_STAGE;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = TC_WARP_M(warp), wn = TC_WARP_N(warp);
  const int m0 = blockIdx.y * TC_BM, n0 = blockIdx.x * TC_BN;
  // the two output pixels (A rows) this thread gathers for every k tile
  int ih0[2], iw0[2];
  const T* xb[2];
  bool mv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int m = m0 + (tid + i * TC_NT) / 4;
    mv[i] = m < M;
    const int mm = mv[i] ? m : 0;
    const int ow = mm % OW, t = mm / OW, oh = t % OH, n = t / OH;
    ih0[i] = oh * stride - pad;
    iw0[i] = ow * stride - pad;
    xb[i] = x + (size_t)n * H * W * C;
  }
  const int ac = (tid % 4) * 8;  // this thread's 8 channels within the 32-wide k tile

  auto load = [&](int stage, int k0) {
    T* as = As + stage * TC_A_STAGE;
    T* bs = Bs + stage * TC_B_STAGE;
    const int k = k0 + ac;
    const int rs = k / C, ch = k - rs * C, kr = rs / S, ks = rs - kr * S;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = (tid + i * TC_NT) / 4;
      const int ih = ih0[i] + kr, iw = iw0[i] + ks;
      const bool ok = mv[i] && k < Kg && ih >= 0 && ih < H && iw >= 0 && iw < W;
      hm_cp_async16(&as[r * TC_ALD + ac], ok ? (const void*)(xb[i] + ((size_t)ih * W + iw) * C + ch) : (const void*)x, ok);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // B: 32 rows x 16 chunks of the packed weights
      const int u = tid + i * TC_NT, r = u / 16, c = (u % 16) * 8;
      hm_chunk(&bs[r * TC_BLD + c], wt, k0 + r, n0 + c, Kg, K, K, true);
    }
  };

  float acc[4][4][4];
  hm_zero_acc(acc);
  hm_cp_pipeline<TC_BK>(
      (Kg + TC_BK - 1) / TC_BK, load,
      [&](int s) { hm_warp_mma_tile(acc, As + s * TC_A_STAGE, Bs + s * TC_B_STAGE, wm, wn, lane); });
  hm_store_warp_tile(acc, y, m0 + wm, n0 + wn, M, K, bias, residual, act, lane);
}

template <typename T>
__device__ __forceinline__ void hm_depthwise3x3(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
    T* __restrict__ y, long long total, int H, int W, int C, int OH, int OW, int stride, int pad, int act) {
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    const int c = (int)(idx % C);
    long long t = idx / C;
    const int ow = (int)(t % OW);
    t /= OW;
    const int oh = (int)(t % OH);
    const long long n = t / OH;
    const T* xn = x + n * H * W * C;
    float acc = 0.f;
#pragma unroll
    for (int r = 0; r < 3; ++r) {
      const int ih = oh * stride - pad + r;
      if (ih < 0 || ih >= H) continue;
#pragma unroll
      for (int s = 0; s < 3; ++s) {
        const int iw = ow * stride - pad + s;
        if (iw < 0 || iw >= W) continue;
        acc += hm_to_f(xn[((size_t)ih * W + iw) * C + c]) * hm_to_f(w[(r * 3 + s) * C + c]);
      }
    }
    if (bias) acc += hm_to_f(bias[c]);
    y[idx] = hm_from_f<T>(hm_activate(acc, act));
  }
}

#define HM_CONV(SUFFIX, T)                                                                                      \
  extern "C" __global__ void __launch_bounds__(TC_NT) conv_igemm_##SUFFIX(const T* x, const T* wt, T* y,         \
      const T* bias, const T* residual, int H, int W, int C, int K, int S, int OH, int OW, int stride, int pad,   \
      int M, int Kg, int act) {                                                                                  \
    hm_conv_igemm<T>(x, wt, y, bias, residual, H, W, C, K, S, OH, OW, stride, pad, M, Kg, act);                 \
  }                                                                                                              \
  extern "C" __global__ void __launch_bounds__(256) depthwise3x3_##SUFFIX(const T* x, const T* w, const T* bias, \
      T* y, long long total, int H, int W, int C, int OH, int OW, int stride, int pad, int act) {                \
    hm_depthwise3x3<T>(x, w, bias, y, total, H, W, C, OH, OW, stride, pad, act);                                 \
  }

HM_CONV(f16, __half)
HM_CONV(bf16, __nv_bfloat16)
