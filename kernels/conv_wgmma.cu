// Hopper convolution (sm_90a): implicit GEMM on wgmma, FP16/BF16 NHWC activations, KRSC weights,
// FP32 accumulate, NHWC out: y = act(conv(x, w) + bias) + residual.
//
// The GEMM: output pixels are the rows (M = N*OH*OW), output channels the columns (K), and the
// reduction runs over (r, s, c) of the filter (Kg = R*S*C). KRSC weights are that GEMM's B as an
// N x K row-major ("K-major") matrix (K rows of R*S*C), so TMA reads them as they are: one 64 x BN
// box per k-step, 128-byte swizzle. The A operand is gathered from the input (im2col on the fly).
//
// One block: 384 threads, three warpgroups, persistent (one block per SM walks the tiles, tile =
// blockIdx.x, += gridDim.x; the N tiles of one M tile are adjacent so the gathered pixels are read
// from L2 once per M tile). Warpgroup 0 is the producer: for each k-step (64 elements of Kg) each of
// its 128 threads decodes its chunk's (r, s, c) once and issues 8 cp.async of 16 bytes (8 output
// pixels' rows of the 128 x 64 A tile; 16 of 8 bytes for the _c4 kernels), written at the
// 128-byte-swizzled position TMA would use, zero-filled where the filter hangs over the padding or past Kg; thread 0 also issues
// the weights' TMA box. Stage s is full when TMA's bytes have landed and all 128 threads' cp.async
// have completed (cp.async.mbarrier.arrive.noinc: full[s] counts 128 + 1 arrivals). Warpgroups 1
// and 2 are consumers, each owning 64 rows x BN columns (BN / 2 FP32 registers a thread), issuing
// 4 wgmma m64nBNk16 per k-step from shared memory and releasing the stage (empty[s], 2 arrivals)
// once they retire. cp.async writes through the generic proxy and wgmma reads through the async
// proxy, so each consumer fences (fence.proxy.async) after the full barrier's wait.
//
// Epilogue: each consumer applies bias / activation / residual in registers, writes its 64 x BN
// tile as FP16/BF16 into its own staging area (16-byte chunks XOR-swizzled by row) and stores it
// with 16-byte coalesced stores, synchronising only its own 128 threads, so it overlaps the other
// warpgroup's mainloop and the producer's loads of the next tile.
//
// Requirements (checked by hookmagic.kernels.conv): C % 8 == 0 for the 16-byte chunks, C % 4 == 0
// for the _c4 kernels' 8-byte chunks (a chunk never straddles two filter taps; other C are
// zero-padded on the host), 16-byte aligned x and w, w's rows (R*S*C) padded to a multiple of 8
// elements (TMA's 16-byte row stride); any K (vec = 0: element stores where K % 8 != 0), any R, S,
// stride, padding.
// Off sm_90a the entry points compile to empty stubs (hookmagic.kernels refuses to launch them).
#include "wgmma_gemm.cuh"

#if !defined(CV_BM) || !defined(CV_BK) || !defined(CV_THREADS) || !defined(CV_STAGES_N128) || !defined(CV_STAGES_N64)
#error "compile with the -D tile constants of hookmagic/kernels/constants.py (hookmagic.kernels.build does)"
#endif
#define CV_A_BYTES (CV_BM * CV_BK * 2)

#ifdef HM_WGMMA_BODY
// d[N / 2] += A (descriptor da, K-major) x B (descriptor db, K-major), one k16 step; NAMES, OPERANDS:
// the N / 2 accumulators (wgmma_gemm.cuh); DA, DB, P: the operand numbers after them.
#define HM_CV_WGMMA(N, NAMES, OPERANDS, TYPE, PTX, DA, DB, P)                                              \
  __device__ __forceinline__ void hm_cv_wgmma(float* d, unsigned long long da, unsigned long long db,      \
                                              TYPE, hm_cv_n<N>) {                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " " NAMES                   \
                 "%" #DA ", %" #DB ", p, 1, 1, 0, 0;\n}\n"                                                 \
                 : OPERANDS                                                                                \
                 : "l"(da), "l"(db), "r"(1)                                                                \
                 : "memory");                                                                              \
  }
