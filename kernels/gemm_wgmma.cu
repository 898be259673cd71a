// Hopper GEMM (sm_90a): C = act(A @ B + bias) + residual with wgmma.mma_async, operands staged by TMA
// (cp.async.bulk.tensor, 128-byte swizzle) through a multi-stage mbarrier pipeline, FP32 accumulate,
// FP16/BF16 in and out.
//
// One block computes a 128 x 256 tile of C with three warpgroups (384 threads): warpgroup 0 is the
// producer (one thread issues the TMA loads of each k-step, 64 deep, into a 4-stage ring of shared
// memory), warpgroups 1 and 2 are consumers, each owning 64 rows x 256 columns of the tile as 128
// FP32 registers per thread and issuing wgmma m64n256k16 (4 per k-step) straight from shared memory.
// Stage s has two mbarriers: full[s] (the producer's arrive.expect_tx; TMA completes the bytes) and
// empty[s] (one arrive per consumer warpgroup once its wgmmas reading the stage have retired).
//
// Operands: A is M x K row-major ("K-major"), loaded as one 64 x 128 box (K x M) per stage. B is
// either K x N row-major ("N-major": four 64 x 64 boxes per stage, wgmma's transpose-B flag set),
// or N x K row-major ("K-major", i.e. a column-major K x N: one 64 x 256 box). The tensor maps are
// built on the host (cuTensorMapEncodeTiled, SWIZZLE_128B) and passed as __grid_constant__ params.
// Tiles past M, N or K are zero-filled by TMA; stores are guarded, so any M, N, K works (the host
// pads a row whose byte stride is not a multiple of 16, which TMA requires).
//
// Epilogue: the accumulators go through shared memory (the pipeline's buffers, now idle) so the
// 256 consumer threads apply bias / activation / residual and write C with 16-byte coalesced stores.
// The tile order is grouped (8 tiles of M per group) so concurrently running blocks share A and B in L2.
//
// The body needs sm_90a (wgmma, setmaxnreg); for any other target the kernels compile to empty stubs
// (hookmagic.kernels refuses to launch them there).
#include "tc_common.cuh"

#define WG_BM 128
#define WG_BN 256
#define WG_BK 64
#define WG_STAGES 4
#define WG_THREADS 384
#define WG_A_BYTES (WG_BM * WG_BK * 2)                 // 16 KiB
#define WG_B_BYTES (WG_BN * WG_BK * 2)                 // 32 KiB
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)
#define WG_EPI_LD (WG_BN + 8)                          // floats per row of the staging tile (float2 writes conflict-free)
#define WG_GROUP_M 8
// dynamic shared memory: 1 KiB of alignment slack, the stages, then 2 * STAGES mbarriers
#define WG_SMEM_BYTES (1024 + WG_STAGES * WG_STAGE_BYTES + 2 * WG_STAGES * 8)

// A CUtensorMap (opaque, 128 bytes, 64-byte aligned), without including cuda.h.
struct __align__(64) HmTensorMap { unsigned long long opaque[16]; };

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

template <int TB>
__device__ __forceinline__ void hm_wgmma_m64n256k16(float* d, unsigned long long da, unsigned long long db, __half) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, %131;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(1), "n"(TB)
      : "memory");
}

template <int TB>
__device__ __forceinline__ void hm_wgmma_m64n256k16(float* d, unsigned long long da, unsigned long long db, __nv_bfloat16) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, %131;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(1), "n"(TB)
      : "memory");
}

template <typename T>
__device__ __forceinline__ float hm_wg_epilogue(float x, int r, int c, int N, const T* __restrict__ bias,
                                                const T* __restrict__ residual, int act) {
  if (bias) x += hm_to_f(bias[c]);
  x = hm_activate(x, act);
  if (residual) x += hm_to_f(residual[(size_t)r * N + c]);
  return x;
}

