// The Hopper GEMM's machinery (sm_90a), shared by kernels/gemm_wgmma.cu (FP16/BF16) and
// kernels/gemm_fp8.cu (FP8 e4m3/e5m2 with per-tensor scales): wgmma.mma_async with operands staged
// by TMA (cp.async.bulk.tensor, 128-byte swizzle) through a multi-stage mbarrier pipeline, FP32
// accumulate, FP16/BF16 out.
//
// One block computes a 128 x 256 tile of C with three warpgroups (384 threads): warpgroup 0 is the
// producer (one thread issues the TMA loads of each k-step into a 4-stage ring of shared memory),
// warpgroups 1 and 2 are consumers, each owning 64 rows x 256 columns of the tile as 128 FP32
// registers per thread and issuing 4 wgmmas per k-step straight from shared memory. A k-step is one
// 128-byte swizzled row of K per operand row: 64 FP16/BF16 elements (m64n256k16) or 128 FP8
// elements (m64n256k32), so both element sizes share the stage layout, descriptors and barriers.
// Stage s has two mbarriers: full[s] (the producer's arrive.expect_tx; TMA completes the bytes) and
// empty[s] (one arrive per consumer warpgroup once its wgmmas reading the stage have retired).
//
// Operands: A is M x K row-major ("K-major"), loaded as one 128-byte x 128-row box per stage. B is
// either K x N row-major ("N-major": four 64 x 64 boxes per stage, wgmma's transpose-B flag set;
// 16-bit types only), or N x K row-major ("K-major", i.e. a column-major K x N: one box of 256 rows).
// The tensor maps are built on the host (cuTensorMapEncodeTiled, SWIZZLE_128B) and passed as
// __grid_constant__ params. Tiles past M, N or K are zero-filled by TMA; stores are guarded, so any
// M, N, K works (TMA needs row strides that are multiples of 16 bytes).
//
// Epilogue: the accumulators (times scale_a * scale_b for FP8) go through shared memory so the 256
// consumer threads apply bias / activation / residual and write C with 16-byte coalesced stores.
// The tile order is grouped (8 tiles of M per group) so concurrently running blocks share A and B in L2.
//
// The bodies need sm_90a (wgmma, setmaxnreg); for any other target the entry points compile to
// empty stubs (hookmagic.kernels refuses to launch them there).
#pragma once
#include "tc_common.cuh"
#if !defined(WG_BM) || !defined(WG_BN) || !defined(WG_BK) || !defined(WG8_BK) || !defined(WG_STAGES) || !defined(WG_THREADS)
#error "compile with the -D tile constants of hookmagic/kernels/constants.py (hookmagic.kernels.build does)"
#endif

#define WG_ROW_BYTES (WG_BK * 2)                       // one 128-byte swizzled row of K per stage (= WG8_BK FP8)
#define WG_A_BYTES (WG_BM * WG_ROW_BYTES)              // 16 KiB
#define WG_B_BYTES (WG_BN * WG_ROW_BYTES)              // 32 KiB
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)
#define WG_EPI_LD (WG_BN + 8)                          // floats per row of the staging tile (float2 writes conflict-free)
#define WG_GROUP_M 8
// dynamic shared memory: 1 KiB of alignment slack, the stages, then 2 * STAGES mbarriers
#define WG_SMEM_BYTES (1024 + WG_STAGES * WG_STAGE_BYTES + 2 * WG_STAGES * 8)

// A CUtensorMap (opaque, 128 bytes, 64-byte aligned), without including cuda.h.
struct __align__(64) HmTensorMap { unsigned long long opaque[16]; };

// The operand types a kernel multiplies. 16-bit operands are named by their own type (wgmma
// m64n256k16: a 128-byte row of a stage holds WG_BK = 64 of them); the FP8 pairs (A type x B type)
// by these tags (wgmma m64n256k32: the same row holds WG8_BK = 128). Either way one wgmma covers
// 32 bytes of K, so the stage layout, the descriptors and the k-steps are the same bytes.
struct HmE4M3xE4M3 {};
struct HmE4M3xE5M2 {};
struct HmE5M2xE4M3 {};
struct HmE5M2xE5M2 {};
template <typename Op> struct HmWgK { static constexpr int KB = WG_BK; };    // K elements per stage
template <> struct HmWgK<HmE4M3xE4M3> { static constexpr int KB = WG8_BK; };
template <> struct HmWgK<HmE4M3xE5M2> { static constexpr int KB = WG8_BK; };
template <> struct HmWgK<HmE5M2xE4M3> { static constexpr int KB = WG8_BK; };
template <> struct HmWgK<HmE5M2xE5M2> { static constexpr int KB = WG8_BK; };

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HM_WGMMA_BODY 1
#endif