template <int N> struct hm_cv_n {};
HM_CV_WGMMA(64, HM_WGMMA_D32_NAMES, HM_WGMMA_D32_OPERANDS, __half, "f16", 32, 33, 34)
HM_CV_WGMMA(64, HM_WGMMA_D32_NAMES, HM_WGMMA_D32_OPERANDS, __nv_bfloat16, "bf16", 32, 33, 34)
HM_CV_WGMMA(128, HM_WGMMA_D64_NAMES, HM_WGMMA_D64_OPERANDS, __half, "f16", 64, 65, 66)
HM_CV_WGMMA(128, HM_WGMMA_D64_NAMES, HM_WGMMA_D64_OPERANDS, __nv_bfloat16, "bf16", 64, 65, 66)

// TMA im2col: 128 output pixels' receptive-field rows of 64 channels (the tensor map's box), the
// pixel walk starting at (c, w, h, n) and each pixel read at its coordinates + (ow_off, oh_off).
__device__ __forceinline__ void hm_tma_im2col_4d(unsigned dst, const HmTensorMap* map, int c, int w, int h, int n,
                                                 unsigned short ow_off, unsigned short oh_off, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n"
               ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar),
                 "h"(ow_off), "h"(oh_off)
               : "memory");
}

__device__ __forceinline__ void hm_cp_async16_bar_arrive(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Named barrier `id` over one warpgroup's 128 threads that also ORs `v` across them (bar.red).
__device__ __forceinline__ bool hm_wg_bar_or(int id, bool v) {
  unsigned r;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 q, %2, 0;\nbar.red.or.pred p, %1, 128, q;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(r) : "r"(id), "r"((unsigned)v) : "memory");
  return r != 0;
}

// Split-K (the _sk kernels): `splits` units share each tile, unit u = part * ntiles + tile taking
// k-steps [part * ktiles / splits, (part + 1) * ktiles / splits). Each consumer warpgroup stores its
// 64 x BN FP32 partial to ws (slot (u * 2 + cw), fragment order: float4 j of thread t at j * 128 + t,
// so every store and load is a coalesced 512 bytes a warp), fences, and counts itself in cnt[tile * 2
// + cw]; the warpgroup that counts last sums the slots of parts 0, 1, .. in that order (the same bits
// whichever part finishes last), resets the counter to 0 for the next launch and runs the epilogue.
// Nobody waits on another block, so any number of units is safe on any number of resident blocks.
template <int BN>
__device__ __forceinline__ bool hm_cv_split_reduce(float* d, float* __restrict__ ws, int* __restrict__ cnt, int tile,
                                                   int ntiles, int part, int splits, int cw, int t) {
  constexpr int J = BN / 8;   // float4s a thread
  float4* own = reinterpret_cast<float4*>(ws) + ((size_t)(part * ntiles + tile) * 2 + cw) * (J * 128) + t;
#pragma unroll
  for (int j = 0; j < J; ++j) __stcg(own + j * 128, make_float4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]));
  __threadfence();
  asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
  bool last = false;
  if (t == 0) {
    int* c = cnt + tile * 2 + cw;
    last = atomicAdd(c, 1) == splits - 1;
    if (last) atomicExch(c, 0);
  }
  if (!hm_wg_bar_or(2 + cw, last)) return false;
  __threadfence();
  const float4* slot = reinterpret_cast<const float4*>(ws) + (size_t)tile * 2 * (J * 128) + cw * (J * 128) + t;
  const size_t step = (size_t)ntiles * 2 * (J * 128);   // one part's slots
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const float4 v = __ldcg(slot + j * 128);
    d[4 * j] = v.x, d[4 * j + 1] = v.y, d[4 * j + 2] = v.z, d[4 * j + 3] = v.w;
  }
  for (int p = 1; p < splits; ++p) {
    slot += step;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float4 v = __ldcg(slot + j * 128);
      d[4 * j] += v.x, d[4 * j + 1] += v.y, d[4 * j + 2] += v.z, d[4 * j + 3] += v.w;
    }
  }
  return true;
}

