"""the inference kernels without a GPU: argument checks, shapes, geometry (CPU torch).

The kernels themselves compile in tests/test_kernels.py (every registered entry, every CI arch)
and are checked against torch/torchvision on the GPU machine (tests/gpu/test_infer_gpu.py).
"""
from __future__ import annotations

import re

import pytest

import hookmagic.kernels as hk
from hookmagic.common.errors import HookmagicError
from hookmagic.kernels.preprocess import yuv_coefficients

torch = pytest.importorskip("torch")   # CPU torch is in [dev]


def test_letterbox_geometry():
    p = hk.letterbox_params((1080, 1920), (640, 640))
    assert (p.width, p.height, p.pad_x, p.pad_y) == (640, 360, 0, 140) and p.scale == pytest.approx(1 / 3)
    p = hk.letterbox_params((720, 405), 320)             # tall frame: pad left/right
    assert (p.height, p.width, p.pad_y, p.pad_x) == (320, 180, 0, 70)
    p = hk.letterbox_params((3, 2), (8, 8))
    assert (p.height, p.width, p.pad_x) == (8, 5, 1)   # odd padding: the extra pixel goes right
    boxes = torch.tensor([[70.0, 10.0, 250.0, 330.0]])
    back = hk.letterbox_params((720, 405), 320).to_frame(boxes)
    assert torch.allclose(back, torch.tensor([[0.0, 22.5, 405.0, 742.5]]))


def test_yuv_coefficients_are_the_standard_ones():
    cy, y0, crv, cgu, cgv, cbu = yuv_coefficients("bt601")
    assert (round(cy, 3), y0, round(crv, 3), round(cgu, 3), round(cgv, 3), round(cbu, 3)) == \
        (1.164, 16.0, 1.596, -0.392, -0.813, 2.017)
    _, _, crv, cgu, cgv, cbu = yuv_coefficients("bt709")
    assert (round(crv, 3), round(cgu, 3), round(cgv, 3), round(cbu, 3)) == (1.793, -0.213, -0.533, 2.112)
    assert yuv_coefficients("bt601", full_range=True)[:3] == (1.0, 0.0, pytest.approx(1.402))
    with pytest.raises(hk.KernelArgumentError, match="bt2020"):
        yuv_coefficients("bt2020")


def test_preprocess_argument_errors_name_expected_and_got():
    f = torch.zeros(2, 10, 12, 3, dtype=torch.uint8)
    with pytest.raises(hk.KernelArgumentError, match=r"uint8 pixels, got torch float32\[2, 10, 12, 3\]"):
        hk.preprocess(f.float(), (4, 4))
    with pytest.raises(hk.KernelArgumentError, match=r"shape \(batch, height, width, 3\), got torch uint8\[2, 10, 12, 4\]"):
        hk.preprocess(torch.zeros(2, 10, 12, 4, dtype=torch.uint8), (4, 4))
    with pytest.raises(hk.KernelArgumentError, match=r"NV12.*even height"):
        hk.preprocess(torch.zeros(2, 16, 12, dtype=torch.uint8), (4, 4), format="NV12")
    with pytest.raises(ValueError, match=r"share one size; frames\[0\] is 10x12.*frames\[1\] is 11x12"):
        hk.preprocess([f[0], torch.zeros(11, 12, 3, dtype=torch.uint8)], (4, 4))
    with pytest.raises(hk.KernelArgumentError, match="empty list"):
        hk.preprocess([], (4, 4))
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device, got torch uint8"):
        hk.preprocess(f, (4, 4))
    with pytest.raises(hk.KernelArgumentError, match=r"dtype must be one of .*got int8"):
        hk.preprocess(f, (4, 4), dtype=torch.int8)
    with pytest.raises(hk.KernelArgumentError, match=r"layout must be one of \('NCHW', 'NHWC'\), got 'CHW'"):
        hk.preprocess(f, (4, 4), layout="CHW")
    with pytest.raises(hk.KernelArgumentError, match="format must be one of"):
        hk.preprocess(f, (4, 4), format="YUYV")
    with pytest.raises(hk.KernelArgumentError, match="std must be finite and non-zero"):
        hk.preprocess(f, (4, 4), std=(1, 0, 1))
    with pytest.raises(hk.KernelArgumentError, match="mean must be a number or 3 numbers"):
        hk.preprocess(f, (4, 4), mean=(0.5, 0.5))
    with pytest.raises(hk.KernelArgumentError, match=r"size must be positive, got \(0, 4\)"):
        hk.preprocess(f, (0, 4))
    assert issubclass(hk.KernelArgumentError, ValueError) and issubclass(hk.KernelArgumentError, HookmagicError)