#ifdef HM_WGMMA_BODY
__device__ __forceinline__ unsigned hm_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void hm_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void hm_mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void hm_mbar_arrive(unsigned bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void hm_mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
// TMA: a 2-D box at coordinates (c0 = innermost, c1) of the tensor map into shared memory,
// completing `bytes` on the mbarrier (out-of-bounds elements are zero-filled and still counted).
__device__ __forceinline__ void hm_tma_load_2d(unsigned dst, const HmTensorMap* map, int c0, int c1, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ void hm_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void hm_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void hm_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading
// and stride byte offsets (all >> 4), 128-byte swizzle (mode 1 in bits 62-63).
__device__ __forceinline__ unsigned long long hm_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
         ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// The FP32 accumulators of a wgmma, 32 at a time: their names %0..%127 in the instruction text
// and the "+f" operands binding them to d[0..127]. An m64nN wgmma holds N / 2 a thread: m64n64
// 32, m64n128 64 (the attention kernel's), m64n256 128 (the GEMMs').
#define HM_D_NAMES_0 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define HM_D_NAMES_32 \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define HM_D_NAMES_64 \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define HM_D_NAMES_96 \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define HM_D_OPERANDS_0 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define HM_D_OPERANDS_32 \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define HM_D_OPERANDS_64 \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define HM_D_OPERANDS_96 \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define HM_WGMMA_D32_NAMES "{" HM_D_NAMES_0 "}, "
#define HM_WGMMA_D64_NAMES "{" HM_D_NAMES_0 ", " HM_D_NAMES_32 "}, "
#define HM_WGMMA_D_NAMES "{" HM_D_NAMES_0 ", " HM_D_NAMES_32 ", " HM_D_NAMES_64 ", " HM_D_NAMES_96 "}, "
#define HM_WGMMA_D32_OPERANDS HM_D_OPERANDS_0
#define HM_WGMMA_D64_OPERANDS HM_D_OPERANDS_0, HM_D_OPERANDS_32
#define HM_WGMMA_D_OPERANDS HM_D_OPERANDS_0, HM_D_OPERANDS_32, HM_D_OPERANDS_64, HM_D_OPERANDS_96

// One wgmma over 32 bytes of K, FP32 accumulators d[128] += A (descriptor da) x B (descriptor db).
// 16-bit operands: m64n256k16; TB: B is N-major (the transpose flag).
#define HM_WGMMA_M64N256K16(TYPE, PTX)                                                                                  \
  template <int TB>                                                                                                     \
  __device__ __forceinline__ void hm_wgmma_step(float* d, unsigned long long da, unsigned long long db, TYPE) {   \
    asm volatile(                                                                                                       \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                                     \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." PTX "." PTX " "                                                    \
      HM_WGMMA_D_NAMES                                                                                                   \
      "%128, %129, p, 1, 1, 0, %131;\n}\n"                                                                              \
      :                                                                                                                 \
        HM_WGMMA_D_OPERANDS                                                                                              \
      : "l"(da), "l"(db), "r"(1), "n"(TB)                                                                               \
      : "memory");                                                                                                      \
  }
HM_WGMMA_M64N256K16(__half, "f16")
HM_WGMMA_M64N256K16(__nv_bfloat16, "bf16")
// FP8: m64n256k32, A type x B type; no transpose flags (8-bit operands are K-major in shared memory
// only), so B must be given N x K; "n"(0) keeps the operand count of the 16-bit form.
#define HM_WGMMA_M64N256K32(TYPE, PA, PB)                                                                                  \
  template <int TB>                                                                                                        \
  __device__ __forceinline__ void hm_wgmma_step(float* d, unsigned long long da, unsigned long long db, TYPE) {            \
    static_assert(TB == 0, "FP8 wgmma reads both operands K-major");                                                       \
    asm volatile(                                                                                                          \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                                        \
      "wgmma.mma_async.sync.aligned.m64n256k32.f32." PA "." PB " "                                                         \
      HM_WGMMA_D_NAMES                                                                                                   \
      "%128, %129, p, 1, 1;\n}\n"                                                                                          \
      :                                                                                                                    \
        HM_WGMMA_D_OPERANDS                                                                                              \
      : "l"(da), "l"(db), "r"(1), "n"(0)                                                                                   \
      : "memory");                                                                                                         \
  }
HM_WGMMA_M64N256K32(HmE4M3xE4M3, "e4m3", "e4m3")
HM_WGMMA_M64N256K32(HmE4M3xE5M2, "e4m3", "e5m2")
HM_WGMMA_M64N256K32(HmE5M2xE4M3, "e5m2", "e4m3")
HM_WGMMA_M64N256K32(HmE5M2xE5M2, "e5m2", "e5m2")

// ---- cluster of 2 CTAs along M sharing B: each CTA loads half of the B tile and multicasts it ----
__device__ __forceinline__ unsigned hm_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void hm_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// arrive on the mbarrier at the same shared-memory offset in CTA `rank` of the cluster
__device__ __forceinline__ void hm_mbar_arrive_cluster(unsigned bar, unsigned rank) {
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
               "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(rank) : "memory");
}
__device__ __forceinline__ void hm_mbar_wait_cluster(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
// TMA load written to the same offset in every CTA of `mask`, completing bytes on each one's mbarrier
__device__ __forceinline__ void hm_tma_load_2d_mc(unsigned dst, const HmTensorMap* map, int c0, int c1, unsigned bar,
                                                  unsigned short mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;\n"
               ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
               : "memory");
}

// ================================ pieces shared by the schedules ================================
#define WG_PSTAGES 3
#define WG_OUT_LD (WG_BN + 8)                          // halves per row of persistent's output tile
#define WG_P4_STAGE_HALVES (64 * 128)                  // persistent4: per-warpgroup staging tile

// Tile `tile` of the grouped order -> its first row and column.
__device__ __forceinline__ void hm_wg_tile(int tile, int tiles_m, int tiles_n, int& m0, int& n0) {
  const int per_group = WG_GROUP_M * tiles_n;
  const int first_m = (tile / per_group) * WG_GROUP_M;
  const int gsize = min(tiles_m - first_m, WG_GROUP_M);
  m0 = (first_m + (tile % per_group) % gsize) * WG_BM;
  n0 = ((tile % per_group) / gsize) * WG_BN;
}

// Shared memory of a schedule: 1024-aligned base, STAGES x (A | B) stages, `extra` bytes (an output
// staging area), then full[s] and empty[s] mbarriers. Thread 0 initialises the barriers.
template <int STAGES>
struct HmWgSmem {
  unsigned sA, sB, extra, bars;
  unsigned char* extra_ptr;
  __device__ __forceinline__ HmWgSmem(unsigned char* raw_ptr, unsigned extra_bytes) {
    const unsigned raw = hm_smem_addr(raw_ptr);
    const unsigned base = (raw + 1023u) & ~1023u;   // 128B swizzle wants 1024-byte-aligned tiles
    sA = base;
    sB = base + STAGES * WG_A_BYTES;
    extra = base + STAGES * WG_STAGE_BYTES;
    extra_ptr = raw_ptr + (extra - raw);
    bars = extra + extra_bytes;
  }
  __device__ __forceinline__ unsigned full(unsigned s) const { return bars + 8 * s; }
  __device__ __forceinline__ unsigned empty(unsigned s) const { return bars + 8 * (STAGES + s); }
  __device__ __forceinline__ void init(unsigned empty_arrivals) const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < STAGES; ++s) {
        hm_mbar_init(full(s), 1);                    // the producer's arrive.expect_tx
        hm_mbar_init(empty(s), empty_arrivals);      // one arrive per consumer warpgroup (per CTA)
      }
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
  }
};

__device__ __forceinline__ void hm_wg_prefetch_maps(const HmTensorMap* tmA, const HmTensorMap* tmB) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmA)) : "memory");
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmB)) : "memory");
}

