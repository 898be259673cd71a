"""The Hopper GEMM (``gemm(..., variant="wgmma")``): wgmma.mma_async + TMA on sm_90a.

Source: ``kernels/gemm_wgmma.cu``. Block tile 128 x 256 x 64, 384 threads (one producer
warpgroup issuing TMA loads into a 4-stage mbarrier ring, two consumer warpgroups issuing wgmma
m64n256k16), FP32 accumulate, FP16/BF16 out with the fused bias / activation / residual epilogue.

The FP8 GEMM (:func:`hookmagic.kernels.gemm.gemm_fp8`, source ``kernels/gemm_fp8.cu``) runs on
the same pipeline (``kernels/wgmma_gemm.cuh``): a stage's 128-byte rows hold 128 FP8 elements of
K (``constants.WG["WG8_BK"]``), wgmma m64n256k32, the per-tensor scales applied to the FP32
accumulators before the epilogue. FP8 wgmma reads both operands K-major, so ``b`` is N x K
row-major (a column-major K x N) and rows need no padding when K is a multiple of 16.

Operand layouts: ``a`` row-major (a transposed/strided ``a`` is copied to row-major first);
``b`` row-major (K x N, read N-major with wgmma's transpose flag) or column-major (``b =
bt.t()`` of a contiguous N x K ``bt``, read K-major as it is, no copy). TMA needs 16-byte aligned
rows: an operand whose contiguous dimension is not a multiple of 8 elements (or whose address is
not 16-byte aligned) is copied into a zero-padded buffer first. Edge tiles are zero-filled by TMA
and the stores are guarded, so any M, N, K works.
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict
from typing import Any

import numpy as np

from hookmagic.kernels import constants, registry, runtime, tma
from hookmagic.kernels.errors import KernelArgumentError, KernelsUnavailable
from hookmagic.kernels.registry import KernelSpec, register

BM, BN, BK, STAGES, THREADS = (constants.WG[k] for k in ("WG_BM", "WG_BN", "WG_BK", "WG_STAGES", "WG_THREADS"))
BK8 = constants.WG["WG8_BK"]   # the FP8 kernels' K per stage: the same bytes as BK 16-bit elements
#: dynamic shared memory: 1 KiB alignment slack + 4 stages of A (16 KiB) and B (32 KiB) + 8 mbarriers
SMEM_BYTES = 1024 + STAGES * (BM * BK + BN * BK) * 2 + 2 * STAGES * 8
#: (every figure is bytes: the FP8 kernels' stages hold the same bytes, 128 x 128 and 256 x 128 FP8)
#: the persistent schedule's: 3 stages + a 128 x (256 + 8) FP16/BF16 output tile + 6 mbarriers
SMEM_BYTES_PERSISTENT = 1024 + 3 * (BM * BK + BN * BK) * 2 + BM * (BN + 8) * 2 + 2 * 3 * 8
#: persistent4's: 4 stages + two 64 x 128 staging tiles (one per consumer warpgroup) + 8 mbarriers
SMEM_BYTES_PERSISTENT4 = 1024 + STAGES * (BM * BK + BN * BK) * 2 + 2 * 64 * 128 * 2 + 2 * STAGES * 8

SPEC = register(KernelSpec(
    "gemm", "wgmma", "gemm_wgmma", {"float16": "gemm_wgmma_f16", "bfloat16": "gemm_wgmma_bf16"},
    (THREADS, 1, 1), (BM, BN), smem=SMEM_BYTES, arch_specific=True, min_arch=90,
    description="Hopper (sm_90a only): wgmma m64n256k16 from shared memory, TMA loads with 128B swizzle, "
                "4-stage mbarrier pipeline, producer + 2 consumer warpgroups, 128x256x64 tiles "
                "(column-major b: gemm_wgmma_<dtype>_bt)"))


#: FP8 operand dtypes (torch's names) and output dtypes -> their part of the FP8 kernels' names
FP8_TYPES = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
FP8_OUT_TYPES = {"float16": "f16", "bfloat16": "bf16"}
#: (a dtype, b dtype, output dtype) -> the FP8 kernel ("tiles" schedule; "_p4" appended for persistent4)
FP8_KERNELS = {(a, b, o): f"gemm_fp8_{ta}_{tb}_{to}" for a, ta in FP8_TYPES.items() for b, tb in FP8_TYPES.items()
               for o, to in FP8_OUT_TYPES.items()}
#: the schedules the FP8 kernels are built for (kernels/gemm_fp8.cu)
FP8_SCHEDULES = ("tiles", "persistent4")

FP8_SPEC = register(KernelSpec(
    "gemm_fp8", "wgmma", "gemm_fp8",
    {a: f"gemm_fp8_{ta}_{ta}_bf16" for a, ta in FP8_TYPES.items()},   # one per A type; all in FP8_KERNELS
    (THREADS, 1, 1), (BM, BN), smem=SMEM_BYTES, arch_specific=True, min_arch=90,
    description=f"Hopper (sm_90a only) FP8 e4m3/e5m2 with per-tensor scales: wgmma m64n256k32 on the wgmma "
                f"GEMM's pipeline, {BM}x{BN}x{BK8} tiles, FP32 accumulate, FP16/BF16 out (b is N x K: "
                "FP8 wgmma reads both operands K-major); every A x B pair and output: gemm_fp8_<a>_<b>_<f16|bf16>"))


#: "tiles": one block per 128 x 256 tile (epilogue staged through shared memory, 16-byte stores);
#: "persistent": one block per SM walking the tiles (3-stage ring), the producer loading the next tile
#: while the consumers store this one through a separate output tile in shared memory; "cluster2": like "tiles", launched
#: as clusters of 2 blocks along M that load half of the shared B tile each and multicast it
#: (TMA .multicast::cluster); "persistent4": persistent with the 4-stage ring, each consumer warpgroup
#: storing its rows through its own small staging tile. Chosen by ``gemm(..., schedule=)``;
#: lab/kernels/gemm_candidates.py measures them.
SCHEDULES = ("tiles", "persistent", "persistent4", "cluster2")
_sm_count: dict[int, int] = {}


def _sms(ordinal: int) -> int:
    n = _sm_count.get(ordinal)
    if n is None:
        n = _sm_count[ordinal] = int(runtime.device(ordinal).properties.multiprocessor_count)
    return n


def _transposed(info: runtime.ArrayInfo) -> runtime.ArrayInfo:
    return runtime.inspect_array(info.obj.t() if info.kind == "torch" else info.obj.T, info.name)


def _tma_ready(info: runtime.ArrayInfo) -> runtime.ArrayInfo:
    """``info`` itself when TMA can read it (row-major, rows a multiple of 16 bytes, 16-byte aligned
    address), else a row-major copy zero-padded to a multiple of 8 columns."""
    rows, cols = info.shape
    if info.contiguous and cols % 8 == 0 and info.ptr % 16 == 0:
        return info
    padded = -(-cols // 8) * 8
    if info.kind == "torch":
        out = info.obj.new_zeros((rows, padded))
    else:
        import cupy
        with cupy.cuda.Device(info.device):
            out = cupy.zeros((rows, padded), dtype=info.obj.dtype)
    out[:, :cols] = info.obj
    return runtime.inspect_array(out, info.name)


class _Scalars(ctypes.Structure):
    """The kernels' parameters after the two tensor maps (kernels/gemm_wgmma.cu), in order."""
    _fields_ = [("c", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("residual", ctypes.c_void_p),
                ("m", ctypes.c_int), ("n", ctypes.c_int), ("k", ctypes.c_int), ("act", ctypes.c_int),
                ("vec", ctypes.c_int)]


_arch_ok: dict[int, str] = {}
_kernels: dict[tuple[str, int], Any] = {}


#: what to use instead of a wgmma kernel on another GPU, by operation
_ELSEWHERE = {"gemm(variant='wgmma')": "Use variant='mma' (sm_80+) or 'wmma' there.",
              "gemm_fp8": "FP8 Tensor Cores elsewhere (sm_89 Ada, sm_100 Blackwell) are reached through "
                          "torch._scaled_mm; or run gemm() in FP16/BF16."}


def check_device(ordinal: int, op: str = "gemm(variant='wgmma')") -> str:
    """``'sm_90a'`` for an sm_90 device (H100/H200/GH200); :class:`KernelsUnavailable` elsewhere,
    naming ``op`` and what to use instead."""
    arch = _arch_ok.get(ordinal)
    if arch is None:
        arch = runtime.device_arch(ordinal)
        if arch != "sm_90":
            raise KernelsUnavailable(
                f"{op} needs an sm_90 GPU (H100, H200 or GH200: wgmma and TMA exist on sm_90a only); "
                f"cuda:{ordinal} is {arch}. {_ELSEWHERE.get(op, '')}".rstrip())
        _arch_ok[ordinal] = arch
    return "sm_90a"


def _smem(name: str) -> int:
    if name.endswith("_p"):
        return SMEM_BYTES_PERSISTENT
    return SMEM_BYTES_PERSISTENT4 if name.endswith("_p4") else SMEM_BYTES


def _kernel(name: str, ordinal: int, family: str = SPEC.family) -> Any:
    """The loaded kernel, its dynamic shared memory allowed (cached: this is the per-call path)."""
    kern = _kernels.get((name, ordinal))
    if kern is None:
        kern = runtime.get_kernel(family, name, ordinal, arch_specific=True)
        runtime.set_dynamic_smem(kern, _smem(name), ordinal)
        _kernels[(name, ordinal)] = kern
    return kern


def gemm_wgmma(ai: runtime.ArrayInfo, bi: runtime.ArrayInfo, bias_i: runtime.ArrayInfo | None,
               res_i: runtime.ArrayInfo | None, act: int, schedule: str = "tiles") -> Any:
    """``act(a @ b + bias) + residual`` with the wgmma kernel; operands already checked by
    :func:`hookmagic.kernels.gemm` (2-D, same FP16/BF16 dtype and device; bias (N,), residual M x N;
    K > 0: the caller runs K == 0 elsewhere, since TMA cannot map an empty operand)."""
    return run(ai, bi, bias_i, res_i, act, schedule)[0]


class Plan:
    """One wgmma launch worked out once per (operand geometry, dtype, device, schedule, epilogue):
    the kernel, grid, shared memory, the prepared driver launch, the tensor maps' geometry and,
    per operand address, the encoded maps (an address and this geometry fix a map's bytes)."""
    __slots__ = ("kern", "name", "grid", "smem", "prep", "geom_a", "geom_b", "maps_a", "maps_b", "m", "n", "k",
                 "act", "vec", "work")

    def map_a(self, ptr: int) -> tuple[Any, bytes]:
        return _map(self.maps_a, ptr, self.geom_a)

    def map_b(self, ptr: int) -> tuple[Any, bytes]:
        return _map(self.maps_b, ptr, self.geom_b)


#: maps kept per plan and operand (an operand's addresses repeat when its tensors are reused)
_MAPS_PER_PLAN = 32
#: plans kept (least recently used dropped)
_MAX_PLANS = 256
_plans: OrderedDict[tuple, Plan] = OrderedDict()


def _map(cache: dict[int, tuple[Any, bytes]], ptr: int, geom: tuple) -> tuple[Any, bytes]:
    """The (CUtensorMap, its bytes) of an operand at ``ptr`` with geometry ``geom``, cached."""
    e = cache.get(ptr)
    if e is None:
        if len(cache) >= _MAPS_PER_PLAN:
            cache.clear()
        m = tma.encode_2d(ptr, *geom)
        e = cache[ptr] = (m, tma.map_bytes(m))
    return e


def _plan(key: tuple, dtype: str, dev: int, m: int, n: int, k: int, kpad: int, bcols: int, k_major: bool,
          schedule: str, act: int, extra_bytes: int) -> Plan:
    """The :class:`Plan` of ``key`` (the arguments after it), from the cache or worked out now."""
    plan = _plans.get(key)
    if plan is not None:
        _plans.move_to_end(key)
        return plan
    if k_major:
        name = SPEC.entries[dtype] + "_bt"
        box_n = BN // 2 if schedule == "cluster2" else BN       # a cluster's CTAs load half each
        geom_b = (dtype, bcols, n, bcols * 2, (BK, box_n))      # b's transpose: N x K(pad) row-major
    else:
        name = SPEC.entries[dtype]
        geom_b = (dtype, bcols, k, bcols * 2, (64, BK))         # K x N(pad) row-major
    tiles = -(-m // BM) * -(-n // BN)
    if schedule == "tiles":
        grid = (tiles, 1, 1)
    elif schedule == "persistent":
        name += "_p"
        grid = (min(tiles, _sms(dev)), 1, 1)
    elif schedule == "persistent4":
        name += "_p4"
        grid = (min(tiles, _sms(dev)), 1, 1)
    elif schedule == "cluster2":
        name += "_c2"
        grid = (2 * -(-m // (2 * BM)) * -(-n // BN), 1, 1)
    else:
        raise KernelArgumentError(f"gemm: schedule={schedule!r}: use one of {', '.join(SCHEDULES)}")
    plan = Plan()
    plan.kern, plan.name, plan.grid, plan.smem = _kernel(name, dev), name, grid, _smem(name)
    plan.geom_a, plan.geom_b = (dtype, kpad, m, kpad * 2, (BK, BM)), geom_b
    plan.maps_a, plan.maps_b = {}, {}
    plan.m, plan.n, plan.k, plan.act, plan.vec = m, n, k, act, int(n % 8 == 0)
    plan.prep = runtime.prepare_maps(plan.kern, dev, grid, SPEC.block, 2, (0, 0, 0, *_I32), plan.smem)
    item = registry.ITEMSIZE[dtype]
    plan.work = registry.LaunchWork(name, 2 * m * n * k, (m * k + k * n + m * n) * item + extra_bytes,
                                    {"m": m, "n": n, "k": k, "dtype": dtype})
    if len(_plans) >= _MAX_PLANS:
        _plans.popitem(last=False)
    _plans[key] = plan
    return plan


#: sample int32 scalars (m, n, k, act, vec) for the prepared launch's argument format
_I32 = (np.int32(0),) * 5


def launch_plan(plan: Plan, kind: str, dev: int, pa: int, pb: int, pc: int, pbias: int, pres: int) -> None:
    """Launch ``plan`` on operands at ``pa`` (A), ``pb`` (B, or its transpose for a K-major plan),
    output ``pc`` and the epilogue's ``pbias``/``pres`` (0: none), on ``kind``'s current stream."""
    ma, mb = plan.maps_a.get(pa) or plan.map_a(pa), plan.maps_b.get(pb) or plan.map_b(pb)
    vec = plan.vec and not pc & 15
    if plan.prep.fmt and runtime.LAUNCHER == "driver":
        runtime.launch_prepared_maps(plan.prep, kind, dev, (ma[1], mb[1]),
                                     (pc, pbias, pres, plan.m, plan.n, plan.k, plan.act, vec))
        return
    stream = runtime.current_stream_handle(runtime.ArrayInfo("", kind, (), (), "", dev, 0, None))
    tma.launch(plan.kern, dev, stream, plan.grid, SPEC.block, plan.smem, (ma[0], mb[0]),
               _Scalars(pc, pbias, pres, plan.m, plan.n, plan.k, plan.act, vec))


def run(ai: runtime.ArrayInfo, bi: runtime.ArrayInfo, bias_i: runtime.ArrayInfo | None,
        res_i: runtime.ArrayInfo | None, act: int, schedule: str = "tiles") -> tuple[Any, Plan | None]:
    """:func:`gemm_wgmma`'s result and the :class:`Plan` it launched, or None for the plan where
    the launch read copies of ``a`` or ``b`` (TMA could not read them as they are) or launched
    nothing (an empty result): a plan that read the operands as they are can be launched again on
    operands of the same geometry by :func:`launch_plan`."""
    m, k = ai.shape
    n = bi.shape[1]
    dev = ai.device
    check_device(dev)
    c, cptr = runtime.new_output(ai, (m, n), ai.dtype)
    if m == 0 or n == 0:
        return c, None
    a_t = _tma_ready(ai)
    # b: column-major (K-major) is read as it is; anything else as row-major (N-major)
    bt = bi
    if not bi.contiguous:
        bt = _transposed(bi)
    k_major = bt is not bi and bt.contiguous
    b_t = _tma_ready(bt) if k_major else _tma_ready(runtime.contiguous(bi))
    item = registry.ITEMSIZE[ai.dtype]
    extra = (n if bias_i else 0) * item + (m * n if res_i else 0) * item
    key = (ai.dtype, dev, m, n, k, a_t.shape[1], b_t.shape[1], k_major, schedule, act, extra)
    plan = _plan(key, ai.dtype, dev, m, n, k, a_t.shape[1], b_t.shape[1], k_major, schedule, act, extra)
    launch_plan(plan, ai.kind, dev, a_t.ptr, b_t.ptr, cptr, bias_i.ptr if bias_i else 0, res_i.ptr if res_i else 0)
    registry.record_work(plan.work)
    # padded copies may be freed now: the caller's stream orders the allocator's reuse (torch's
    # caching allocator and CuPy's pool are stream-ordered)
    return c, (plan if a_t is ai and (b_t is bt if k_major else b_t is bi) else None)


class _Fp8Scalars(ctypes.Structure):
    """The FP8 kernels' parameters after the two tensor maps (kernels/gemm_fp8.cu), in order."""
    _fields_ = [("c", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("scale_a", ctypes.c_void_p),
                ("scale_b", ctypes.c_void_p), ("m", ctypes.c_int), ("n", ctypes.c_int), ("k", ctypes.c_int),
                ("vec", ctypes.c_int)]


def gemm_fp8_wgmma(ai: runtime.ArrayInfo, bti: runtime.ArrayInfo, scale_a: int, scale_b: int, out_dtype: str,
                   bias_i: runtime.ArrayInfo | None, schedule: str) -> Any:
    """``(scale_a * scale_b) * (a @ bt.T) + bias`` with the FP8 kernels; operands already checked by
    :func:`hookmagic.kernels.gemm.gemm_fp8`: ``a`` M x K and ``bt`` N x K row-major FP8 with K a
    positive multiple of 16 and 16-byte aligned addresses (TMA reads them as they are), ``scale_a``
    and ``scale_b`` addresses of FP32 scalars, ``bias`` (N,) of ``out_dtype`` or None."""
    m, k = ai.shape
    n = bti.shape[0]
    dev = ai.device
    check_device(dev, "gemm_fp8")
    c, cptr = runtime.new_output(ai, (m, n), out_dtype)
    if m == 0 or n == 0:
        return c
    name = FP8_KERNELS[(ai.dtype, bti.dtype, out_dtype)]
    map_a = tma.encode_2d(ai.ptr, ai.dtype, k, m, k, (BK8, BM))
    map_b = tma.encode_2d(bti.ptr, bti.dtype, k, n, k, (BK8, BN))
    if schedule == "tiles":
        grid = (-(-m // BM) * -(-n // BN), 1, 1)
    elif schedule == "persistent4":
        name += "_p4"
        grid = (min(-(-m // BM) * -(-n // BN), _sms(dev)), 1, 1)
    else:
        raise KernelArgumentError(f"gemm_fp8: schedule={schedule!r}: use one of {', '.join(FP8_SCHEDULES)}")
    kern = _kernel(name, dev, FP8_SPEC.family)
    vec = int(n % 8 == 0 and cptr % 16 == 0)
    scalars = _Fp8Scalars(cptr, bias_i.ptr if bias_i else 0, scale_a, scale_b, m, n, k, vec)
    tma.launch(kern, dev, runtime.current_stream_handle(ai), grid, FP8_SPEC.block, _smem(name), (map_a, map_b), scalars)
    out_item = registry.ITEMSIZE[out_dtype]
    registry.record(name, 2 * m * n * k, m * k + k * n + m * n * out_item + (n * out_item if bias_i else 0),
                    m=m, n=n, k=k, dtype=ai.dtype)
    return c


__all__ = ["gemm_wgmma", "run", "launch_plan", "Plan", "gemm_fp8_wgmma", "check_device", "SPEC", "FP8_SPEC", "SMEM_BYTES", "SCHEDULES",
           "FP8_SCHEDULES", "FP8_TYPES", "FP8_OUT_TYPES", "FP8_KERNELS"]