def test_new_kernels_are_registered():
    t = hk.available()
    assert set(t[t.op == "preprocess"].dtype) == {"float32", "float16", "bfloat16"}


def test_nms_and_decode_argument_errors():
    boxes, scores = torch.zeros(5, 4), torch.zeros(5)
    with pytest.raises(hk.KernelArgumentError, match=r"boxes must be float32, got torch float64\[5, 4\]"):
        hk.nms(boxes.double(), scores, 0.5)
    with pytest.raises(hk.KernelArgumentError, match=r"boxes must have shape \(n, 4\) or \(batch, n, 4\), got .*\[5, 5\]"):
        hk.nms(torch.zeros(5, 5), scores, 0.5)
    with pytest.raises(hk.KernelArgumentError, match=r"scores must have shape \[5\] \(one per box\), got .*\[4\]"):
        hk.nms(boxes, torch.zeros(4), 0.5)
    with pytest.raises(hk.KernelArgumentError, match="iou_threshold must be a number"):
        hk.nms(boxes, scores, "high")
    with pytest.raises(hk.KernelArgumentError, match=r"idxs must be int64 .* of shape \[5\]"):
        hk.batched_nms(boxes, scores, torch.zeros(5), 0.5)
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device"):
        hk.nms(boxes, scores, 0.5)
    with pytest.raises(hk.KernelArgumentError, match=r"anchors must be float32 of shape \(5, 4\)"):
        hk.decode_boxes(boxes, torch.zeros(4, 4))
    with pytest.raises(hk.KernelArgumentError, match="at least 4 columns"):
        hk.decode_boxes(torch.zeros(5, 3))
    with pytest.raises(hk.KernelArgumentError, match="weights must be 4 non-zero"):
        hk.decode_boxes(boxes, weights=(1, 1, 0, 1))
    assert {"nms", "decode_boxes"} <= set(hk.available().op)


def test_transpose_and_reduction_argument_errors():
    with pytest.raises(hk.KernelArgumentError, match=r"4-D needs layout"):
        hk.transpose(torch.zeros(2, 3, 4, 5))
    with pytest.raises(hk.KernelArgumentError, match=r"layout NCHW->NHWC needs a 4-D x \(NCHW\), got torch float32\[2, 3\]"):
        hk.transpose(torch.zeros(2, 3), "NCHW->NHWC")
    with pytest.raises(hk.KernelArgumentError, match="layout must be one of"):
        hk.transpose(torch.zeros(2, 3, 4, 5), "NCHW->CHWN")
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device"):
        hk.transpose(torch.zeros(2, 3))
    with pytest.raises(hk.KernelArgumentError, match=r"float32, float16 or bfloat16, got torch int32"):
        hk.row_sum(torch.zeros(2, 3, dtype=torch.int32))
    with pytest.raises(hk.KernelArgumentError, match="last dimension of x is empty"):
        hk.row_max(torch.zeros(2, 0))
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device"):
        hk.row_max(torch.zeros(2, 3))


def test_attention_argument_errors():
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(hk.KernelArgumentError, match=r"float16 or bfloat16, got q torch float32\[1, 2, 8, 64\]"):
        hk.attention(q.float(), q, q)
    with pytest.raises(hk.KernelArgumentError, match="share one dtype"):
        hk.attention(q, q.bfloat16(), q)
    with pytest.raises(hk.KernelArgumentError, match=r"head dimension must be one of \(64, 128\), got q .*\[1, 2, 8, 96\]"):
        hk.attention(*(torch.zeros(1, 2, 8, 96, dtype=torch.float16),) * 3)
    with pytest.raises(hk.KernelArgumentError, match=r"q must have shape \(batch, heads, seq, d\)"):
        hk.attention(q[0], q[0], q[0])
    with pytest.raises(hk.KernelArgumentError, match=r"k and v must match q's batch, heads"):
        hk.attention(q, torch.zeros(1, 3, 8, 64, dtype=torch.float16), torch.zeros(1, 3, 8, 64, dtype=torch.float16))
    with pytest.raises(hk.KernelArgumentError, match="must be on a CUDA device"):
        hk.attention(q, q, q)
    with pytest.raises(hk.KernelArgumentError, match=r"block_m must be one of \(64, 128\), got 32"):
        hk.attention(q, q, q, block_m=32)
    with pytest.raises(hk.KernelArgumentError, match="kv_offsets needs offsets"):
        hk.attention(q, q, q, kv_offsets=torch.zeros(2, dtype=torch.int32))


