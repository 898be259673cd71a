"""Inference kernels on a GPU: preprocess, NMS and box decoding, transpose and row
reductions, attention — each against an independent reference (torchvision, torch).

Run on the GPU machine (about a minute, NVRTC compiles included)::

    timeout 140 python3 -m pytest -q tests/gpu/test_infer_gpu.py

Accuracy criterion as for the GEMMs (tests/gpu/accuracy.py): against a wider-type reference,
within twice torch's own error, one unit of output rounding and the sqrt(n) rounding bound of FP32
arithmetic over ``n`` terms of total magnitude ``magnitude``. NMS is compared exactly.
"""
from __future__ import annotations

import math

import pytest

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

from tests.gpu.accuracy import assert_within_rounding  # noqa: E402

import hookmagic.kernels as hk  # noqa: E402
from hookmagic.kernels.preprocess import yuv_coefficients  # noqa: E402

pytestmark = pytest.mark.needs("torchvision")
F = torch.nn.functional


# --- preprocess ---------------------------------------------------------------------------------

def _src_index(out: int, inn: int, device) -> tuple:
    """torch's align_corners=False source index of every output pixel (FP32 scale and one fused
    multiply-add, as torch's CUDA kernel computes it for float images), lambdas in float64."""
    scale = torch.tensor(inn, dtype=torch.float32) / torch.tensor(out, dtype=torch.float32)
    s = (scale.double() * (torch.arange(out, dtype=torch.float64) + 0.5) - 0.5).float().clamp(min=0)
    i0 = s.long()
    i1 = torch.where(i0 < inn - 1, i0 + 1, i0)
    l1 = s - i0.float()
    l0 = 1 - l1
    return i0.to(device), i1.to(device), l0.double().to(device), l1.double().to(device)


def _bilinear64(img, oh, ow):
    """Bilinear resize (align_corners=False, no antialias) of a float64 (B, C, H, W) image."""
    h, w = img.shape[-2:]
    y0, y1, ly0, ly1 = _src_index(oh, h, img.device)
    x0, x1, lx0, lx1 = _src_index(ow, w, img.device)
    r0, r1 = img[:, :, y0, :], img[:, :, y1, :]
    top = lx0 * r0[..., x0] + lx1 * r0[..., x1]
    bot = lx0 * r1[..., x0] + lx1 * r1[..., x1]
    return ly0[:, None] * top + ly1[:, None] * bot


def _nv12_to_rgb64(nv12, matrix="bt601", full_range=False):
    """float64 (B, 3, H, W) RGB, clamped to 0..255, from (B, H*3/2, W) uint8 NV12."""
    b, rows, w = nv12.shape
    h = rows * 2 // 3
    y = nv12[:, :h].double()
    uv = nv12[:, h:].double().view(b, h // 2, w // 2, 2)
    u = uv[..., 0].repeat_interleave(2, 1).repeat_interleave(2, 2) - 128
    v = uv[..., 1].repeat_interleave(2, 1).repeat_interleave(2, 2) - 128
    cy, y0, crv, cgu, cgv, cbu = yuv_coefficients(matrix, full_range)
    lum = cy * (y - y0)
    rgb = torch.stack([lum + crv * v, lum + cgu * u + cgv * v, lum + cbu * u], 1)
    return rgb.clamp(0, 255)


def _reference(rgb64, size, mean, std, letterbox=False, pad=114.0):
    """float64 resize (or letterbox) + normalise of float64 (B, 3, H, W) pixels 0..255 -> NCHW."""
    oh, ow = size
    if letterbox:
        p = hk.letterbox_params(rgb64.shape[-2:], size)
        x = _bilinear64(rgb64, p.height, p.width)
        x = F.pad(x, (p.pad_x, ow - p.width - p.pad_x, p.pad_y, oh - p.height - p.pad_y), value=pad)
    else:
        x = _bilinear64(rgb64, oh, ow)
    m = torch.tensor(mean, dtype=torch.float64, device=x.device)[:, None, None]
    s = torch.tensor(std, dtype=torch.float64, device=x.device)[:, None, None]
    return (x / 255 - m) / s


def _torch_chain(frames_u8, size, mean, std, dtype):
    """The eager torchvision chain users write: permute, to float, resize, scale, normalise, cast."""
    import torchvision.transforms.v2.functional as tvF
    x = frames_u8.permute(0, 3, 1, 2).float()
    x = tvF.resize(x, list(size), antialias=False) / 255
    return tvF.normalize(x, list(mean), list(std)).to(dtype)


def _check_pre(ours, ref, theirs, dtype, mean, std, layout="NCHW", nv12=False):
    if layout == "NHWC":
        ours = ours.permute(0, 3, 1, 2)
    m = torch.tensor(mean, dtype=torch.float64, device=ref.device)[:, None, None]
    s = torch.tensor(std, dtype=torch.float64, device=ref.device)[:, None, None]
    mag = ((3.0 if nv12 else 1.0) + m.abs()) / s.abs() * torch.ones_like(ref)   # |v/255/std| + |mean/std|
    assert ours.dtype == dtype
    assert_within_rounding(ours, theirs, ref, dtype, n=8, magnitude=mag)


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hw, size, batch", [((1080, 1920), (640, 640), 2), ((37, 53), (224, 224), 3),
                                             ((1, 1), (5, 7), 1), ((480, 641), (241, 320), 4),
                                             ((64, 64), (64, 64), 1)])