// B_KMAJOR = 0: B is K x N row-major (N contiguous); 1: B is given as N x K row-major.
template <typename T, int B_KMAJOR>
__device__ __forceinline__ void hm_gemm_wgmma(const HmTensorMap* tmA, const HmTensorMap* tmB, T* __restrict__ C,
                                              const T* __restrict__ bias, const T* __restrict__ residual,
                                              int M, int N, int K, int act, int vec) {
  extern __shared__ unsigned char hm_wg_smem_raw[];
  const unsigned raw = hm_smem_addr(hm_wg_smem_raw);
  const unsigned base = (raw + 1023u) & ~1023u;                 // 128B swizzle wants 1024-byte-aligned tiles
  unsigned char* gbase = hm_wg_smem_raw + (base - raw);
  const unsigned sA = base, sB = base + WG_STAGES * WG_A_BYTES;
  const unsigned bars = base + WG_STAGES * WG_STAGE_BYTES;       // full[s] at bars + 8s, empty[s] at bars + 8(S + s)

  // grouped tile order: WG_GROUP_M tiles of M walk together across N
  const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + WG_BN - 1) / WG_BN;
  const int bid = blockIdx.x, per_group = WG_GROUP_M * tiles_n;
  const int first_m = (bid / per_group) * WG_GROUP_M;
  const int gsize = min(tiles_m - first_m, WG_GROUP_M);
  const int tm = first_m + (bid % per_group) % gsize, tn = (bid % per_group) / gsize;
  const int m0 = tm * WG_BM, n0 = tn * WG_BN;
  const int ktiles = (K + WG_BK - 1) / WG_BK;

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < WG_STAGES; ++s) {
      hm_mbar_init(bars + 8 * s, 1);                       // the producer's arrive.expect_tx
      hm_mbar_init(bars + 8 * (WG_STAGES + s), 2);         // one arrive per consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ---- producer warpgroup: gives back registers, one thread issues every TMA load ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmA)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmB)) : "memory");
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % WG_STAGES;
        const unsigned phase = (unsigned)(kt / WG_STAGES) & 1u;
        hm_mbar_wait(bars + 8 * (WG_STAGES + s), phase ^ 1u);    // the consumers freed this stage
        const unsigned full = bars + 8 * s;
        hm_mbar_expect_tx(full, WG_STAGE_BYTES);
        hm_tma_load_2d(sA + s * WG_A_BYTES, tmA, kt * WG_BK, m0, full);
        if (B_KMAJOR) {
          hm_tma_load_2d(sB + s * WG_B_BYTES, tmB, kt * WG_BK, n0, full);
        } else {
#pragma unroll
          for (int i = 0; i < WG_BN / 64; ++i)
            hm_tma_load_2d(sB + s * WG_B_BYTES + i * (64 * WG_BK * 2), tmB, n0 + 64 * i, kt * WG_BK, full);
        }
      }
    }
    return;
  }

  // ---- consumer warpgroups 1 and 2: rows (wg - 1) * 64 ... + 63 of the tile ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int cw = wg - 1;
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.f;
  for (int kt = 0; kt < ktiles; ++kt) {
    const int s = kt % WG_STAGES;
    hm_mbar_wait(bars + 8 * s, (unsigned)(kt / WG_STAGES) & 1u);
    const unsigned a0 = sA + s * WG_A_BYTES + cw * (64 * WG_BK * 2);
    const unsigned b0 = sB + s * WG_B_BYTES;
    hm_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < WG_BK / 16; ++kk) {
      // A (K-major, 128-byte rows): the k-step is 32 bytes along the row; 8-row groups 1024 B apart.
      const unsigned long long da = hm_desc(a0 + kk * 32, 16, 1024);
      unsigned long long db;
      if (B_KMAJOR) db = hm_desc(b0 + kk * 32, 16, 1024);
      // B (N-major): 16 k-rows of 128 B per step; LBO = next 64-column box (8 KiB), SBO = next 8 k-rows.
      else db = hm_desc(b0 + kk * 16 * 128, 64 * WG_BK * 2, 1024);
      hm_wgmma_m64n256k16<B_KMAJOR ? 0 : 1>(d, da, db, T());
    }
    hm_wgmma_commit();
    hm_wgmma_wait<1>();                                   // the previous stage's wgmmas have retired
    if (kt > 0 && threadIdx.x % 128 == 0) hm_mbar_arrive(bars + 8 * (WG_STAGES + (kt - 1) % WG_STAGES));
  }
  hm_wgmma_wait<0>();

  // ---- epilogue: accumulators -> shared memory (FP32) -> bias/activation/residual -> C ----
  asm volatile("bar.sync 1, 256;\n" ::: "memory");       // both consumers are done reading the stages
  float* stage = reinterpret_cast<float*>(gbase);
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
  const int ct = threadIdx.x - 128;