def test_attention_declared_work():
    from hookmagic.kernels.attention import _pairs
    assert _pairs(4, 4, False) == 16 and _pairs(4, 4, True) == 10
    assert _pairs(3, 5, True) == 1 + 2 + 3 and _pairs(5, 3, True) == 1 + 2 + 3 + 3 + 3


def test_conv_argument_errors_and_weight_packing():
    x = torch.zeros(1, 8, 8, 16, dtype=torch.float16)
    with pytest.raises(hk.KernelArgumentError, match=r"x must be float16 or bfloat16, got torch float32"):
        hk.conv2d(x.float(), torch.zeros(8, 3, 3, 16))
    with pytest.raises(hk.KernelArgumentError, match=r"w must be KRSC \(K, R, S, 16\).*\[8, 5, 5, 15\]"):
        hk.conv2d(x, torch.zeros(8, 5, 5, 15, dtype=torch.float16))
    # torch's KCRS weights with NHWC activations: the mixed convention is refused, naming the fix
    with pytest.raises(hk.KernelArgumentError, match="layout='NCHW' takes KCRS"):
        hk.conv2d(x, torch.zeros(8, 16, 3, 3, dtype=torch.float16))
    with pytest.raises(hk.KernelArgumentError, match="layout='NHWC' takes KRSC"):
        hk.conv2d(x.permute(0, 3, 1, 2), torch.zeros(8, 3, 3, 16, dtype=torch.float16), layout="NCHW")
    with pytest.raises(hk.KernelArgumentError, match="layout must be 'NHWC'"):
        hk.conv2d(x, torch.zeros(8, 3, 3, 16, dtype=torch.float16), layout="CHWN")
    with pytest.raises(hk.KernelArgumentError, match="unknown variant .cudnn.; one of auto, wgmma, wgmma_gather, implicit_gemm, gemm"):
        hk.conv2d(x, torch.zeros(8, 3, 3, 16, dtype=torch.float16), variant="cudnn")
    with pytest.raises(hk.KernelArgumentError, match=r"block_n must be one of \[64, 128\]"):
        hk.conv2d(x, torch.zeros(8, 3, 3, 16, dtype=torch.float16), block_n=256)
    for bad in (0, 9, 2.0, True):
        with pytest.raises(hk.KernelArgumentError, match="split_k must be an int from 1 to 8"):
            hk.conv2d(x, torch.zeros(8, 3, 3, 16, dtype=torch.float16), split_k=bad)
    with pytest.raises(hk.KernelArgumentError, match="stride must be >= 1, got 0"):
        hk.conv2d(x, torch.zeros(8, 3, 3, 16, dtype=torch.float16), stride=0)
    with pytest.raises(hk.KernelArgumentError, match="one number .the same for height and width"):
        hk.conv2d(x, torch.zeros(8, 3, 3, 16, dtype=torch.float16), stride=(1, 2))
    with pytest.raises(hk.KernelArgumentError, match=r"needs kernel_size \(R = S >= 1\)"):
        hk.conv2d(x, torch.zeros(144, 8, dtype=torch.float16))
    with pytest.raises(hk.KernelArgumentError, match=r"packed w must have 400 rows"):
        hk.conv2d(x, torch.zeros(144, 8, dtype=torch.float16), kernel_size=5)
    with pytest.raises(hk.KernelArgumentError, match="does not fit"):
        hk.conv2d(x, torch.zeros(8, 9, 9, 16, dtype=torch.float16))
    with pytest.raises(hk.KernelArgumentError, match="must be on one CUDA device|same kind of array on one CUDA device"):
        hk.conv2d(x, torch.zeros(8, 3, 3, 16, dtype=torch.float16))
    with pytest.raises(hk.KernelArgumentError, match=r"w must be float16\[16, 1, 3, 3\]"):
        hk.depthwise_conv2d(x, torch.zeros(16, 1, 5, 5, dtype=torch.float16))
    w = torch.arange(8 * 16 * 3 * 3, dtype=torch.float32).reshape(8, 16, 3, 3)   # KCRS
    p = hk.pack_conv_weight(w, layout="NCHW")
    # row (r*S + s)*C + c, column k holds w[k, c, r, s]
    assert p.shape == (144, 8) and p[(1 * 3 + 2) * 16 + 5, 7] == w[7, 5, 1, 2]
    # the same filters as KRSC pack to the same matrix
    assert torch.equal(hk.pack_conv_weight(w.permute(0, 2, 3, 1)), p)


