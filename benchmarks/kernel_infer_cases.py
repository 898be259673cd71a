"""The inference kernels against torch / torchvision and a device-to-device copy, timed in
one process (run by ``python -m benchmarks run kernels --set sections=infer``; each process measures every
reference beside the kernel it is compared with).

Every case: a label, its implementations (``hookmagic`` and the references), the work of one
call (bytes for memory-bound kernels: compulsory traffic, each operand read once and the result
written once; FLOPs for attention; none for NMS, timed in ms) and a correctness check of our
result against the reference, done once per process. A wrong result is reported, not timed.
"""
from __future__ import annotations

import math
import re
from typing import Callable

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _case(rows: list, timer: Callable, case: str, unit: str, work: float, impls: dict, ok: bool, err: float) -> None:
    for impl, fn in impls.items():
        mine = impl == "hookmagic"
        secs = timer(fn) if (ok or not mine) else float("nan")
        rows.append({"section": "infer", "case": case, "impl": impl, "unit": unit, "work": work, "seconds": secs,
                     "ok": bool(ok) if mine else True, "max_err": err if mine else 0.0})
        print(f"  {case:42s} {impl:22s} {secs * 1e3:9.3f} ms" + ("" if ok or not mine else "  WRONG"), flush=True)


def _copy(nbytes: int):
    import torch
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def torch_preprocess_chains(frames) -> tuple[Callable, Callable]:
    """The torch eager chains that hookmagic.kernels.preprocess replaces, for 8 uint8 NHWC
    1080p frames -> 640 x 640 FP16 NCHW: plain resize, and letterboxed (360 x 640 padded)."""
    import torch
    F = torch.nn.functional
    mean = torch.tensor(MEAN, device="cuda")[:, None, None]
    std = torch.tensor(STD, device="cuda")[:, None, None]

    def chain():
        x = frames.permute(0, 3, 1, 2).float()
        x = F.interpolate(x, size=(640, 640), mode="bilinear", align_corners=False, antialias=False)
        return ((x / 255 - mean) / std).half()

    def chain_letterbox():
        x = frames.permute(0, 3, 1, 2).float()
        x = F.interpolate(x, size=(360, 640), mode="bilinear", align_corners=False, antialias=False)
        x = F.pad(x, (0, 0, 140, 140), value=114.0)
        return ((x / 255 - mean) / std).half()

    return chain, chain_letterbox


def reduction_inputs():
    """The row-reduction cases both benches time, checked once: yields (rows, cols, dtype name,
    x, bytes moved, row_sum within tolerance of torch, its max error, row_max equal to torch)."""
    import torch

    import hookmagic.kernels as hk

    for r, c, dtype in ((4096, 4096, torch.float16), (256, 65536, torch.float32), (65536, 256, torch.float16)):
        x = torch.randn(r, c, device="cuda", dtype=dtype)
        nb = x.numel() * x.element_size() + r * x.element_size()
        err = (hk.row_sum(x).float() - x.sum(-1).float()).abs().max().item()
        tol = 1e-2 * math.sqrt(c) if dtype == torch.float16 else 1e-4 * math.sqrt(c)
        yield (r, c, str(dtype).removeprefix("torch."), x, nb, err <= tol, err,
               torch.equal(hk.row_max(x), x.amax(-1)))
        del x


