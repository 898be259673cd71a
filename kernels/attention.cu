// Flash-style fused attention forward: O = softmax(scale * Q K^T [causal mask]) V, without ever
// writing the score matrix. FP16 / BF16 inputs, FP32 accumulation and softmax statistics, head
// dimension 64 or 128, fixed-length batches or packed variable-length sequences (offsets).
//
// One block of NW warps (4 or 8) per 16*NW query rows of one (sequence, head); each warp owns 16
// query rows. (8 warps halve the K/V traffic per FLOP, 4 leave room for more blocks per SM.)
// The kernel walks the keys/values in tiles of 64 rows staged in shared memory with cp.async
// (V of tile t loads while S = Q K_t^T is computed; K of tile t+1 while O += P V_t is).
// S and O use mma.sync m16n8k16 with ldmatrix; P stays in registers (the accumulator layout of
// two 8-column tiles is the A-operand layout of one 16-deep step). Online softmax in base 2
// (FlashAttention-2): running max m and sum l per row, O rescaled when m grows, divided by l once.
// Causal masking is top-left aligned (query i sees keys j <= i), as torch's is_causal.
#include "tc_common.cuh"

#define AT_BN 64
#define AT_NEG_INF __int_as_float(0xff800000)

// rows [row0, row0 + ROWS) of a (len x D) matrix with row stride `rs` into shared memory (row
// pitch D + 8 elements) by NT threads; rows at or past `len` are zero-filled.
template <typename T, int D, int ROWS, int NT>
__device__ __forceinline__ void at_load_tile(T* s, const T* __restrict__ g, long long rs, int row0, int len) {
  constexpr int LDS = D + 8, CH = D / 8;  // 16-byte chunks per row
#pragma unroll
  for (int u = threadIdx.x; u < ROWS * CH; u += NT) {
    const int r = u / CH, c = (u % CH) * 8;
    const bool ok = row0 + r < len;
    hm_cp_async16(s + r * LDS + c, ok ? (const void*)(g + (long long)(row0 + r) * rs + c) : (const void*)g, ok);
  }
}

template <typename T, int D, int NW>
__device__ __forceinline__ void hm_attention(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    T* __restrict__ o, long long q_bs, long long q_hs, long long q_rs, long long k_bs, long long k_hs, long long k_rs,
    long long v_bs, long long v_hs, long long v_rs, long long o_bs, long long o_hs, long long o_rs,
    const int* __restrict__ q_off, const int* __restrict__ k_off, int q_len, int k_len, float scale_log2, int causal) {
  constexpr int LDS = D + 8, KD = D / 16, ND = D / 8, BM = 16 * NW, NT = 32 * NW;
  static_assert(BM <= 2 * AT_BN, "the Q tile is staged where K and V go");
  extern __shared__ __align__(128) unsigned char at_smem[];
  T* sK = reinterpret_cast<T*>(at_smem);  // the Q tile first (BM rows over sK and sV), then K tiles
  T* sV = sK + AT_BN * LDS;
  const int b = blockIdx.z, h = blockIdx.y, m0 = blockIdx.x * BM;
  const int qs = q_off ? q_off[b] : 0, ql = q_off ? q_off[b + 1] - qs : q_len;
  const int ks = k_off ? k_off[b] : 0, kl = k_off ? k_off[b + 1] - ks : k_len;
  if (m0 >= ql) return;
  const T* Q = q + b * q_bs + h * q_hs + (long long)qs * q_rs;
  const T* K = k + b * k_bs + h * k_hs + (long long)ks * k_rs;
  const T* V = v + b * v_bs + h * v_hs + (long long)ks * v_rs;
  T* O = o + b * o_bs + h * o_hs + (long long)qs * o_rs;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int kv_end = causal ? min(kl, m0 + BM) : kl;
  const int ntiles = (kv_end + AT_BN - 1) / AT_BN;

  at_load_tile<T, D, BM, NT>(sK, Q + (long long)m0 * q_rs, q_rs, 0, ql - m0);
  hm_cp_commit();
  hm_cp_wait<0>();
  __syncthreads();
  unsigned qf[KD][4];
#pragma unroll
  for (int kk = 0; kk < KD; ++kk)
    hm_ldmatrix_x4(qf[kk], &sK[(warp * 16 + (lane % 16)) * LDS + kk * 16 + (lane / 16) * 8]);
  __syncthreads();  // every warp holds its Q fragments: the tile's space takes K and V now
  if (ntiles > 0) at_load_tile<T, D, AT_BN, NT>(sK, K, k_rs, 0, kl);
  hm_cp_commit();

  float acc[ND][4];
#pragma unroll
  for (int j = 0; j < ND; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  float row_m[2] = {AT_NEG_INF, AT_NEG_INF}, row_l[2] = {0.f, 0.f};
  const int r_lo = m0 + warp * 16 + g;  // query rows of this thread: r_lo and r_lo + 8

  for (int tile = 0; tile < ntiles; ++tile) {
    const int n0 = tile * AT_BN;
    __syncthreads();  // every warp is done with sV (the previous V tile)
    at_load_tile<T, D, AT_BN, NT>(sV, V, v_rs, n0, kl);
    hm_cp_commit();
    hm_cp_wait<1>();  // this tile's K (committed before V) has landed
    __syncthreads();

    float s[AT_BN / 8][4];
#pragma unroll
    for (int j = 0; j < AT_BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
#pragma unroll
      for (int np = 0; np < AT_BN / 16; ++np) {
        unsigned r[4];
        hm_ldmatrix_x4(r, &sK[(np * 16 + (lane % 8) + (lane / 16) * 8) * LDS + kk * 16 + ((lane / 8) % 2) * 8]);
        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        hm_mma16816(s[2 * np], qf[kk], b0, T());
        hm_mma16816(s[2 * np + 1], qf[kk], b1, T());
      }
    }
    // scale to base 2, mask, and the online softmax update
    const bool need_mask = n0 + AT_BN > kl || (causal && n0 + AT_BN - 1 > m0 + warp * 16);
#pragma unroll
    for (int j = 0; j < AT_BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[j][e] * scale_log2;
        if (need_mask) {
          const int col = n0 + j * 8 + 2 * t + (e & 1), row = r_lo + (e >= 2 ? 8 : 0);
          if (col >= kl || (causal && col > row)) x = AT_NEG_INF;
        }
        s[j][e] = x;
      }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = AT_NEG_INF;
#pragma unroll
      for (int j = 0; j < AT_BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hh], s[j][2 * hh + 1]));
      mx = hm_quad_max(mx);
      const float m_new = fmaxf(row_m[hh], mx);
      const float m_use = m_new == AT_NEG_INF ? 0.f : m_new;
      const float alpha = exp2f(row_m[hh] - m_use);  // 0 while the row had no finite score
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < AT_BN / 8; ++j) {
        s[j][2 * hh] = exp2f(s[j][2 * hh] - m_use);
        s[j][2 * hh + 1] = exp2f(s[j][2 * hh + 1] - m_use);
        sum += s[j][2 * hh] + s[j][2 * hh + 1];
      }
      row_l[hh] = row_l[hh] * alpha + sum;
      row_m[hh] = m_new;