// Producer, one k-step (KB elements of K): A's KB x 128 box and B's tile (one KB x 256 box K-major,
// four 64 x 64 boxes N-major) into stage buffers a_dst / b_dst, completing on `full`.
template <int B_KMAJOR, int KB>
__device__ __forceinline__ void hm_wg_load_stage(const HmTensorMap* tmA, const HmTensorMap* tmB, unsigned a_dst,
                                                 unsigned b_dst, int kt, int m0, int n0, unsigned full) {
  hm_mbar_expect_tx(full, WG_STAGE_BYTES);
  hm_tma_load_2d(a_dst, tmA, kt * KB, m0, full);
  if (B_KMAJOR) {
    hm_tma_load_2d(b_dst, tmB, kt * KB, n0, full);
  } else {
#pragma unroll
    for (int i = 0; i < WG_BN / 64; ++i) hm_tma_load_2d(b_dst + i * (64 * WG_ROW_BYTES), tmB, n0 + 64 * i, kt * KB, full);
  }
}

// Producer of the persistent schedules: every k-step of every tile of this block, `it` counting
// k-steps across tiles (stage it % STAGES, phase (it / STAGES) & 1).
template <int B_KMAJOR, int STAGES, int KB>
__device__ __forceinline__ void hm_wg_produce_tiles(const HmTensorMap* tmA, const HmTensorMap* tmB,
                                                    const HmWgSmem<STAGES>& sm, int tiles_m, int tiles_n, int ktiles) {
  hm_wg_prefetch_maps(tmA, tmB);
  unsigned it = 0;
  for (int tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    int m0, n0;
    hm_wg_tile(tile, tiles_m, tiles_n, m0, n0);
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const unsigned s = it % STAGES;
      hm_mbar_wait(sm.empty(s), ((it / STAGES) & 1u) ^ 1u);   // the consumers freed this stage
      hm_wg_load_stage<B_KMAJOR, KB>(tmA, tmB, sm.sA + s * WG_A_BYTES, sm.sB + s * WG_B_BYTES, kt, m0, n0, sm.full(s));
    }
  }
}