#pragma unroll 1
  for (int i = ct; i < WG_BM * (WG_BN / 8); i += 256) {
    const int r = i / (WG_BN / 8), c = (i % (WG_BN / 8)) * 8;
    const int gr = m0 + r, gc = n0 + c;
    if (gr >= M || gc >= N) continue;
    const float4 lo = *reinterpret_cast<const float4*>(&stage[r * WG_EPI_LD + c]);
    const float4 hi = *reinterpret_cast<const float4*>(&stage[r * WG_EPI_LD + c + 4]);
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    if (!plain) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (gc + e < N) v[e] = hm_wg_epilogue(v[e], gr, gc + e, N, bias, residual, act);
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
// Tile `tile` of the grouped order -> its first row and column.
__device__ __forceinline__ void hm_wg_tile(int tile, int tiles_m, int tiles_n, int& m0, int& n0) {
  const int per_group = WG_GROUP_M * tiles_n;
  const int first_m = (tile / per_group) * WG_GROUP_M;
  const int gsize = min(tiles_m - first_m, WG_GROUP_M);
  m0 = (first_m + (tile % per_group) % gsize) * WG_BM;
  n0 = ((tile % per_group) / gsize) * WG_BN;
}

// Persistent schedule: gridDim.x blocks (one per SM) walk the tiles tile = blockIdx.x, += gridDim.x.
// The producer runs ahead into the next tile while the consumers store this one, so the epilogue
// (straight from registers: the stages stay in use) overlaps the next tile's first loads.
template <typename T, int B_KMAJOR>
__device__ __forceinline__ void hm_gemm_wgmma_persistent(const HmTensorMap* tmA, const HmTensorMap* tmB,
                                                         T* __restrict__ C, const T* __restrict__ bias,
                                                         const T* __restrict__ residual, int M, int N, int K,
                                                         int act, int vec) {
  extern __shared__ unsigned char hm_wg_smem_raw[];
  const unsigned raw = hm_smem_addr(hm_wg_smem_raw);
  const unsigned base = (raw + 1023u) & ~1023u;
  const unsigned sA = base, sB = base + WG_STAGES * WG_A_BYTES;
  const unsigned bars = base + WG_STAGES * WG_STAGE_BYTES;
  const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + WG_BN - 1) / WG_BN, ntiles = tiles_m * tiles_n;
  const int ktiles = (K + WG_BK - 1) / WG_BK;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < WG_STAGES; ++s) {
      hm_mbar_init(bars + 8 * s, 1);
      hm_mbar_init(bars + 8 * (WG_STAGES + s), 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmA)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmB)) : "memory");
      unsigned it = 0;
      for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        int m0, n0;
        hm_wg_tile(tile, tiles_m, tiles_n, m0, n0);
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
          const unsigned s = it % WG_STAGES, phase = (it / WG_STAGES) & 1u;
          hm_mbar_wait(bars + 8 * (WG_STAGES + s), phase ^ 1u);
          const unsigned full = bars + 8 * s;
          hm_mbar_expect_tx(full, WG_STAGE_BYTES);
          hm_tma_load_2d(sA + s * WG_A_BYTES, tmA, kt * WG_BK, m0, full);
          if (B_KMAJOR) {
            hm_tma_load_2d(sB + s * WG_B_BYTES, tmB, kt * WG_BK, n0, full);
          } else {
#pragma unroll
            for (int i = 0; i < WG_BN / 64; ++i)
              hm_tma_load_2d(sB + s * WG_B_BYTES + i * (64 * WG_BK * 2), tmB, n0 + 64 * i, kt * WG_BK, full);
          }
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int cw = wg - 1;
  const bool leader = threadIdx.x % 128 == 0;
  const bool plain = !bias && !residual && act == 0;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  unsigned it = 0;
  float d[128];
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    int m0, n0;
    hm_wg_tile(tile, tiles_m, tiles_n, m0, n0);
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const unsigned s = it % WG_STAGES;
      hm_mbar_wait(bars + 8 * s, (it / WG_STAGES) & 1u);
      const unsigned a0 = sA + s * WG_A_BYTES + cw * (64 * WG_BK * 2);
      const unsigned b0 = sB + s * WG_B_BYTES;
      hm_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < WG_BK / 16; ++kk) {
        const unsigned long long da = hm_desc(a0 + kk * 32, 16, 1024);
        unsigned long long db;
        if (B_KMAJOR) db = hm_desc(b0 + kk * 32, 16, 1024);
        else db = hm_desc(b0 + kk * 16 * 128, 64 * WG_BK * 2, 1024);
        hm_wgmma_m64n256k16<B_KMAJOR ? 0 : 1>(d, da, db, T());
      }
      hm_wgmma_commit();
      hm_wgmma_wait<1>();
      if (kt > 0 && leader) hm_mbar_arrive(bars + 8 * (WG_STAGES + (it - 1) % WG_STAGES));
    }
    hm_wgmma_wait<0>();
    if (ktiles > 0 && leader) hm_mbar_arrive(bars + 8 * (WG_STAGES + (it - 1) % WG_STAGES));
    // epilogue from registers: thread holds rows r0, r0 + 8 and column pairs c0 + 8j
    const int r0 = m0 + cw * 64 + warp * 16 + lane / 4, c0 = n0 + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < WG_BN / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h, c = c0 + 8 * j;
        if (r >= M || c >= N) continue;
        float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
        if (!plain) {
          v0 = hm_epilogue(v0, r, c, N, bias, residual, act);
          if (c + 1 < N) v1 = hm_epilogue(v1, r, c + 1, N, bias, residual, act);
        }
        T* out = C + (size_t)r * N + c;
        if (vec && c + 1 < N) {
          __align__(4) T p[2] = {hm_from_f<T>(v0), hm_from_f<T>(v1)};
          *reinterpret_cast<unsigned*>(out) = *reinterpret_cast<const unsigned*>(p);
        } else {
          out[0] = hm_from_f<T>(v0);
          if (c + 1 < N) out[1] = hm_from_f<T>(v1);
        }
      }
    }
  }
}
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