def test_preprocess_matches_torchvision_resize_and_normalize(hw, size, batch, dtype):
    frames = torch.randint(0, 256, (batch, *hw, 3), dtype=torch.uint8, device="cuda")
    ours = hk.preprocess(frames, size, MEAN, STD, dtype=dtype)
    assert ours.shape == (batch, 3, *size)
    ref = _reference(frames.permute(0, 3, 1, 2).double(), size, MEAN, STD)
    _check_pre(ours, ref, _torch_chain(frames, size, MEAN, STD, dtype), dtype, MEAN, STD)


def test_preprocess_agrees_with_torchvision_uint8_pipeline():
    """Independent of this file's reference: torchvision's own uint8 Resize -> ToDtype -> Normalize
    rounds the resized pixels to integers, so it differs by at most half a pixel level."""
    import torchvision.transforms.v2 as T
    frames = torch.randint(0, 256, (2, 300, 400, 3), dtype=torch.uint8, device="cuda")
    tv = T.Compose([T.Resize((128, 160), antialias=False), T.ToDtype(torch.float32, scale=True),
                    T.Normalize(MEAN, STD)])(frames.permute(0, 3, 1, 2))
    ours = hk.preprocess(frames, (128, 160), MEAN, STD, dtype=torch.float32)
    tol = (0.5 + 1e-3) / 255 / torch.tensor(STD, device="cuda")[:, None, None]
    assert ((ours - tv).abs() <= tol).all()


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("hw, size", [((1080, 1920), (640, 640)), ((720, 405), (320, 256)), ((3, 2), (8, 8))])
def test_preprocess_letterbox_and_layouts(hw, size, layout):
    frames = torch.randint(0, 256, (3, *hw, 3), dtype=torch.uint8, device="cuda")
    ours = hk.preprocess(frames, size, MEAN, STD, layout=layout, dtype=torch.float32, letterbox=True)
    assert ours.shape == ((3, 3, *size) if layout == "NCHW" else (3, *size, 3))
    ref = _reference(frames.permute(0, 3, 1, 2).double(), size, MEAN, STD, letterbox=True)
    _check_pre(ours, ref, ref.float(), torch.float32, MEAN, STD, layout)
    p = hk.letterbox_params(hw, size)
    assert p.width == size[1] or p.height == size[0]


def test_preprocess_bgr_channels_list_and_strided_frames():
    base = torch.randint(0, 256, (4, 100, 130, 3), dtype=torch.uint8, device="cuda")
    crop = base[:, 5:95, 7:127]                               # strided rows: no copy needed
    rgb_ref = _reference(crop.permute(0, 3, 1, 2).double(), (64, 96), MEAN, STD)
    theirs = rgb_ref.float()
    _check_pre(hk.preprocess(crop, (64, 96), MEAN, STD, dtype=torch.float32), rgb_ref, theirs, torch.float32, MEAN, STD)
    bgr = crop.flip(-1).contiguous()
    _check_pre(hk.preprocess(bgr, (64, 96), MEAN, STD, dtype=torch.float32, format="BGR"), rgb_ref, theirs,
               torch.float32, MEAN, STD)
    out_bgr = hk.preprocess(crop, (64, 96), MEAN[::-1], STD[::-1], dtype=torch.float32, channels="BGR")
    _check_pre(out_bgr.flip(1), rgb_ref, theirs, torch.float32, MEAN, STD)
    as_list = hk.preprocess([f for f in crop], (64, 96), MEAN, STD, dtype=torch.float32)
    _check_pre(as_list, rgb_ref, theirs, torch.float32, MEAN, STD)
    single = hk.preprocess(crop[1], (64, 96), MEAN, STD, dtype=torch.float32)
    assert single.shape == (1, 3, 64, 96) and torch.equal(single[0], as_list[1])