// Consumer warpgroup `cw` (rows cw * 64 ... + 63 of the tile), one tile's mainloop: k-steps it ...
// it + ktiles - 1 of the ring, 4 wgmmas of 32 bytes of K each into d (operand types Op); a stage is
// released (its empty barrier, and the peer CTA's for a cluster) once the wgmmas reading it have retired.
template <typename Op, int B_KMAJOR, int STAGES, bool CLUSTER>
__device__ __forceinline__ void hm_wg_mainloop(float* d, unsigned& it, const HmWgSmem<STAGES>& sm, int cw, int ktiles) {
  const bool leader = threadIdx.x % 128 == 0;
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  for (int kt = 0; kt < ktiles; ++kt, ++it) {
    const unsigned s = it % STAGES;
    hm_mbar_wait(sm.full(s), (it / STAGES) & 1u);
    const unsigned a0 = sm.sA + s * WG_A_BYTES + cw * (64 * WG_ROW_BYTES);
    const unsigned b0 = sm.sB + s * WG_B_BYTES;
    hm_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < WG_ROW_BYTES / 32; ++kk) {
      // A (K-major, 128-byte rows): the k-step is 32 bytes along the row; 8-row groups 1024 B apart.
      const unsigned long long da = hm_desc(a0 + kk * 32, 16, 1024);
      // B K-major likewise; B N-major: 16 k-rows of 128 B per step, LBO = next 64-column box (8 KiB),
      // SBO = next 8 k-rows.
      const unsigned long long db = B_KMAJOR ? hm_desc(b0 + kk * 32, 16, 1024)
                                             : hm_desc(b0 + kk * 16 * 128, 64 * WG_ROW_BYTES, 1024);
      hm_wgmma_step<B_KMAJOR ? 0 : 1>(d, da, db, Op());
    }
    hm_wgmma_commit();
    hm_wgmma_wait<1>();                                  // the previous stage's wgmmas have retired
    if (kt > 0 && leader) {
      hm_mbar_arrive(sm.empty((it - 1) % STAGES));
      if (CLUSTER) hm_mbar_arrive_cluster(sm.empty((it - 1) % STAGES), hm_cluster_rank() ^ 1u);
    }
  }
  hm_wgmma_wait<0>();
  if (ktiles > 0 && leader) {
    hm_mbar_arrive(sm.empty((it - 1) % STAGES));
    if (CLUSTER) hm_mbar_arrive_cluster(sm.empty((it - 1) % STAGES), hm_cluster_rank() ^ 1u);
  }
}