#pragma unroll
      for (int j = 0; j < ND; ++j) {
        acc[j][2 * hh] *= alpha;
        acc[j][2 * hh + 1] *= alpha;
      }
    }
    hm_cp_wait<0>();  // V of this tile
    __syncthreads();  // ... visible to all, and every warp is done with sK
    if (tile + 1 < ntiles) at_load_tile<T, D, AT_BN, NT>(sK, K, k_rs, n0 + AT_BN, kl);
    hm_cp_commit();
    // O += P V: P from registers (accumulator layout -> A operand), V by transposed ldmatrix
#pragma unroll
    for (int kk = 0; kk < AT_BN / 16; ++kk) {
      unsigned a[4];
      a[0] = hm_pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = hm_pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = hm_pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = hm_pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        unsigned r[4];
        hm_ldmatrix_x4_trans(r, &sV[(kk * 16 + (lane % 16)) * LDS + dp * 16 + (lane / 16) * 8]);
        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        hm_mma16816(acc[2 * dp], a, b0, T());
        hm_mma16816(acc[2 * dp + 1], a, b1, T());
      }
    }
  }
  hm_cp_wait<0>();
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float l = hm_quad_sum(row_l[hh]);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = r_lo + hh * 8;  // query row within the sequence
    if (row < ql) {
      T* orow = O + (long long)row * o_rs;
#pragma unroll
      for (int j = 0; j < ND; ++j)
        *reinterpret_cast<unsigned*>(orow + j * 8 + 2 * t) = hm_pack2<T>(acc[j][2 * hh] * inv, acc[j][2 * hh + 1] * inv);
    }
  }
}

#define HM_ATTENTION(NAME, T, D, NW)                                                                            \
  extern "C" __global__ void __launch_bounds__(32 * NW) NAME(                                                     \
      const T* q, const T* k, const T* v, T* o, long long q_bs, long long q_hs, long long q_rs, long long k_bs,   \
      long long k_hs, long long k_rs, long long v_bs, long long v_hs, long long v_rs, long long o_bs,             \
      long long o_hs, long long o_rs, const int* q_off, const int* k_off, int q_len, int k_len, float scale_log2, \
      int causal) {                                                                                              \
    hm_attention<T, D, NW>(q, k, v, o, q_bs, q_hs, q_rs, k_bs, k_hs, k_rs, v_bs, v_hs, v_rs, o_bs, o_hs, o_rs,    \
                           q_off, k_off, q_len, k_len, scale_log2, causal);                                      \
  }

// 64 query rows per block (4 warps) and 128 (8 warps)
HM_ATTENTION(attention_f16_d64, __half, 64, 4)
HM_ATTENTION(attention_f16_d128, __half, 128, 4)
HM_ATTENTION(attention_bf16_d64, __nv_bfloat16, 64, 4)
HM_ATTENTION(attention_bf16_d128, __nv_bfloat16, 128, 4)
HM_ATTENTION(attention_f16_d64_m128, __half, 64, 8)
HM_ATTENTION(attention_f16_d128_m128, __half, 128, 8)
HM_ATTENTION(attention_bf16_d64_m128, __nv_bfloat16, 64, 8)
HM_ATTENTION(attention_bf16_d128_m128, __nv_bfloat16, 128, 8)
