// Hopper attention forward (sm_90a): O = softmax(scale * Q K^T [causal mask]) V with wgmma and TMA,
// FlashAttention-3's structure. FP16 / BF16 in and out, FP32 accumulation and softmax statistics,
// head dimension 64 or 128, fixed-length batches (q, k, v and o of shape (batch, heads, seq, d)
// with any strides that are multiples of 16 bytes and a contiguous last dimension).
//
// One block per 128 query rows of one (batch, head); 384 threads in three warpgroups:
//  - warpgroup 0 is the producer: it gives back registers (setmaxnreg) and one thread issues every
//    TMA load: the Q tile once, then K and V tiles of 128 keys into two rings of AW_STAGES stages,
//    each stage with a full barrier (TMA completes its bytes) and an empty one (both consumers arrive);
//  - warpgroups 1 and 2 are consumers, each owning 64 query rows: S = Q K^T with wgmma m64n128k16
//    (both operands K-major in shared memory), scale, mask and the online softmax (base 2, running
//    max and sum per row) on the accumulators in registers, then O += P V with P taken from
//    registers as the A operand (the accumulator layout of S is the A-fragment layout) and V read
//    N-major (the transpose flag) from shared memory.
// Within a consumer the next tile's Q K^T is issued before this tile's P V and before its softmax
// (FlashAttention-3's intra-warpgroup overlap): the softmax of tile t runs while the Tensor Cores
// do P_{t-1} V_{t-1}; O is rescaled once that wgmma has retired. The "pingpong" entry points (_pp)
// also make the two consumers take turns issuing their wgmmas (named barriers 1 and 2,
// FlashAttention-3's inter-warpgroup schedule), so one's softmax runs while the other's GEMMs do.
// Tensor maps are 4-D (d, seq, heads, batch), so a tile past the sequence's end is zero-filled by
// TMA (never the next head's rows); masked scores are -inf before the exponential. Causal masking
// is top-left aligned (query i sees keys j <= i), as torch's is_causal; causal blocks run the
// longest (last) query blocks first.
//
// Off sm_90a the entry points compile to empty stubs (hookmagic.kernels launches them on sm_90 only).
#include "wgmma_gemm.cuh"

#define AW_BM 128          // query rows per block (64 per consumer warpgroup)
#define AW_BN 128          // keys per K/V tile
#define AW_STAGES 2        // stages of each of the K and V rings
#define AW_THREADS 384
#define AW_NEG_INF __int_as_float(0xff800000)

#ifdef HM_WGMMA_BODY
// TMA: a 4-D box at coordinates (c0 = innermost, ..., c3) into shared memory, completing on `bar`
// (elements outside the tensor are zero-filled and still counted).
__device__ __forceinline__ void aw_tma_load_4d(unsigned dst, const HmTensorMap* map, int c0, int c1, int c2, int c3,
                                               unsigned bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
               : "memory");
}

// 2^x on the special-function unit (the softmax's exponentials; -inf gives 0)
__device__ __forceinline__ float aw_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// S (64 x 128) [+]= Q (64 x 16) K^T (16 x 128): both from shared memory, K-major (no transpose);
// acc = 0 overwrites S (the first k-step of a tile).
#define AW_WGMMA_QK(TYPE, PTX)                                                                                   \
  __device__ __forceinline__ void aw_wgmma_qk(float* d, unsigned long long da, unsigned long long db, int acc,   \
                                              TYPE) {                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                    \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " " HM_WGMMA_D64_NAMES                \
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                                  \
                 : HM_WGMMA_D64_OPERANDS                                                                          \
                 : "l"(da), "l"(db), "r"(acc)                                                                     \
                 : "memory");                                                                                     \
  }
AW_WGMMA_QK(__half, "f16")
AW_WGMMA_QK(__nv_bfloat16, "bf16")