// Like hm_gemm_wgmma (one tile per CTA, staged epilogue), launched as clusters of 2 CTAs holding
// tiles (2p, n) and (2p + 1, n): B's 256 x 64 tile per stage is loaded half by each CTA and
// multicast to both, halving B's L2 traffic. A stage is refilled only when the consumers of both
// CTAs have released it (empty barriers count 4 arrivals: 2 local, 2 remote). For K-major B the
// tensor map's box is 64 x 128 (half a tile), for N-major B each CTA loads two of the four 64-column boxes.
template <typename T, int B_KMAJOR>
__device__ __forceinline__ void hm_gemm_wgmma_c2(const HmTensorMap* tmA, const HmTensorMap* tmB, T* __restrict__ C,
                                                 const T* __restrict__ bias, const T* __restrict__ residual,
                                                 int M, int N, int K, int act, int vec) {
  extern __shared__ unsigned char hm_wg_smem_raw[];
  const unsigned raw = hm_smem_addr(hm_wg_smem_raw);
  const unsigned base = (raw + 1023u) & ~1023u;   // same offset in both CTAs (same kernel, same layout)
  unsigned char* gbase = hm_wg_smem_raw + (base - raw);
  const unsigned sA = base, sB = base + WG_STAGES * WG_A_BYTES;
  const unsigned bars = base + WG_STAGES * WG_STAGE_BYTES;
  const unsigned rank = hm_cluster_rank(), peer = rank ^ 1u;

  const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + WG_BN - 1) / WG_BN;
  const int pairs_m = (tiles_m + 1) / 2, group = WG_GROUP_M / 2;
  const int pid = blockIdx.x / 2, per_group = group * tiles_n;
  const int first_p = (pid / per_group) * group;
  const int gsize = min(pairs_m - first_p, group);
  const int tm = 2 * (first_p + (pid % per_group) % gsize) + (int)rank, tn = (pid % per_group) / gsize;
  const int m0 = tm * WG_BM, n0 = tn * WG_BN;   // m0 may be past M (odd tile count): loads zeros, stores nothing
  const int ktiles = (K + WG_BK - 1) / WG_BK;

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < WG_STAGES; ++s) {
      hm_mbar_init(bars + 8 * s, 1);
      hm_mbar_init(bars + 8 * (WG_STAGES + s), 4);   // 2 consumer warpgroups x 2 CTAs
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncwarp();        // barrier.cluster is .aligned: converge the warp first
  hm_cluster_sync();   // both CTAs' barriers exist before any multicast or remote arrive

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmA)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(tmB)) : "memory");
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % WG_STAGES;
        hm_mbar_wait_cluster(bars + 8 * (WG_STAGES + s), ((unsigned)(kt / WG_STAGES) & 1u) ^ 1u);
        const unsigned full = bars + 8 * s;
        hm_mbar_expect_tx(full, WG_STAGE_BYTES);           // own A + both halves of B
        hm_tma_load_2d(sA + s * WG_A_BYTES, tmA, kt * WG_BK, m0, full);
        if (B_KMAJOR) {
          hm_tma_load_2d_mc(sB + s * WG_B_BYTES + rank * (WG_B_BYTES / 2), tmB, kt * WG_BK, n0 + (int)rank * (WG_BN / 2),
                            full, (unsigned short)3);
        } else {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int box = 2 * (int)rank + i;
            hm_tma_load_2d_mc(sB + s * WG_B_BYTES + box * (64 * WG_BK * 2), tmB, n0 + 64 * box, kt * WG_BK, full,
                              (unsigned short)3);
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1;
    const bool leader = threadIdx.x % 128 == 0;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int kt = 0; kt < ktiles; ++kt) {
      const int s = kt % WG_STAGES;
      hm_mbar_wait(bars + 8 * s, (unsigned)(kt / WG_STAGES) & 1u);
      const unsigned a0 = sA + s * WG_A_BYTES + cw * (64 * WG_BK * 2);
      const unsigned b0 = sB + s * WG_B_BYTES;
      hm_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < WG_BK / 16; ++kk) {
        const unsigned long long da = hm_desc(a0 + kk * 32, 16, 1024);
        unsigned long long db;
        if (B_KMAJOR) db = hm_desc(b0 + kk * 32, 16, 1024);
        else db = hm_desc(b0 + kk * 16 * 128, 64 * WG_BK * 2, 1024);
        hm_wgmma_m64n256k16<B_KMAJOR ? 0 : 1>(d, da, db, T());
      }
      hm_wgmma_commit();
      hm_wgmma_wait<1>();
      if (kt > 0 && leader) {
        const unsigned e = bars + 8 * (WG_STAGES + (kt - 1) % WG_STAGES);
        hm_mbar_arrive(e);
        hm_mbar_arrive_cluster(e, peer);
      }
    }
    hm_wgmma_wait<0>();
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    float* stage = reinterpret_cast<float*>(gbase);
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
    const int ct = threadIdx.x - 128;
