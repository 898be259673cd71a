"""hookmagic.kernels against cuBLAS (torch.matmul / torch._int_mm), timed with CUDA events.

    python -m benchmarks run kernels            # on a GPU machine

Each process times every case (median of several launches after a warm-up, CUDA events) and
its cuBLAS reference in the same process; the runner starts fresh processes and keeps the
min-max of each case's time. ``summarise`` writes the fraction-of-cuBLAS table from the rows. Every kernel's
result is checked against its reference once per process; a wrong result is reported as such,
not timed. FP32 references run with TF32 off (true FP32 SGEMM).
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

#: (label, shape M, N, K, kernel cases) — kernel cases: (kind, variant); kind in sgemm/f16/bf16/int8
PLAN = [
    ("4096", (4096, 4096, 4096), [("sgemm", v) for v in ("naive", "coalesced", "smem_tiled", "tile_1d", "tile_2d",
                                                          "vectorized", "warptile")]
     + [("f16", "wmma"), ("f16", "mma"), ("bf16", "wmma"), ("bf16", "mma"), ("int8", "mma")]
     + [("f16", "wgmma"), ("bf16", "wgmma")]),
    ("1024", (1024, 1024, 1024), [("sgemm", "vectorized"), ("sgemm", "warptile"), ("f16", "wmma"), ("f16", "mma"),
                                  ("bf16", "mma"), ("int8", "mma"), ("f16", "wgmma"), ("bf16", "wgmma")]),
    ("8192", (8192, 8192, 8192), [("sgemm", "warptile"), ("f16", "mma"), ("bf16", "mma"), ("int8", "mma"),
                                  ("f16", "wgmma"), ("bf16", "wgmma")]),
    # the dispatch table's boundary between wgmma and mma (hookmagic.kernels.dispatch)
    ("512", (512, 512, 512), [("f16", "mma"), ("f16", "wgmma"), ("bf16", "mma"), ("bf16", "wgmma")]),
    ("2048", (2048, 2048, 2048), [("f16", "mma"), ("f16", "wgmma"), ("bf16", "mma"), ("bf16", "wgmma")]),
    ("M=1024", (1024, 4096, 4096), [("f16", "mma"), ("f16", "wgmma")]),
    ("M=256", (256, 4096, 4096), [("f16", "mma"), ("f16", "wgmma")]),
    ("K=128", (4096, 4096, 128), [("f16", "mma"), ("f16", "wgmma")]),
    ("K=512", (4096, 4096, 512), [("f16", "mma"), ("f16", "wgmma")]),
    ("skinny M=8", (8, 4096, 4096), [("sgemm", "warptile"), ("f16", "wmma"), ("f16", "mma"), ("int8", "mma"),
                                     ("f16", "wgmma")]),
    ("skinny M=64", (64, 4096, 4096), [("sgemm", "warptile"), ("f16", "wmma"), ("f16", "mma"), ("int8", "mma"),
                                       ("f16", "wgmma")]),
]
#: variants that run only on some GPUs (skipped, not failed, elsewhere)
NEEDS_SM90 = {"wgmma"}
#: the "fp8" section (sm_90 only): (label, (M, N, K), kinds); kind "AxB" multiplies an A-type by a
#: B-type FP8 operand into BF16 with per-tensor scales, against torch._scaled_mm on the same operands
FP8_PLAN = [("4096", (4096, 4096, 4096), ("e4m3xe4m3", "e4m3xe5m2")), ("8192", (8192, 8192, 8192), ("e4m3xe4m3",)),
            ("M=1024", (1024, 4096, 4096), ("e4m3xe4m3",))]


def _plan(shapes: str = "", cases: str = "") -> list:
    """PLAN, restricted to the shape labels in ``shapes`` and the ``kind:variant`` pairs in
    ``cases`` (comma-separated; empty: all)."""
    want_shapes = {x.strip() for x in shapes.split(",") if x.strip()}
    want_cases = [tuple(x.strip().split(":", 1)) for x in cases.split(",") if x.strip()]
    plan = []
    for label, shape, cs in PLAN:
        if want_shapes and label not in want_shapes:
            continue
        cs = want_cases or cs       # named cases run as given (e.g. "f16:wgmma@persistent", a schedule)
        if cs:
            plan.append((label, shape, cs))
    return plan


def _tensor_core(a, b, variant: str):
    """``hk.gemm(a, b, variant=...)``; ``"wgmma@persistent"`` picks a schedule of the wgmma kernel."""
    import hookmagic.kernels as hk
    if "@" not in variant:
        return hk.gemm(a, b, variant=variant)
    variant, schedule = variant.split("@", 1)
    return hk.gemm(a, b, variant=variant, schedule=schedule)
REFERENCE = {"sgemm": "cuBLAS FP32 (torch.matmul, TF32 off)", "f16": "cuBLAS FP16 (torch.matmul)",
             "bf16": "cuBLAS BF16 (torch.matmul)", "int8": "cuBLAS INT8 (torch._int_mm)"}


def _time(fn, budget_s: float = 0.1, min_reps: int = 3, max_reps: int = 50) -> float:
    """Median seconds of one call of ``fn`` (CUDA events around each call, after a warm-up)."""
    import torch

    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); e.synchronize()
    first = s.elapsed_time(e) / 1e3
    reps = int(min(max_reps, max(min_reps, budget_s / max(first, 1e-6))))
    times = []
    for _ in range(reps):
        s.record(); fn(); e.record(); e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return times[len(times) // 2]


def _time_device(fn, reps: int = 15) -> float:
    """Median device seconds of one call of ``fn`` from a cold L2, with the host's launch cost
    hidden: a sleep kernel holds the stream while ``reps`` rounds of (read a 256 MiB buffer:
    evicts the L2 with clean lines; event; call; event) are queued behind it, so each event pair
    times one call's kernels alone (what a bandwidth figure needs: ``_time`` includes the host's
    time to launch one call, which for a 20 µs kernel can be most of what it measures; back-to-back
    calls on the same buffers would be served partly from the 50 MB L2). The host's time per call
    is kept in ``_HOST['last']``."""
    import time

    import torch

    fn()
    torch.cuda.synchronize()
    flush = _FLUSH.get("buf")
    if flush is None:
        flush = _FLUSH["buf"] = torch.empty(256 * 2 ** 20 // 4, dtype=torch.float32, device="cuda").fill_(1.0)
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per_call = (time.perf_counter() - t0) / 3
    cycles = int(min(0.2, 2.0 * (per_call + 50e-6) * reps + 2e-3) * 2.0e9)   # >= the queueing time at <= 2 GHz
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    hosts = []
    torch.cuda._sleep(cycles)
    for i in range(reps):
        flush.amax()
        starts[i].record()
        h0 = time.perf_counter()
        fn()
        hosts.append(time.perf_counter() - h0)   # the stream is held: pure host cost of the call
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends))
    hosts.sort()
    _HOST["last"] = hosts[len(hosts) // 2]
    return times[len(times) // 2]


_FLUSH: dict = {}


#: host seconds per call (Python + launch) of the last ``_time_device`` measurement
_HOST: dict[str, float | None] = {"last": None}


def _int_mm_reference(a, b):
    """torch._int_mm on (a, b), or on a row-major copy of b if this torch wants that; None if neither runs."""
    import torch
    for bb in (b, b.contiguous()):
        try:
            torch._int_mm(a, bb)
            return lambda a=a, bb=bb: torch._int_mm(a, bb)
        except RuntimeError as exc:
            print("  torch._int_mm:", exc, flush=True)
    return None


def worker(out: str, sections: tuple[str, ...] = ("gemm", "memory", "infer"), shapes: str = "", cases: str = "",
           timer: str = "call", variants: bool = False) -> None:
    import torch

    # "device": kernel time alone (cold L2, host launch cost hidden), what the dispatch table compares;
    # "call": CUDA events around one call, the host's launch cost included
    mem_timer = _time_device if timer == "device" else _time

    import hookmagic.kernels as hk

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    rows = []
    sm90 = torch.cuda.get_device_capability() == (9, 0)
    for label, (m, n, k), cases in (_plan(shapes, cases) if "gemm" in sections else []):
        cases = [c for c in cases if sm90 or c[1].split("@")[0] not in NEEDS_SM90]
        data = {}
        for kind in {c[0] for c in cases}:
            if kind == "int8":
                a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
                b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8).t()   # column-major
                ref_fn = _int_mm_reference(a, b) if m > 16 else None   # _int_mm needs M > 16
                run = lambda v, a=a, b=b: hk.gemm(a, b, variant=v)                      # noqa: E731
                exact = (a.double() @ b.double())
            else:
                dtype = {"sgemm": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[kind]
                a = torch.randn(m, k, device="cuda", dtype=dtype)
                b = torch.randn(k, n, device="cuda", dtype=dtype)
                ref_fn = lambda a=a, b=b: a @ b                                         # noqa: E731
                run = ((lambda v, a=a, b=b: hk.sgemm(a, b, variant=v)) if kind == "sgemm"
                       else (lambda v, a=a, b=b: _tensor_core(a, b, v)))
                exact = a.double() @ b.double() if kind == "sgemm" else a.float() @ b.float()
            ref_s = mem_timer(ref_fn) if ref_fn else float("nan")
            ref_err = (ref_fn().double() - exact.double()).abs().max().item() if ref_fn else 0.0
            data[kind] = (run, ref_s, exact, ref_err)
            rows.append({"shape": label, "m": m, "n": n, "k": k, "kind": kind, "variant": "cuBLAS",
                         "kernel": REFERENCE[kind], "seconds": ref_s, "ok": True, "max_err": ref_err})
        for kind, variant in cases:
            run, ref_s, exact, ref_err = data[kind]
            try:
                c = run(variant)
            except Exception as exc:  # report, keep measuring the others
                print(f"  {label:12s} {kind:5s} {variant:10s} FAILED: {exc}", flush=True)
                rows.append({"shape": label, "m": m, "n": n, "k": k, "kind": kind, "variant": variant,
                             "kernel": f"{kind} {variant}", "seconds": float("nan"), "ok": False,
                             "max_err": float("nan")})
                continue
            err = (c.double() - exact.double()).abs().max().item()
            scale = max(exact.abs().max().item(), 1.0)
            eps = {"sgemm": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7, "int8": 0.0}[kind]
            ok = err == 0 if kind == "int8" else err <= 2 * ref_err + eps * scale
            secs = mem_timer(lambda: run(variant)) if ok else float("nan")
            rows.append({"shape": label, "m": m, "n": n, "k": k, "kind": kind, "variant": variant,
                         "kernel": f"{kind} {variant}", "seconds": secs, "ok": bool(ok), "max_err": err})
            print(f"  {label:12s} {kind:5s} {variant:10s} {secs * 1e3:9.3f} ms ok={ok}", flush=True)
        del data
        torch.cuda.empty_cache()
    Path(out).write_text(json.dumps(rows))
    try:
        if "memory" in sections:
            memory_bound(mem_timer, rows, variants)
    except Exception as exc:  # keep the GEMM rows
        print("  memory-bound section FAILED:", repr(exc), flush=True)
    Path(out).write_text(json.dumps(rows))
    try:   # preprocess, transposes, row reductions (benchmarks/kernel_memory_cases.py)
        if "memory" in sections:
            from benchmarks.kernel_memory_cases import memory_cases
            memory_cases(mem_timer, lambda: _HOST["last"] if timer == "device" else None, rows, variants)
    except Exception as exc:  # keep the other rows
        print("  memory-bound cases FAILED:", repr(exc), flush=True)
    Path(out).write_text(json.dumps(rows))
    if "fp8" in sections and sm90:
        try:
            rows += fp8_rows(mem_timer, shapes)
        except Exception as exc:  # keep the other rows
            print("  fp8 section FAILED:", repr(exc), flush=True)
        Path(out).write_text(json.dumps(rows))
    if "attention" in sections and sm90:
        try:
            rows += attention_rows()
        except Exception as exc:  # keep the other rows
            print("  attention section FAILED:", repr(exc), flush=True)
        Path(out).write_text(json.dumps(rows))
    if "infer" in sections:  # the inference kernels (benchmarks/kernel_infer_cases.py)
        try:
            from benchmarks.kernel_infer_cases import infer_rows
            rows += infer_rows(mem_timer if timer == "device" else _time)
        except Exception as exc:  # keep the other rows
            print("  inference section FAILED:", repr(exc), flush=True)
        Path(out).write_text(json.dumps(rows))


def fp8_rows(timer, shapes: str = "") -> list[dict]:
    """gemm_fp8 (each FP8 schedule) against torch._scaled_mm (the reference, "cuBLAS" rows: its
    default use_fast_accum=False; the fast-accumulation form is a row of its own) on the same
    operands and scales. Correct means: no farther from the FP32 product of the same FP8 values
    than twice torch._scaled_mm(use_fast_accum=True) (the same Tensor Core accumulation) plus one
    BF16 rounding of the result."""
    import torch

    from hookmagic.kernels.gemm import gemm_fp8
    from hookmagic.kernels.gemm_wgmma import FP8_SCHEDULES

    want = {x.strip() for x in shapes.split(",") if x.strip()}
    types = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    rows = []
    for label, (m, n, k), kinds in FP8_PLAN:
        if want and label not in want:
            continue
        for kind in kinds:
            ta, tb = (types[t] for t in kind.split("x"))
            a = torch.randn(m, k, device="cuda").to(ta)
            b = torch.randn(n, k, device="cuda").to(tb).t()          # column-major, as _scaled_mm takes it
            sa = torch.tensor(0.5, device="cuda")
            sb = torch.tensor(2.0 ** -3, device="cuda")
            exact = (a.float() @ b.float()) * (0.5 * 2.0 ** -3)       # TF32 off: FP32 products of exact values
            scale = max(exact.abs().max().item(), 1.0)
            refs = {"cuBLAS": False, "cuBLAS fast accum": True}
            errs = {}
            for variant, fast in refs.items():
                def ref(a=a, b=b, sa=sa, sb=sb, fast=fast):
                    return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
                errs[variant] = (ref().float() - exact).abs().max().item()
                rows.append({"shape": label, "m": m, "n": n, "k": k, "kind": kind, "variant": variant,
                             "kernel": f"torch._scaled_mm(use_fast_accum={fast})", "seconds": timer(ref),
                             "ok": True, "max_err": errs[variant]})
            for sched in FP8_SCHEDULES:
                def ours(a=a, b=b, sa=sa, sb=sb, sched=sched):
                    return gemm_fp8(a, b, sa, sb, out_dtype=torch.bfloat16, schedule=sched)
                err = (ours().float() - exact).abs().max().item()
                ok = err <= 2 * errs["cuBLAS fast accum"] + 2.0 ** -8 * scale
                secs = timer(ours) if ok else float("nan")
                rows.append({"shape": label, "m": m, "n": n, "k": k, "kind": kind, "variant": f"wgmma@{sched}",
                             "kernel": f"gemm_fp8 {sched}", "seconds": secs, "ok": bool(ok), "max_err": err})
                print(f"  {label:8s} {kind:10s} {sched:12s} {secs * 1e3:8.3f} ms ok={ok} err={err:.3g} "
                      f"(torch {errs['cuBLAS']:.3g}, fast {errs['cuBLAS fast accum']:.3g})", flush=True)
            del a, b, exact
            torch.cuda.empty_cache()
    return rows


#: the "attention" section (sm_90): (batch, heads, seq, head dim); each causal and not, FP16 and BF16
ATTENTION_PLAN = [(4, 16, 4096, 128), (4, 16, 4096, 64), (4, 16, 1024, 128), (4, 16, 1024, 64)]
#: the attention section's reference: torch SDPA restricted to its FlashAttention backend
SDPA_FLASH = "torch SDPA (flash)"


def attention_rows(reps: int = 25) -> list[dict]:
    """kernels.attention (variant "wgmma", the sm_90 default, in each of its schedules, and "mma")
    against torch SDPA's flash
    backend on the same operands, kernel time alone (``_time_device``: cold L2, host launch cost
    hidden, median of ``reps``). Correct means: no farther from the FP32 SDPA of the same inputs
    than twice the flash backend is, plus one unit of output rounding."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import hookmagic.kernels as hk
    from hookmagic.kernels.attention import SCHEDULES
    F = torch.nn.functional
    rows = []
    for b, h, s, d in ATTENTION_PLAN:
        for dtype, kind in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
            for causal in (False, True):
                shape = f"b{b} h{h} s{s} d{d}{' causal' if causal else ''}"
                flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)

                def flash(q=q, k=k, v=v, causal=causal):
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
                ref_err = (flash().float() - exact).abs().max().item()
                ulp = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8}[kind] * max(exact.abs().max().item(), 1.0)
                impls = {SDPA_FLASH: flash}
                for sched in SCHEDULES:
                    impls[f"wgmma@{sched}"] = lambda q=q, k=k, v=v, c=causal, sc=sched: hk.attention(
                        q, k, v, causal=c, variant="wgmma", schedule=sc)
                impls["mma"] = lambda q=q, k=k, v=v, c=causal: hk.attention(q, k, v, causal=c, variant="mma")
                for variant, fn in impls.items():
                    err = (fn().float() - exact).abs().max().item()
                    ok = variant == SDPA_FLASH or err <= 2 * ref_err + ulp
                    secs = _time_device(fn, reps) if ok else float("nan")
                    rows.append({"section": "attention", "shape": shape, "kind": kind, "variant": variant,
                                 "seconds": secs, "flops": flops, "ok": bool(ok), "max_err": err})
                    print(f"  {shape:28s} {kind:4s} {variant:20s} {secs * 1e3:8.3f} ms "
                          f"{flops / secs / 1e12:7.1f} TFLOP/s ok={ok} err={err:.3g} (flash {ref_err:.3g})",
                          flush=True)
                del exact
            del q, k, v
            torch.cuda.empty_cache()
    return rows