// O (64 x N) += P (64 x 16, four registers a thread in the A-fragment layout) V (16 x N from shared
// memory, N-major: the transpose flag), N = the head dimension.
template <int N> struct AwN {};
#define AW_WGMMA_PV(N, NAMES, OPERANDS, A, DB, P, TYPE, PTX)                                                     \
  __device__ __forceinline__ void aw_wgmma_pv(float* d, const unsigned* a, unsigned long long db, TYPE, AwN<N>) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                                  \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " " NAMES                          \
                 "{" A "}, " DB ", p, 1, 1, 1;\n}\n"                                                              \
                 : OPERANDS                                                                                       \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1)                                    \
                 : "memory");                                                                                     \
  }
AW_WGMMA_PV(64, HM_WGMMA_D32_NAMES, HM_WGMMA_D32_OPERANDS, "%32, %33, %34, %35", "%36", "%37", __half, "f16")
AW_WGMMA_PV(64, HM_WGMMA_D32_NAMES, HM_WGMMA_D32_OPERANDS, "%32, %33, %34, %35", "%36", "%37", __nv_bfloat16, "bf16")
AW_WGMMA_PV(128, HM_WGMMA_D64_NAMES, HM_WGMMA_D64_OPERANDS, "%64, %65, %66, %67", "%68", "%69", __half, "f16")
AW_WGMMA_PV(128, HM_WGMMA_D64_NAMES, HM_WGMMA_D64_OPERANDS, "%64, %65, %66, %67", "%68", "%69", __nv_bfloat16, "bf16")

// Shared memory: 1024-aligned Q tile (D / 64 boxes of AW_BM rows x 128 bytes, 128-byte swizzle),
// the K ring and the V ring (AW_STAGES tiles of D / 64 boxes of AW_BN rows each), then the
// mbarriers: q_full, k_full[s], v_full[s], k_empty[s], v_empty[s].
template <int D>
struct AwSmem {
  static constexpr unsigned Q_BYTES = AW_BM * D * 2, KV_BYTES = AW_BN * D * 2;
  unsigned q, k, v, bars;
  __device__ __forceinline__ AwSmem(unsigned char* raw_ptr) {
    const unsigned raw = hm_smem_addr(raw_ptr);
    q = (raw + 1023u) & ~1023u;
    k = q + Q_BYTES;
    v = k + AW_STAGES * KV_BYTES;
    bars = v + AW_STAGES * KV_BYTES;
  }
  __device__ __forceinline__ unsigned q_full() const { return bars; }
  __device__ __forceinline__ unsigned k_full(unsigned s) const { return bars + 8 * (1 + s); }
  __device__ __forceinline__ unsigned v_full(unsigned s) const { return bars + 8 * (1 + AW_STAGES + s); }
  __device__ __forceinline__ unsigned k_empty(unsigned s) const { return bars + 8 * (1 + 2 * AW_STAGES + s); }
  __device__ __forceinline__ unsigned v_empty(unsigned s) const { return bars + 8 * (1 + 3 * AW_STAGES + s); }
};

// One tile (AW_BM or AW_BN rows x D) of a (d, seq, heads, batch) tensor map: D / 64 boxes of 64 columns.
template <int D, int ROWS>
__device__ __forceinline__ void aw_load_tile(unsigned dst, const HmTensorMap* map, int row0, int h, int b,
                                             unsigned bar) {
  hm_mbar_expect_tx(bar, ROWS * D * 2);
#pragma unroll
  for (int c = 0; c < D / 64; ++c) aw_tma_load_4d(dst + c * (ROWS * 128), map, 64 * c, row0, h, b, bar);
}

// S = Q K^T for this warpgroup's 64 rows (qa: its rows of the Q tile) and the K tile at kb.
template <typename T, int D>
__device__ __forceinline__ void aw_qk(float* s, unsigned qa, unsigned kb) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)   // 16 columns of d a step: 32 bytes within a 128-byte box row
    aw_wgmma_qk(s, hm_desc(qa + (kk / 4) * (AW_BM * 128) + (kk % 4) * 32, 16, 1024),
                hm_desc(kb + (kk / 4) * (AW_BN * 128) + (kk % 4) * 32, 16, 1024), kk > 0, T());
}

