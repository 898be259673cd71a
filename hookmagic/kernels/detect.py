"""Detector post-processing on the GPU: non-maximum suppression and box decoding.

    keep = kernels.nms(boxes, scores, 0.5)                  # == torchvision.ops.nms(boxes, scores, 0.5)
    keep = kernels.batched_nms(boxes, scores, labels, 0.5)  # == torchvision.ops.batched_nms(...)
    keeps = kernels.nms(boxes_bn4, scores_bn, 0.5)          # a batch of images: one list entry each
    xyxy = kernels.decode_boxes(head[..., :4])              # (cx, cy, w, h) -> (x1, y1, x2, y2)
    xyxy = kernels.decode_boxes(deltas, anchors, weights=(10, 10, 5, 5))   # torchvision BoxCoder

NMS sorts the scores with the array library's stable sort (as torchvision does), then runs
torchvision's bitmask algorithm in two kernels: IoU tests of 64 x 64 tiles into a bitmask, and one
warp per image that walks the boxes in score order. The kept indices equal torchvision's exactly
(same IoU arithmetic in FP32, same tie order). Reading the kept counts synchronises with the GPU once
per call, as torchvision's own ``nms`` does.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from hookmagic.kernels import registry, runtime
from hookmagic.kernels.errors import KernelArgumentError
from hookmagic.kernels.registry import KernelSpec, register

_TPB = 64
_SCORE_DTYPES = ("float32", "float16", "bfloat16")

register(KernelSpec("nms", "bitmask", "detect", {"float32": "nms_mask"}, (_TPB, 1, 1), (_TPB, _TPB), min_arch=70,
                    description="NMS step 1: IoU > threshold bitmask of 64 x 64 tiles of score-sorted boxes"))
register(KernelSpec("nms", "gather", "detect", {"float32": "nms_gather"}, (32, 1, 1), (1, 1), min_arch=70,
                    description="NMS step 2: one warp per image walks the sorted boxes, keeps the unsuppressed"))
register(KernelSpec("decode_boxes", "elementwise", "detect", {"float32": "decode_boxes"}, (256, 1, 1), (1, 1),
                    min_arch=70, description="cxcywh -> xyxy or anchor deltas (BoxCoder), letterbox undo, clip"))


def _float_box_array(x: Any, name: str, op: str, last: int | None = 4) -> runtime.ArrayInfo:
    xi = runtime.inspect_array(x, name)
    if xi.dtype != "float32":
        raise KernelArgumentError(f"{op}: {name} must be float32, got {xi.where()}")
    if len(xi.shape) not in (2, 3) or (last is not None and xi.shape[-1] != last):
        want = f"(n, {last}) or (batch, n, {last})" if last else "(n, k >= 4) or (batch, n, k >= 4)"
        raise KernelArgumentError(f"{op}: {name} must have shape {want}, got {xi.where()}")
    return xi


def _on_device(op: str, *infos: runtime.ArrayInfo) -> None:
    first = infos[0]
    for i in infos:
        if i.device < 0:
            raise KernelArgumentError(f"{op}: {i.name} must be on a CUDA device, got {i.where()}")
        if i.kind != first.kind or i.device != first.device:
            raise KernelArgumentError(f"{op}: {first.name} and {i.name} must be the same kind of array on one "
                                      f"device; {first.name} is {first.where()}, {i.name} is {i.where()}")


def _check_nms(boxes: Any, scores: Any, idxs: Any, iou_threshold: Any, op: str):
    bi = _float_box_array(boxes, "boxes", op)
    si = runtime.inspect_array(scores, "scores")
    if si.dtype not in _SCORE_DTYPES:
        raise KernelArgumentError(f"{op}: scores must be one of {_SCORE_DTYPES}, got {si.where()}")
    if tuple(si.shape) != tuple(bi.shape[:-1]):
        raise KernelArgumentError(f"{op}: scores must have shape {list(bi.shape[:-1])} (one per box), "
                                  f"got {si.where()}; boxes is {bi.where()}")
    ci = None
    if idxs is not None:
        ci = runtime.inspect_array(idxs, "idxs")
        if ci.dtype not in ("int64", "int32") or tuple(ci.shape) != tuple(bi.shape[:-1]):
            raise KernelArgumentError(f"{op}: idxs must be int64 (or int32) of shape {list(bi.shape[:-1])}, "
                                      f"got {ci.where()}; boxes is {bi.where()}")
    try:
        thr = float(iou_threshold)
    except (TypeError, ValueError):
        raise KernelArgumentError(f"{op}: iou_threshold must be a number, got {iou_threshold!r}") from None
    if math.isnan(thr):
        raise KernelArgumentError(f"{op}: iou_threshold must be a number, got nan")
    _on_device(op, *(i for i in (bi, si, ci) if i is not None))
    return bi, si, ci, thr


def _lib(info: runtime.ArrayInfo):
    if info.kind == "torch":
        import torch
        return torch
    import cupy
    return cupy


def _nms_run(bi: runtime.ArrayInfo, si: runtime.ArrayInfo, ci: runtime.ArrayInfo | None, thr: float):
    """Kept indices per image: (keep (batch, n) int64 array, counts list)."""
    batched = len(bi.shape) == 3
    b = bi.shape[0] if batched else 1
    n = bi.shape[-2]
    if b == 0 or n == 0:
        return None, [0] * b
    lib = _lib(bi)
    boxes = runtime.contiguous(bi).obj.reshape(b, n, 4)
    scores = si.obj.reshape(b, n)
    if bi.kind == "torch":
        order = lib.sort(scores, dim=-1, descending=True, stable=True).indices.contiguous()
        classes = None if ci is None else ci.obj.reshape(b, n).to(lib.int64).contiguous()
        empty = lambda shape, dt: lib.empty(shape, dtype=getattr(lib, dt), device=boxes.device)  # noqa: E731
    else:
        with lib.cuda.Device(bi.device):
            order = lib.ascontiguousarray(lib.argsort(-scores, axis=-1).astype(lib.int64))
            classes = None if ci is None else lib.ascontiguousarray(ci.obj.reshape(b, n).astype(lib.int64))
        empty = lambda shape, dt: runtime.empty_like_kind(bi, shape, dt)  # noqa: E731
    col_blocks = -(-n // _TPB)
    mask = empty((b, n, col_blocks), "int64")
    keep = empty((b, n), "int64")
    count = empty((b,), "int64")
    info = runtime.inspect_array(boxes, "boxes")
    ptr = lambda a: runtime.inspect_array(a, "x").ptr if a is not None else 0  # noqa: E731
    mk = runtime.get_kernel("detect", "nms_mask", bi.device)
    gk = runtime.get_kernel("detect", "nms_gather", bi.device)
    if b > 65535:
        raise KernelArgumentError(f"nms: at most 65535 images per call, got {b}")
    runtime.launch(mk, info, (col_blocks, col_blocks, b), (_TPB, 1, 1),
                   (info.ptr, ptr(order), ptr(classes), np.int32(n), np.float32(thr), ptr(mask)))
    smem = col_blocks * 8
    runtime.set_dynamic_smem(gk, smem, bi.device)
    runtime.launch(gk, info, (b, 1, 1), (32, 1, 1), (ptr(mask), ptr(order), np.int32(n), ptr(keep), ptr(count)),
                   smem=smem)
    pairs = b * n * (n + 1) // 2
    registry.record("nms_mask", 12 * pairs, b * n * (16 + 8 + (8 if ci is not None else 0)) + b * n * col_blocks * 8,
                    batch=b, n=n)
    registry.record("nms_gather", 0, b * n * col_blocks * 8 + b * n * 16, batch=b, n=n)
    counts = [int(c) for c in count.tolist()]
    return keep, counts


def nms(boxes: Any, scores: Any, iou_threshold: float) -> Any:
    """Indices of the boxes kept by non-maximum suppression, highest score first — exactly
    ``torchvision.ops.nms(boxes, scores, iou_threshold)``.

    ``boxes``: float32 ``(n, 4)`` as (x1, y1, x2, y2); ``scores``: ``(n,)`` float32/float16/bfloat16.
    A box is dropped when its IoU with a kept, higher-scoring box is above ``iou_threshold``.
    Batched: ``boxes`` ``(batch, n, 4)`` and ``scores`` ``(batch, n)`` give a list of ``batch``
    int64 index arrays (each image on its own, in one pair of launches).
    """
    bi, si, _, thr = _check_nms(boxes, scores, None, iou_threshold, "nms")
    return _nms_result(bi, *_nms_run(bi, si, None, thr))


def batched_nms(boxes: Any, scores: Any, idxs: Any, iou_threshold: float) -> Any:
    """Class-aware NMS — ``torchvision.ops.batched_nms``: boxes of different ``idxs`` (class or
    image labels, int64/int32 of the scores' shape) never suppress each other. Kept indices,
    highest score first (a list per image for ``(batch, n, 4)`` boxes)."""
    bi, si, ci, thr = _check_nms(boxes, scores, idxs, iou_threshold, "batched_nms")
    return _nms_result(bi, *_nms_run(bi, si, ci, thr))


def _nms_result(bi: runtime.ArrayInfo, keep: Any, counts: list[int]) -> Any:
    out = [keep[i, :c] if keep is not None else runtime.empty_like_kind(bi, (0,), "int64")
           for i, c in enumerate(counts)]
    if len(bi.shape) == 2:
        return out[0] if out else runtime.empty_like_kind(bi, (0,), "int64")
    return out


def decode_boxes(pred: Any, anchors: Any = None, *, weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
                 clip: float = math.log(1000.0 / 16), letterbox: Any = None, image_size: Any = None) -> Any:
    """Boxes (x1, y1, x2, y2) from a detector head's output, float32 ``(..., n, 4)``.

    ``pred``: float32 ``(n, k)`` or ``(batch, n, k)`` with ``k >= 4``; the first four columns are
    read (scores may follow, no copy). Without ``anchors`` they are ``(cx, cy, w, h)`` (YOLO-style
    heads, ``torchvision.ops.box_convert(pred, 'cxcywh', 'xyxy')``). With ``anchors`` (float32
    ``(n, 4)`` xyxy, shared by the batch) they are deltas ``(dx, dy, dw, dh)`` decoded as
    torchvision's ``BoxCoder(weights, clip).decode_single`` (Faster R-CNN, RetinaNet, SSD).
    ``letterbox`` (a :class:`~hookmagic.kernels.LetterboxParams`) maps the boxes back to the
    original frame; ``image_size`` ``(height, width)`` then clamps them to it
    (``torchvision.ops.clip_boxes_to_image``).
    """
    pi = _float_box_array(pred, "pred", "decode_boxes", last=None)
    if pi.shape[-1] < 4:
        raise KernelArgumentError(f"decode_boxes: pred must have at least 4 columns, got {pi.where()}")
    n = pi.shape[-2]
    ai = None
    if anchors is not None:
        ai = runtime.inspect_array(anchors, "anchors")
        if ai.dtype != "float32" or tuple(ai.shape) != (n, 4):
            raise KernelArgumentError(f"decode_boxes: anchors must be float32 of shape ({n}, 4) (one per box of "
                                      f"pred), got {ai.where()}; pred is {pi.where()}")
    w = tuple(float(v) for v in weights)
    if len(w) != 4 or any(v == 0 for v in w):
        raise KernelArgumentError(f"decode_boxes: weights must be 4 non-zero numbers, got {weights!r}")
    clip_hw = (0.0, 0.0)
    if image_size is not None:
        try:
            ih, iw = (float(v) for v in image_size)
        except (TypeError, ValueError):
            raise KernelArgumentError(f"decode_boxes: image_size must be (height, width), got {image_size!r}") from None
        if ih <= 0 or iw <= 0:
            raise KernelArgumentError(f"decode_boxes: image_size must be positive, got {image_size!r}")
        clip_hw = (ih, iw)
    _on_device("decode_boxes", *(i for i in (pi, ai) if i is not None))
    # rows uniformly strided with contiguous columns: read in place; otherwise a dense copy
    s = pi.strides
    uniform = s[-1] == 1 and (len(s) == 2 or s[0] == pi.shape[1] * s[1] or pi.shape[0] == 1)
    if not uniform:
        pi = runtime.contiguous(runtime.inspect_array(pi.obj.contiguous() if pi.kind == "torch"
                                                      else __import__("cupy").ascontiguousarray(pi.obj), "pred"))
    stride = pi.strides[-2] if pi.shape[-2] > 1 else pi.shape[-1]
    total = int(np.prod(pi.shape[:-1]))
    out = runtime.empty_like_kind(pi, (*pi.shape[:-1], 4), "float32")
    if total == 0:
        return out
    if ai is not None:
        ai = runtime.contiguous(ai)
    oi = runtime.inspect_array(out, "out")
    lb = letterbox
    kern = runtime.get_kernel("detect", "decode_boxes", pi.device)
    threads = 256
    grid = min(-(-total // threads), 1 << 16)
    runtime.launch(kern, pi, (grid, 1, 1), (threads, 1, 1),
                   (pi.ptr, np.int32(stride), ai.ptr if ai is not None else 0, np.int64(total), np.int32(n),
                    np.int32(0 if ai is None else 1), *(np.float32(v) for v in w), np.float32(clip),
                    np.int32(lb is not None), np.float32(lb.scale if lb else 1.0), np.float32(lb.pad_x if lb else 0),
                    np.float32(lb.pad_y if lb else 0), np.float32(clip_hw[1]), np.float32(clip_hw[0]), oi.ptr))
    registry.record("decode_boxes", (20 if ai is not None else 6) * total,
                    total * 32 + (n * 16 if ai is not None else 0), boxes=total)
    return out


__all__ = ["nms", "batched_nms", "decode_boxes"]