// Epilogue through FP32 staging in the (now idle) stage buffers, by both consumer warpgroups (256
// threads, named barrier 1): fragments -> shared memory -> bias / activation / residual -> C in
// 16-byte coalesced stores. Used by the one-tile-per-block schedules.
template <typename T>
__device__ __forceinline__ void hm_wg_store_fp32_staged(const float* d, float* stage, int cw, int m0, int n0,
                                                        T* __restrict__ C, const T* __restrict__ bias,
                                                        const T* __restrict__ residual, int M, int N, int act, int vec) {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");       // both consumers are done reading the stages
  {
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    const int r0 = cw * 64 + warp * 16 + lane / 4, c0 = 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < WG_BN / 8; ++j) {
      *reinterpret_cast<float2*>(&stage[r0 * WG_EPI_LD + j * 8 + c0]) = make_float2(d[4 * j], d[4 * j + 1]);
      *reinterpret_cast<float2*>(&stage[(r0 + 8) * WG_EPI_LD + j * 8 + c0]) = make_float2(d[4 * j + 2], d[4 * j + 3]);
    }
  }
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
  const bool plain = !bias && !residual && act == 0;
#pragma unroll 1
  for (int i = threadIdx.x - 128; i < WG_BM * (WG_BN / 8); i += 256) {
    const int r = i / (WG_BN / 8), c = (i % (WG_BN / 8)) * 8;
    const int gr = m0 + r, gc = n0 + c;
    if (gr >= M || gc >= N) continue;
    const float4 lo = *reinterpret_cast<const float4*>(&stage[r * WG_EPI_LD + c]);
    const float4 hi = *reinterpret_cast<const float4*>(&stage[r * WG_EPI_LD + c + 4]);
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    if (!plain) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (gc + e < N) v[e] = hm_epilogue(v[e], gr, gc + e, N, bias, residual, act);
    }
    T* out = C + (size_t)gr * N + gc;
    if (vec && gc + 8 <= N) {
      __align__(16) T h[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) h[e] = hm_from_f<T>(v[e]);
      *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(h);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (gc + e < N) out[e] = hm_from_f<T>(v[e]);
    }
  }
}

// The accumulator pair (v0, v1) of row r, columns c and c + 1 of C, through the epilogue (if any).
template <typename T>
__device__ __forceinline__ unsigned hm_wg_pair(float v0, float v1, int r, int c, bool plain, const T* __restrict__ bias,
                                               const T* __restrict__ residual, int M, int N, int act) {
  if (!plain) {
    if (r < M && c < N) v0 = hm_epilogue(v0, r, c, N, bias, residual, act);
    if (r < M && c + 1 < N) v1 = hm_epilogue(v1, r, c + 1, N, bias, residual, act);
  }
  __align__(4) T p[2] = {hm_from_f<T>(v0), hm_from_f<T>(v1)};
  return *reinterpret_cast<const unsigned*>(p);
}

// 16 bytes (8 halves) of row gr from column gc of C: one vector store when whole and aligned.
template <typename T>
__device__ __forceinline__ void hm_wg_store8(T* __restrict__ C, int gr, int gc, int N, int vec, uint4 v) {
  T* out = C + (size_t)gr * N + gc;
  if (vec && gc + 8 <= N) {
    *reinterpret_cast<uint4*>(out) = v;
  } else {
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int x = 0; x < 8; ++x)
      if (gc + x < N) out[x] = e[x];
  }
}

// FP8's per-tensor scales: d *= scale_a * scale_b (the 16-bit kernels pass no scales: a no-op).
__device__ __forceinline__ void hm_wg_scale(float* d, const float* scale_a, const float* scale_b) {
  if (scale_a) {
    const float alpha = __ldg(scale_a) * __ldg(scale_b);
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] *= alpha;
  }
}

// ==================================== the schedules ====================================
// Each takes Op (the operand types: T itself, or an FP8 tag), T (the output type), B_KMAJOR, and
// FP8's scale pointers (nullptr for 16-bit operands).