#pragma unroll 1
    for (int i = ct; i < WG_BM * (WG_BN / 8); i += 256) {
      const int r = i / (WG_BN / 8), c = (i % (WG_BN / 8)) * 8;
      const int gr = m0 + r, gc = n0 + c;
      if (gr >= M || gc >= N) continue;
      const float4 lo = *reinterpret_cast<const float4*>(&stage[r * WG_EPI_LD + c]);
      const float4 hi = *reinterpret_cast<const float4*>(&stage[r * WG_EPI_LD + c + 4]);
      float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      if (!plain) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (gc + e < N) v[e] = hm_wg_epilogue(v[e], gr, gc + e, N, bias, residual, act);
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
  __syncwarp();
  hm_cluster_sync();   // no CTA leaves while its peer may still arrive on its barriers
}
#endif  // HM_WGMMA_BODY

#ifdef HM_WGMMA_BODY
#define HM_WG_CALL(T, BK) hm_gemm_wgmma<T, BK>(&tmA, &tmB, C, bias, residual, M, N, K, act, vec)
#define HM_WG_CALL_P(T, BK) hm_gemm_wgmma_persistent<T, BK>(&tmA, &tmB, C, bias, residual, M, N, K, act, vec)
#define HM_WG_CALL_C2(T, BK) hm_gemm_wgmma_c2<T, BK>(&tmA, &tmB, C, bias, residual, M, N, K, act, vec)
#else
#define HM_WG_CALL_C2(T, BK) ((void)0)
#define HM_WG_CALL(T, BK) ((void)0)
#define HM_WG_CALL_P(T, BK) ((void)0)
#endif

