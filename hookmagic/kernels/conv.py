"""2-D convolution: implicit GEMM on Tensor Cores, and depthwise 3x3.

One layout convention per call, chosen by ``layout=``: ``"NHWC"`` (the default, what the
kernels read: activations ``(N, H, W, C)``, weights ``(K, R, S, C)``, result ``(N, OH, OW, K)``)
or ``"NCHW"`` (torch's: activations ``(N, C, H, W)``, weights ``(K, C, R, S)``, result
``(N, K, OH, OW)``; the activations are read through a channels-last copy unless they already are
``torch.channels_last``, and the result is a channels-last tensor of NCHW shape)::

    y = kernels.conv2d(x_nhwc, w_krsc, bias, stride=2, padding=1)
    y = kernels.conv2d(x_nchw, w_kcrs, bias, stride=2, padding=1, layout="NCHW")   # F.conv2d's layout
    wp = kernels.pack_conv_weight(w_krsc); y = kernels.conv2d(x_nhwc, wp, ..., kernel_size=3)   # pack once
    z = kernels.depthwise_conv2d(x_nhwc, w_dw, stride=1, padding=1)   # w_dw: (C, 1, 3, 3)

FP16/BF16 with FP32 accumulation. ``conv2d``'s variants (``variant=``; the default
``"auto"`` runs what :func:`hookmagic.kernels.dispatch.choose_conv` picks, and
``kernels.explain("conv2d", x.shape, w.shape, ...)`` says what and why):

- ``"wgmma"`` (sm_90 only, ``kernels/conv_wgmma.cu``): implicit GEMM on Hopper's wgmma; a
  producer warpgroup loads the KRSC weights by TMA as they are and the activations by TMA in
  im2col mode (``cuTensorMapEncodeIm2col``: input channels a multiple of 64, square filters), or
  else gathers them itself (cp.async into the 128-byte swizzled layout); two consumer warpgroups
  multiply; 128 x ``block_n`` tiles (64 or 128 output channels), persistent blocks; with
  ``split_k`` > 1 each tile's K loop (R*S*C) is split into that many parts on different blocks,
  which add FP32 partials in a workspace (the last part runs the epilogue).
  ``"wgmma_gather"`` always gathers.
- ``"implicit_gemm"`` (sm_80+, ``kernels/conv.cu``): the same GEMM with mma.sync, 128 x 128 x 32
  tiles, 3 cp.async stages.
- ``"gemm"`` (sm_90; 1x1 filters with stride 1 and no padding): NHWC activations are then an
  (N*H*W) x C matrix and KRSC weights a K x C one (K-major), so the convolution is the wgmma GEMM
  (:mod:`hookmagic.kernels.gemm_wgmma`, "tiles" schedule).

Input channels that are not a multiple of 4 (wgmma; 8 for implicit_gemm) are zero-padded to one
(a copy of x and w: the 3 of an RGB stem become 4); the wgmma variant takes any number of output
channels.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from hookmagic.kernels import constants, dispatch, registry, runtime, tma
from hookmagic.kernels.errors import KernelArgumentError
from hookmagic.kernels.registry import ITEMSIZE, KernelSpec, register

_DTYPES = ("float16", "bfloat16")
_SUFFIX = {"float16": "f16", "bfloat16": "bf16"}
_ACT = constants.ACTIVATIONS
_SMEM = constants.TC["TC_STAGES"] * constants.TC_STAGE_BYTES   # the A and B tile stages, as gemm_mma
#: conv2d's layouts: activations and the weights that go with them
LAYOUTS = {"NHWC": "KRSC", "NCHW": "KCRS"}

register(KernelSpec("conv2d", "implicit_gemm", "conv", {d: f"conv_igemm_{s}" for d, s in _SUFFIX.items()},
                    (256, 1, 1), (128, 128), smem=_SMEM, min_arch=80,
                    description="implicit GEMM (im2col on the fly by cp.async), mma.sync m16n8k16, 128x128x32 "
                                "tiles, 3 stages; + bias, activation, residual"))
#: the wgmma kernels' tiles (constants.CV, compiled into kernels/conv_wgmma.cu): block_n -> stages
_CV = constants.CV
WG_BM, WG_BK, WG_THREADS = _CV["CV_BM"], _CV["CV_BK"], _CV["CV_THREADS"]
WG_STAGES = {128: _CV["CV_STAGES_N128"], 64: _CV["CV_STAGES_N64"]}
#: dynamic shared memory by block_n: 1 KiB alignment slack, the A (128 x 64) and B (block_n x 64)
#: stages, two 64 x block_n staging tiles, 2 mbarriers a stage
WG_SMEM = {bn: 1024 + st * (WG_BM + bn) * WG_BK * 2 + 2 * 64 * bn * 2 + 2 * st * 8 for bn, st in WG_STAGES.items()}
#: conv2d's variants (``variant=``)
VARIANTS = ("wgmma", "wgmma_gather", "implicit_gemm", "gemm")
#: the most parts conv2d's ``split_k`` takes
SPLIT_K_MAX = 8
register(KernelSpec("conv2d", "wgmma", "conv_wgmma", {d: f"conv_wgmma_{s}_n128" for d, s in _SUFFIX.items()},
                    (WG_THREADS, 1, 1), (WG_BM, 128), smem=WG_SMEM[128], arch_specific=True, min_arch=90,
                    description="Hopper (sm_90a only) implicit GEMM: producer warpgroup gathers the activations "
                                "(cp.async into the 128B-swizzled layout) and TMA-loads KRSC weights, 2 consumer "
                                "warpgroups issue wgmma m64n128k16 (conv_wgmma_<dtype>_n64: m64n64k16), persistent, "
                                "5/7-stage mbarrier ring; + bias, activation, residual"))
register(KernelSpec("depthwise_conv2d", "direct3x3", "conv", {d: f"depthwise3x3_{s}" for d, s in _SUFFIX.items()},
                    (256, 1, 1), (1, 1), min_arch=70,
                    description="direct depthwise 3x3, one thread per output element, channels fastest"))


def _layout(layout: Any, op: str) -> str:
    lay = str(layout).upper()
    if lay not in LAYOUTS:
        raise KernelArgumentError(f"{op}: layout must be 'NHWC' (weights KRSC) or 'NCHW' (weights KCRS), got {layout!r}")
    return lay


def pack_conv_weight(w: Any, layout: str = "NHWC") -> Any:
    """Weights as the ``(R*S*C, K)`` matrix :func:`conv2d` multiplies by (one copy; pack once and
    reuse): ``(K, R, S, C)`` for ``layout="NHWC"``, ``(K, C, R, S)`` (``F.conv2d``'s) for ``"NCHW"``."""
    lay = _layout(layout, "pack_conv_weight")
    wi = runtime.inspect_array(w, "w")
    if len(wi.shape) != 4:
        raise KernelArgumentError(f"pack_conv_weight: w must be ({', '.join(LAYOUTS[lay])}) for layout {lay}, "
                                  f"got {wi.where()}")
    order = (1, 2, 3, 0) if lay == "NHWC" else (2, 3, 1, 0)   # -> (R, S, C, K)
    k = wi.shape[0]
    if wi.kind == "torch":
        return w.permute(*order).reshape(-1, k).contiguous()
    import cupy
    return cupy.ascontiguousarray(cupy.transpose(w, order).reshape(-1, k))


def _x_nhwc(x: Any, op: str) -> runtime.ArrayInfo:
    xi = runtime.inspect_array(x, "x")
    if xi.dtype not in _DTYPES:
        raise KernelArgumentError(f"{op}: x must be float16 or bfloat16, got {xi.where()}")
    if len(xi.shape) != 4:
        raise KernelArgumentError(f"{op}: x must be NHWC (N, H, W, C), got {xi.where()}")
    return xi


def _nchw_to_nhwc(x: Any, op: str) -> Any:
    """An NCHW array as its NHWC view (no copy for a channels-last torch tensor; the kernels copy
    other strides to row-major)."""
    xi = runtime.inspect_array(x, "x")
    if len(xi.shape) != 4:
        raise KernelArgumentError(f"{op}: with layout='NCHW' x must be (N, C, H, W), got {xi.where()}")
    return x.permute(0, 2, 3, 1) if xi.kind == "torch" else x.transpose(0, 2, 3, 1)


def _int2(v: Any, name: str, op: str, allowed: tuple[int, ...] | None = None) -> int:
    if isinstance(v, (tuple, list)):
        if len(v) != 2 or v[0] != v[1]:
            raise KernelArgumentError(f"{op}: {name} must be one number (the same for height and width), got {v!r}")
        v = v[0]
    try:
        iv = int(v)
    except (TypeError, ValueError):
        raise KernelArgumentError(f"{op}: {name} must be an int, got {v!r}") from None
    if iv < 0 or (allowed is not None and iv not in allowed):
        raise KernelArgumentError(f"{op}: {name} must be {' or '.join(map(str, allowed)) if allowed else '>= 0'}, got {v!r}")
    return iv



def _geometry(op: str, xi: Any, wi: Any, filt: tuple[int, int], stride: Any, padding: Any,
              activation: str | None) -> tuple[int, int, int, int]:
    """The checks both convolutions share: activation, stride, padding, the filter fitting the
    input, and x and w on one device. Returns ``stride, padding, OH, OW``."""
    if activation not in _ACT:
        raise KernelArgumentError(f"{op}: activation must be one of {[a for a in _ACT if a]}, got {activation!r}")
    st = _int2(stride, "stride", op)
    if st < 1:
        raise KernelArgumentError(f"{op}: stride must be >= 1, got {stride!r}")
    pad = _int2(padding, "padding", op)
    (r, s), (h, wd) = filt, xi.shape[1:3]
    oh, ow = (h + 2 * pad - r) // st + 1, (wd + 2 * pad - s) // st + 1
    if oh < 1 or ow < 1:
        raise KernelArgumentError(f"{op}: the {r}x{s} filter does not fit x {xi.where()} with padding {pad}")
    for i in (xi, wi):
        if i.device < 0 or i.kind != xi.kind or i.device != xi.device:
            raise KernelArgumentError(f"{op}: x and w must be the same kind of array on one CUDA device; "
                                      f"x is {xi.where()}, w is {wi.where()}")
    return st, pad, oh, ow

def _param(p: Any, name: str, shape: tuple[int, ...], xi: runtime.ArrayInfo, op: str) -> runtime.ArrayInfo | None:
    if p is None:
        return None
    pi = runtime.inspect_array(p, name)
    if pi.kind != xi.kind or pi.dtype != xi.dtype or tuple(pi.shape) != shape or pi.device != xi.device:
        raise KernelArgumentError(f"{op}: {name} must be a {xi.kind} {xi.dtype}{list(shape)} on the device of x; "
                                  f"{name} is {pi.where()}, x is {xi.where()}")
    return runtime.contiguous(pi)


def _zeros(info: runtime.ArrayInfo, shape: tuple[int, ...]) -> Any:
    if info.kind == "torch":
        return info.obj.new_zeros(shape)
    import cupy
    with cupy.cuda.Device(info.device):
        return cupy.zeros(shape, dtype=info.obj.dtype)


def _pad_channels(xi: runtime.ArrayInfo, wi: runtime.ArrayInfo, mult: int) -> tuple[runtime.ArrayInfo, runtime.ArrayInfo]:
    """x (N, H, W, C) and KRSC w zero-padded to a multiple of ``mult`` channels (the kernels gather
    whole 8- or 16-byte chunks); the padded channels add zeros to every sum."""
    extra = -xi.shape[3] % mult
    if xi.kind == "torch":
        pad = __import__("torch").nn.functional.pad
        return runtime.inspect_array(pad(xi.obj, (0, extra)), "x"), runtime.inspect_array(pad(wi.obj, (0, extra)), "w")
    import cupy
    widths = ((0, 0), (0, 0), (0, 0), (0, extra))
    return runtime.inspect_array(cupy.pad(xi.obj, widths), "x"), runtime.inspect_array(cupy.pad(wi.obj, widths), "w")


def _krsc(wi: runtime.ArrayInfo, c: int, kernel_size: Any, op: str) -> runtime.ArrayInfo:
    """The weights as a KRSC (K, R, S, C) array (a view of a packed (R*S*C, K) matrix)."""
    if len(wi.shape) == 4:
        if wi.shape[3] != c:
            raise KernelArgumentError(f"{op}: w must be KRSC (K, R, S, {c}) for NHWC x with {c} channels "
                                      f"(layout='NCHW' takes KCRS); w is {wi.where()}")
        return wi
    if len(wi.shape) == 2:
        try:
            r = int(kernel_size)
        except (TypeError, ValueError):
            r = 0
        if r < 1:
            raise KernelArgumentError(f"{op}: a packed (R*S*C, K) w needs kernel_size (R = S >= 1), got {kernel_size!r}")
        if wi.shape[0] != r * r * c:
            raise KernelArgumentError(f"{op}: packed w must have {r * r * c} rows (R*S*C) for x with {c} channels, "
                                      f"got {wi.where()}")
        k = wi.shape[1]
        v = wi.obj.reshape(r, r, c, k)
        return runtime.inspect_array(v.permute(3, 0, 1, 2) if wi.kind == "torch" else v.transpose(3, 0, 1, 2), "w")
    raise KernelArgumentError(f"{op}: w must be (K, R, S, C) or packed (R*S*C, K), got {wi.where()}")


_sm_count: dict[int, int] = {}
_auto: dict[tuple, tuple[str, int]] = {}


def _sms(ordinal: int) -> int:
    n = _sm_count.get(ordinal)
    if n is None:
        n = _sm_count[ordinal] = int(runtime.device(ordinal).properties.multiprocessor_count)
    return n


class _WgScalars(ctypes.Structure):
    """conv_wgmma's parameters after the weights' and the activations' tensor maps
    (kernels/conv_wgmma.cu), in order."""
    _fields_ = [("x", ctypes.c_void_p), ("y", ctypes.c_void_p), ("bias", ctypes.c_void_p),
                ("residual", ctypes.c_void_p)] + [(f, ctypes.c_int) for f in (
                    "h", "w", "c", "k", "s", "oh", "ow", "stride", "pad", "m", "kg", "act", "vec")]


class _WgSplitScalars(ctypes.Structure):
    """The split-K kernels' (``_sk``) parameters: conv_wgmma's, then the FP32 partials' workspace,
    the tiles' counters and the number of parts."""
    _fields_ = _WgScalars._fields_ + [("ws", ctypes.c_void_p), ("cnt", ctypes.c_void_p), ("splits", ctypes.c_int)]


_wg_kernels: dict[tuple[str, int], Any] = {}
#: the split-K kernels' scratch by (array kind, device, stream): tile counters (int32, zero between
#: launches: the last part of each tile resets its own) and the FP32 partials, grown on demand
_split_scratch: dict[tuple[str, int, int], list[Any]] = {}
#: scratch arrays outgrown: kept, since a captured CUDA graph may still launch with their addresses
#: (each replacement at least doubles, so what is kept stays below the current arrays' size)
_split_retired: list[Any] = []


def _scratch(xi: runtime.ArrayInfo, stream: int, counters: int, floats: int) -> tuple[int, int]:
    """Addresses of at least ``counters`` zeroed int32 counters and ``floats`` FP32 workspace
    elements for split-K launches on ``stream`` (kept per stream: launches on one stream run in
    order, so they share them safely)."""
    key = (xi.kind, xi.device, stream)
    have = _split_scratch.get(key)
    cnt, ws = have if have is not None else (None, None)
    if cnt is None or _numel(cnt) < counters:
        cnt = _zeros_typed(xi, max(counters, 2048, _retire(cnt)), "int32")
    if ws is None or _numel(ws) < floats:
        ws = runtime.empty_like_kind(xi, (max(floats, 1 << 20, _retire(ws)),), "float32")
    _split_scratch[key] = [cnt, ws]
    return _ptr(cnt), _ptr(ws)


def _retire(a: Any) -> int:
    """Keeps an outgrown scratch array ``a`` (None: nothing) and returns the least size of its
    replacement: twice its own."""
    if a is None:
        return 0
    _split_retired.append(a)
    return 2 * _numel(a)


def _numel(a: Any) -> int:
    return int(a.numel()) if hasattr(a, "numel") else int(a.size)


def _ptr(a: Any) -> int:
    return int(a.data_ptr()) if hasattr(a, "data_ptr") else int(a.data.ptr)


def _zeros_typed(info: runtime.ArrayInfo, n: int, dtype: str) -> Any:
    if info.kind == "torch":
        torch = __import__("torch")
        return torch.zeros(n, dtype=getattr(torch, dtype), device=info.obj.device)
    import cupy
    with cupy.cuda.Device(info.device):
        return cupy.zeros(n, dtype=dtype)


def _run_wgmma(xi, wi, yi, bi, ri, geo, act: int, block_n: int, gather: bool, split_k: int = 1) -> str:
    from hookmagic.kernels.gemm_wgmma import check_device
    (n, h, wd, c), (k, r, s), (st, pad, oh, ow) = geo
    dev = xi.device
    check_device(dev, "conv2d(variant='wgmma')")
    tma_a = not gather and dispatch.im2col_ok(c, r, s, st, pad)
    name = f"conv_wgmma_{_SUFFIX[xi.dtype]}_n{block_n}" + ("_tma" if tma_a else "" if c % 8 == 0 else "_c4")
    if split_k > 1:
        name += "_sk"
    m, kg = n * oh * ow, r * s * c
    kern = _wg_kernels.get((name, dev))
    if kern is None:
        kern = runtime.get_kernel("conv_wgmma", name, dev, arch_specific=True)
        runtime.set_dynamic_smem(kern, WG_SMEM[block_n], dev)
        _wg_kernels[(name, dev)] = kern
    row = wi.shape[1] if len(wi.shape) == 2 else kg     # padded rows: see conv2d
    wmap = tma.encode_2d(wi.ptr, xi.dtype, kg, k, row * 2, (WG_BK, block_n))
    xmap = tma.encode_im2col_nhwc(xi.ptr, xi.dtype, (n, h, wd, c), pad, r, st, (WG_BK, WG_BM)) if tma_a else wmap
    tiles = -(-m // WG_BM) * -(-k // block_n)
    args = (xi.ptr, yi.ptr, bi.ptr if bi else 0, ri.ptr if ri else 0, h, wd, c, k, s, oh, ow, st, pad, m, kg, act,
            int(k % 8 == 0))
    stream = runtime.current_stream_handle(xi)
    if split_k > 1:
        # 2 counters a tile; 128 x block_n FP32 partials a tile and part (kernels/conv_wgmma.cu)
        cnt, ws = _scratch(xi, stream, 2 * tiles, split_k * tiles * WG_BM * block_n)
        scalars = _WgSplitScalars(*args, ws, cnt, split_k)
        tiles *= split_k
    else:
        scalars = _WgScalars(*args)
    tma.launch(kern, dev, stream, (min(tiles, _sms(dev)), 1, 1), (WG_THREADS, 1, 1), WG_SMEM[block_n], (wmap, xmap),
               scalars)
    return name


def conv2d(x: Any, w: Any, bias: Any = None, stride: int = 1, padding: int = 0, *, activation: str | None = None,
           residual: Any = None, kernel_size: int | None = None, layout: str = "NHWC", variant: str = "auto",
           block_n: int | None = None, split_k: int | None = None) -> Any:
    """``F.conv2d`` of FP16/BF16 ``x`` by implicit GEMM on Tensor Cores:
    ``activation(conv(x, w) + bias) + residual``.

    ``layout="NHWC"``: ``x`` ``(N, H, W, C)``, ``w`` ``(K, R, S, C)``, result ``(N, OH, OW, K)``;
    ``layout="NCHW"``: ``x`` ``(N, C, H, W)``, ``w`` ``(K, C, R, S)``, result ``(N, K, OH, OW)``
    (channels-last strides). ``w`` may instead be packed by :func:`pack_conv_weight` ``(R*S*C, K)``
    (then give ``kernel_size`` R = S). Any filter size, ``stride`` >= 1, any ``padding`` (the same
    for height and width); ``bias`` ``(K,)``; ``residual`` like the output; ``activation`` None,
    'relu', 'gelu' or 'gelu_tanh'. ``variant``: ``"auto"`` (the dispatch table's pick for the
    device, dtype and filter), ``"wgmma"`` (sm_90; activations by TMA im2col where
    :func:`hookmagic.kernels.dispatch.im2col_ok`), ``"wgmma_gather"`` (sm_90, activations gathered by
    the producer warpgroup), ``"implicit_gemm"`` (sm_80+, output channels a multiple of 8) or
    ``"gemm"`` (sm_90, 1x1, stride 1, padding 0: the wgmma GEMM); ``block_n`` (64 or 128) overrides the wgmma variants' tile
    width; ``split_k`` (1 to :data:`SPLIT_K_MAX`, at most one part a 64-element k-step) splits the wgmma
    variants' K loop (R*S*C) into that many parts, which add FP32 partials in a workspace kept per stream
    (``split_k`` x output pixels x output channels x 4 bytes; input channels a multiple of 8). ``variant="auto"``
    picks both unless given (:func:`hookmagic.kernels.dispatch.conv_split_k`).
    """
    op = "conv2d"
    lay = _layout(layout, op)
    if variant != "auto" and variant not in VARIANTS:
        raise KernelArgumentError(f"{op}: unknown variant {variant!r}; one of auto, {', '.join(VARIANTS)}")
    if block_n is not None and block_n not in WG_SMEM:
        raise KernelArgumentError(f"{op}: block_n must be one of {sorted(WG_SMEM)} (the wgmma tile widths), got {block_n!r}")
    if split_k is not None and (isinstance(split_k, bool) or not isinstance(split_k, int)
                                or not 1 <= split_k <= SPLIT_K_MAX):
        raise KernelArgumentError(f"{op}: split_k must be an int from 1 to {SPLIT_K_MAX}, got {split_k!r}")
    if lay == "NCHW":
        x = _nchw_to_nhwc(x, op)
        if residual is not None:
            residual = _nchw_to_nhwc(residual, op)
        wi = runtime.inspect_array(w, "w")
        if len(wi.shape) == 4:
            c = runtime.inspect_array(x, "x").shape[3]
            if wi.shape[1] != c:
                raise KernelArgumentError(f"{op}: w must be KCRS (K, {c}, R, S) for NCHW x with {c} channels "
                                          f"(layout='NHWC' takes KRSC); w is {wi.where()}")
            w = w.permute(0, 2, 3, 1) if wi.kind == "torch" else w.transpose(0, 2, 3, 1)   # a KRSC view
        y = conv2d(x, w, bias, stride, padding, activation=activation, residual=residual,
                   kernel_size=kernel_size, layout="NHWC", variant=variant, block_n=block_n, split_k=split_k)
        return y.permute(0, 3, 1, 2) if runtime.inspect_array(y, "y").kind == "torch" else y.transpose(0, 3, 1, 2)
    xi = _x_nhwc(x, op)
    n, h, wd, c = xi.shape
    wi = _krsc(runtime.inspect_array(w, "w"), c, kernel_size, op)
    k, r, s, _ = wi.shape
    if wi.dtype != xi.dtype:
        raise KernelArgumentError(f"{op}: w must have x's dtype; w is {wi.where()}, x is {xi.where()}")
    st, pad, oh, ow = _geometry(op, xi, wi, (r, s), stride, padding, activation)
    bi = _param(bias, "bias", (k,), xi, op)
    ri = _param(residual, "residual", (n, oh, ow, k), xi, op)
    m = n * oh * ow
    if n * h * wd >= 2 ** 31 or m >= 2 ** 31:
        raise KernelArgumentError(f"{op}: at most 2**31 - 1 input and output pixels per call, got x {xi.where()}")
    if variant == "auto":
        key = (xi.device, xi.dtype, r, s, st, pad, c, k, m)
        pick = _auto.get(key)
        if pick is None:
            rule = dispatch.choose_conv(runtime.device_arch(xi.device), xi.dtype, (r, s), st, pad, c, k, m,
                                        _sms(xi.device))
            pick = _auto[key] = (rule.variant, rule.block_n, rule.split_k)
        variant, auto_bn, auto_split = pick
        if block_n is None or block_n == auto_bn:   # the split was picked for the auto tile width
            split_k = split_k or auto_split
        block_n = block_n or auto_bn
    if (split_k or 1) > 1 and variant not in ("wgmma", "wgmma_gather"):
        raise KernelArgumentError(f"{op}: split_k is for the wgmma variants, got variant={variant!r}")
    if variant == "gemm":
        if (r, s, st, pad) != (1, 1, 1, 0):
            raise KernelArgumentError(f"{op}: variant='gemm' is for 1x1 filters with stride 1 and padding 0, "
                                      f"got {r}x{s}, stride {st}, padding {pad}")
        from hookmagic.kernels.gemm_wgmma import check_device, gemm_wgmma
        check_device(xi.device, "conv2d(variant='gemm')")
        a = runtime.inspect_array(runtime.contiguous(xi).obj.reshape(m, c), "x")
        wk = runtime.contiguous(wi).obj.reshape(k, c)           # K x C row-major: the GEMM's K-major B
        bt = runtime.inspect_array(wk.t() if wi.kind == "torch" else wk.T, "w")
        yk = gemm_wgmma(a, bt, bi, ri, _ACT[activation], "tiles")
        return yk.reshape(n, oh, ow, k)
    if variant == "implicit_gemm" and k % 8:
        raise KernelArgumentError(f"{op}: variant='implicit_gemm' needs output channels that are a multiple of 8 "
                                  f"(16-byte chunks); w is {wi.where()} (variant='wgmma' takes any)")
    if (split_k or 1) > 1 and c % 8:
        raise KernelArgumentError(f"{op}: split_k needs input channels that are a multiple of 8 (the split kernels "
                                  f"read 16-byte chunks), got x {xi.where()}")
    if c % (8 if variant == "implicit_gemm" else 4):   # the wgmma kernels gather 8-byte chunks where C % 8 != 0
        xi, wi = _pad_channels(xi, wi, 8 if variant == "implicit_gemm" else 4)
        c = xi.shape[3]
    xi = runtime.contiguous(xi)
    if xi.ptr % 16:
        xi = runtime.inspect_array(xi.obj.clone() if xi.kind == "torch" else xi.obj.copy(), "x")
    y = runtime.empty_like_kind(xi, (n, oh, ow, k), xi.dtype)
    if m == 0:
        return y
    yi = runtime.inspect_array(y, "y")
    kg = r * s * c
    item = ITEMSIZE[xi.dtype]
    nbytes = (n * h * wd * c + kg * k + m * k * (2 if ri else 1)) * item
    if variant in ("wgmma", "wgmma_gather"):
        wk = runtime.contiguous(wi)   # KRSC is the GEMM's K-major B: (K, R*S*C) rows, read as it is
        if kg % 8 or wk.ptr % 16:     # TMA reads rows 16-byte aligned: pad them to a multiple of 8 elements
            rows = _zeros(wk, (k, -(-kg // 8) * 8))
            rows[:, :kg] = wk.obj.reshape(k, kg)
            wk = runtime.inspect_array(rows, "w")
        bn = block_n or dispatch.conv_block_n(k, m, _sms(xi.device))
        sk = min(split_k or 1, -(-kg // WG_BK))          # at most one part a k-step
        name = _run_wgmma(xi, wk, yi, bi, ri, ((n, h, wd, c), (k, r, s), (st, pad, oh, ow)), _ACT[activation], bn,
                          variant == "wgmma_gather", sk)
        registry.record(name, 2 * m * k * kg, nbytes, n=n, h=h, w=wd, c=c, k=k, r=r, s=s, stride=st, padding=pad,
                        dtype=xi.dtype, split_k=sk)
        return y
    wp = pack_conv_weight(wi.obj, "NHWC")
    wpi = runtime.inspect_array(wp, "w")
    if wpi.ptr % 16:
        wpi = runtime.inspect_array(wp.clone() if wpi.kind == "torch" else wp.copy(), "w")
    if -(-m // 128) > 65535:
        raise KernelArgumentError(f"{op}: variant='implicit_gemm' takes at most 65535 * 128 output pixels per call, "
                                  f"got {m}")
    name = f"conv_igemm_{_SUFFIX[xi.dtype]}"
    kern = runtime.get_kernel("conv", name, xi.device)
    runtime.set_dynamic_smem(kern, _SMEM, xi.device)
    args = (xi.ptr, wpi.ptr, yi.ptr, bi.ptr if bi else 0, ri.ptr if ri else 0, np.int32(h), np.int32(wd), np.int32(c),
            np.int32(k), np.int32(s), np.int32(oh), np.int32(ow), np.int32(st), np.int32(pad), np.int32(m),
            np.int32(kg), np.int32(_ACT[activation]))
    runtime.launch(kern, xi, (-(-k // 128), -(-m // 128), 1), (256, 1, 1), args, smem=_SMEM)
    registry.record(name, 2 * m * k * kg, nbytes, n=n, h=h, w=wd, c=c, k=k, r=r, s=s, stride=st, padding=pad,
                    dtype=xi.dtype)
    return y


def depthwise_conv2d(x: Any, w: Any, bias: Any = None, stride: int = 1, padding: int = 1, *,
                     activation: str | None = None) -> Any:
    """Depthwise 3x3 convolution (``F.conv2d(..., groups=C)``) of NHWC FP16/BF16 ``x`` ``(N, H, W, C)``
    with ``w`` ``(C, 1, 3, 3)``; ``bias`` ``(C,)``; returns ``(N, OH, OW, C)``."""
    op = "depthwise_conv2d"
    xi = _x_nhwc(x, op)
    n, h, wd, c = xi.shape
    wi = runtime.inspect_array(w, "w")
    if tuple(wi.shape) != (c, 1, 3, 3) or wi.dtype != xi.dtype:
        raise KernelArgumentError(f"{op}: w must be {xi.dtype}[{c}, 1, 3, 3] (one 3x3 filter per channel of x); "
                                  f"w is {wi.where()}, x is {xi.where()}")
    st, pad, oh, ow = _geometry(op, xi, wi, (3, 3), stride, padding, activation)
    bi = _param(bias, "bias", (c,), xi, op)
    xi = runtime.contiguous(xi)
    if wi.kind == "torch":
        wp = w.reshape(c, 9).t().contiguous()
    else:
        import cupy

        wp = cupy.ascontiguousarray(w.reshape(c, 9).T)
    wpi = runtime.inspect_array(wp, "w")
    y = runtime.empty_like_kind(xi, (n, oh, ow, c), xi.dtype)
    total = n * oh * ow * c
    if total == 0:
        return y
    yi = runtime.inspect_array(y, "y")
    name = f"depthwise3x3_{_SUFFIX[xi.dtype]}"
    kern = runtime.get_kernel("conv", name, xi.device)
    grid = min(-(-total // 256), 1 << 20)
    runtime.launch(kern, xi, (grid, 1, 1), (256, 1, 1),
                   (xi.ptr, wpi.ptr, bi.ptr if bi else 0, yi.ptr, np.int64(total), np.int32(h), np.int32(wd), np.int32(c),
                    np.int32(oh), np.int32(ow), np.int32(st), np.int32(pad), np.int32(_ACT[activation])))
    item = ITEMSIZE[xi.dtype]
    registry.record(name, 2 * 9 * total, (n * h * wd * c + 9 * c + total) * item, n=n, h=h, w=wd, c=c, stride=st,
                    padding=pad, dtype=xi.dtype)
    return y


__all__ = ["conv2d", "depthwise_conv2d", "pack_conv_weight", "LAYOUTS", "VARIANTS"]