// Shared memory: 1024-aligned base, STAGES A stages (16 KiB), STAGES B stages (BN x 128 B), two
// 64 x BN staging tiles, then full[s] and empty[s] mbarriers.
template <int BN, int STAGES>
struct HmCvSmem {
  static constexpr unsigned B_BYTES = BN * CV_BK * 2;
  unsigned sA, sB, bars;
  unsigned char* stage_ptr;
  __device__ __forceinline__ explicit HmCvSmem(unsigned char* raw_ptr) {
    const unsigned raw = hm_smem_addr(raw_ptr);
    const unsigned base = (raw + 1023u) & ~1023u;
    sA = base;
    sB = base + STAGES * CV_A_BYTES;
    const unsigned stg = sB + STAGES * B_BYTES;
    stage_ptr = raw_ptr + (stg - raw);
    bars = stg + 2 * 64 * BN * 2;
  }
  __device__ __forceinline__ unsigned full(unsigned s) const { return bars + 8 * s; }
  __device__ __forceinline__ unsigned empty(unsigned s) const { return bars + 8 * (STAGES + s); }
};

// CB: how the producer loads A: 0 = TMA im2col (tmX; C % 64 == 0), else cp.async chunks of CB bytes,
// 16 (C % 8 == 0) or 8 (C % 4 == 0: the RGB stem padded to 4 channels)
// SK: the split-K form (hm_cv_split_reduce; ws, cnt, splits), else splits = 1 and the units are the tiles.
template <typename T, int BN, int STAGES, int CB, bool SK>
__device__ __forceinline__ void hm_conv_wgmma(const HmTensorMap* tmW, const HmTensorMap* tmX, const T* __restrict__ x,
                                              T* __restrict__ y,
                                              const T* __restrict__ bias, const T* __restrict__ residual, int H,
                                              int W, int C, int K, int S, int OH, int OW, int stride, int pad, int M,
                                              int Kg, int act, int vec, float* __restrict__ ws, int* __restrict__ cnt,
                                              int splits) {
  extern __shared__ unsigned char hm_cv_smem_raw[];
  const HmCvSmem<BN, STAGES> sm(hm_cv_smem_raw);
  const int tiles_n = (K + BN - 1) / BN, ntiles = ((M + CV_BM - 1) / CV_BM) * tiles_n;
  const int ktiles = (Kg + CV_BK - 1) / CV_BK;
  const int nunits = SK ? ntiles * splits : ntiles;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      // TMA im2col: the expect_tx alone; gathering: + 128 producer threads' cp.async
      hm_mbar_init(sm.full(s), CB == 0 ? 1 : 128 + 1);
      hm_mbar_init(sm.empty(s), 2);        // one arrive per consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (wg == 0 && CB == 0) {
    // ---- producer, TMA im2col: thread 0 loads both operands of every k-step: the weights' box and
    // 128 pixels x 64 channels of tap (r, s) = (kt / (C / 64)) divided by S, channels (kt % (C / 64)) * 64 ----
    if (t == 0) {
      hm_wg_prefetch_maps(tmW, tmX);
      const int cblocks = C / CV_BK;
      unsigned it = 0;
      for (int u = blockIdx.x; u < nunits; u += gridDim.x) {
        const int tile = SK ? u % ntiles : u, part = SK ? u / ntiles : 0;
        const int kb = SK ? part * ktiles / splits : 0, ke = SK ? (part + 1) * ktiles / splits : ktiles;
        const int m0 = (tile / tiles_n) * CV_BM, n0 = (tile % tiles_n) * BN;
        const int ow = m0 % OW, q = m0 / OW, oh = q % OH, n = q / OH;
        const int w0 = ow * stride - pad, h0 = oh * stride - pad;   // the first pixel's filter corner
        for (int kt = kb; kt < ke; ++kt, ++it) {
          const unsigned s = it % STAGES;
          hm_mbar_wait(sm.empty(s), ((it / STAGES) & 1u) ^ 1u);
          const int rs = kt / cblocks, r = rs / S;
          hm_mbar_expect_tx(sm.full(s), CV_A_BYTES + HmCvSmem<BN, STAGES>::B_BYTES);
          hm_tma_im2col_4d(sm.sA + s * CV_A_BYTES, tmX, (kt - rs * cblocks) * CV_BK, w0, h0, n,
                           (unsigned short)(rs - r * S), (unsigned short)r, sm.full(s));
          hm_tma_load_2d(sm.sB + s * HmCvSmem<BN, STAGES>::B_BYTES, tmW, kt * CV_BK, n0, sm.full(s));
        }
      }
    }
    return;
  }
  if (wg == 0) {
    // ---- producer: thread t gathers chunk j = t % NCH (E channels of the k-step) of rows
    // t / NCH + (128 / NCH) i, i < NCH; thread 0 also loads the weights' box ----
    constexpr int CBG = CB ? CB : 16;   // (the TMA kernels never get here)
    constexpr int E = CBG / 2, NCH = 128 / CBG, RSTEP = 128 / NCH;
    if (t == 0) asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmW)) : "memory");
    const int j = t % NCH, row0 = t / NCH;
    // the chunk's byte offset in a 128-byte row: its 16-byte unit XOR (row % 8), as TMA's 128B swizzle
    const int unit = (j * CBG) >> 4, sub = (j * CBG) & 15;
    unsigned it = 0;
    for (int u = blockIdx.x; u < nunits; u += gridDim.x) {
      const int tile = SK ? u % ntiles : u, part = SK ? u / ntiles : 0;
      const int kb = SK ? part * ktiles / splits : 0, ke = SK ? (part + 1) * ktiles / splits : ktiles;
      const int m0 = (tile / tiles_n) * CV_BM, n0 = (tile % tiles_n) * BN;
      int pix[NCH], ih0[NCH], iw0[NCH];
#pragma unroll
      for (int i = 0; i < NCH; ++i) {
        const int m = m0 + row0 + RSTEP * i;
        const int mm = m < M ? m : 0;
        const int ow = mm % OW, q = mm / OW, oh = q % OH, n = q / OH;
        pix[i] = n * H * W;
        ih0[i] = m < M ? oh * stride - pad : -(1 << 28);   // a row past M fails every bounds check
        iw0[i] = ow * stride - pad;
      }
      for (int kt = kb; kt < ke; ++kt, ++it) {
        const unsigned s = it % STAGES;
        hm_mbar_wait(sm.empty(s), ((it / STAGES) & 1u) ^ 1u);
        if (t == 0) {
          hm_mbar_expect_tx(sm.full(s), HmCvSmem<BN, STAGES>::B_BYTES);
          hm_tma_load_2d(sm.sB + s * HmCvSmem<BN, STAGES>::B_BYTES, tmW, kt * CV_BK, n0, sm.full(s));
        }
        const int k = kt * CV_BK + E * j;
        const bool kok = k < Kg;
        const int rs = kok ? k / C : 0, c = k - rs * C, r = rs / S, fs = rs - r * S;
        const unsigned a_dst = sm.sA + s * CV_A_BYTES;
#pragma unroll
        for (int i = 0; i < NCH; ++i) {
          const int row = row0 + RSTEP * i;
          const int ih = ih0[i] + r, iw = iw0[i] + fs;
          const bool ok = kok && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
          const T* src = ok ? x + ((size_t)(pix[i] + ih * W + iw) * C + c) : x;
          const unsigned dst = a_dst + row * 128 + ((unit ^ (row & 7)) << 4) + sub;
          if (CBG == 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0)
                         : "memory");
          else
            asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 8 : 0)
                         : "memory");
        }
        hm_cp_async16_bar_arrive(sm.full(s));
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }
  // ---- consumers ----
  const int cw = wg - 1, warp = t / 32, lane = t % 32;
  const bool leader = t == 0, plain = !bias && !residual && act == 0;
  T* stg = reinterpret_cast<T*>(sm.stage_ptr) + cw * 64 * BN;
  constexpr int CH = BN / 8;               // 16-byte chunks per staging row
  unsigned it = 0;
  float d[BN / 2];
  for (int u = blockIdx.x; u < nunits; u += gridDim.x) {
    const int tile = SK ? u % ntiles : u, part = SK ? u / ntiles : 0;
    const int kb = SK ? part * ktiles / splits : 0, ke = SK ? (part + 1) * ktiles / splits : ktiles;
    const int m0 = (tile / tiles_n) * CV_BM, n0 = (tile % tiles_n) * BN;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
    for (int kt = kb; kt < ke; ++kt, ++it) {
      const unsigned s = it % STAGES;
      hm_mbar_wait(sm.full(s), (it / STAGES) & 1u);
      if (CB) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // the producer's cp.async bytes
      const unsigned a0 = sm.sA + s * CV_A_BYTES + cw * (64 * 128);
      const unsigned b0 = sm.sB + s * HmCvSmem<BN, STAGES>::B_BYTES;
      hm_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        hm_cv_wgmma(d, hm_desc(a0 + kk * 32, 16, 1024), hm_desc(b0 + kk * 32, 16, 1024), T(), hm_cv_n<BN>());
      hm_wgmma_commit();
      hm_wgmma_wait<1>();
      if (kt > kb && leader) hm_mbar_arrive(sm.empty((it - 1) % STAGES));
    }
    hm_wgmma_wait<0>();
    if (ke > kb && leader) hm_mbar_arrive(sm.empty((it - 1) % STAGES));
    if (SK && splits > 1 && !hm_cv_split_reduce<BN>(d, ws, cnt, tile, ntiles, part, splits, cw, t)) continue;
    // epilogue: registers (+ bias / activation / residual) -> staging tile -> y
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");   // the previous tile's stores have read it
    const int rl = warp * 16 + lane / 4, q = lane % 4;
#pragma unroll
    for (int jj = 0; jj < CH; ++jj)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = rl + 8 * h;
        *reinterpret_cast<unsigned*>(&stg[row * BN + ((jj ^ (row % 8)) * 8) + 2 * q]) = hm_wg_pair<T>(
            d[4 * jj + 2 * h], d[4 * jj + 2 * h + 1], m0 + cw * 64 + row, n0 + 8 * jj + 2 * q, plain, bias, residual,
            M, K, act);
      }
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
#pragma unroll 1
    for (int i = t; i < 64 * CH; i += 128) {
      const int row = i / CH, ch = i % CH;
      const int gr = m0 + cw * 64 + row, gc = n0 + ch * 8;
      if (gr >= M || gc >= K) continue;
      hm_wg_store8<T>(y, gr, gc, K, vec, *reinterpret_cast<const uint4*>(&stg[row * BN + ((ch ^ (row % 8)) * 8)]));
    }
  }
}
#define HM_CV_BODY(T, BN, ST, CB, SK, WS, CNT, SPLITS)                                                           \
  hm_conv_wgmma<T, BN, ST, CB, SK>(&tmW, &tmX, x, y, bias, residual, H, W, C, K, S, OH, OW, stride, pad, M, Kg, act, \
                                   vec, WS, CNT, SPLITS)