def infer_rows(timer: Callable) -> list[dict]:
    import torch
    F = torch.nn.functional

    import hookmagic.kernels as hk

    rows: list[dict] = []

    # --- preprocess: 1080p frames, batch 8 -> 640 x 640 FP16 NCHW ---------------------------------
    frames = torch.randint(0, 256, (8, 1080, 1920, 3), dtype=torch.uint8, device="cuda")
    chain, chain_letterbox = torch_preprocess_chains(frames)

    ours = lambda: hk.preprocess(frames, (640, 640), MEAN, STD)                          # noqa: E731
    ours_lb = lambda: hk.preprocess(frames, (640, 640), MEAN, STD, letterbox=True)        # noqa: E731
    nbytes = frames.numel() + 8 * 3 * 640 * 640 * 2
    for case, mine, ref in (("preprocess 8x1080p -> 640x640 fp16", ours, chain),
                            ("preprocess letterbox 8x1080p -> 640x640", ours_lb, chain_letterbox)):
        err = (mine().float() - ref().float()).abs().max().item()
        _case(rows, timer, case, "GB/s", nbytes, {"hookmagic": mine, "torch eager chain": ref,
                                                   "copy (same bytes)": _copy(nbytes)}, err <= 0.02, err)
    nv12 = torch.randint(0, 256, (8, 1620, 1920), dtype=torch.uint8, device="cuda")
    nb12 = nv12.numel() + 8 * 3 * 640 * 640 * 2
    _case(rows, timer, "preprocess NV12 8x1080p -> 640x640 fp16", "GB/s", nb12,
          {"hookmagic": lambda: hk.preprocess(nv12, (640, 640), MEAN, STD, format="NV12"),
           "copy (same bytes)": _copy(nb12)}, True, 0.0)
    del frames, nv12

    # --- NMS -------------------------------------------------------------------------------------
    import torchvision
    for n in (1000, 10_000):
        g = torch.Generator(device="cpu").manual_seed(n)
        xy = torch.rand(n, 2, generator=g) * 1000
        boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 200 + 1], 1).cuda()
        scores = (torch.randperm(n, generator=g).float() / n).cuda()
        ok = torch.equal(hk.nms(boxes, scores, 0.5), torchvision.ops.nms(boxes, scores, 0.5))
        _case(rows, timer, f"nms {n} boxes (IoU 0.5)", "ms", 0,
              {"hookmagic": lambda b=boxes, s=scores: hk.nms(b, s, 0.5),
               "torchvision.ops.nms": lambda b=boxes, s=scores: torchvision.ops.nms(b, s, 0.5)}, ok, 0.0 if ok else 1.0)
    head = torch.randn(8, 25200, 85, device="cuda").abs() * 100
    theirs = lambda: torchvision.ops.box_convert(head[..., :4], "cxcywh", "xyxy")  # noqa: E731
    err = (hk.decode_boxes(head) - theirs()).abs().max().item()
    _case(rows, timer, "decode_boxes cxcywh 8x25200", "GB/s", 8 * 25200 * 32,
          {"hookmagic": lambda: hk.decode_boxes(head), "torchvision box_convert": theirs}, err <= 1e-3, err)
    del head

    # --- transpose and row reductions ---------------------------------------------------------------
    for label, shape, dtype, layout in (("transpose NCHW->NHWC 32x64x112x112 fp16", (32, 64, 112, 112), torch.float16,
                                         "NCHW->NHWC"),
                                        ("transpose 8192x8192 fp32", (8192, 8192), torch.float32, None)):
        x = torch.randn(shape, device="cuda", dtype=dtype)
        ref = (lambda x=x: x.permute(0, 2, 3, 1).contiguous()) if layout else (lambda x=x: x.t().contiguous())
        ok = torch.equal(hk.transpose(x, layout), ref())
        nb = 2 * x.numel() * x.element_size()
        _case(rows, timer, label, "GB/s", nb, {"hookmagic": lambda x=x, lay=layout: hk.transpose(x, lay),
                                               "torch contiguous()": ref, "copy (same bytes)": _copy(nb)}, ok, 0.0)
        del x
    for r, c, d, x, nb, sum_ok, sum_err, max_ok in reduction_inputs():
        _case(rows, timer, f"row_sum {r}x{c} {d}", "GB/s", nb, {"hookmagic": lambda x=x: hk.row_sum(x),
                                                                 "torch sum(-1)": lambda x=x: x.sum(-1),
                                                                 "copy (same bytes)": _copy(nb)}, sum_ok, sum_err)
        _case(rows, timer, f"row_max {r}x{c} {d}", "GB/s", nb, {"hookmagic": lambda x=x: hk.row_max(x),
                                                                 "torch amax(-1)": lambda x=x: x.amax(-1)}, max_ok, 0.0)
        del x

    # --- attention: seq 4096, FP16, causal and not ----------------------------------------------------
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for d, causal in ((128, False), (128, True), (64, False)):
        b, h, s = 2, 16, 4096
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))

        def flash(q=q, k=k, v=v, causal=causal):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        err = (hk.attention(q, k, v, causal=causal).float() - flash().float()).abs().max().item()
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        err128 = (hk.attention(q, k, v, causal=causal, block_m=128).float() - flash().float()).abs().max().item()
        label = f"attention b2 h16 s4096 d{d} fp16{' causal' if causal else ''}"
        _case(rows, timer, label, "TFLOP/s", flops,
              {"hookmagic": lambda q=q, k=k, v=v, c=causal: hk.attention(q, k, v, causal=c),
               "torch SDPA (flash)": flash}, err <= 2e-2, err)
        _case(rows, timer, label + " block_m=128", "TFLOP/s", flops,
              {"hookmagic": lambda q=q, k=k, v=v, c=causal: hk.attention(q, k, v, causal=c, block_m=128),
               "torch SDPA (flash)": flash}, err128 <= 2e-2, err128)
        del q, k, v
    torch.cuda.empty_cache()

    # --- conv2d: ResNet-50's 3x3 layers, NHWC FP16, batch 32, against cuDNN (channels_last) ---------
    # (every distinct layer of the network, each variant: conv_measure below, --conv)
    for hw, c, stride in ((56, 64, 1), (28, 128, 1), (14, 256, 1), (7, 512, 1), (56, 128, 2)):
        x = torch.randn(32, hw, hw, c, device="cuda", dtype=torch.float16)
        w = (torch.randn(c, c, 3, 3, device="cuda") / math.sqrt(9 * c)).half()
        wk = w.permute(0, 2, 3, 1).contiguous()            # KRSC: the wgmma kernel reads it as it is
        xn = x.permute(0, 3, 1, 2)                          # a channels_last NCHW view: cuDNN's NHWC path
        wn = w.contiguous(memory_format=torch.channels_last)
        ref = lambda xn=xn, wn=wn, st=stride: F.conv2d(xn, wn, None, st, 1)  # noqa: E731
        mine = lambda x=x, wk=wk, st=stride: hk.conv2d(x, wk, None, st, 1)  # noqa: E731
        out = mine()
        err = (out.float() - ref().permute(0, 2, 3, 1).float()).abs().max().item()
        oh = (hw + 2 - 3) // stride + 1
        flops = 2 * 32 * oh * oh * c * 9 * c
        _case(rows, timer, f"conv2d 3x3 b32 {hw}x{hw}x{c} s{stride} fp16 NHWC", "TFLOP/s", flops,
              {"hookmagic": mine, "cuDNN (torch, channels_last)": ref}, err <= 5e-2, err)
        del x, w, wk, xn, wn, out
    x = torch.randn(32, 112, 112, 32, device="cuda", dtype=torch.float16)
    w = torch.randn(32, 1, 3, 3, device="cuda", dtype=torch.float16)
    xn = x.permute(0, 3, 1, 2)
    ref = lambda: F.conv2d(xn, w, None, 1, 1, groups=32)  # noqa: E731
    err = (hk.depthwise_conv2d(x, w).float() - ref().permute(0, 2, 3, 1).float()).abs().max().item()
    nb = 2 * x.numel() * 2
    _case(rows, timer, "depthwise 3x3 b32 112x112x32 fp16 NHWC", "GB/s", nb,
          {"hookmagic": lambda: hk.depthwise_conv2d(x, w), "cuDNN (torch, channels_last)": ref,
           "copy (same bytes)": _copy(nb)}, err <= 5e-2, err)
    del x, w, xn
    torch.cuda.empty_cache()
    return rows