// "tiles": one block per 128 x 256 tile, 4-stage ring, FP32-staged epilogue.
// B_KMAJOR = 0: B is K x N row-major (N contiguous); 1: B is given as N x K row-major.
template <typename Op, typename T, int B_KMAJOR>
__device__ __forceinline__ void hm_gemm_wgmma(const HmTensorMap* tmA, const HmTensorMap* tmB, T* __restrict__ C,
                                              const T* __restrict__ bias, const T* __restrict__ residual,
                                              int M, int N, int K, int act, int vec, const float* scale_a,
                                              const float* scale_b) {
  extern __shared__ unsigned char hm_wg_smem_raw[];
  const HmWgSmem<WG_STAGES> sm(hm_wg_smem_raw, 0);
  const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + WG_BN - 1) / WG_BN;
  int m0, n0;
  hm_wg_tile(blockIdx.x, tiles_m, tiles_n, m0, n0);
  const int ktiles = (K + HmWgK<Op>::KB - 1) / HmWgK<Op>::KB;
  const int wg = threadIdx.x / 128;
  sm.init(2);
  __syncthreads();
  if (wg == 0) {
    // producer warpgroup: gives back registers, one thread issues every TMA load
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      hm_wg_prefetch_maps(tmA, tmB);
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % WG_STAGES;
        hm_mbar_wait(sm.empty(s), ((unsigned)(kt / WG_STAGES) & 1u) ^ 1u);
        hm_wg_load_stage<B_KMAJOR, HmWgK<Op>::KB>(tmA, tmB, sm.sA + s * WG_A_BYTES, sm.sB + s * WG_B_BYTES, kt, m0, n0,
                                                 sm.full(s));
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  float d[128];
  unsigned it = 0;
  hm_wg_mainloop<Op, B_KMAJOR, WG_STAGES, false>(d, it, sm, wg - 1, ktiles);
  hm_wg_scale(d, scale_a, scale_b);
  hm_wg_store_fp32_staged<T>(d, reinterpret_cast<float*>(hm_wg_smem_raw + (sm.sA - hm_smem_addr(hm_wg_smem_raw))),
                             wg - 1, m0, n0, C, bias, residual, M, N, act, vec);
}

// The persistent schedules' start: barriers made, then warpgroup 0 gives back registers and one of
// its threads issues every TMA load of the block's tiles; true for the consumer warpgroups (which
// take the registers), false for the producer, whose work is done when this returns.
template <int B_KMAJOR, int STAGES, int KB>
__device__ __forceinline__ bool hm_wg_persistent_roles(const HmTensorMap* tmA, const HmTensorMap* tmB,
                                                       const HmWgSmem<STAGES>& sm, int tiles_m, int tiles_n,
                                                       int ktiles) {
  sm.init(2);
  __syncthreads();
  if (threadIdx.x / 128 == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) hm_wg_produce_tiles<B_KMAJOR, STAGES, KB>(tmA, tmB, sm, tiles_m, tiles_n, ktiles);
    return false;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  return true;
}

// "persistent": gridDim.x blocks (one per SM) walk the tiles tile = blockIdx.x, += gridDim.x, with a
// 3-stage ring and a separate 128 x 256 output tile in shared memory: the producer runs ahead into
// the next tile while the consumers apply the epilogue in registers, write the tile as FP16/BF16
// into shared memory and store it with 16-byte coalesced stores.
template <typename Op, typename T, int B_KMAJOR>
__device__ __forceinline__ void hm_gemm_wgmma_persistent(const HmTensorMap* tmA, const HmTensorMap* tmB,
                                                         T* __restrict__ C, const T* __restrict__ bias,
                                                         const T* __restrict__ residual, int M, int N, int K,
                                                         int act, int vec, const float* scale_a,
                                                         const float* scale_b) {
  extern __shared__ unsigned char hm_wg_smem_raw[];
  const HmWgSmem<WG_PSTAGES> sm(hm_wg_smem_raw, WG_BM * WG_OUT_LD * 2);
  T* out_tile = reinterpret_cast<T*>(sm.extra_ptr);
  const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + WG_BN - 1) / WG_BN, ntiles = tiles_m * tiles_n;
  const int ktiles = (K + HmWgK<Op>::KB - 1) / HmWgK<Op>::KB;
  const int wg = threadIdx.x / 128;
  if (!hm_wg_persistent_roles<B_KMAJOR, WG_PSTAGES, HmWgK<Op>::KB>(tmA, tmB, sm, tiles_m, tiles_n, ktiles)) return;
  const int cw = wg - 1;
  const bool plain = !bias && !residual && act == 0;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  unsigned it = 0;
  float d[128];
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    int m0, n0;
    hm_wg_tile(tile, tiles_m, tiles_n, m0, n0);
    hm_wg_mainloop<Op, B_KMAJOR, WG_PSTAGES, false>(d, it, sm, cw, ktiles);
    hm_wg_scale(d, scale_a, scale_b);
    // epilogue: registers (+ bias / activation / residual) -> output tile in shared memory -> C
    asm volatile("bar.sync 1, 256;\n" ::: "memory");   // the previous tile's stores have read the tile
    const int rl = cw * 64 + warp * 16 + lane / 4, cl = 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < WG_BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<unsigned*>(&out_tile[(rl + 8 * h) * WG_OUT_LD + cl + 8 * j]) = hm_wg_pair<T>(
            d[4 * j + 2 * h], d[4 * j + 2 * h + 1], m0 + rl + 8 * h, n0 + cl + 8 * j, plain, bias, residual, M, N, act);
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
#pragma unroll 1
    for (int i = threadIdx.x - 128; i < WG_BM * (WG_BN / 8); i += 256) {
      const int r = i / (WG_BN / 8), c = (i % (WG_BN / 8)) * 8;
      if (m0 + r >= M || n0 + c >= N) continue;
      hm_wg_store8<T>(C, m0 + r, n0 + c, N, vec, *reinterpret_cast<const uint4*>(&out_tile[r * WG_OUT_LD + c]));
    }
  }
}