#: (rows, cols) of the memory-bound cases; bytes = compulsory traffic (read x [+ params], write y)
MEMORY_SHAPES = [(4096, 4096), (256, 65536)]


def memory_bound(timer, rows: list | None = None, variants: bool = False) -> list[dict]:
    """softmax / LayerNorm / RMSNorm / bias+GELU against torch eager and a device-to-device copy
    of the same bytes (read + write), FP16 and FP32; appended to ``rows`` as they are measured
    (what was measured survives a failure later on)."""
    import torch
    F = torch.nn.functional

    import hookmagic.kernels as hk

    rows = [] if rows is None else rows
    for r, c in MEMORY_SHAPES:
        for dtype in (torch.float16, torch.float32):
            x = torch.randn(r, c, device="cuda", dtype=dtype)
            w = torch.randn(c, device="cuda", dtype=dtype)
            b = torch.randn(c, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            label = f"{r}x{c} {str(dtype).removeprefix('torch.')}"
            nbytes = 2 * x.numel() * x.element_size()
            copy_s = timer(lambda: y.copy_(x))
            rows.append({"shape": label, "kind": "copy", "variant": "torch copy_", "seconds": copy_s,
                         "bytes": nbytes, "ok": True, "max_err": 0.0, "host_s": _HOST["last"]})
            # ours(impl) picks the kernel design with the op's impl= argument ("auto": the default)
            cases = {"softmax": (lambda impl="auto": hk.softmax(x, impl=impl), lambda: torch.softmax(x, -1), 0),
                     "layer_norm": (lambda impl="auto": hk.layer_norm(x, w, b, impl=impl),
                                    lambda: F.layer_norm(x, (c,), w, b), 2),
                     "rms_norm": (lambda impl="auto": hk.rms_norm(x, w, impl=impl),
                                  lambda: F.rms_norm(x, (c,), w, 1e-6), 1),
                     "bias_gelu": (lambda impl="auto": hk.bias_gelu(x, b, impl=impl), lambda: F.gelu(x + b), 1)}
            for op, (ours, theirs, nparams) in cases.items():
                t = theirs()
                err = (ours().float() - t.float()).abs().max().item()
                tol = 1e-2 * max(t.float().abs().max().item(), 1.0) if dtype == torch.float16 else 1e-4 * max(
                    t.float().abs().max().item(), 1.0)
                ok = err <= tol
                opb = nbytes + nparams * c * x.element_size()
                rows.append({"shape": label, "kind": op, "variant": "torch eager", "seconds": timer(theirs),
                             "bytes": opb, "ok": True, "max_err": 0.0, "host_s": _HOST["last"]})
                rows.append({"shape": label, "kind": op, "variant": "hookmagic", "seconds": timer(ours) if ok else float("nan"),
                             "bytes": opb, "ok": bool(ok), "max_err": err, "host_s": _HOST["last"] if ok else None})
                extra = [("hookmagic multipass", "multipass")] if variants else []
                if extra and c > 16384 and op != "bias_gelu":
                    extra.append(("hookmagic one 1024-thread block/SM", "reg"))
                if extra and c <= 16384 and op != "bias_gelu":
                    extra.append(("hookmagic 8 vectors a thread", "k8"))
                for variant, impl in extra:   # the other designs, same process
                    try:
                        design = lambda ours=ours, impl=impl: ours(impl)   # noqa: E731
                        errm = (design().float() - t.float()).abs().max().item()
                        okm = errm <= tol
                        rows.append({"shape": label, "kind": op, "variant": variant,
                                     "seconds": timer(design) if okm else float("nan"), "bytes": opb, "ok": bool(okm),
                                     "max_err": errm, "host_s": _HOST["last"] if okm else None})
                    except Exception as exc:   # report, keep measuring
                        print(f"  {label} {op} {variant} FAILED: {exc!r}", flush=True)
                print(f"  {label:18s} {op:10s} ok={ok}", flush=True)
            del x, w, b, y
            torch.cuda.empty_cache()
    return rows


def _machine() -> dict:
    import torch
    from hookmagic.cupti.library import driver_info
    from hookmagic.kernels.build import nvrtc_version

    p = torch.cuda.get_device_properties(0)
    return {"gpu": p.name, "driver": driver_info().driver_version or "?", "torch": torch.__version__, "cuda": torch.version.cuda,
            "nvrtc": nvrtc_version(), "date": dt.date.today().isoformat()}


DESCRIPTION = ("hookmagic.kernels against cuBLAS/cuDNN/PyTorch on the same GPU: GEMMs, row-wise "
               "kernels and inference kernels, microseconds per call (CUDA events)")
#: variants=1 also times each row-wise op's and memory case's other designs (impl=...); sections may
#: add "fp8" (sm_90: gemm_fp8 against torch._scaled_mm, FP8_PLAN) and "attention" (sm_90:
#: kernels.attention against torch SDPA's flash backend, ATTENTION_PLAN)
PARAMS = {"sections": "gemm,memory,infer", "shapes": "", "cases": "", "timer": "call", "variants": 0}
NEEDS = ("gpu", "torch")


def measure(sections: str, shapes: str, cases: str, timer: str, variants: int = 0) -> dict[str, float]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.json"
        # a single shape given on the command line arrives as a number
        worker(str(path), tuple(s.strip() for s in str(sections).split(",") if s.strip()),
               str(shapes), str(cases), timer, bool(int(variants)))
        rows = json.loads(path.read_text())
    out = {}
    for r in rows:   # the inference section's rows (kernel_infer_cases) name a case and a design
        if r.get("section") == "infer" and r.get("seconds") and r["seconds"] == r["seconds"]:
            out[f"infer|{r['case']}|{r['impl']}_us".replace(" ", "_")] = float(r["seconds"]) * 1e6
    rows = [r for r in rows if r.get("section") != "infer"]
    reference = {(r["shape"], r["kind"]): r["seconds"] for r in rows if r["variant"] == "cuBLAS"}
    sdpa = {(r["shape"], r["kind"]): r["seconds"] for r in rows if r.get("variant") == SDPA_FLASH}
    for r in rows:
        if r.get("ok", True) and r.get("seconds") and r["seconds"] == r["seconds"]:
            key = f"{r['kind']}|{r['variant']}|{r['shape']}".replace(" ", "_")
            out[f"{key}_us"] = float(r["seconds"]) * 1e6
            ref = reference.get((r["shape"], r["kind"]))
            if r["variant"] != "cuBLAS" and ref and ref == ref:
                out[f"{key}_pct_of_cublas"] = 100.0 * ref / float(r["seconds"])
            ref_sdpa = sdpa.get((r["shape"], r["kind"]))
            if r["variant"] != SDPA_FLASH and ref_sdpa and ref_sdpa == ref_sdpa:
                out[f"{key}_pct_of_sdpa"] = 100.0 * ref_sdpa / float(r["seconds"])
            if r.get("flops"):
                out[f"{key}_tflops"] = r["flops"] / float(r["seconds"]) / 1e12
    return out


def summarise(frames, machine: dict, out: Path) -> None:
    """Write kernels.md / .csv / .json (min-max over the processes so far) and print the table."""
    import pandas as pd

    nproc = len(frames)
    raw = pd.concat(frames, ignore_index=True)
    infer = raw[raw["section"] == "infer"].copy() if "section" in raw else raw.iloc[0:0]
    raw = raw[raw["section"] != "infer"].copy() if "section" in raw else raw
    if len(infer) and (not len(raw) or "m" not in raw or raw["m"].isna().all()):   # --sections infer alone
        from benchmarks.kernel_infer_cases import summarise_infer
        infer.to_csv(out / "kernels_infer_raw.csv", index=False)
        lines = [f"# hookmagic.kernels inference kernels — {machine['gpu']}, driver {machine['driver']}, torch "
                 f"{machine['torch']} (CUDA {machine['cuda']}), NVRTC {machine['nvrtc']}, {machine['date']}", "",
                 "Re-run: `python -m benchmarks run kernels --set sections=infer`."]
        lines += summarise_infer(infer, nproc)
        (out / "kernels_infer.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)
        return
    mem = raw[raw["bytes"].notna()].copy() if "bytes" in raw else raw.iloc[0:0]
    raw = raw[raw["bytes"].isna()].copy() if "bytes" in raw else raw
    for col in ("m", "n", "k"):   # --sections memory alone: no GEMM rows
        if col not in raw:
            raw[col] = pd.Series(dtype=float)
    raw["rate"] = 2 * raw.m * raw.n * raw.k / raw.seconds / 1e12
    ref = raw[raw.variant == "cuBLAS"][["run", "shape", "kind", "rate"]].rename(columns={"rate": "ref_rate"})
    raw = raw.merge(ref, on=["run", "shape", "kind"])
    raw["of_cublas"] = raw.rate / raw.ref_rate
    g = raw.groupby(["shape", "kind", "variant"], sort=False)
    table = g.agg(rate_min=("rate", "min"), rate_max=("rate", "max"), frac_min=("of_cublas", "min"),
                  frac_max=("of_cublas", "max"), ms_min=("seconds", lambda s: s.min() * 1e3),
                  ms_max=("seconds", lambda s: s.max() * 1e3), ok=("ok", "all"),
                  max_err=("max_err", "max")).reset_index()
    raw.to_csv(out / "kernels_raw.csv", index=False)
    table.to_csv(out / "kernels.csv", index=False)
    (out / "kernels.json").write_text(json.dumps({"machine": machine, "processes": nproc,
                                                  "rows": json.loads(table.to_json(orient="records"))}, indent=1))

    def rng(lo, hi, fmt):
        return "n/a" if pd.isna(lo) else (fmt.format(lo) if abs(hi - lo) < 1e-12 else f"{fmt.format(lo)}–{fmt.format(hi)}")

    lines = [f"# hookmagic.kernels vs cuBLAS — {machine['gpu']}, driver {machine['driver']}, torch {machine['torch']} "
             f"(CUDA {machine['cuda']}), NVRTC {machine['nvrtc']}, {machine['date']}", "",
             f"Min–max over {nproc} fresh processes; each the median of several launches timed with CUDA "
             "events; the cuBLAS reference is measured in the same process. TFLOP/s (INT8: TOPS) = 2·M·N·K / time. "
             "Re-run: `python -m benchmarks run kernels`.", "",
             "| shape | dtype | kernel | TFLOP/s | of cuBLAS | ms | correct |", "|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.shape} | {r.kind} | {r.variant} | {rng(r.rate_min, r.rate_max, '{:.3g}')} | "
                     f"{rng(r.frac_min, r.frac_max, '{:.0%}') if r.variant != 'cuBLAS' else '—'} | "
                     f"{rng(r.ms_min, r.ms_max, '{:.3f}')} | {'yes' if r.ok else 'NO (max err %.3g)' % r.max_err} |")
    if len(mem):
        mem["gbps"] = mem["bytes"] / mem["seconds"] / 1e9
        cp = mem[mem.kind == "copy"][["run", "shape", "gbps"]].rename(columns={"gbps": "copy_gbps"})
        mem = mem.merge(cp, on=["run", "shape"])
        te = mem[mem.variant == "torch eager"][["run", "shape", "kind", "seconds"]].rename(columns={"seconds": "torch_s"})
        mem = mem.merge(te, on=["run", "shape", "kind"], how="left")
        mem["of_copy"] = mem["gbps"] / mem["copy_gbps"]
        mem["vs_torch"] = mem["torch_s"] / mem["seconds"]
        mem["host_us"] = (mem["host_s"] if "host_s" in mem else pd.Series(float("nan"), index=mem.index)) * 1e6
        mem["dev_us"] = mem["seconds"] * 1e6
        mt = mem.groupby(["shape", "kind", "variant"], sort=False).agg(
            gbps_min=("gbps", "min"), gbps_max=("gbps", "max"), copy_min=("of_copy", "min"), copy_max=("of_copy", "max"),
            vt_min=("vs_torch", "min"), vt_max=("vs_torch", "max"), ok=("ok", "all"), max_err=("max_err", "max"),
            us_min=("dev_us", "min"), us_max=("dev_us", "max"), host_min=("host_us", "min"),
            host_max=("host_us", "max")).reset_index()
        mt.to_csv(out / "kernels_bandwidth.csv", index=False)
        how = ("kernel time from a cold L2: the median of 15 calls, each timed alone by CUDA events after a 256 MiB "
               "read that evicts the L2, all queued behind a sleep kernel (the host's launch cost hidden); 'host µs' "
               "is the host's time to make one call (Python + launch)"
               if machine.get("timer") == "device" else
               "time per call: CUDA events around one call, the host's launch cost included")
        lines += ["", "## Memory-bound kernels (bytes = compulsory traffic: read input and parameters, write output)", "",
                  f"Timer: {how}. Min–max over {nproc} fresh processes; ratios are same-process.", "",
                  "| shape | op | implementation | GB/s | of copy bandwidth | speed-up vs torch eager | µs | host µs "
                  "| correct |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in mt.itertuples():
            lines.append(f"| {r.shape} | {r.kind} | {r.variant} | {rng(r.gbps_min, r.gbps_max, '{:.0f}')} | "
                         f"{rng(r.copy_min, r.copy_max, '{:.0%}')} | "
                         f"{rng(r.vt_min, r.vt_max, '{:.2f}x') if r.variant.startswith('hookmagic') else '—'} | "
                         f"{rng(r.us_min, r.us_max, '{:.1f}')} | {rng(r.host_min, r.host_max, '{:.1f}')} | "
                         f"{'yes' if r.ok else 'NO (max err %.3g)' % r.max_err} |")
    if len(infer):
        from benchmarks.kernel_infer_cases import summarise_infer
        infer.to_csv(out / "kernels_infer_raw.csv", index=False)
        lines += summarise_infer(infer, nproc)
    (out / "kernels.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
