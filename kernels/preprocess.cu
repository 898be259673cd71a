// Fused frame preprocessing, one kernel per batch: uint8 frames (HWC RGB/BGR, or NV12) ->
// bilinear resize (optionally letterboxed: aspect kept, the rest padded) -> per-channel
// normalisation -> NCHW or NHWC in FP32 / FP16 / BF16.
//
// One thread per output pixel (all three channels); grid (ceil(W/32), ceil(H/8), batch).
// Frame b starts at ptrs[b] when a pointer table is given (a list of separate frames), else at
// base + b * frame_stride. `pitch` is the byte distance between rows (crops and padded decoder
// surfaces need no copy). Resampling follows torch.nn.functional.interpolate(mode="bilinear",
// align_corners=False, antialias=False) operation for operation, on the pixel values 0..255 as
// floats (no intermediate rounding to uint8), then y = v * a[c] + b[c] with a = 1 / (255 std),
// b = -mean / std.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define PP_RGB 0
#define PP_BGR 1
#define PP_NV12 2

__device__ __forceinline__ void pp_st(float* p, float v) { *p = v; }
__device__ __forceinline__ void pp_st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void pp_st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

struct PPColor {  // limited/full-range YUV -> RGB: R = cy (Y - y0) + crv (V - 128), ...
  float cy, y0, crv, cgu, cgv, cbu;
};

// Bilinear blend of the four taps, then normalise: output channel c from frame channel s (swapped
// for BGR <-> RGB), r[c] = blend * a[c] + b[c].
__device__ __forceinline__ void pp_blend(const float* v00, const float* v01, const float* v10, const float* v11,
                                         float lx0, float lx1, float ly0, float ly1, int swap, const float* a,
                                         const float* bb, float* r) {
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    const int s = swap ? 2 - c : c;
    const float v = ly0 * (lx0 * v00[s] + lx1 * v01[s]) + ly1 * (lx0 * v10[s] + lx1 * v11[s]);
    r[c] = v * a[c] + bb[c];
  }
}

// One output pixel's three channels, NHWC or NCHW.
template <typename T>
__device__ __forceinline__ void pp_store(T* out, int b, int oy, int ox, int out_h, int out_w, int nhwc,
                                         const float* r) {
  if (nhwc) {
    T* o = out + (((size_t)b * out_h + oy) * out_w + ox) * 3;
    pp_st(o, r[0]); pp_st(o + 1, r[1]); pp_st(o + 2, r[2]);
  } else {
    const size_t plane = (size_t)out_h * out_w;
    T* o = out + (size_t)b * 3 * plane + (size_t)oy * out_w + ox;
    pp_st(o, r[0]); pp_st(o + plane, r[1]); pp_st(o + 2 * plane, r[2]);
  }
}

// The three channels (in the frame's own order: RGB or BGR; NV12 gives RGB) of pixel (x, y).
__device__ __forceinline__ void pp_pixel(const unsigned char* __restrict__ f, int pitch, int in_h, int x, int y,
                                         int fmt, const PPColor& col, float* v) {
  if (fmt == PP_NV12) {
    const float Y = (float)f[(size_t)y * pitch + x];
    const unsigned char* uv = f + (size_t)(in_h + (y >> 1)) * pitch + (x & ~1);
    const float U = (float)uv[0] - 128.f, V = (float)uv[1] - 128.f;
    const float l = col.cy * (Y - col.y0);
    v[0] = fminf(fmaxf(l + col.crv * V, 0.f), 255.f);
    v[1] = fminf(fmaxf(l + col.cgu * U + col.cgv * V, 0.f), 255.f);
    v[2] = fminf(fmaxf(l + col.cbu * U, 0.f), 255.f);
  } else {
    const unsigned char* p = f + (size_t)y * pitch + 3 * x;
    v[0] = (float)p[0];
    v[1] = (float)p[1];
    v[2] = (float)p[2];
  }
}