// O += P V for the V tile at vb: 16 keys a step (16 rows of 128 bytes); the next 64 columns of d
// are the next box (leading byte offset AW_BN * 128).
template <typename T, int D>
__device__ __forceinline__ void aw_pv(float* o, const unsigned (*p)[4], unsigned vb) {
#pragma unroll
  for (int kk = 0; kk < AW_BN / 16; ++kk) aw_wgmma_pv(o, p[kk], hm_desc(vb + kk * 16 * 128, AW_BN * 128, 1024), T(), AwN<D>());
}

// Scale, mask and the online-softmax update of one tile of scores (keys n0 ...), in place: s
// becomes exp2(s * scale_log2 - m); row_m / row_l (rows r_lo and r_lo + 8) are updated and alpha
// is the factor O must be multiplied by. (Accumulator layout: s[4j + e] is row r_lo + 8 * (e / 2),
// key n0 + 8j + 2 * (lane % 4) + e % 2.)
__device__ __forceinline__ void aw_softmax(float* s, float* row_m, float* row_l, float* alpha, int n0, int r_lo,
                                           int row_w, int tq, int k_len, int causal, float scale_log2) {
  const bool need_mask = n0 + AW_BN > k_len || (causal && n0 + AW_BN - 1 > row_w);
#pragma unroll
  for (int j = 0; j < AW_BN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[4 * j + e] * scale_log2;
      if (need_mask) {
        const int col = n0 + 8 * j + 2 * tq + (e & 1), row = r_lo + (e >= 2 ? 8 : 0);
        if (col >= k_len || (causal && col > row)) x = AW_NEG_INF;
      }
      s[4 * j + e] = x;
    }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float mx = AW_NEG_INF;
#pragma unroll
    for (int j = 0; j < AW_BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hh], s[4 * j + 2 * hh + 1]));
    mx = hm_quad_max(mx);
    const float m_new = fmaxf(row_m[hh], mx);
    const float m_use = m_new == AW_NEG_INF ? 0.f : m_new;
    alpha[hh] = aw_exp2(row_m[hh] - m_use);   // 0 while the row had no finite score
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < AW_BN / 8; ++j) {
      s[4 * j + 2 * hh] = aw_exp2(s[4 * j + 2 * hh] - m_use);
      s[4 * j + 2 * hh + 1] = aw_exp2(s[4 * j + 2 * hh + 1] - m_use);
      sum += s[4 * j + 2 * hh] + s[4 * j + 2 * hh + 1];
    }
    row_l[hh] = row_l[hh] * alpha[hh] + sum;
    row_m[hh] = m_new;
  }
}