# --- conv2d on ResNet-50's layers (python -m benchmarks.kernel_infer_cases --conv) -----------------
#: ResNet-50's distinct convolutions (torchvision's v1.5: stride on the 3x3), at a 224 x 224 input:
#: (name, input H = W, C, K, filter R = S, stride, padding, how many times the network runs it)
RESNET50_CONVS = (
    ("stem 7x7/2 3->64", 224, 3, 64, 7, 2, 3, 1),
    ("s1 1x1 64->64", 56, 64, 64, 1, 1, 0, 1),
    ("s1 3x3 64->64", 56, 64, 64, 3, 1, 1, 3),
    ("s1 1x1 64->256", 56, 64, 256, 1, 1, 0, 4),
    ("s1 1x1 256->64", 56, 256, 64, 1, 1, 0, 2),
    ("s2 1x1 256->128", 56, 256, 128, 1, 1, 0, 1),
    ("s2 3x3/2 128->128", 56, 128, 128, 3, 2, 1, 1),
    ("s2 1x1 128->512", 28, 128, 512, 1, 1, 0, 4),
    ("s2 1x1/2 256->512 (proj)", 56, 256, 512, 1, 2, 0, 1),
    ("s2 1x1 512->128", 28, 512, 128, 1, 1, 0, 3),
    ("s2 3x3 128->128", 28, 128, 128, 3, 1, 1, 3),
    ("s3 1x1 512->256", 28, 512, 256, 1, 1, 0, 1),
    ("s3 3x3/2 256->256", 28, 256, 256, 3, 2, 1, 1),
    ("s3 1x1 256->1024", 14, 256, 1024, 1, 1, 0, 6),
    ("s3 1x1/2 512->1024 (proj)", 28, 512, 1024, 1, 2, 0, 1),
    ("s3 1x1 1024->256", 14, 1024, 256, 1, 1, 0, 5),
    ("s3 3x3 256->256", 14, 256, 256, 3, 1, 1, 5),
    ("s4 1x1 1024->512", 14, 1024, 512, 1, 1, 0, 1),
    ("s4 3x3/2 512->512", 14, 512, 512, 3, 2, 1, 1),
    ("s4 1x1 512->2048", 7, 512, 2048, 1, 1, 0, 3),
    ("s4 1x1/2 1024->2048 (proj)", 14, 1024, 2048, 1, 2, 0, 1),
    ("s4 1x1 2048->512", 7, 2048, 512, 1, 1, 0, 2),
    ("s4 3x3 512->512", 7, 512, 512, 3, 1, 1, 2),
)
#: conv2d's designs timed per layer: label -> conv2d keywords ("gemm": 1x1 stride-1 layers only)
CONV_IMPLS = {"auto": {}, "wgmma_n64": {"variant": "wgmma", "block_n": 64},
              "wgmma_n128": {"variant": "wgmma", "block_n": 128},
              "gather_n64": {"variant": "wgmma_gather", "block_n": 64},
              "gather_n128": {"variant": "wgmma_gather", "block_n": 128}, "implicit_gemm": {"variant": "implicit_gemm"},
              "gemm": {"variant": "gemm"}}