// "persistent4": persistent with the full 4-stage ring; each consumer warpgroup stores its own 64
// rows through a private 64 x 128 staging tile (two passes over the 256 columns, 16-byte chunks
// XOR-swizzled by row so both the fragment writes and the row reads are free of bank conflicts),
// synchronising only its own 128 threads (named barriers 2 and 3), so one warpgroup's epilogue
// overlaps the other's mainloop and the producer's loads of the next tile.
template <typename Op, typename T, int B_KMAJOR>
__device__ __forceinline__ void hm_gemm_wgmma_persistent4(const HmTensorMap* tmA, const HmTensorMap* tmB,
                                                          T* __restrict__ C, const T* __restrict__ bias,
                                                          const T* __restrict__ residual, int M, int N, int K,
                                                          int act, int vec, const float* scale_a,
                                                          const float* scale_b) {
  extern __shared__ unsigned char hm_wg_smem_raw[];
  const HmWgSmem<WG_STAGES> sm(hm_wg_smem_raw, 2 * WG_P4_STAGE_HALVES * 2);
  const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + WG_BN - 1) / WG_BN, ntiles = tiles_m * tiles_n;
  const int ktiles = (K + HmWgK<Op>::KB - 1) / HmWgK<Op>::KB;
  const int wg = threadIdx.x / 128;
  if (!hm_wg_persistent_roles<B_KMAJOR, WG_STAGES, HmWgK<Op>::KB>(tmA, tmB, sm, tiles_m, tiles_n, ktiles)) return;
  const int cw = wg - 1;
  const bool plain = !bias && !residual && act == 0;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  T* stg = reinterpret_cast<T*>(sm.extra_ptr) + cw * WG_P4_STAGE_HALVES;   // this warpgroup's 64 x 128 tile
  unsigned it = 0;
  float d[128];
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    int m0, n0;
    hm_wg_tile(tile, tiles_m, tiles_n, m0, n0);
    hm_wg_mainloop<Op, B_KMAJOR, WG_STAGES, false>(d, it, sm, cw, ktiles);
    hm_wg_scale(d, scale_a, scale_b);
    const int rl = warp * 16 + lane / 4, q = lane % 4;        // rows rl, rl + 8 of this warpgroup's 64
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");   // the previous pass has read the tile
#pragma unroll
      for (int jj = 0; jj < 16; ++jj) {
        const int j = half * 16 + jj;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = rl + 8 * h;
          // chunk jj of the row (8 halves), swizzled by row % 8; the pair is word q of the chunk
          *reinterpret_cast<unsigned*>(&stg[row * 128 + ((jj ^ (row % 8)) * 8) + 2 * q]) = hm_wg_pair<T>(
              d[4 * j + 2 * h], d[4 * j + 2 * h + 1], m0 + cw * 64 + row, n0 + 8 * j + 2 * q, plain, bias, residual,
              M, N, act);
        }
      }
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + cw) : "memory");
#pragma unroll 1
      for (int i = t; i < 64 * 16; i += 128) {
        const int row = i / 16, ch = i % 16;
        const int gr = m0 + cw * 64 + row, gc = n0 + half * 128 + ch * 8;
        if (gr >= M || gc >= N) continue;
        hm_wg_store8<T>(C, gr, gc, N, vec, *reinterpret_cast<const uint4*>(&stg[row * 128 + ((ch ^ (row % 8)) * 8)]));
      }
    }
  }
}