// P (16-bit) in the A-fragment layout of 16-key steps from the probabilities in s.
template <typename T>
__device__ __forceinline__ void aw_pack_p(unsigned (*p)[4], const float* s) {
#pragma unroll
  for (int kk = 0; kk < AW_BN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) p[kk][i] = hm_pack2<T>(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

// PP: the consumers take turns issuing wgmmas. A turn is one issue block (the first tile's Q K^T,
// each loop step's Q K^T + P V, the last P V): ntiles + 1 turns for each consumer. Consumer c waits
// on barrier 1 + c and, its wgmmas issued, arrives on the other's; consumer 1 opens consumer 0's
// first turn and skips its own last arrive, so every barrier sees as many arrives as waits.
// (Immediate barrier ids, so ptxas reserves 3 barriers rather than all 16.)
template <bool PP>
__device__ __forceinline__ void aw_turn_begin(int cw) {
  if (PP && cw == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");
  if (PP && cw == 1) asm volatile("bar.sync 2, 256;\n" ::: "memory");
}
template <bool PP>
__device__ __forceinline__ void aw_turn_end(int cw, bool last) {
  if (PP && cw == 0) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
  if (PP && cw == 1 && !last) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
}

template <typename T, int D, bool PP>
__device__ __forceinline__ void hm_attention_wgmma(const HmTensorMap* tmQ, const HmTensorMap* tmK,
                                                   const HmTensorMap* tmV, T* __restrict__ o, long long o_bs,
                                                   long long o_hs, long long o_rs, int q_len, int k_len,
                                                   float scale_log2, int causal) {
  extern __shared__ unsigned char aw_smem_raw[];
  const AwSmem<D> sm(aw_smem_raw);
  const int h = blockIdx.y, b = blockIdx.z;
  const int m0 = (causal ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x) * AW_BM;
  const int kv_end = causal ? min(k_len, m0 + AW_BM) : k_len;
  const int ntiles = (kv_end + AW_BN - 1) / AW_BN;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    hm_mbar_init(sm.q_full(), 1);
    for (int s = 0; s < AW_STAGES; ++s) {
      hm_mbar_init(sm.k_full(s), 1);     // the producer's arrive.expect_tx
      hm_mbar_init(sm.v_full(s), 1);
      hm_mbar_init(sm.k_empty(s), 2);    // one arrive per consumer warpgroup
      hm_mbar_init(sm.v_empty(s), 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {
    // producer: 24 registers a thread are enough; the consumers take the rest
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmQ)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmK)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmV)) : "memory");
      aw_load_tile<D, AW_BM>(sm.q, tmQ, m0, h, b, sm.q_full());
      for (int t = 0; t < ntiles; ++t) {
        const unsigned s = t % AW_STAGES, ph = ((unsigned)(t / AW_STAGES) & 1u) ^ 1u;
        hm_mbar_wait(sm.k_empty(s), ph);
        aw_load_tile<D, AW_BN>(sm.k + s * sm.KV_BYTES, tmK, t * AW_BN, h, b, sm.k_full(s));
        hm_mbar_wait(sm.v_empty(s), ph);
        aw_load_tile<D, AW_BN>(sm.v + s * sm.KV_BYTES, tmV, t * AW_BN, h, b, sm.v_full(s));
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  const int cw = wg - 1, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, tq = lane % 4;
  const bool leader = tid == 0;
  const int row_w = m0 + cw * 64 + warp * 16;   // this warp's first query row
  const int r_lo = row_w + lane / 4;            // this thread's rows: r_lo and r_lo + 8
  const unsigned qa = sm.q + cw * 64 * 128;     // this warpgroup's 64 rows of each Q box
  float oacc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) oacc[i] = 0.f;
  float s[AW_BN / 2], alpha[2];
  unsigned p[AW_BN / 16][4];
  float row_m[2] = {AW_NEG_INF, AW_NEG_INF}, row_l[2] = {0.f, 0.f};
  if (PP && cw == 1 && ntiles > 0) asm volatile("bar.arrive 1, 256;\n" ::: "memory");   // consumer 0 goes first
  hm_mbar_wait(sm.q_full(), 0);
  if (ntiles > 0) {
    aw_turn_begin<PP>(cw);
    hm_mbar_wait(sm.k_full(0), 0);
    hm_wgmma_fence();
    aw_qk<T, D>(s, qa, sm.k);
    hm_wgmma_commit();
    aw_turn_end<PP>(cw, false);
    hm_wgmma_wait<0>();
    if (leader) hm_mbar_arrive(sm.k_empty(0));
    aw_softmax(s, row_m, row_l, alpha, 0, r_lo, row_w, tq, k_len, causal, scale_log2);
    aw_pack_p<T>(p, s);
  }
  for (int t = 1; t < ntiles; ++t) {
    const unsigned st = t % AW_STAGES, sp = (t - 1) % AW_STAGES;
    aw_turn_begin<PP>(cw);
    hm_mbar_wait(sm.k_full(st), (unsigned)(t / AW_STAGES) & 1u);
    hm_wgmma_fence();
    aw_qk<T, D>(s, qa, sm.k + st * sm.KV_BYTES);            // S of tile t ...
    hm_wgmma_commit();
    hm_mbar_wait(sm.v_full(sp), (unsigned)((t - 1) / AW_STAGES) & 1u);
    aw_pv<T, D>(oacc, p, sm.v + sp * sm.KV_BYTES);           // ... while O += P V of tile t - 1
    hm_wgmma_commit();
    aw_turn_end<PP>(cw, false);
    hm_wgmma_wait<1>();                                      // S of tile t is ready
    if (leader) hm_mbar_arrive(sm.k_empty(st));
    aw_softmax(s, row_m, row_l, alpha, t * AW_BN, r_lo, row_w, tq, k_len, causal, scale_log2);
    hm_wgmma_wait<0>();                                      // P V of tile t - 1 has retired
    if (leader) hm_mbar_arrive(sm.v_empty(sp));
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      oacc[4 * j] *= alpha[0];
      oacc[4 * j + 1] *= alpha[0];
      oacc[4 * j + 2] *= alpha[1];
      oacc[4 * j + 3] *= alpha[1];
    }
    aw_pack_p<T>(p, s);
  }
  if (ntiles > 0) {
    const unsigned sl = (ntiles - 1) % AW_STAGES;
    aw_turn_begin<PP>(cw);
    hm_mbar_wait(sm.v_full(sl), (unsigned)((ntiles - 1) / AW_STAGES) & 1u);
    hm_wgmma_fence();
    aw_pv<T, D>(oacc, p, sm.v + sl * sm.KV_BYTES);
    hm_wgmma_commit();
    aw_turn_end<PP>(cw, true);
    hm_wgmma_wait<0>();
  }
  T* O = o + b * o_bs + h * o_hs;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float l = hm_quad_sum(row_l[hh]);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = r_lo + 8 * hh;
    if (row < q_len) {
      T* orow = O + (long long)row * o_rs;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<unsigned*>(orow + 8 * j + 2 * tq) =
            hm_pack2<T>(oacc[4 * j + 2 * hh] * inv, oacc[4 * j + 2 * hh + 1] * inv);
    }
  }
}
#define AW_BODY(T, D, PP) hm_attention_wgmma<T, D, PP>(&tmQ, &tmK, &tmV, o, o_bs, o_hs, o_rs, q_len, k_len, scale_log2, causal)
#else
#define AW_BODY(T, D, PP) ((void)0)
#endif  // HM_WGMMA_BODY