template <typename T>
__device__ __forceinline__ void hm_preprocess(const unsigned char* __restrict__ base,
                                              const unsigned long long* __restrict__ ptrs, long long frame_stride,
                                              int pitch, int in_h, int in_w, int fmt, T* __restrict__ out, int out_h,
                                              int out_w, int nhwc, int box_x, int box_y, int box_w, int box_h,
                                              float scale_x, float scale_y, float a0, float a1, float a2, float b0,
                                              float b1, float b2, float p0, float p1, float p2, int swap,
                                              PPColor col) {
  const int ox = blockIdx.x * blockDim.x + threadIdx.x;
  const int oy = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z;
  if (ox >= out_w || oy >= out_h) return;
  float r[3];
  const int bx = ox - box_x, by = oy - box_y;
  if (bx < 0 || by < 0 || bx >= box_w || by >= box_h) {  // letterbox padding (already normalised)
    r[0] = p0; r[1] = p1; r[2] = p2;
  } else {
    const unsigned char* f = ptrs ? reinterpret_cast<const unsigned char*>(ptrs[b]) : base + (long long)b * frame_stride;
    // torch's area_pixel_compute_source_index (align_corners=False, linear: clamp at 0)
    // (one fused multiply-add, as nvcc contracts torch's `scale * (dst + 0.5) - 0.5`)
    float sy = fmaf(scale_y, (float)by + 0.5f, -0.5f);
    sy = sy < 0.f ? 0.f : sy;
    float sx = fmaf(scale_x, (float)bx + 0.5f, -0.5f);
    sx = sx < 0.f ? 0.f : sx;
    const int y0 = (int)sy, x0 = (int)sx;
    const int y1 = y0 + (y0 < in_h - 1 ? 1 : 0), x1 = x0 + (x0 < in_w - 1 ? 1 : 0);
    const float ly1 = sy - (float)y0, ly0 = 1.f - ly1;
    const float lx1 = sx - (float)x0, lx0 = 1.f - lx1;
    float v00[3], v01[3], v10[3], v11[3];
    pp_pixel(f, pitch, in_h, x0, y0, fmt, col, v00);
    pp_pixel(f, pitch, in_h, x1, y0, fmt, col, v01);
    pp_pixel(f, pitch, in_h, x0, y1, fmt, col, v10);
    pp_pixel(f, pitch, in_h, x1, y1, fmt, col, v11);
    const float a[3] = {a0, a1, a2}, bb[3] = {b0, b1, b2};
    pp_blend(v00, v01, v10, v11, lx0, lx1, ly0, ly1, swap, a, bb, r);
  }
  pp_store(out, b, oy, ox, out_h, out_w, nhwc, r);
}

// ---- PX (1 or 4) output pixels per thread, lane-interleaved ----
// Thread (lane l of a 32-wide block row) computes pixels ox = 32 * PX * blockIdx.x + 32 * i + l,
// i < PX: the vertical taps (rows, weights, row pointers) are computed once and shared by its 4
// pixels, and every load or store instruction of a warp still covers 32 consecutive output pixels
// (a narrow span of source bytes: few L1 wavefronts per gather). RGB/BGR taps: the two horizontal
// neighbours (6 bytes) come from three aligned 4-byte loads and funnel shifts instead of six byte
// loads, away from the row's ends; NV12: the shared chroma pair as one 2-byte load. The same
// arithmetic as hm_preprocess, pixel for pixel.
__device__ __forceinline__ void pp_pair(const unsigned char* __restrict__ f, int pitch, int in_h, int in_w, int x0,
                                        int x1, int y, int fmt, const PPColor& col, float* va, float* vb) {
  if (fmt != PP_NV12 && x1 == x0 + 1 && x0 >= 1 && x0 <= in_w - 4) {
    const unsigned char* p = f + (size_t)y * pitch + 3 * x0;
    const unsigned int o = (unsigned int)((size_t)p & 3u);
    const unsigned int* w = reinterpret_cast<const unsigned int*>(p - o);
    const unsigned int w0 = __ldg(w), w1 = __ldg(w + 1), w2 = __ldg(w + 2);
    const unsigned int lo = __funnelshift_r(w0, w1, 8 * o), hi = __funnelshift_r(w1, w2, 8 * o);
    va[0] = (float)(lo & 0xffu);
    va[1] = (float)((lo >> 8) & 0xffu);
    va[2] = (float)((lo >> 16) & 0xffu);
    vb[0] = (float)(lo >> 24);
    vb[1] = (float)(hi & 0xffu);
    vb[2] = (float)((hi >> 8) & 0xffu);
    return;
  }
  if (fmt == PP_NV12) {
    const unsigned char* yr = f + (size_t)y * pitch;
    const unsigned char* uvr = f + (size_t)(in_h + (y >> 1)) * pitch;
    const float Ya = (float)__ldg(yr + x0), Yb = (float)__ldg(yr + x1);
    float Ua, Va, Ub, Vb;
    const unsigned char* uva = uvr + (x0 & ~1);
    const unsigned char* uvb = uvr + (x1 & ~1);
    if (((size_t)uva & 1u) == 0) {
      const unsigned short qa = __ldg(reinterpret_cast<const unsigned short*>(uva));
      const unsigned short qb = uvb == uva ? qa : __ldg(reinterpret_cast<const unsigned short*>(uvb));
      Ua = (float)(qa & 0xffu) - 128.f; Va = (float)(qa >> 8) - 128.f;
      Ub = (float)(qb & 0xffu) - 128.f; Vb = (float)(qb >> 8) - 128.f;
    } else {
      Ua = (float)__ldg(uva) - 128.f; Va = (float)__ldg(uva + 1) - 128.f;
      Ub = (float)__ldg(uvb) - 128.f; Vb = (float)__ldg(uvb + 1) - 128.f;
    }
    const float la = col.cy * (Ya - col.y0), lb = col.cy * (Yb - col.y0);
    va[0] = fminf(fmaxf(la + col.crv * Va, 0.f), 255.f);
    va[1] = fminf(fmaxf(la + col.cgu * Ua + col.cgv * Va, 0.f), 255.f);
    va[2] = fminf(fmaxf(la + col.cbu * Ua, 0.f), 255.f);
    vb[0] = fminf(fmaxf(lb + col.crv * Vb, 0.f), 255.f);
    vb[1] = fminf(fmaxf(lb + col.cgu * Ub + col.cgv * Vb, 0.f), 255.f);
    vb[2] = fminf(fmaxf(lb + col.cbu * Ub, 0.f), 255.f);
    return;
  }
  pp_pixel(f, pitch, in_h, x0, y, fmt, col, va);
  pp_pixel(f, pitch, in_h, x1, y, fmt, col, vb);
}

