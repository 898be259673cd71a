"""More memory-bound cases for the kernels benchmark's ``memory`` section: fused frame
preprocessing, transposes and row reductions, in the rows format of the memory-bound table
(``shape``, ``kind``, ``variant``, ``seconds``, ``bytes``): each case has its torch reference
(``variant='torch eager'``) and a device-to-device copy of the same number of bytes
(``kind='copy'``) measured in the same process, so the table gives each kernel's fraction of copy
bandwidth and its speed-up over torch. Bytes are compulsory traffic: every input byte read
once, every output byte written once.

``variants=True`` times the other designs too, each chosen with the op's ``impl=`` argument (one
pixel a thread preprocessing: ``'hookmagic 1 px a thread, word loads'``, ``'hookmagic 4 px a
thread'``; 32x32-tile transposes: ``'hookmagic 32x32 tile'``).
"""
from __future__ import annotations

from typing import Callable

from benchmarks.kernel_infer_cases import MEAN, STD, _copy, reduction_inputs, torch_preprocess_chains


def _row(shape: str, kind: str, variant: str, seconds: float, nbytes: int, ok: bool = True, err: float = 0.0,
         host_s: float | None = None) -> dict:
    return {"shape": shape, "kind": kind, "variant": variant, "seconds": seconds, "bytes": nbytes, "ok": bool(ok),
            "max_err": err, "host_s": host_s}


def memory_cases(timer: Callable, host: Callable[[], float | None] = lambda: None,
                 rows: list | None = None, variants: bool = False) -> list[dict]:
    """Rows for preprocess (RGB, letterbox, NV12), NCHW->NHWC and 2-D transposes, row_sum/row_max,
    appended to ``rows`` as they are measured. ``timer(fn)`` returns seconds per call; ``host()``
    the host launch time of its last measurement."""
    import torch

    import hookmagic.kernels as hk

    rows = [] if rows is None else rows
    multipass = variants

    copied: set[str] = set()

    def case(shape: str, kind: str, nbytes: int, impls: dict, ok: bool, err: float) -> None:
        if shape not in copied:   # one copy reference per shape label (row_sum and row_max share theirs;
            # the labels differ from the row-wise section's, whose copies move other byte counts)
            copied.add(shape)
            rows.append(_row(shape, "copy", "torch copy_", timer(_copy(nbytes)), nbytes, host_s=host()))
        for variant, fn in impls.items():
            mine = variant.startswith("hookmagic")
            secs = timer(fn) if (ok or not mine) else float("nan")
            rows.append(_row(shape, kind, variant, secs, nbytes, ok if mine else True, err if mine else 0.0,
                             host() if (ok or not mine) else None))
        print(f"  {shape:34s} {kind:10s} ok={ok}", flush=True)

    # --- preprocess: 1080p frames, batch 8 -> 640 x 640 FP16 NCHW ---------------------------------
    frames = torch.randint(0, 256, (8, 1080, 1920, 3), dtype=torch.uint8, device="cuda")
    chain, chain_letterbox = torch_preprocess_chains(frames)

    nbytes = frames.numel() + 8 * 3 * 640 * 640 * 2
    for shape, letterbox, ref in (("8x1080p RGB -> 640x640 fp16", False, chain),
                                  ("8x1080p RGB -> 640x640 letterbox", True, chain_letterbox)):
        def mine(impl: str = "auto", letterbox: bool = letterbox):
            return hk.preprocess(frames, (640, 640), MEAN, STD, letterbox=letterbox, impl=impl)
        err = (mine().float() - ref().float()).abs().max().item()
        impls = {"hookmagic": mine, "torch eager": ref}
        if multipass:
            impls["hookmagic 1 px a thread, word loads"] = lambda mine=mine: mine("w1")
            impls["hookmagic 4 px a thread"] = lambda mine=mine: mine("w4")
        case(shape, "preprocess", nbytes, impls, err <= 0.02, err)
    del frames
    nv12 = torch.randint(0, 256, (8, 1620, 1920), dtype=torch.uint8, device="cuda")
    nb12 = nv12.numel() + 8 * 3 * 640 * 640 * 2
    def mine_nv12(impl: str = "auto"):
        return hk.preprocess(nv12, (640, 640), MEAN, STD, format="NV12", impl=impl)
    px = lambda: mine_nv12("w1")   # noqa: E731
    err = (mine_nv12().float() - px().float()).abs().max().item()   # the two kernels: same arithmetic (FMA contraction aside)
    impls = {"hookmagic": mine_nv12}
    if multipass:
        impls["hookmagic 1 px a thread, word loads"] = px
        impls["hookmagic 4 px a thread"] = lambda: mine_nv12("w4")
    case("8x1080p NV12 -> 640x640 fp16", "preprocess", nb12, impls, err <= 0.02, err)
    del nv12

    # --- transposes -----------------------------------------------------------------------------------
    for shape, size, dtype, layout in (("NCHW->NHWC 32x64x112x112 fp16", (32, 64, 112, 112), torch.float16,
                                        "NCHW->NHWC"),
                                       ("NHWC->NCHW 32x112x112x64 fp16", (32, 112, 112, 64), torch.float16,
                                        "NHWC->NCHW"),
                                       ("8192x8192 fp32", (8192, 8192), torch.float32, None)):
        x = torch.randn(size, device="cuda", dtype=dtype)
        if layout == "NCHW->NHWC":
            ref = lambda x=x: x.permute(0, 2, 3, 1).contiguous()   # noqa: E731
        elif layout == "NHWC->NCHW":
            ref = lambda x=x: x.permute(0, 3, 1, 2).contiguous()   # noqa: E731
        else:
            ref = lambda x=x: x.t().contiguous()                   # noqa: E731
        ok = torch.equal(hk.transpose(x, layout), ref())
        impls = {"hookmagic": lambda x=x, lay=layout: hk.transpose(x, lay), "torch eager": ref}
        if multipass:
            impls["hookmagic 32x32 tile"] = lambda x=x, lay=layout: hk.transpose(x, lay, impl="tile")
            ok = ok and torch.equal(impls["hookmagic 32x32 tile"](), ref())
        case(shape, "transpose", 2 * x.numel() * x.element_size(), impls, ok, 0.0)
        del x

    # --- row reductions -------------------------------------------------------------------------------
    for r, c, d, x, nb, sum_ok, sum_err, max_ok in reduction_inputs():
        case(f"{r}x{c} {d} (reduction)", "row_sum", nb, {"hookmagic": lambda x=x: hk.row_sum(x),
                                              "torch eager": lambda x=x: x.sum(-1)}, sum_ok, sum_err)
        case(f"{r}x{c} {d} (reduction)", "row_max", nb, {"hookmagic": lambda x=x: hk.row_max(x),
                                              "torch eager": lambda x=x: x.amax(-1)}, max_ok, 0.0)
        del x
    torch.cuda.empty_cache()
    return rows