#: split-K designs, timed only when named in --impls: label -> conv2d keywords
CONV_SPLIT_IMPLS = {f"split{sk}_n{bn}": {"variant": "wgmma", "block_n": bn, "split_k": sk}
                    for bn in (128, 64) for sk in (2, 3, 4)}
CONV_DESCRIPTION = ("hookmagic.kernels.conv2d (NHWC + KRSC, FP16) on every distinct convolution of ResNet-50 at "
                    "batch 32 against cuDNN (torch F.conv2d, channels_last, cudnn.benchmark=True) in the same "
                    "process: kernel time with the host's launch cost hidden (CUDA events around each call queued "
                    "behind a sleep kernel, warm L2, median of 25)")


def _time_queued(fn, reps: int = 25) -> float:
    """Median device seconds of one call of ``fn``: ``reps`` (event, call, event) rounds queued behind
    a sleep kernel, so the host's launch cost is hidden and each pair times the call's kernels alone."""
    import time

    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    per_call = time.perf_counter() - t0
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda._sleep(int(min(0.2, 2.0 * (per_call + 50e-6) * reps + 2e-3) * 2.0e9))
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends))
    return times[len(times) // 2]


def _conv_layers(layers: str) -> tuple:
    """The rows of :data:`RESNET50_CONVS` named in ``layers`` (comma-separated names; empty: all)."""
    names = [s.strip() for s in layers.split(",") if s.strip()]
    unknown = set(names) - {c[0] for c in RESNET50_CONVS}
    if unknown:
        raise SystemExit(f"unknown layers {sorted(unknown)}; names are those of RESNET50_CONVS")
    return tuple(c for c in RESNET50_CONVS if not names or c[0] in names)


def conv_measure(batch: int = 32, impls: str = ",".join(CONV_IMPLS), dtype: str = "float16",
                 layers: str = "") -> dict[str, float]:
    """One process: every layer of :data:`RESNET50_CONVS` (or those named in ``layers``) by cuDNN
    and by each of ``impls`` (:data:`CONV_IMPLS`, :data:`CONV_SPLIT_IMPLS`), checked against cuDNN
    once (a wrong result is reported as ``..._wrong_max_err``, not timed). Metrics
    ``conv|<layer>|<impl>_us``, ``..._pct_of_cudnn`` (cuDNN's time / ours, this process), what auto
    ran, and with every layer the whole network's sum weighted by each layer's count."""
    import torch
    F = torch.nn.functional

    import hookmagic.kernels as hk
    torch.backends.cudnn.benchmark = True
    dt_ = getattr(torch, dtype)
    out: dict[str, float] = {}
    total = {"cudnn": 0.0}
    timed: dict[str, int] = {}
    convs = _conv_layers(layers)
    for name, hw, c, k, r, stride, pad, count in convs:
        torch.manual_seed(hw * c + k)
        x = torch.randn(batch, hw, hw, c, device="cuda", dtype=dt_)
        w = (torch.randn(k, r, r, c, device="cuda") / math.sqrt(c * r * r)).to(dt_)       # KRSC
        xn, wn = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)       # channels_last NCHW views: cuDNN's NHWC path
        ref = F.conv2d(xn, wn, None, stride, pad).permute(0, 2, 3, 1).float()
        t_ref = _time_queued(lambda xn=xn, wn=wn: F.conv2d(xn, wn, None, stride, pad))
        key = f"conv|{name}|"
        out[key + "cudnn_us"] = t_ref * 1e6
        total["cudnn"] += count * t_ref
        for impl in [s.strip() for s in impls.split(",") if s.strip()]:
            kw = {**CONV_IMPLS, **CONV_SPLIT_IMPLS}[impl]
            if kw.get("variant") == "gemm" and (r, stride, pad) != (1, 1, 0):
                continue
            if kw.get("variant") == "implicit_gemm" and c % 8:
                continue    # the stem: the mma path pads 3 channels to 8 too, but times a copy; kept to wgmma
            fn = (lambda x=x, w=w, kw=kw: hk.conv2d(x, w, None, stride, pad, **kw))
            err = (fn().float() - ref).abs().max().item()
            if not err <= 2e-2 * max(ref.abs().max().item(), 1.0):
                out[key + f"{impl}_wrong_max_err"] = err
                continue
            t = _time_queued(fn)
            out[key + f"{impl}_us"] = t * 1e6
            out[key + f"{impl}_pct_of_cudnn"] = 100 * t_ref / t
            total[impl] = total.get(impl, 0.0) + count * t
            timed[impl] = timed.get(impl, 0) + 1
        if "auto" in impls:
            hk.launch_log(clear=True)
            hk.conv2d(x, w, None, stride, pad)
            torch.cuda.synchronize()
            last = hk.launch_log()[-1]
            ran = last.kernel
            tile = re.search(r"^conv_wgmma_\w+?_n(\d+)", ran)
            out[key + "auto_block_n"] = float(tile.group(1)) if tile else 0.0
            out[key + "auto_im2col_tma"] = float("_tma" in ran)
            out[key + "auto_split_k"] = float(last.args.get("split_k", 1))
        del x, w, xn, wn, ref
    torch.cuda.empty_cache()
    if len(convs) != len(RESNET50_CONVS):
        return out          # some layers: no whole-network figures
    for impl, t in total.items():
        if impl != "cudnn" and timed.get(impl) != len(RESNET50_CONVS):
            continue        # not every layer (gemm: 1x1 stride-1 layers only): no whole-network figure
        out[f"conv|network|{impl}_us"] = t * 1e6
        if impl != "cudnn":
            out[f"conv|network|{impl}_pct_of_cudnn"] = 100 * total["cudnn"] / t
    return out