// Entry points: gemm_wgmma_<dtype> takes B as K x N row-major; gemm_wgmma_<dtype>_bt as N x K row-major.
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) gemm_wgmma_f16(
    const __grid_constant__ HmTensorMap tmA, const __grid_constant__ HmTensorMap tmB, __half* C,
    const __half* bias, const __half* residual, int M, int N, int K, int act, int vec) {
  HM_WG_CALL(__half, 0);
}
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) gemm_wgmma_f16_bt(
    const __grid_constant__ HmTensorMap tmA, const __grid_constant__ HmTensorMap tmB, __half* C,
    const __half* bias, const __half* residual, int M, int N, int K, int act, int vec) {
  HM_WG_CALL(__half, 1);
}
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) gemm_wgmma_bf16(
    const __grid_constant__ HmTensorMap tmA, const __grid_constant__ HmTensorMap tmB, __nv_bfloat16* C,
    const __nv_bfloat16* bias, const __nv_bfloat16* residual, int M, int N, int K, int act, int vec) {
  HM_WG_CALL(__nv_bfloat16, 0);
}
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) gemm_wgmma_bf16_bt(
    const __grid_constant__ HmTensorMap tmA, const __grid_constant__ HmTensorMap tmB, __nv_bfloat16* C,
    const __nv_bfloat16* bias, const __nv_bfloat16* residual, int M, int N, int K, int act, int vec) {
  HM_WG_CALL(__nv_bfloat16, 1);
}

// Persistent schedule (grid = one block per SM): gemm_wgmma_<dtype>_p and _bt_p.
#define HM_WG_PERSISTENT_ENTRY(NAME, T, BK)                                                                     \
  extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) NAME(                                           \
      const __grid_constant__ HmTensorMap tmA, const __grid_constant__ HmTensorMap tmB, T* C, const T* bias,  \
      const T* residual, int M, int N, int K, int act, int vec) {                                             \
    HM_WG_CALL_P(T, BK);                                                                                       \
  }
HM_WG_PERSISTENT_ENTRY(gemm_wgmma_f16_p, __half, 0)
HM_WG_PERSISTENT_ENTRY(gemm_wgmma_f16_bt_p, __half, 1)
HM_WG_PERSISTENT_ENTRY(gemm_wgmma_bf16_p, __nv_bfloat16, 0)
HM_WG_PERSISTENT_ENTRY(gemm_wgmma_bf16_bt_p, __nv_bfloat16, 1)

// Clusters of 2 CTAs along M sharing B by multicast (grid = 2 x ceil(tiles_m / 2) x tiles_n): _c2.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define HM_CLUSTER2 __cluster_dims__(2, 1, 1)
#else
#define HM_CLUSTER2
#endif
#define HM_WG_CLUSTER_ENTRY(NAME, T, BK)                                                                       \
  extern "C" __global__ void HM_CLUSTER2 __launch_bounds__(WG_THREADS, 1) NAME(                 \
      const __grid_constant__ HmTensorMap tmA, const __grid_constant__ HmTensorMap tmB, T* C, const T* bias,  \
      const T* residual, int M, int N, int K, int act, int vec) {                                             \
    HM_WG_CALL_C2(T, BK);                                                                                      \
  }
HM_WG_CLUSTER_ENTRY(gemm_wgmma_f16_c2, __half, 0)
HM_WG_CLUSTER_ENTRY(gemm_wgmma_f16_bt_c2, __half, 1)
HM_WG_CLUSTER_ENTRY(gemm_wgmma_bf16_c2, __nv_bfloat16, 0)
HM_WG_CLUSTER_ENTRY(gemm_wgmma_bf16_bt_c2, __nv_bfloat16, 1)