// Grid (ceil(seq_q / 128), heads, batch), AW_THREADS threads, dynamic shared memory
// 1024 + 128 * D * 2 * (1 + 2 * AW_STAGES) + 8 * (1 + 4 * AW_STAGES) bytes (hookmagic/kernels/attention.py).
#define AW_ENTRY(NAME, T, D, PP)                                                                                 \
  extern "C" __global__ void __launch_bounds__(AW_THREADS, 1) NAME(                                              \
      const __grid_constant__ HmTensorMap tmQ, const __grid_constant__ HmTensorMap tmK,                          \
      const __grid_constant__ HmTensorMap tmV, T* o, long long o_bs, long long o_hs, long long o_rs, int q_len,  \
      int k_len, float scale_log2, int causal) {                                                                 \
    AW_BODY(T, D, PP);                                                                                           \
  }
// schedule "overlap" (no suffix) and "pingpong" (_pp)
#define AW_ENTRIES(SUFFIX, PP)                                          \
  AW_ENTRY(attention_wgmma_f16_d64##SUFFIX, __half, 64, PP)             \
  AW_ENTRY(attention_wgmma_f16_d128##SUFFIX, __half, 128, PP)           \
  AW_ENTRY(attention_wgmma_bf16_d64##SUFFIX, __nv_bfloat16, 64, PP)     \
  AW_ENTRY(attention_wgmma_bf16_d128##SUFFIX, __nv_bfloat16, 128, PP)
AW_ENTRIES(, false)
AW_ENTRIES(_pp, true)