def test_conv_explain_names_the_variant_and_tile_by_architecture_and_shape():
    # ResNet-50's 3x3 layer at 56x56, batch 32: M = 32*56*56 output pixels, K = 64 channels -> 64-wide tiles
    text = hk.explain("conv2d", (32, 56, 56, 64), (64, 3, 3, 64), padding=1)
    assert "variant='wgmma'" in text and "block_n=64" in text and f"{-(-32 * 56 * 56 // 128)} of them" in text
    # 256 channels at 14x14: 49 x 2 = 98 tiles of 128 x 128 cover more than half of the 132 SMs: 128 wide
    assert "block_n=128 (128 x 128 tiles, 98 of them" in hk.explain("conv2d", (32, 14, 14, 256), (256, 3, 3, 256),
                                                                     padding=1)
    # a 1x1 stride-1 layer with 1 MiB of weights is a plain GEMM: (32*14*14) x 1024 @ 1024 x 512
    assert "variant='gemm'" in hk.explain("conv2d", (32, 14, 14, 1024), (512, 1, 1, 1024))
    # ... but not with padding, a stride, few output channels or weights, or too few 128 x 256 tiles (13 x 2 at 7x7)
    assert "variant='wgmma'" in hk.explain("conv2d", (32, 14, 14, 1024), (512, 1, 1, 1024), stride=2)
    assert "variant='wgmma'" in hk.explain("conv2d", (32, 14, 14, 1024), (128, 1, 1, 1024))
    assert "variant='wgmma'" in hk.explain("conv2d", (32, 14, 14, 1024), (256, 1, 1, 1024))
    assert "variant='wgmma'" in hk.explain("conv2d", (32, 7, 7, 2048), (512, 1, 1, 2048))
    # ... at 7x7 13 x 4 = 52 tiles of 128 x 128 would leave SMs idle: the K loop (72 k-steps) split 2 ways, 104 parts
    text = hk.explain("conv2d", (32, 7, 7, 512), (512, 3, 3, 512), padding=1)
    assert "block_n=128 (128 x 128 tiles, 52 of them" in text and "split_k=2 (the K loop of 72 k-steps" in text
    # the stem's 3 channels (padded to 4) are gathered in 8-byte chunks, which the split kernels do not take
    assert "split_k" not in hk.explain("conv2d", (1, 64, 64, 3), (64, 7, 7, 3), stride=2, padding=3).split("Why")[0]
    # the same layer in torch's convention gives the same pick; the RGB stem's 3 channels are padded to 8
    nchw = hk.explain("conv2d", (32, 3, 224, 224), (64, 3, 7, 7), stride=2, padding=3, layout="NCHW")
    nhwc = hk.explain("conv2d", (32, 224, 224, 3), (64, 7, 7, 3), stride=2, padding=3)
    assert "7x7 stride 2 padding 3" in nchw and "zero-padded to 4" in nchw
    assert nchw.split(" on sm_90")[1] == nhwc.split(" on sm_90")[1]
    assert "variant='implicit_gemm'" in hk.explain("conv2d", (1, 8, 8, 16), (16, 3, 3, 16), arch="sm_80")
    with pytest.raises(hk.KernelArgumentError, match="no kernel for float16 on sm_80 with 12 output channels"):
        hk.explain("conv2d", (1, 8, 8, 16), (12, 3, 3, 16), arch="sm_80")
    with pytest.raises(hk.KernelArgumentError, match="give the shapes of x and w"):
        hk.explain("conv2d", (1, 8, 8, 16))
    with pytest.raises(hk.KernelArgumentError, match="does not fit"):
        hk.explain("conv2d", (1, 2, 2, 16), (16, 3, 3, 16))