#else
#define HM_CV_BODY(T, BN, ST, CB, SK, WS, CNT, SPLITS) ((void)0)
#endif  // HM_WGMMA_BODY

// conv_wgmma_<f16|bf16>_n<BN>[_c4|_tma]: BN output channels a tile, STAGES k-steps in flight (both fill
// the shared memory: CV_STAGES_N128 x 32 KiB for BN 128, CV_STAGES_N64 x 24 KiB for BN 64, + 2 x 64 x BN
// staging); the A operand
// by TMA im2col (_tma: C % 64 == 0, tmX), or gathered in 16-byte chunks (C % 8 == 0) or 8-byte ones
// (_c4: C % 4 == 0; tmX unused).
#define HM_CV_ENTRY(NAME, T, BN, ST, CB)                                                                       \
  extern "C" __global__ void __launch_bounds__(CV_THREADS, 1) NAME(                                            \
      const __grid_constant__ HmTensorMap tmW, const __grid_constant__ HmTensorMap tmX, const T* x, T* y, const T* bias, const T* residual, int H, int W, \
      int C, int K, int S, int OH, int OW, int stride, int pad, int M, int Kg, int act, int vec) {             \
    HM_CV_BODY(T, BN, ST, CB, false, nullptr, nullptr, 1);                                                     \
  }