template <typename T, int PX>
__device__ __forceinline__ void hm_preprocess4(const unsigned char* __restrict__ base,
                                               const unsigned long long* __restrict__ ptrs, long long frame_stride,
                                               int pitch, int in_h, int in_w, int fmt, T* __restrict__ out, int out_h,
                                               int out_w, int nhwc, int box_x, int box_y, int box_w, int box_h,
                                               float scale_x, float scale_y, float a0, float a1, float a2, float b0,
                                               float b1, float b2, float p0, float p1, float p2, int swap,
                                               PPColor col) {
  const int oxb = blockIdx.x * blockDim.x * PX + threadIdx.x;
  const int oy = blockIdx.y * blockDim.y + threadIdx.y;
  const int b = blockIdx.z;
  if (oxb >= out_w || oy >= out_h) return;
  const unsigned char* f = ptrs ? reinterpret_cast<const unsigned char*>(__ldg(ptrs + b)) : base + (long long)b * frame_stride;
  const int by = oy - box_y;
  const bool row_in = by >= 0 && by < box_h;
  int y0 = 0, y1 = 0;
  float ly0 = 0.f, ly1 = 0.f;
  if (row_in) {
    float sy = fmaf(scale_y, (float)by + 0.5f, -0.5f);
    sy = sy < 0.f ? 0.f : sy;
    y0 = (int)sy;
    y1 = y0 + (y0 < in_h - 1 ? 1 : 0);
    ly1 = sy - (float)y0;
    ly0 = 1.f - ly1;
  }
  const float a[3] = {a0, a1, a2}, bb[3] = {b0, b1, b2};
#pragma unroll
  for (int i = 0; i < PX; ++i) {
    const int ox = oxb + 32 * i;
    if (ox >= out_w) break;
    float r[3];
    const int bx = ox - box_x;
    if (!row_in || bx < 0 || bx >= box_w) {
      r[0] = p0; r[1] = p1; r[2] = p2;
    } else {
      float sx = fmaf(scale_x, (float)bx + 0.5f, -0.5f);
      sx = sx < 0.f ? 0.f : sx;
      const int x0 = (int)sx;
      const int x1 = x0 + (x0 < in_w - 1 ? 1 : 0);
      const float lx1 = sx - (float)x0, lx0 = 1.f - lx1;
      float v00[3], v01[3], v10[3], v11[3];
      pp_pair(f, pitch, in_h, in_w, x0, x1, y0, fmt, col, v00, v01);
      pp_pair(f, pitch, in_h, in_w, x0, x1, y1, fmt, col, v10, v11);
      pp_blend(v00, v01, v10, v11, lx0, lx1, ly0, ly1, swap, a, bb, r);
    }
    pp_store(out, b, oy, ox, out_h, out_w, nhwc, r);
  }
}

