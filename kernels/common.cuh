// Shared helpers of hookmagic's CUDA kernels (compiled at run time with NVRTC).
#pragma once

#define HM_DIV_UP(a, b) (((a) + (b) - 1) / (b))

// Four consecutive floats of row `row` from column `col` of a row-major matrix with leading
// dimension `ld`; out-of-range elements read as 0. `vec` (aligned base, ld % 4 == 0) allows a
// single 16-byte load when all four are in range.
__device__ __forceinline__ float4 hm_load4(const float* __restrict__ p, int row, int col, int rows,
                                           int cols, int ld, bool vec) {
  if (vec && row < rows && col + 3 < cols)
    return *reinterpret_cast<const float4*>(p + (size_t)row * ld + col);
  float4 v;
  const float* r = p + (size_t)row * ld;
  bool ok = row < rows;
  v.x = (ok && col + 0 < cols) ? r[col + 0] : 0.f;
  v.y = (ok && col + 1 < cols) ? r[col + 1] : 0.f;
  v.z = (ok && col + 2 < cols) ? r[col + 2] : 0.f;
  v.w = (ok && col + 3 < cols) ? r[col + 3] : 0.f;
  return v;
}

__device__ __forceinline__ void hm_store4(float* __restrict__ p, int row, int col, int rows, int cols,
                                          int ld, bool vec, float4 v) {
  if (row >= rows) return;
  float* r = p + (size_t)row * ld;
  if (vec && col + 3 < cols) { *reinterpret_cast<float4*>(r + col) = v; return; }
  if (col + 0 < cols) r[col + 0] = v.x;
  if (col + 1 < cols) r[col + 1] = v.y;
  if (col + 2 < cols) r[col + 2] = v.z;
  if (col + 3 < cols) r[col + 3] = v.w;
}

// Epilogues shared by the GEMMs: activation codes match hookmagic.kernels' ACTIVATIONS.
#define HM_ACT_NONE 0
#define HM_ACT_RELU 1
#define HM_ACT_GELU 2        // tanh approximation (torch gelu(approximate='tanh'))
#define HM_ACT_GELU_ERF 3    // exact erf form (torch gelu default)

__device__ __forceinline__ float hm_activate(float x, int act) {
  if (act == HM_ACT_RELU) return x > 0.f ? x : 0.f;
  if (act == HM_ACT_GELU) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    return 0.5f * x * (1.f + tanhf(k0 * (x + k1 * x * x * x)));
  }
  if (act == HM_ACT_GELU_ERF) return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
  return x;
}
