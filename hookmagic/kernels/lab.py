"""The kernel lab: capture the GEMM journey with hookmagic and attach each launch's declared work.

Used by ``lab/kernels/record_kernels.py`` (which makes the bundled recording) and live by
``notebooks/05_kernels.ipynb`` on a GPU.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Any

#: cuBLAS reference step -> (input dtype, output dtype)
_REFERENCE_DTYPES = {"cuBLAS FP32": ("float32", "float32"), "cuBLAS FP16": ("float16", "float16"),
                     "cuBLAS BF16": ("bfloat16", "bfloat16"), "cuBLAS INT8": ("int8", "int32")}


def recorded_on() -> str:
    """``'<GPU>, driver <version>, torch <version>, <date>'`` for the current machine."""
    import torch

    from hookmagic.cupti.library import driver_info

    drv = driver_info().driver_version or "?"
    return f"{torch.cuda.get_device_name(0)}, driver {drv}, torch {torch.__version__}, {dt.date.today().isoformat()}"


def capture_journey(size: int = 4096, launches: int = 2, counters: bool = False) -> Any:
    """Capture every SGEMM step, the Tensor Core GEMMs and their cuBLAS references on ``size``^3
    matrices, then the row-wise kernels (softmax, LayerNorm, RMSNorm, bias+GELU) on the FP16
    ``size`` x ``size`` matrix (``launches`` each, each step in a ``hookmagic.range`` named after it).

    The returned Trace's ``meta["work"]`` lists the declared work of every launch (kernel name,
    FLOPs, DRAM bytes, dtype); cuBLAS kernels get the work of the matmul they ran.
    ``meta["nvrtc"]`` holds NVRTC's registers / shared memory / spills for the GPU's arch.
    ``counters=True`` reads the default hardware counters of every launch (kernel replay).
    """
    import torch

    from hookmagic.cupti import capture, range as hm_range
    import hookmagic.kernels as hk
    from hookmagic.kernels import registry, runtime

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        n = size
        g = torch.Generator(device="cuda").manual_seed(0)
        a32 = torch.randn(n, n, device="cuda", generator=g)
        b32 = torch.randn(n, n, device="cuda", generator=g)
        a16, b16, abf, bbf = a32.half(), b32.half(), a32.bfloat16(), b32.bfloat16()
        a8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8, generator=g)
        b8 = torch.randint(-128, 128, (n, n), device="cuda", dtype=torch.int8, generator=g).t()
        steps = [(f"sgemm {v}", lambda v=v: hk.sgemm(a32, b32, variant=v)) for v in hk.SGEMM_VARIANTS]
        steps += [("cuBLAS FP32", lambda: a32 @ b32),
                  ("FP16 wmma", lambda: hk.gemm(a16, b16, variant="wmma")), ("FP16 mma", lambda: hk.gemm(a16, b16)),
                  ("cuBLAS FP16", lambda: a16 @ b16),
                  ("BF16 wmma", lambda: hk.gemm(abf, bbf, variant="wmma")), ("BF16 mma", lambda: hk.gemm(abf, bbf)),
                  ("cuBLAS BF16", lambda: abf @ bbf),
                  ("INT8 mma", lambda: hk.gemm(a8, b8)), ("cuBLAS INT8", lambda: torch._int_mm(a8, b8))]
        # memory-bound row-wise kernels on the same 4096 x 4096 FP16 matrix (the roofline's slope)
        w16, c16 = b16[0].contiguous(), b16[1].contiguous()
        steps += [("softmax FP16", lambda: hk.softmax(a16)), ("LayerNorm FP16", lambda: hk.layer_norm(a16, w16, c16)),
                  ("RMSNorm FP16", lambda: hk.rms_norm(a16, w16)), ("bias+GELU FP16", lambda: hk.bias_gelu(a16, c16))]
        kept = []
        for name, fn in steps:       # compile, load and warm up outside the capture
            try:
                fn()
                kept.append((name, fn))
            except RuntimeError as exc:   # e.g. a torch without this _int_mm layout: leave the step out
                trace_note = f"{name} left out: {exc}"
                print(trace_note)
        steps = kept
        torch.cuda.synchronize()
        registry.launch_log(clear=True)
        with capture(label="kernel_journey", counters=counters) as trace:
            for name, fn in steps:
                with hm_range(name):
                    for _ in range(launches):
                        fn()
            torch.cuda.synchronize()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    work = [asdict(w) for w in registry.launch_log(clear=True)]
    k, r = trace.kernels, trace.ranges
    for name, (din, dout) in _REFERENCE_DTYPES.items():
        ids = r.loc[r["name"] == name, "range_id"]
        mine = k[k["range_id"].isin(ids)]
        if mine.empty:
            continue
        main = mine.groupby("name")["duration_ns"].sum().idxmax()
        w = registry.gemm_work(n, n, n, din, dout)
        for _ in range(int((mine["name"] == main).sum())):
            work.append({"kernel": main, "flops": w["flops"], "dram_bytes": w["dram_bytes"],
                         "args": {"m": n, "n": n, "k": n, "dtype": din, "reference": name}})
    arch = runtime.device_arch(0)
    trace.meta["work"] = work
    trace.meta["nvrtc"] = {"arch": arch, "kernels": hk.check(arch).drop(columns=["cached"]).to_dict("records")}
    trace.meta["recorded_on"] = recorded_on()
    trace.meta["description"] = (f"hookmagic.kernels GEMM journey and cuBLAS references, {n}^3, row-wise kernels, "
                                 f"{launches} launches per step")
    return trace


def capture_bandwidth(rows: int = 4096, cols: int = 4096, launches: int = 3, batch: int = 8,
                      frame_hw: tuple[int, int] = (1080, 1920), size: tuple[int, int] = (640, 640)) -> dict[str, Any]:
    """Capture the memory-bound kernels against a device-to-device copy and torch eager, and the
    fused frame preprocessing against the torch chain it replaces.

    Returns ``{"bandwidth": Trace}`` plus, where ``hookmagic.kernels.preprocess`` exists,
    ``"preprocess_fused"`` and ``"preprocess_torch"`` (two captures, for a differential flame
    graph). In ``bandwidth``, every step (``launches`` calls on an FP16 ``rows`` x ``cols``
    matrix) is a ``hookmagic.range``: ``copy FP16`` (torch ``copy_``: the measured bandwidth
    roof), then each of softmax, LayerNorm, RMSNorm and bias+GELU by hookmagic and by torch
    eager. ``meta["range_work"]`` holds each step's compulsory DRAM bytes (both implementations
    of an op get the bytes hookmagic's kernel declares: same inputs, same output) for
    :func:`hookmagic.analysis.roofline.range_rates`; ``meta["left_out"]`` any step that failed.
    """
    import torch
    import torch.nn.functional as F

    from hookmagic.cupti import capture, range as hm_range
    import hookmagic.kernels as hk
    from hookmagic.kernels import registry

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", generator=g).half()
    w, b = torch.randn(cols, device="cuda", generator=g).half(), torch.randn(cols, device="cuda", generator=g).half()
    dst = torch.empty_like(x)
    ops = [("softmax", lambda: hk.softmax(x), lambda: torch.softmax(x, -1)),
           ("LayerNorm", lambda: hk.layer_norm(x, w, b), lambda: F.layer_norm(x, (cols,), w, b)),
           ("RMSNorm", lambda: hk.rms_norm(x, w), lambda: F.rms_norm(x, (cols,), w, 1e-6)),
           ("bias+GELU", lambda: hk.bias_gelu(x, b), lambda: F.gelu(x + b))]
    steps: list[tuple[str, Any, float]] = [("copy FP16", lambda: dst.copy_(x), 2.0 * x.numel() * x.element_size())]
    left_out: list[str] = []
    for op, mine, theirs in ops:
        try:                             # compile, load, warm up; the bytes hookmagic's kernel declares
            registry.launch_log(clear=True)
            mine()
            nbytes = float(sum(r.dram_bytes for r in registry.launch_log(clear=True)))
            theirs()
        except Exception as exc:  # noqa: BLE001 - a step that cannot run is left out and named
            left_out.append(f"{op}: {type(exc).__name__}: {exc}")
            continue
        steps += [(f"{op} hookmagic", mine, nbytes), (f"{op} torch", theirs, nbytes)]
    steps[0][1]()
    torch.cuda.synchronize()
    with capture(label="kernel_bandwidth") as trace:
        for name, fn, _ in steps:
            with hm_range(name):
                for _ in range(launches):
                    fn()
        torch.cuda.synchronize()
    registry.launch_log(clear=True)
    where = recorded_on()
    trace.meta["range_work"] = {name: {"dram_bytes": nbytes * launches, "flops": 0.0, "calls": launches}
                                for name, _, nbytes in steps}
    trace.meta["left_out"] = left_out
    trace.meta["recorded_on"] = where
    trace.meta["description"] = (f"memory-bound kernels on an FP16 {rows} x {cols} matrix: torch copy_, hookmagic "
                                 f"and torch eager, {launches} calls per step")
    out = {"bandwidth": trace}

    if not hasattr(hk, "preprocess"):
        trace.meta["left_out"].append("preprocess: hookmagic.kernels.preprocess is not in this version")
        return out
    h, wd = frame_hw
    frames = torch.randint(0, 256, (batch, h, wd, 3), device="cuda", dtype=torch.uint8, generator=g)
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1)

    def fused() -> Any:
        return hk.preprocess(frames, size, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                             layout="NCHW", dtype="float16")

    def chain() -> Any:                  # what a torch user writes: permute, cast, resize, normalise, cast
        y = frames.permute(0, 3, 1, 2).float()
        y = F.interpolate(y, size=size, mode="bilinear", align_corners=False, antialias=False)
        return ((y / 255.0 - mean) / std).half()

    try:
        registry.launch_log(clear=True)
        fused()
        nbytes = float(sum(r.dram_bytes for r in registry.launch_log(clear=True)))
        chain()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        trace.meta["left_out"].append(f"preprocess: {type(exc).__name__}: {exc}")
        return out
    what = f"{batch} frames {h}x{wd} uint8 RGB -> {size[0]}x{size[1]} FP16 NCHW, normalised"
    for key, name, fn in (("preprocess_fused", "preprocess hookmagic", fused), ("preprocess_torch", "preprocess torch", chain)):
        with capture(label=key) as t:
            with hm_range(name):
                for _ in range(launches):
                    fn()
            torch.cuda.synchronize()
        registry.launch_log(clear=True)
        t.meta["range_work"] = {name: {"dram_bytes": nbytes * launches, "flops": 0.0, "calls": launches}}
        t.meta["recorded_on"] = where
        t.meta["description"] = f"{name}: {what}, {launches} calls"
        out[key] = t
    return out


def capture_inference(launches: int = 2) -> Any:
    """Capture the inference kernels beside the torch / torchvision / cuDNN code they replace
    (``launches`` each, each step in a ``hookmagic.range`` named after it): fused preprocessing of
    eight 1080p frames against the eager chain, NMS of 10,000 boxes, attention at sequence 4096,
    ResNet-50's 56x56 3x3 convolution, an NCHW->NHWC transpose and row reductions.

    ``meta["work"]`` lists the declared work of our launches; ``meta["recorded_on"]`` the machine.
    """
    import torch
    import torch.nn.functional as F

    from hookmagic.cupti import capture, range as hm_range
    import hookmagic.kernels as hk
    from hookmagic.kernels import registry, runtime

    g = torch.Generator(device="cuda").manual_seed(0)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    mt = torch.tensor(mean, device="cuda")[:, None, None]
    st = torch.tensor(std, device="cuda")[:, None, None]
    frames = torch.randint(0, 256, (8, 1080, 1920, 3), dtype=torch.uint8, device="cuda", generator=g)

    def chain():
        x = F.interpolate(frames.permute(0, 3, 1, 2).float(), size=(640, 640), mode="bilinear", align_corners=False)
        return ((x / 255 - mt) / st).half()

    n = 10_000
    xy = torch.rand(n, 2, device="cuda", generator=g) * 1000
    boxes = torch.cat([xy, xy + torch.rand(n, 2, device="cuda", generator=g) * 200 + 1], 1)
    scores = torch.randperm(n, device="cuda", generator=g).float() / n
    q, k, v = (torch.randn(1, 16, 4096, 128, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    x = torch.randn(32, 56, 56, 64, device="cuda", dtype=torch.float16, generator=g)
    w = (torch.randn(64, 64, 3, 3, device="cuda", generator=g) / 24).half()
    wp, wn, xn = hk.pack_conv_weight(w, layout="NCHW"), w.contiguous(memory_format=torch.channels_last), x.permute(0, 3, 1, 2)
    act = torch.randn(32, 64, 112, 112, device="cuda", dtype=torch.float16, generator=g)
    rows = torch.randn(4096, 4096, device="cuda", dtype=torch.float16, generator=g)
    steps = [("preprocess (hookmagic, one kernel)", lambda: hk.preprocess(frames, (640, 640), mean, std)),
             ("preprocess (torch eager chain)", chain),
             ("nms (hookmagic)", lambda: hk.nms(boxes, scores, 0.5))]
    try:
        import torchvision
        steps.append(("nms (torchvision)", lambda: torchvision.ops.nms(boxes, scores, 0.5)))
    except ImportError:
        pass
    steps += [("attention (hookmagic)", lambda: hk.attention(q, k, v)),
              ("attention (torch SDPA)", lambda: F.scaled_dot_product_attention(q, k, v)),
              ("conv2d 3x3 (hookmagic)", lambda: hk.conv2d(x, wp, None, 1, 1, kernel_size=3)),
              ("conv2d 3x3 (cuDNN)", lambda: F.conv2d(xn, wn, None, 1, 1)),
              ("NCHW->NHWC (hookmagic)", lambda: hk.transpose(act, "NCHW->NHWC")),
              ("NCHW->NHWC (torch)", lambda: act.permute(0, 2, 3, 1).contiguous()),
              ("row_sum (hookmagic)", lambda: hk.row_sum(rows)), ("row_sum (torch)", lambda: rows.sum(-1)),
              ("copy (same bytes as the row sums)", lambda: rows.clone())]
    for _, fn in steps:   # compile, load and warm up outside the capture
        fn()
    torch.cuda.synchronize()
    registry.launch_log(clear=True)
    with capture(label="kernel_inference") as trace:
        for name, fn in steps:
            with hm_range(name):
                for _ in range(launches):
                    fn()
        torch.cuda.synchronize()
    trace.meta["work"] = [asdict(w) for w in registry.launch_log(clear=True)]
    trace.meta["nvrtc"] = {"arch": runtime.device_arch(0)}
    trace.meta["recorded_on"] = recorded_on()
    trace.meta["description"] = ("hookmagic.kernels inference kernels beside the torch / torchvision / "
                                 f"cuDNN code they replace, {launches} launches per step")
    return trace