def conv_markdown(result: dict) -> str:
    """The per-layer table of a :func:`conv_measure` result over processes: min-max of each time and
    of the same-process percentage of cuDNN's speed."""
    met = result["metrics"]
    impls = [i for i in {**CONV_IMPLS, **CONV_SPLIT_IMPLS} if any(k.endswith(f"|{i}_us") for k in met)]

    def mm(key: str, fmt: str = "{:.1f}") -> str:
        v = met.get(key)
        if v is None:
            return "—"
        lo, hi = fmt.format(v["min"]), fmt.format(v["max"])
        return lo if lo == hi else f"{lo}–{hi}"

    gpu = result.get("gpu") or {}
    lines = [f"# conv2d on ResNet-50's layers — {gpu.get('name', '?')}, driver {gpu.get('driver', '?')}",
             "", f"{result['description']}.", "",
             f"Date {result['date']}, commit {result.get('commit')}, {result['processes']} fresh processes "
             f"(min–max over them). Command: `{result['command']}`.", "",
             "% of cuDNN = cuDNN's time / ours in the same process (100 % = as fast as cuDNN). "
             "`auto` is what `conv2d` runs by default (`kernels.explain('conv2d', ...)`).", "",
             "| layer (batch " + str(result["params"]["batch"]) + ") | count | cuDNN µs | "
             + " | ".join(f"{i} µs | {i} % of cuDNN" for i in impls) + " |",
             "|---|---|---|" + "---|---|" * len(impls)]
    for name, *_, count in (*RESNET50_CONVS, ("network", 0, 0, 0, 0, 0, 0, "sum")):
        key = f"conv|{name}|"
        if key + "cudnn_us" not in met:
            continue
        row = [name if name != "network" else "**whole network (Σ count × time)**", str(count), mm(key + "cudnn_us")]
        for i in impls:
            wrong = met.get(key + f"{i}_wrong_max_err")
            row += ["WRONG" if wrong else mm(key + f"{i}_us"), mm(key + f"{i}_pct_of_cudnn", "{:.0f}")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def summarise_infer(raw, nproc: int) -> list[str]:
    """Markdown lines: per case and implementation, min-max over processes of the rate, and the
    same-process ratios against the references of that case."""
    import pandas as pd

    raw = raw.copy()
    raw["rate"] = raw.apply(lambda r: (r.work / r.seconds / (1e9 if r.unit == "GB/s" else 1e12))
                            if r.unit != "ms" else r.seconds * 1e3, axis=1)
    lines = ["", "## Inference kernels: same-process comparisons", "",
             f"Min–max over {nproc} fresh processes. GB/s = compulsory bytes / time (each operand once); "
             "'copy' moves the same number of bytes with a device-to-device copy; for NMS the rate is ms per "
             "call; 'speed-up' = reference time / our time in the same process.", "",
             "| case | implementation | rate | of copy | our speed-up vs it | correct |", "|---|---|---|---|---|---|"]
    for case, grp in raw.groupby("case", sort=False):
        unit = grp.unit.iloc[0]
        mine = grp[grp.impl == "hookmagic"][["run", "seconds", "rate"]].rename(
            columns={"seconds": "my_s", "rate": "my_rate"})
        g = grp.merge(mine, on="run")
        g["speedup"] = g["seconds"] / g["my_s"]
        copy = g[g.impl.str.startswith("copy")][["run", "rate"]].rename(columns={"rate": "copy_rate"})
        g = g.merge(copy, on="run", how="left")
        g["of_copy"] = g["rate"] / g["copy_rate"]
        for impl, r in g.groupby("impl", sort=False):
            def rng(col, fmt):
                lo, hi = r[col].min(), r[col].max()
                if pd.isna(lo):
                    return "—"
                return fmt.format(lo) if abs(hi - lo) < 1e-12 else f"{fmt.format(lo)}–{fmt.format(hi)}"
            rate = rng("rate", "{:.3g}") + f" {unit}"
            ofc = rng("of_copy", "{:.0%}") if unit == "GB/s" and not impl.startswith("copy") else "—"
            sp = rng("speedup", "{:.2f}x") if impl != "hookmagic" and not impl.startswith("copy") else "—"
            okv = "yes" if r["ok"].all() else f"NO (max err {r['max_err'].max():.3g})"
            lines.append(f"| {case} | {impl} | {rate} | {ofc} | {sp} | {okv} |")
    return lines


# --- a benchmark of its own: preprocessing against the torch chain, and the 65,536-column rows ---------
# (``python -m benchmarks.kernel_infer_cases`` runs it in fresh processes and writes the result in the
# harness's schema; the module defines what the harness's registry needs to run it as ``kernels_infer``)
DESCRIPTION = ("preprocess 8x1080p -> 640x640 fp16 (plain, letterbox, NV12; every design) against the torch "
               "eager chain and a copy of the same bytes, and softmax/LayerNorm/RMSNorm on 256 x 65536 rows "
               "against torch and a copy: 'call' = CUDA events around one call (the host's launch cost "
               "included, median of 50), 'kernel' = kernel time from a cold L2 with the launch cost hidden "
               "(median of 21)")
PARAMS = {"impls": "auto,pixel,x2,y2,xy", "rows": 1, "row_impls": "auto"}
NEEDS: tuple[str, ...] = ("gpu", "torch")


def measure(impls: str = "auto,pixel,x2,y2,xy", rows: int = 1, row_impls: str = "auto") -> dict[str, float]:
    import torch

    import hookmagic.kernels as hk
    from benchmarks.bench_kernels import _HOST, _time, _time_device

    def both(fn) -> tuple[float, float, float]:
        k = _time_device(fn, reps=21)
        return _time(fn, max_reps=50, min_reps=50), k, _HOST["last"]

    out: dict[str, float] = {}
    frames = torch.randint(0, 256, (8, 1080, 1920, 3), dtype=torch.uint8, device="cuda")
    nv12 = torch.randint(0, 256, (8, 1620, 1920), dtype=torch.uint8, device="cuda")
    chain, chain_letterbox = torch_preprocess_chains(frames)
    cases = (("plain", frames, {}, chain), ("letterbox", frames, {"letterbox": True}, chain_letterbox),
             ("nv12", nv12, {"format": "NV12"}, None))
    for case, fr, kw, ref in cases:
        nbytes = fr.numel() + 8 * 3 * 640 * 640 * 2
        c_call, c_kernel, _ = both(_copy(nbytes))
        out[f"pre_{case}_copy_kernel_us"] = c_kernel * 1e6
        if ref is not None:
            r_call, r_kernel, r_host = both(ref)
            out[f"pre_{case}_torch_chain_call_us"] = r_call * 1e6
            out[f"pre_{case}_torch_chain_kernel_us"] = r_kernel * 1e6
            out[f"pre_{case}_torch_chain_host_us"] = r_host * 1e6
        pixel = hk.preprocess(fr, (640, 640), MEAN, STD, impl="pixel", **kw).float()
        for impl in [s.strip() for s in impls.split(",") if s.strip()]:
            fn = (lambda fr=fr, kw=kw, impl=impl: hk.preprocess(fr, (640, 640), MEAN, STD, impl=impl, **kw))
            mine = fn().float()
            err = (mine - (ref().float() if ref is not None else pixel)).abs().max().item()
            if not err <= 0.02:
                out[f"pre_{case}_{impl}_wrong_max_err"] = err
                continue
            call, kernel, host = both(fn)
            p = f"pre_{case}_{impl}"
            out[f"{p}_call_us"], out[f"{p}_kernel_us"], out[f"{p}_host_us"] = call * 1e6, kernel * 1e6, host * 1e6
            out[f"{p}_kernel_pct_of_copy"] = 100 * c_kernel / kernel
            if ref is not None:
                out[f"{p}_vs_chain_call_x"] = r_call / call
                out[f"{p}_vs_chain_kernel_x"] = r_kernel / kernel
    del frames, nv12
    torch.cuda.empty_cache()
    if int(rows):
        F = torch.nn.functional
        for dtype in (torch.float32, torch.float16):
            d = str(dtype).removeprefix("torch.")
            x = torch.randn(256, 65536, device="cuda", dtype=dtype)
            w = torch.randn(65536, device="cuda", dtype=dtype)
            nb = 2 * x.numel() * x.element_size()
            _, c_kernel, _ = both(_copy(nb))
            for op, theirs in (("softmax", lambda: torch.softmax(x, -1)),
                               ("layer_norm", lambda: F.layer_norm(x, (65536,), w, w)),
                               ("rms_norm", lambda: F.rms_norm(x, (65536,), w))):
                _, k_theirs, _ = both(theirs)
                for impl in [s.strip() for s in row_impls.split(",") if s.strip()]:
                    mine = {"softmax": lambda impl=impl: hk.softmax(x, impl=impl),
                            "layer_norm": lambda impl=impl: hk.layer_norm(x, w, w, impl=impl),
                            "rms_norm": lambda impl=impl: hk.rms_norm(x, w, impl=impl)}[op]
                    p = f"{op}_{d}_65k" + ("" if impl == "auto" else f"_{impl}")
                    err = (mine().float() - theirs().float()).abs().max().item()
                    if not err <= (2e-2 if dtype == torch.float16 else 1e-4):
                        out[f"{p}_wrong_max_err"] = err
                        continue
                    _, k_mine, _ = both(mine)
                    out[f"{p}_kernel_us"] = k_mine * 1e6
                    out[f"{p}_pct_of_copy"] = 100 * c_kernel / k_mine
                    out[f"{p}_vs_torch_x"] = k_theirs / k_mine
            del x, w
    return out


def _main() -> None:
    """Run :func:`measure` in fresh processes (``--processes N``, default 3) and write
    ``--out``/kernels_infer.{json,md} in the harness's schema (``--one``: one process, metrics
    as JSON on the last line)."""
    import argparse
    import datetime as dt
    import json
    import os
    import statistics
    import subprocess
    import sys
    from pathlib import Path

    from benchmarks import harness

    ap = argparse.ArgumentParser(prog="python -m benchmarks.kernel_infer_cases")
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--out", type=Path, default=harness.RESULTS)
    ap.add_argument("--name", default="kernels_infer")
    ap.add_argument("--impls", default=PARAMS["impls"])
    ap.add_argument("--rows", type=int, default=PARAMS["rows"])
    ap.add_argument("--row-impls", default=PARAMS["row_impls"])
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--conv", action="store_true", help="conv2d on ResNet-50's layers (conv_measure) instead")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--layers", default="", help="--conv: only these ResNet-50 layers (comma-separated names)")
    a = ap.parse_args()
    params = {"impls": a.impls, "rows": a.rows, "row_impls": a.row_impls}
    one_args = ["--impls", a.impls, "--rows", str(a.rows), "--row-impls", a.row_impls]
    command = (f"python -m benchmarks.kernel_infer_cases --processes {a.processes} --impls {a.impls} "
               f"--row-impls {a.row_impls}")
    if a.conv:
        impls = a.impls if a.impls != PARAMS["impls"] else ",".join(CONV_IMPLS)
        params = {"batch": a.batch, "impls": impls, "layers": a.layers}
        one_args = ["--conv", "--batch", str(a.batch), "--impls", impls, "--layers", a.layers]
        command = f"python -m benchmarks.kernel_infer_cases --conv --processes {a.processes} --batch {a.batch} --name {a.name}"
        if impls != ",".join(CONV_IMPLS) or a.layers:
            command += f" --impls {impls}" + (f" --layers '{a.layers}'" if a.layers else "")
    if a.one:
        print(json.dumps(conv_measure(a.batch, params["impls"], layers=a.layers) if a.conv else measure(**params)))
        return
    values: dict[str, list[float]] = {}
    for i in range(a.processes):
        done = subprocess.run([sys.executable, "-m", "benchmarks.kernel_infer_cases", "--one", *one_args],
                              cwd=harness.ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  filter(None, [str(harness.ROOT), os.environ.get("PYTHONPATH")]))})
        if done.returncode != 0:
            raise SystemExit(f"process {i + 1} failed\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items():
            values.setdefault(k, []).append(v)
        print(f"process {i + 1}/{a.processes} done", flush=True)
    result = {"benchmark": a.name, "description": CONV_DESCRIPTION if a.conv else DESCRIPTION, "command": command,
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "commit": harness.commit(), "machine": harness.machine(), "gpu": harness.gpu(), "params": params,
              "processes": a.processes,
              "metrics": {k: {"min": min(v), "max": max(v), "median": statistics.median(v), "values": v}
                          for k, v in values.items()}}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    text = conv_markdown(result) if a.conv else harness.markdown(result)
    (a.out / f"{a.name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    _main()