@pytest.mark.parametrize("matrix, full", [("bt601", False), ("bt709", False), ("bt601", True)])
def test_preprocess_nv12(matrix, full):
    h, w = 96, 160
    nv12 = torch.randint(0, 256, (2, h * 3 // 2, w), dtype=torch.uint8, device="cuda")
    ours = hk.preprocess(nv12, (50, 70), MEAN, STD, dtype=torch.float32, format="NV12", color_matrix=matrix,
                         full_range=full)
    ref = _reference(_nv12_to_rgb64(nv12, matrix, full), (50, 70), MEAN, STD)
    _check_pre(ours, ref, ref.float(), torch.float32, MEAN, STD, nv12=True)


@pytest.mark.parametrize("impl", ["x2", "y2", "xy"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
def test_preprocess_multi_pixel_designs_equal_the_one_pixel_kernel(impl, dtype):
    """The 2 and 2 x 2 pixels-a-thread kernels do the one-pixel kernel's arithmetic (checked against
    torchvision above) pixel for pixel: equal to it within one unit of the output's rounding (the
    compiler may contract a multiply-add differently), on odd and even widths, heights that are not
    a multiple of the block's rows, letterbox, NHWC, BGR, NV12, strided and listed frames."""
    g = torch.Generator(device="cuda").manual_seed(3)
    frames = torch.randint(0, 256, (3, 37, 53, 3), dtype=torch.uint8, device="cuda", generator=g)
    big = torch.randint(0, 256, (2, 1080, 1920, 3), dtype=torch.uint8, device="cuda", generator=g)
    nv12 = torch.randint(0, 256, (2, 144, 160), dtype=torch.uint8, device="cuda", generator=g)
    calls = [(frames, (23, 31), {}), (frames, (64, 90), {}), (frames, (64, 90), {"layout": "NHWC"}),
             (frames, (40, 48), {"letterbox": True}), (frames, (40, 47), {"letterbox": True, "layout": "NHWC"}),
             (frames, (30, 30), {"format": "BGR", "channels": "RGB"}), (big, (640, 640), {}),
             (big, (640, 640), {"letterbox": True}), (big[:, 5:1000, 7:1500], (224, 224), {}),
             ([f for f in frames], (17, 18), {}), (nv12, (50, 70), {"format": "NV12"}),
             (frames[0], (9, 10), {})]
    for fr, size, kw in calls:
        ours = hk.preprocess(fr, size, MEAN, STD, dtype=dtype, impl=impl, **kw)
        ref = hk.preprocess(fr, size, MEAN, STD, dtype=dtype, impl="pixel", **kw)
        assert ours.shape == ref.shape and ours.dtype == ref.dtype, (impl, size, kw)
        # bound: one rounding unit of the largest output (|output| <= 2.7: (255/255 - 0.406) / 0.225)
        # plus 4 FP32 rounding units of a 255 pixel value, normalised (/ (255 * min std))
        tol = 2.7 * torch.finfo(dtype).eps + 4 * 255 * 2.0 ** -23 / (255 * min(STD))
        assert ((ours.float() - ref.float()).abs() <= tol).all(), (impl, size, kw)


def test_preprocess_bad_input_and_empty_batch():
    frames = torch.zeros(2, 10, 12, 3, dtype=torch.uint8, device="cuda")
    assert hk.preprocess(frames[:0], (4, 4)).shape == (0, 3, 4, 4)
    with pytest.raises(ValueError, match=r"share one size.*10x12.*11x12"):
        hk.preprocess([frames[0], torch.zeros(11, 12, 3, dtype=torch.uint8, device="cuda")], (4, 4))
    with pytest.raises(hk.KernelArgumentError, match=r"uint8.*float32"):
        hk.preprocess(frames.float(), (4, 4))
    with pytest.raises(hk.KernelArgumentError, match=r"\(batch, height, width, 3\).*\[2, 10, 12, 4\]"):
        hk.preprocess(torch.zeros(2, 10, 12, 4, dtype=torch.uint8, device="cuda"), (4, 4))


# --- NMS and box decoding -------------------------------------------------------------------------

def _random_boxes(n, device="cuda", seed=0, size=1000.0, max_wh=200.0):
    """Synthetic boxes (many overlaps) with distinct scores (a permutation: no ties)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * size
    wh = torch.rand(n, 2, generator=g) * max_wh + 1
    boxes = torch.cat([xy, xy + wh], 1).to(device)
    scores = (torch.randperm(n, generator=g).float() / max(n, 1)).to(device)
    return boxes, scores


@pytest.mark.parametrize("n", [0, 1, 2, 63, 64, 65, 1000, 10_000])
@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_nms_equals_torchvision(n, thr):
    import torchvision
    boxes, scores = _random_boxes(n, seed=n)
    ours = hk.nms(boxes, scores, thr)
    theirs = torchvision.ops.nms(boxes, scores, thr)
    assert ours.dtype == torch.int64 and torch.equal(ours, theirs), (ours[:10], theirs[:10])


def test_nms_ties_and_identical_boxes_equal_torchvision():
    import torchvision
    boxes = torch.tensor([[0, 0, 10, 10]] * 5 + [[5, 5, 15, 15]] * 3 + [[100, 100, 101, 101]], dtype=torch.float32,
                         device="cuda")
    scores = torch.tensor([0.5, 0.9, 0.5, 0.9, 0.1, 0.9, 0.2, 0.9, 0.5], device="cuda")
    for thr in (0.0, 0.1, 0.5, 1.0):
        assert torch.equal(hk.nms(boxes, scores, thr), torchvision.ops.nms(boxes, scores, thr))


def test_nms_batch_of_images_and_class_aware():
    import torchvision
    b, n = 5, 777
    per = [_random_boxes(n, seed=100 + i) for i in range(b)]
    boxes = torch.stack([p[0] for p in per])
    scores = torch.stack([p[1] for p in per])
    keeps = hk.nms(boxes, scores, 0.5)
    assert len(keeps) == b
    for i in range(b):
        assert torch.equal(keeps[i], torchvision.ops.nms(boxes[i], scores[i], 0.5))
    labels = torch.randint(0, 7, (n,), device="cuda")
    ours = hk.batched_nms(boxes[0], scores[0], labels, 0.5)
    # torchvision's per-class loop (its exact path for large inputs; the coordinate trick rounds differently)
    theirs = torchvision.ops.boxes._batched_nms_vanilla(boxes[0], scores[0], labels, 0.5)
    assert torch.equal(ours, theirs)
    per_img = hk.batched_nms(boxes, scores, labels.expand(b, n).contiguous(), 0.5)
    assert torch.equal(per_img[0], ours)
    assert hk.nms(boxes[:0], scores[:0], 0.5) == []


@pytest.mark.needs("cupy")
def test_nms_cupy():
    import cupy
    import torchvision
    boxes, scores = _random_boxes(500, seed=3)
    ours = hk.nms(cupy.asarray(boxes), cupy.asarray(scores), 0.5)
    assert isinstance(ours, cupy.ndarray)
    assert torch.equal(torch.as_tensor(ours, device="cuda"), torchvision.ops.nms(boxes, scores, 0.5))


def test_decode_cxcywh_with_letterbox_undo_and_clip():
    import torchvision
    head = torch.randn(2, 300, 85, device="cuda") * 50 + 300      # (cx, cy, w, h, scores...)
    head[..., 2:4] = head[..., 2:4].abs()
    ours = hk.decode_boxes(head)
    theirs = torchvision.ops.box_convert(head[..., :4], "cxcywh", "xyxy")
    ref = torchvision.ops.box_convert(head[..., :4].double(), "cxcywh", "xyxy")
    assert_within_rounding(ours, theirs, ref, torch.float32, n=2, magnitude=head[..., :4].double().abs().sum(-1, keepdim=True))
    p = hk.letterbox_params((1080, 1920), (640, 640))
    ours = hk.decode_boxes(head, letterbox=p, image_size=(1080, 1920))
    ref = torchvision.ops.clip_boxes_to_image(p.to_frame(ref), (1080, 1920))
    theirs = torchvision.ops.clip_boxes_to_image(p.to_frame(theirs), (1080, 1920))
    assert_within_rounding(ours, theirs, ref, torch.float32, n=4,
                           magnitude=(head[..., :4].double().abs().sum(-1, keepdim=True) + 200) * 3)


def test_decode_anchor_deltas_equal_torchvision_box_coder():
    from torchvision.models.detection._utils import BoxCoder
    n = 5000
    anchors, _ = _random_boxes(n, seed=7)
    deltas = torch.randn(n, 4, device="cuda") * 0.5
    deltas[:10, 2:] = 10.0                     # beyond the clip
    coder = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
    ours = hk.decode_boxes(deltas, anchors, weights=(10.0, 10.0, 5.0, 5.0))
    theirs = coder.decode_single(deltas, anchors)
    ref = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0)).decode_single(deltas.double(), anchors.double())
    assert_within_rounding(ours, theirs, ref, torch.float32, n=6,
                           magnitude=ref.abs().max(-1, keepdim=True).values * 4 + 1200)
    batched = hk.decode_boxes(torch.stack([deltas, deltas]), anchors, weights=(10.0, 10.0, 5.0, 5.0))
    assert torch.equal(batched[1], ours)


# --- transpose and row reductions -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.int64])
@pytest.mark.parametrize("shape", [(1, 1), (1, 37), (33, 1), (64, 64), (1000, 3), (4097, 129)])
def test_transpose_2d_and_batched(shape, dtype):
    x = torch.randint(0, 100, shape, device="cuda").to(dtype)
    assert torch.equal(hk.transpose(x), x.t().contiguous())
    xb = torch.randint(0, 100, (3, *shape), device="cuda").to(dtype)
    assert torch.equal(hk.transpose(xb), xb.transpose(1, 2).contiguous())
    assert torch.equal(hk.transpose(x[:, ::2] if shape[1] > 1 else x), (x[:, ::2] if shape[1] > 1 else x).t().contiguous())


@pytest.mark.parametrize("shape", [(2, 3, 224, 224), (1, 64, 7, 7), (4, 1, 5, 3), (0, 3, 4, 4)])
def test_transpose_nchw_nhwc(shape):
    x = torch.randn(shape, device="cuda").half()
    nhwc = hk.transpose(x, "NCHW->NHWC")
    assert torch.equal(nhwc, x.permute(0, 2, 3, 1).contiguous())
    assert torch.equal(hk.transpose(nhwc, "NHWC->NCHW"), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 17), (5, 4097), (64, 1024), (8, 65536), (2, 3, 2048), (7, 2049)])
def test_row_sum_and_max(shape, dtype):
    x = torch.randn(shape, device="cuda").to(dtype)
    s = hk.row_sum(x)
    assert s.dtype == dtype and s.shape == shape[:-1]
    assert_within_rounding(s, x.sum(-1), x.double().sum(-1), dtype, n=shape[-1], magnitude=x.double().abs().sum(-1))
    m = hk.row_max(x)
    assert torch.equal(m, x.amax(-1))


def test_row_max_nan_and_strided_and_empty():
    x = torch.randn(4, 300, device="cuda")
    x[2, 17] = float("nan")
    assert torch.equal(hk.row_max(x).isnan(), x.amax(-1).isnan())
    y = torch.randn(64, 2 * 1024 + 1, device="cuda")[:, 1:1025]
    assert_within_rounding(hk.row_sum(y), y.sum(-1), y.double().sum(-1), torch.float32, n=1024,
                           magnitude=y.double().abs().sum(-1))
    assert hk.row_sum(torch.randn(0, 5, device="cuda")).shape == (0,)
    assert torch.equal(hk.row_sum(torch.randn(3, 0, device="cuda")), torch.zeros(3, device="cuda"))


# --- attention ------------------------------------------------------------------------------------

def _sdpa(q, k, v, causal, scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _check_attention(ours, q, k, v, causal, scale=None):
    """FlashAttention's rule: error against an FP64 reference at most twice torch's own (same
    dtype), plus output rounding and the sqrt(n) bound of the FP32 sums."""
    ref = _sdpa(q.double(), k.double(), v.double(), causal, scale)
    theirs = _sdpa(q, k, v, causal, scale)
    assert ours.dtype == q.dtype and ours.shape == q.shape
    assert_within_rounding(ours, theirs, ref, q.dtype, n=k.shape[-2], magnitude=v.double().abs().amax())


@pytest.mark.parametrize("block_m", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b, h, s, d", [(2, 3, 1, 64), (1, 2, 17, 128), (2, 4, 256, 64), (1, 2, 1000, 128),
                                        (1, 1, 4097, 64)])
def test_attention_matches_sdpa(b, h, s, d, causal, dtype, block_m):
    # the mma kernel on every architecture (auto takes wgmma on Hopper: tests/gpu/test_attention_gpu.py)
    torch.manual_seed(s + d)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
    _check_attention(hk.attention(q, k, v, causal=causal, block_m=block_m, variant="mma"), q, k, v, causal)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_other_key_length_strided_and_scale(causal):
    q = torch.randn(2, 100, 4, 128, device="cuda", dtype=torch.float16).transpose(1, 2)   # (B, H, S, D) view
    k = torch.randn(2, 4, 300, 128, device="cuda", dtype=torch.float16)
    v = torch.randn(2, 4, 300, 128, device="cuda", dtype=torch.float16)
    _check_attention(hk.attention(q, k, v, causal=causal, variant="mma"), q, k, v, causal)
    _check_attention(hk.attention(q, k, v, causal=causal, scale=0.3, variant="mma"), q, k, v, causal, scale=0.3)
    qs = q[:, :, :70]
    _check_attention(hk.attention(qs, k[:, :, :50], v[:, :, :50], causal=causal, variant="mma"), qs, k[:, :, :50], v[:, :, :50], causal)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_variable_lengths(d, causal, dtype):
    lens = [1, 63, 64, 65, 300, 7]
    h = 3
    off = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    total = sum(lens)
    q, k, v = (torch.randn(total, h, d, device="cuda", dtype=dtype) for _ in range(3))
    for block_m in (64, 128):
        out = hk.attention(q, k, v, causal=causal, offsets=off, block_m=block_m)
        assert out.shape == q.shape
        for i, n in enumerate(lens):
            a, e = int(off[i]), int(off[i + 1])
            per = [x[a:e].transpose(0, 1)[None] for x in (q, k, v)]       # (1, H, n, d)
            _check_attention(out[a:e].transpose(0, 1)[None], *per, causal)


def test_attention_separate_kv_offsets_and_errors():
    d, h = 64, 2
    ql, kl = [5, 40], [70, 3]
    qo = torch.tensor([0, 5, 45], dtype=torch.int32, device="cuda")
    ko = torch.tensor([0, 70, 73], dtype=torch.int32, device="cuda")
    q = torch.randn(45, h, d, device="cuda", dtype=torch.float16)
    k = torch.randn(73, h, d, device="cuda", dtype=torch.float16)
    v = torch.randn(73, h, d, device="cuda", dtype=torch.float16)
    out = hk.attention(q, k, v, offsets=qo, kv_offsets=ko)
    for i in range(2):
        per = (q[qo[i]:qo[i + 1]], k[ko[i]:ko[i + 1]], v[ko[i]:ko[i + 1]])
        per = [x.transpose(0, 1)[None] for x in per]
        _check_attention(out[qo[i]:qo[i + 1]].transpose(0, 1)[None], *per, False)
    with pytest.raises(hk.KernelArgumentError, match=r"head dimension must be one of \(64, 128\)"):
        hk.attention(*(torch.randn(1, 1, 8, 32, device="cuda", dtype=torch.float16) for _ in range(3)))


# --- convolution ----------------------------------------------------------------------------------

def _conv_ref(x_nhwc, w, bias, stride, padding, groups=1):
    """(ours' layout) float64 reference, cuDNN's same-dtype result, and the magnitude |x| * |w|."""
    xn = x_nhwc.permute(0, 3, 1, 2)
    ref = F.conv2d(xn.double(), w.double(), None if bias is None else bias.double(), stride, padding, groups=groups)
    theirs = F.conv2d(xn, w, bias, stride, padding, groups=groups)
    mag = F.conv2d(xn.double().abs(), w.double().abs(), None if bias is None else bias.double().abs(), stride, padding,
                   groups=groups)
    return ref.permute(0, 2, 3, 1), theirs.permute(0, 2, 3, 1), mag.permute(0, 2, 3, 1)


_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
#: conv2d's variants as the tests name them: (variant, block_n)
_CONV_VARIANTS = {"auto": ("auto", None), "wgmma_n64": ("wgmma", 64), "wgmma_n128": ("wgmma", 128),
                  "gather_n64": ("wgmma_gather", 64), "gather_n128": ("wgmma_gather", 128),
                  "implicit_gemm": ("implicit_gemm", None), "gemm": ("gemm", None)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("variant", list(_CONV_VARIANTS))
@pytest.mark.parametrize("n, h, w, c, k, r, stride, pad", [
    # ResNet-50's layer kinds at batch 2: 3x3, 3x3 stride 2, 1x1, 1x1 stride 2 (projection), the 7x7 RGB stem
    (2, 56, 56, 64, 64, 3, 1, 1), (2, 56, 56, 64, 128, 3, 2, 1), (2, 28, 28, 256, 64, 1, 1, 0),
    (2, 28, 28, 128, 256, 1, 2, 0), (2, 14, 14, 1024, 256, 1, 1, 0), (2, 64, 64, 3, 64, 7, 2, 3),
    # odd shapes: channels not multiples of the tiles (nor of 8 or 4), M not a multiple of 128, batch 1, 1x1
    # images, padding wider than the filter's reach, stride 3
    (1, 7, 9, 8, 16, 3, 1, 0), (3, 5, 5, 24, 40, 3, 2, 2), (1, 1, 1, 8, 8, 1, 1, 0), (1, 13, 11, 20, 200, 3, 1, 1),
    (2, 9, 9, 72, 20, 1, 1, 0), (1, 17, 17, 40, 136, 5, 3, 2), (1, 6, 6, 8, 24, 3, 1, 4), (2, 10, 10, 12, 20, 3, 2, 1),
    (1, 8, 8, 5, 72, 1, 1, 0),
    # the TMA im2col path (C a multiple of 64): tiles crossing rows and images, stride 2 with odd sizes, 5x5
    (3, 7, 7, 128, 96, 3, 2, 1), (2, 9, 11, 64, 64, 5, 1, 2), (2, 6, 6, 64, 32, 3, 1, 0), (5, 3, 3, 192, 64, 1, 2, 0)])
def test_conv2d_matches_cudnn(n, h, w, c, k, r, stride, pad, variant, dtype):
    name, block_n = _CONV_VARIANTS[variant]
    if name in ("wgmma", "wgmma_gather", "gemm") and not _SM90:
        pytest.skip("the wgmma variants need an sm_90 GPU")
    if name == "gemm" and (r, stride, pad) != (1, 1, 0):
        pytest.skip("variant='gemm' is for 1x1 filters with stride 1 and no padding")
    if name == "implicit_gemm" and k % 8:
        pytest.skip("variant='implicit_gemm' needs output channels that are a multiple of 8")
    torch.manual_seed(h * c + k)
    x = torch.randn(n, h, w, c, device="cuda", dtype=dtype)
    wt = (torch.randn(k, c, r, r, device="cuda") / math.sqrt(c * r * r)).to(dtype)
    b = torch.randn(k, device="cuda", dtype=dtype)
    kw = {"variant": name, "block_n": block_n}
    ours = hk.conv2d(x, wt.permute(0, 2, 3, 1), b, stride=stride, padding=pad, **kw)     # NHWC + KRSC
    ref, theirs, mag = _conv_ref(x, wt, b, stride, pad)
    assert ours.shape == ref.shape and ours.dtype == dtype
    assert_within_rounding(ours, theirs, ref, dtype, n=c * r * r, magnitude=mag)
    packed = hk.conv2d(x, hk.pack_conv_weight(wt, layout="NCHW"), b, stride=stride, padding=pad, kernel_size=r, **kw)
    assert torch.equal(packed, ours)
    nchw = hk.conv2d(x.permute(0, 3, 1, 2), wt, b, stride=stride, padding=pad, layout="NCHW", **kw)   # NCHW + KCRS
    assert nchw.shape == ref.permute(0, 3, 1, 2).shape and torch.equal(nchw.permute(0, 2, 3, 1), ours)


@pytest.mark.parametrize("variant", ["auto", "wgmma_n64", "wgmma_n128", "gather_n128", "implicit_gemm"])
def test_conv2d_fused_relu_and_residual(variant):
    name, block_n = _CONV_VARIANTS[variant]
    if name.startswith("wgmma") and not _SM90:
        pytest.skip("the wgmma variants need an sm_90 GPU")
    x = torch.randn(2, 14, 14, 64, device="cuda", dtype=torch.float16)
    wt = (torch.randn(192, 64, 3, 3, device="cuda") / 24).half()
    b = torch.randn(192, device="cuda", dtype=torch.float16)
    res = torch.randn(2, 14, 14, 192, device="cuda", dtype=torch.float16)
    ours = hk.conv2d(x, wt.permute(0, 2, 3, 1), b, padding=1, activation="relu", residual=res, variant=name,
                     block_n=block_n)
    ref, theirs, mag = _conv_ref(x, wt, b, 1, 1)
    assert_within_rounding(ours, (theirs.relu() + res), ref.relu() + res.double(), torch.float16, n=576,
                           magnitude=mag + res.double().abs())


@pytest.mark.skipif(not _SM90, reason="the wgmma variants need an sm_90 GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("variant, block_n, split_k", [("wgmma", 128, 2), ("wgmma", 64, 3), ("wgmma_gather", 128, 4),
                                                       ("wgmma_gather", 64, 8)])
@pytest.mark.parametrize("n, h, w, c, k, r, stride, pad", [
    # ResNet-50's 7x7 layers (TMA im2col), channels and pixels off the tiles (gathered; K % 8 != 0: element
    # stores; 4 k-steps split 8 ways: 4 parts), and more parts than SMs (392 of 128 x 128 x 9 k-steps)
    (2, 7, 7, 2048, 512, 1, 1, 0), (4, 7, 7, 512, 512, 3, 1, 1), (3, 9, 11, 72, 200, 3, 2, 1),
    (1, 13, 11, 24, 20, 3, 1, 1), (8, 28, 28, 128, 256, 3, 1, 1)])
def test_conv2d_split_k_matches_cudnn(n, h, w, c, k, r, stride, pad, variant, block_n, split_k, dtype):
    torch.manual_seed(h * c + k + split_k)
    x = torch.randn(n, h, w, c, device="cuda", dtype=dtype)
    wt = (torch.randn(k, c, r, r, device="cuda") / math.sqrt(c * r * r)).to(dtype)
    b = torch.randn(k, device="cuda", dtype=dtype)
    ref, theirs, mag = _conv_ref(x, wt, b, stride, pad)
    res = torch.randn(ref.shape, device="cuda", dtype=dtype)
    kw = {"stride": stride, "padding": pad, "variant": variant, "block_n": block_n}
    wk = wt.permute(0, 2, 3, 1)
    hk.launch_log(clear=True)
    ours = hk.conv2d(x, wk, b, activation="relu", residual=res, split_k=split_k, **kw)
    ran = hk.launch_log()[-1]
    assert ran.kernel.endswith("_sk") and ran.args["split_k"] == min(split_k, -(-c * r * r // 64))
    assert_within_rounding(ours, theirs.relu() + res, ref.relu() + res.double(), dtype, n=c * r * r,
                           magnitude=mag + res.double().abs())
    # the parts add in a fixed order: the same bits on every call (the tiles' counters reset themselves)
    assert torch.equal(hk.conv2d(x, wk, b, activation="relu", residual=res, split_k=split_k, **kw), ours)
    plain = hk.conv2d(x, wk, split_k=split_k, **kw)   # no bias, activation or residual: the plain epilogue
    ref0, theirs0, mag0 = _conv_ref(x, wt, None, stride, pad)
    assert_within_rounding(plain, theirs0, ref0, dtype, n=c * r * r, magnitude=mag0)


@pytest.mark.skipif(not _SM90, reason="the wgmma variants need an sm_90 GPU")
def test_conv2d_auto_splits_the_7x7_layers_as_explain_says():
    x = torch.randn(32, 7, 7, 512, device="cuda", dtype=torch.float16)
    wt = (torch.randn(512, 3, 3, 512, device="cuda") / 68).half()
    hk.launch_log(clear=True)
    y = hk.conv2d(x, wt, padding=1)
    ran = hk.launch_log()[-1]
    said = hk.explain("conv2d", tuple(x.shape), tuple(wt.shape), padding=1)
    assert ran.kernel == "conv_wgmma_f16_n128_tma_sk" and f"split_k={ran.args['split_k']}" in said
    assert torch.equal(y, hk.conv2d(x, wt, padding=1, variant="wgmma", block_n=128, split_k=ran.args["split_k"]))


@pytest.mark.skipif(not _SM90, reason="the wgmma variants need an sm_90 GPU")
def test_conv2d_auto_runs_what_explain_names():
    x = torch.randn(4, 28, 28, 128, device="cuda", dtype=torch.float16)
    wt = torch.randn(128, 3, 3, 128, device="cuda", dtype=torch.float16)
    hk.launch_log(clear=True)
    hk.conv2d(x, wt, padding=1)
    ran = hk.launch_log()[-1].kernel
    said = hk.explain("conv2d", tuple(x.shape), tuple(wt.shape), padding=1)
    assert ran == "conv_wgmma_f16_n64_tma"          # 4*28*28 pixels: 25 x 1 tiles of 128 x 128 fill under half the SMs
    assert "block_n=64" in said and "activations by TMA im2col" in said
    with pytest.raises(hk.KernelArgumentError, match="variant='gemm' is for 1x1 filters"):
        hk.conv2d(x, wt, padding=1, variant="gemm")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n, h, w, c, stride, pad", [(2, 28, 28, 32, 1, 1), (1, 7, 8, 24, 2, 1), (1, 3, 3, 5, 1, 0),
                                                     (4, 112, 112, 32, 2, 1)])
def test_depthwise_conv2d(n, h, w, c, stride, pad, dtype):
    x = torch.randn(n, h, w, c, device="cuda", dtype=dtype)
    wt = torch.randn(c, 1, 3, 3, device="cuda", dtype=dtype)
    b = torch.randn(c, device="cuda", dtype=dtype)
    ours = hk.depthwise_conv2d(x, wt, b, stride=stride, padding=pad)
    ref, theirs, mag = _conv_ref(x, wt, b, stride, pad, groups=c)
    assert_within_rounding(ours, theirs, ref, dtype, n=9, magnitude=mag)
    relu = hk.depthwise_conv2d(x, wt, b, stride=stride, padding=pad, activation="relu")
    assert_within_rounding(relu, theirs.relu(), ref.relu(), dtype, n=9, magnitude=mag)