// conv_wgmma_<f16|bf16>_n<BN>[_tma]_sk: the same with the K loop split `splits` ways (hm_cv_split_reduce):
// ws holds splits x tiles x 128 x BN FP32 partials, cnt 2 ints a tile, all 0 before the first launch
#define HM_CV_ENTRY_SK(NAME, T, BN, ST, CB)                                                                    \
  extern "C" __global__ void __launch_bounds__(CV_THREADS, 1) NAME(                                            \
      const __grid_constant__ HmTensorMap tmW, const __grid_constant__ HmTensorMap tmX, const T* x, T* y, const T* bias, const T* residual, int H, int W, \
      int C, int K, int S, int OH, int OW, int stride, int pad, int M, int Kg, int act, int vec, float* ws,      \
      int* cnt, int splits) {                                                                                  \
    HM_CV_BODY(T, BN, ST, CB, true, ws, cnt, splits);                                                          \
  }
HM_CV_ENTRY(conv_wgmma_f16_n128, __half, 128, CV_STAGES_N128, 16)
HM_CV_ENTRY(conv_wgmma_bf16_n128, __nv_bfloat16, 128, CV_STAGES_N128, 16)
HM_CV_ENTRY(conv_wgmma_f16_n64, __half, 64, CV_STAGES_N64, 16)
HM_CV_ENTRY(conv_wgmma_bf16_n64, __nv_bfloat16, 64, CV_STAGES_N64, 16)
HM_CV_ENTRY(conv_wgmma_f16_n128_c4, __half, 128, CV_STAGES_N128, 8)
HM_CV_ENTRY(conv_wgmma_bf16_n128_c4, __nv_bfloat16, 128, CV_STAGES_N128, 8)
HM_CV_ENTRY(conv_wgmma_f16_n64_c4, __half, 64, CV_STAGES_N64, 8)
HM_CV_ENTRY(conv_wgmma_bf16_n64_c4, __nv_bfloat16, 64, CV_STAGES_N64, 8)
HM_CV_ENTRY(conv_wgmma_f16_n128_tma, __half, 128, CV_STAGES_N128, 0)
HM_CV_ENTRY(conv_wgmma_bf16_n128_tma, __nv_bfloat16, 128, CV_STAGES_N128, 0)
HM_CV_ENTRY(conv_wgmma_f16_n64_tma, __half, 64, CV_STAGES_N64, 0)
HM_CV_ENTRY(conv_wgmma_bf16_n64_tma, __nv_bfloat16, 64, CV_STAGES_N64, 0)
HM_CV_ENTRY_SK(conv_wgmma_f16_n128_sk, __half, 128, CV_STAGES_N128, 16)
HM_CV_ENTRY_SK(conv_wgmma_bf16_n128_sk, __nv_bfloat16, 128, CV_STAGES_N128, 16)
HM_CV_ENTRY_SK(conv_wgmma_f16_n64_sk, __half, 64, CV_STAGES_N64, 16)
HM_CV_ENTRY_SK(conv_wgmma_bf16_n64_sk, __nv_bfloat16, 64, CV_STAGES_N64, 16)
HM_CV_ENTRY_SK(conv_wgmma_f16_n128_tma_sk, __half, 128, CV_STAGES_N128, 0)
HM_CV_ENTRY_SK(conv_wgmma_bf16_n128_tma_sk, __nv_bfloat16, 128, CV_STAGES_N128, 0)
HM_CV_ENTRY_SK(conv_wgmma_f16_n64_tma_sk, __half, 64, CV_STAGES_N64, 0)
HM_CV_ENTRY_SK(conv_wgmma_bf16_n64_tma_sk, __nv_bfloat16, 64, CV_STAGES_N64, 0)