// "cluster2": like "tiles", launched as clusters of 2 CTAs holding tiles (2p, n) and (2p + 1, n):
// B's 256 x 64 tile per stage is loaded half by each CTA and multicast to both, halving B's L2
// traffic. A stage is refilled only when the consumers of both CTAs have released it (empty
// barriers count 4 arrivals: 2 local, 2 remote). For K-major B the tensor map's box is 64 x 128
// (half a tile), for N-major B each CTA loads two of the four 64-column boxes.
template <typename Op, typename T, int B_KMAJOR>
__device__ __forceinline__ void hm_gemm_wgmma_c2(const HmTensorMap* tmA, const HmTensorMap* tmB, T* __restrict__ C,
                                                 const T* __restrict__ bias, const T* __restrict__ residual,
                                                 int M, int N, int K, int act, int vec, const float* scale_a,
                                                 const float* scale_b) {
  extern __shared__ unsigned char hm_wg_smem_raw[];
  const HmWgSmem<WG_STAGES> sm(hm_wg_smem_raw, 0);   // same offsets in both CTAs (same kernel, same layout)
  const unsigned rank = hm_cluster_rank();
  const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + WG_BN - 1) / WG_BN;
  const int pairs_m = (tiles_m + 1) / 2, group = WG_GROUP_M / 2;
  const int pid = blockIdx.x / 2, per_group = group * tiles_n;
  const int first_p = (pid / per_group) * group;
  const int gsize = min(pairs_m - first_p, group);
  const int tm = 2 * (first_p + (pid % per_group) % gsize) + (int)rank, tn = (pid % per_group) / gsize;
  const int m0 = tm * WG_BM, n0 = tn * WG_BN;   // m0 may be past M (odd tile count): loads zeros, stores nothing
  const int ktiles = (K + HmWgK<Op>::KB - 1) / HmWgK<Op>::KB;
  const int wg = threadIdx.x / 128;
  sm.init(4);                                    // 2 consumer warpgroups x 2 CTAs
  __syncwarp();        // barrier.cluster is .aligned: converge the warp first
  hm_cluster_sync();   // both CTAs' barriers exist before any multicast or remote arrive
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      hm_wg_prefetch_maps(tmA, tmB);
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % WG_STAGES;
        hm_mbar_wait_cluster(sm.empty(s), ((unsigned)(kt / WG_STAGES) & 1u) ^ 1u);
        const unsigned full = sm.full(s), b_dst = sm.sB + s * WG_B_BYTES;
        hm_mbar_expect_tx(full, WG_STAGE_BYTES);           // own A + both halves of B
        hm_tma_load_2d(sm.sA + s * WG_A_BYTES, tmA, kt * HmWgK<Op>::KB, m0, full);
        if (B_KMAJOR) {
          hm_tma_load_2d_mc(b_dst + rank * (WG_B_BYTES / 2), tmB, kt * HmWgK<Op>::KB, n0 + (int)rank * (WG_BN / 2), full,
                            (unsigned short)3);
        } else {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int box = 2 * (int)rank + i;
            hm_tma_load_2d_mc(b_dst + box * (64 * WG_ROW_BYTES), tmB, n0 + 64 * box, kt * HmWgK<Op>::KB, full,
                            (unsigned short)3);
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    float d[128];
    unsigned it = 0;
    hm_wg_mainloop<Op, B_KMAJOR, WG_STAGES, true>(d, it, sm, wg - 1, ktiles);
    hm_wg_scale(d, scale_a, scale_b);
    hm_wg_store_fp32_staged<T>(d, reinterpret_cast<float*>(hm_wg_smem_raw + (sm.sA - hm_smem_addr(hm_wg_smem_raw))),
                               wg - 1, m0, n0, C, bias, residual, M, N, act, vec);
  }
  __syncwarp();
  hm_cluster_sync();   // no CTA leaves while its peer may still arrive on its barriers
}
#endif  // HM_WGMMA_BODY

// Clusters of 2 CTAs along M sharing B by multicast need the cluster attribute on the entry point.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define HM_CLUSTER2 __cluster_dims__(2, 1, 1)
#else
#define HM_CLUSTER2
#endif