def test_conv_wgmma_compiles_for_sm90a_into_wgmma_code_and_to_stubs_elsewhere():
    pytest.importorskip("cuda.core")
    from hookmagic.kernels import conv
    from tests.kernel_compiles import assert_warpgroup_kernels_fit, compiled_with_ptx, family_ptx
    c, ptx = compiled_with_ptx("conv_wgmma", "sm_90a")
    assert set(c.kernels) == {f"conv_wgmma_{t}_n{bn}{a}" for t in ("f16", "bf16") for bn in conv.WG_SMEM
                              for a in ("", "_c4", "_tma", "_sk", "_tma_sk")}
    assert_warpgroup_kernels_fit(c)
    for needle in ("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
                   "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                   "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes",
                   "cp.async.mbarrier.arrive.noinc.shared::cta.b64", "fence.proxy.async.shared::cta",
                   "mbarrier.try_wait.parity", "bar.red.or.pred", "atom.global.add.u32", "ld.global.cg.v4.f32"):
        assert needle in ptx, needle
    assert re.search(r"cp\.async\.ca\.shared\.global \[%r\d+\], \[%rd\d+\], 8,", ptx)   # the _c4 kernels' 8-byte chunks
    assert "wgmma.mma_async" not in family_ptx("conv_wgmma", "sm_90")
    # the stages and staging tiles fit the H100/H200's 227 KiB a block
    assert max(conv.WG_SMEM.values()) <= 227 * 1024


def test_conv_im2col_tensor_map_ranges_are_checked_before_the_driver():
    from hookmagic.kernels import dispatch, tma
    # cuTensorMapEncodeIm2col's rank-4 corners are signed 8-bit and element strides 1-8 (CUDA driver API)
    with pytest.raises(hk.KernelArgumentError, match=r"padding and filter offsets in \[-128, 127\]"):
        tma.encode_im2col_nhwc(1 << 20, "float16", (1, 300, 300, 64), 130, 3, 1, (64, 128))
    with pytest.raises(hk.KernelArgumentError, match="strides 1-8"):
        tma.encode_im2col_nhwc(1 << 20, "float16", (1, 30, 30, 64), 1, 3, 9, (64, 128))
    with pytest.raises(hk.KernelArgumentError, match="16-byte aligned"):
        tma.encode_im2col_nhwc((1 << 20) + 8, "float16", (1, 30, 30, 64), 1, 3, 1, (64, 128))
    # the convolution takes the im2col path only within those ranges, for 64-channel k-steps and square filters
    assert dispatch.im2col_ok(64, 3, 3, 2, 1) and dispatch.im2col_ok(2048, 1, 1, 1, 0)
    assert not dispatch.im2col_ok(96, 3, 3, 1, 1) and not dispatch.im2col_ok(64, 3, 5, 1, 1)
    assert not dispatch.im2col_ok(64, 3, 3, 9, 1) and not dispatch.im2col_ok(64, 3, 3, 1, 128)


def test_conv_split_k_rule():
    from hookmagic.kernels import dispatch
    # ResNet-50's 3x3 layers with 7x7 outputs at batch 32 on 132 SMs: 13 x 4 = 52 tiles of 128 x 128 and 72
    # k-steps -> 2 parts (104 blocks); the 1x1 2048->512 layer's 32 k-steps stay whole (2 x 16 ran level)
    assert dispatch.conv_split_k(512, 512, 32 * 7 * 7, 9 * 512, 132) == 2
    assert dispatch.conv_split_k(2048, 512, 32 * 7 * 7, 2048, 132) == 1
    # batch 8: 4 x 4 = 16 tiles, still at most 2 parts (the most measured faster)
    assert dispatch.conv_split_k(512, 512, 8 * 7 * 7, 9 * 512, 132) == 2
    # no split: tiles covering more than half the SMs (49 x 2 = 98 at 14x14), <= 64 output channels, channels
    # not a multiple of 8 (the stem), or a K loop under 2 x 24 k-steps
    assert dispatch.conv_split_k(256, 256, 32 * 14 * 14, 9 * 256, 132) == 1
    assert dispatch.conv_split_k(64, 64, 128, 9 * 64, 132) == 1
    assert dispatch.conv_split_k(3, 128, 128, 147, 132) == 1
    assert dispatch.conv_split_k(64, 512, 32 * 7 * 7, 64 * 47, 132) == 1
    assert dispatch.conv_split_k(64, 512, 32 * 7 * 7, 64 * 48, 132) == 2
    pick = dispatch.choose_conv("sm_90", "float16", (3, 3), 1, 1, 512, 512, 32 * 7 * 7)
    assert (pick.variant, pick.block_n, pick.split_k) == ("wgmma", 128, 2)
    assert dispatch.choose_conv("sm_90", "float16", (3, 3), 1, 1, 256, 256, 32 * 14 * 14).split_k == 1