// ---- PXX x PXY output pixels a thread: adjacent columns, rows a block height apart ----
// Thread (x, y) of a (32, 8) block computes columns PXX * (32 * blockIdx.x + x) + j, j < PXX, of rows
// 8 * PXY * blockIdx.y + y + 8 * i, i < PXY, with hm_preprocess's arithmetic pixel for pixel (byte
// taps). Every tap of its PXX * PXY pixels is loaded before the first is used (more loads in flight
// a thread: the one-pixel kernel issues 12 one-byte loads and waits), and with PXX = 2 an NCHW row
// of an even width is written as one 2-element store a channel (a warp writes 64 pixels: 128 bytes
// of FP16 a plane, full sectors).
template <typename T> struct PPPair;
template <> struct PPPair<float> {
  static __device__ __forceinline__ void st(float* p, float v0, float v1) { *reinterpret_cast<float2*>(p) = make_float2(v0, v1); }
};
template <> struct PPPair<__half> {
  static __device__ __forceinline__ void st(__half* p, float v0, float v1) { *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1); }
};
template <> struct PPPair<__nv_bfloat16> {
  static __device__ __forceinline__ void st(__nv_bfloat16* p, float v0, float v1) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
  }
};

template <typename T, int PXX, int PXY>
__device__ __forceinline__ void hm_preprocess_xy(const unsigned char* __restrict__ base,
                                                 const unsigned long long* __restrict__ ptrs, long long frame_stride,
                                                 int pitch, int in_h, int in_w, int fmt, T* __restrict__ out,
                                                 int out_h, int out_w, int nhwc, int box_x, int box_y, int box_w,
                                                 int box_h, float scale_x, float scale_y, float a0, float a1, float a2,
                                                 float b0, float b1, float b2, float p0, float p1, float p2, int swap,
                                                 PPColor col) {
  const int ox0 = (blockIdx.x * blockDim.x + threadIdx.x) * PXX;
  const int oyb = blockIdx.y * blockDim.y * PXY + threadIdx.y;
  const int b = blockIdx.z;
  if (ox0 >= out_w || oyb >= out_h) return;
  const unsigned char* f = ptrs ? reinterpret_cast<const unsigned char*>(__ldg(ptrs + b)) : base + (long long)b * frame_stride;
  const float a[3] = {a0, a1, a2}, bb[3] = {b0, b1, b2};
  // Coordinates are clamped into the box, so every tap's address is valid and a row's loads need
  // no per-pixel branch: the compiler can issue all of them before the first blend. Pixels outside
  // the box or the output take the padding value after the loads.
  float r[PXY][PXX][3];
  float v[PXY][PXX][4][3];
  float w[PXY][PXX][4];
  bool in[PXY][PXX];
#pragma unroll
  for (int i = 0; i < PXY; ++i) {
    const int oy = oyb + blockDim.y * i;
    const int by = oy - box_y;
    const int byc = min(max(by, 0), box_h - 1);
    float sy = fmaf(scale_y, (float)byc + 0.5f, -0.5f);
    sy = sy < 0.f ? 0.f : sy;
    const int y0 = (int)sy;
    const int y1 = y0 + (y0 < in_h - 1 ? 1 : 0);
    const float ly1 = sy - (float)y0, ly0 = 1.f - ly1;
    const bool row_in = oy < out_h && by >= 0 && by < box_h;
#pragma unroll
    for (int j = 0; j < PXX; ++j) {
      const int bx = ox0 + j - box_x;
      in[i][j] = oy < out_h && ox0 + j < out_w && bx >= 0 && by >= 0 && bx < box_w && by < box_h;
      const int bxc = min(max(bx, 0), box_w - 1);
      float sx = fmaf(scale_x, (float)bxc + 0.5f, -0.5f);
      sx = sx < 0.f ? 0.f : sx;
      const int x0 = (int)sx;
      const int x1 = x0 + (x0 < in_w - 1 ? 1 : 0);
      const float lx1 = sx - (float)x0, lx0 = 1.f - lx1;
      w[i][j][0] = lx0; w[i][j][1] = lx1; w[i][j][2] = ly0; w[i][j][3] = ly1;
      if (row_in) {   // uniform across a warp (one output row): letterbox bands load nothing
        pp_pixel(f, pitch, in_h, x0, y0, fmt, col, v[i][j][0]);
        pp_pixel(f, pitch, in_h, x1, y0, fmt, col, v[i][j][1]);
        pp_pixel(f, pitch, in_h, x0, y1, fmt, col, v[i][j][2]);
        pp_pixel(f, pitch, in_h, x1, y1, fmt, col, v[i][j][3]);
      } else {
#pragma unroll
        for (int t = 0; t < 4; ++t) v[i][j][t][0] = v[i][j][t][1] = v[i][j][t][2] = 0.f;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < PXY; ++i) {
#pragma unroll
    for (int j = 0; j < PXX; ++j) {
      pp_blend(v[i][j][0], v[i][j][1], v[i][j][2], v[i][j][3], w[i][j][0], w[i][j][1], w[i][j][2], w[i][j][3], swap,
               a, bb, r[i][j]);
      if (!in[i][j]) { r[i][j][0] = p0; r[i][j][1] = p1; r[i][j][2] = p2; }
    }
  }
  const size_t plane = (size_t)out_h * out_w;
#pragma unroll
  for (int i = 0; i < PXY; ++i) {
    const int oy = oyb + blockDim.y * i;
    if (oy >= out_h) break;
    if (PXX == 2 && !nhwc && (out_w & 1) == 0) {   // ox0 even, ox0 + 1 < out_w: aligned pairs
      T* o = out + (size_t)b * 3 * plane + (size_t)oy * out_w + ox0;
#pragma unroll
      for (int c = 0; c < 3; ++c) PPPair<T>::st(o + c * plane, r[i][0][c], r[i][PXX - 1][c]);
    } else {
#pragma unroll
      for (int j = 0; j < PXX; ++j)
        if (ox0 + j < out_w) pp_store(out, b, oy, ox0 + j, out_h, out_w, nhwc, r[i][j]);
    }
  }
}

// The three kernels of a type share one parameter list (the host passes the same arguments to each).
#define HM_PP_PARAMS(T)                                                                                        \
  const unsigned char *base, const unsigned long long *ptrs, long long frame_stride, int pitch, int in_h,       \
      int in_w, int fmt, T *out, int out_h, int out_w, int nhwc, int box_x, int box_y, int box_w, int box_h,    \
      float scale_x, float scale_y, float a0, float a1, float a2, float b0, float b1, float b2, float p0,       \
      float p1, float p2, int swap, float cy, float y0, float crv, float cgu, float cgv, float cbu
#define HM_PP_ENTRY(NAME, T, BODY)                                                                             \
  extern "C" __global__ void __launch_bounds__(256) NAME(HM_PP_PARAMS(T)) {                                    \
    PPColor col = {cy, y0, crv, cgu, cgv, cbu};                                                                \
    BODY(base, ptrs, frame_stride, pitch, in_h, in_w, fmt, out, out_h, out_w, nhwc, box_x, box_y, box_w,       \
         box_h, scale_x, scale_y, a0, a1, a2, b0, b1, b2, p0, p1, p2, swap, col);                              \
  }
#define HM_PREPROCESS(SUFFIX, T)                                                                               \
  HM_PP_ENTRY(preprocess_##SUFFIX, T, hm_preprocess<T>)                                                        \
  HM_PP_ENTRY(preprocess4_##SUFFIX, T, (hm_preprocess4<T, 4>))                                                 \
  HM_PP_ENTRY(preprocess1w_##SUFFIX, T, (hm_preprocess4<T, 1>))                                               \
  HM_PP_ENTRY(preprocess_x2_##SUFFIX, T, (hm_preprocess_xy<T, 2, 1>))                                          \
  HM_PP_ENTRY(preprocess_y2_##SUFFIX, T, (hm_preprocess_xy<T, 1, 2>))                                          \
  HM_PP_ENTRY(preprocess_xy_##SUFFIX, T, (hm_preprocess_xy<T, 2, 2>))

HM_PREPROCESS(f32, float)
HM_PREPROCESS(f16, __half)
HM_PREPROCESS(bf16, __nv_bfloat16)
