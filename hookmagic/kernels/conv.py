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

FP16/BF16 with FP32 accumulation.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from hookmagic.kernels import constants, registry, runtime
from hookmagic.kernels.errors import KernelArgumentError
from hookmagic.kernels.registry import ITEMSIZE, KernelSpec, register

_DTYPES = ("float16", "bfloat16")
_SUFFIX = {"float16": "f16", "bfloat16": "bf16"}
#: activation codes of kernels/common.cuh (the GEMMs' ACTIVATIONS)
_ACT = {None: 0, "none": 0, "relu": 1, "gelu_tanh": 2, "gelu": 3}
_SMEM = constants.TC["TC_STAGES"] * constants.TC_STAGE_BYTES   # the A and B tile stages, as gemm_mma
#: conv2d's layouts: activations and the weights that go with them
LAYOUTS = {"NHWC": "KRSC", "NCHW": "KCRS"}

register(KernelSpec("conv2d", "implicit_gemm", "conv", {d: f"conv_igemm_{s}" for d, s in _SUFFIX.items()},
                    (256, 1, 1), (128, 128), smem=_SMEM, min_arch=80,
                    description="implicit GEMM (im2col on the fly by cp.async), mma.sync m16n8k16, 128x128x32 "
                                "tiles, 3 stages; + bias, activation, residual"))
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
    st = _int2(stride, "stride", op, (1, 2))
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


def conv2d(x: Any, w: Any, bias: Any = None, stride: int = 1, padding: int = 0, *, activation: str | None = None,
           residual: Any = None, kernel_size: int | None = None, layout: str = "NHWC") -> Any:
    """``F.conv2d`` of FP16/BF16 ``x`` by implicit GEMM on Tensor Cores:
    ``activation(conv(x, w) + bias) + residual``.

    ``layout="NHWC"``: ``x`` ``(N, H, W, C)``, ``w`` ``(K, R, S, C)``, result ``(N, OH, OW, K)``;
    ``layout="NCHW"``: ``x`` ``(N, C, H, W)``, ``w`` ``(K, C, R, S)``, result ``(N, K, OH, OW)``
    (channels-last strides). ``w`` may instead be packed by :func:`pack_conv_weight` ``(R*S*C, K)``
    (then give ``kernel_size`` R = S). Filters 1x1 or 3x3, ``stride`` 1 or 2, any ``padding``,
    ``C`` and ``K`` multiples of 8; ``bias`` ``(K,)``; ``residual`` like the output;
    ``activation`` None, 'relu', 'gelu' or 'gelu_tanh'.
    """
    op = "conv2d"
    lay = _layout(layout, op)
    if lay == "NCHW":
        x = _nchw_to_nhwc(x, op)
        if residual is not None:
            residual = _nchw_to_nhwc(residual, op)
        wi = runtime.inspect_array(w, "w")
        if len(wi.shape) == 4:
            c = runtime.inspect_array(x, "x").shape[3]
            _, wc, r, s = wi.shape
            if wc != c or r != s or r not in (1, 3):
                raise KernelArgumentError(f"{op}: w must be KCRS (K, {c}, R, R) with R 1 or 3 for NCHW x with {c} "
                                          f"channels (layout='NHWC' takes KRSC); w is {wi.where()}")
            w, kernel_size = pack_conv_weight(w, "NCHW"), r
        y = conv2d(x, w, bias, stride, padding, activation=activation, residual=residual,
                   kernel_size=kernel_size, layout="NHWC")
        return y.permute(0, 3, 1, 2) if runtime.inspect_array(y, "y").kind == "torch" else y.transpose(0, 3, 1, 2)
    xi = _x_nhwc(x, op)
    n, h, wd, c = xi.shape
    wi = runtime.inspect_array(w, "w")
    if len(wi.shape) == 4:
        k, r, s, wc = wi.shape
        if wc != c or r != s or r not in (1, 3):
            raise KernelArgumentError(f"{op}: w must be KRSC (K, R, R, {c}) with R 1 or 3 for NHWC x with {c} "
                                      f"channels (layout='NCHW' takes KCRS); w is {wi.where()}, x is {xi.where()}")
    elif len(wi.shape) == 2:
        if kernel_size not in (1, 3):
            raise KernelArgumentError(f"{op}: a packed (R*S*C, K) w needs kernel_size 1 or 3, got {kernel_size!r}")
        r = s = int(kernel_size)
        k = wi.shape[1]
        if wi.shape[0] != r * s * c:
            raise KernelArgumentError(f"{op}: packed w must have {r * s * c} rows (R*S*C) for x with {c} channels, "
                                      f"got {wi.where()}")
    else:
        raise KernelArgumentError(f"{op}: w must be (K, C, R, S) or packed (R*S*C, K), got {wi.where()}")
    if wi.dtype != xi.dtype:
        raise KernelArgumentError(f"{op}: w must have x's dtype; w is {wi.where()}, x is {xi.where()}")
    if c % 8 or k % 8:
        raise KernelArgumentError(f"{op}: input and output channels must be multiples of 8 (16-byte chunks); "
                                  f"x is {xi.where()}, w is {wi.where()}")
    st, pad, oh, ow = _geometry(op, xi, wi, (r, s), stride, padding, activation)
    bi = _param(bias, "bias", (k,), xi, op)
    ri = _param(residual, "residual", (n, oh, ow, k), xi, op)
    xi = runtime.contiguous(xi)
    if xi.ptr % 16:
        xi = runtime.inspect_array(xi.obj.clone() if xi.kind == "torch" else xi.obj.copy(), "x")
    wp = pack_conv_weight(wi.obj, "NHWC") if len(wi.shape) == 4 else runtime.contiguous(wi).obj
    wpi = runtime.inspect_array(wp, "w")
    if wpi.ptr % 16:
        wpi = runtime.inspect_array(wp.clone() if wpi.kind == "torch" else wp.copy(), "w")
    y = runtime.empty_like_kind(xi, (n, oh, ow, k), xi.dtype)
    m, kg = n * oh * ow, r * s * c
    if m == 0:
        return y
    yi = runtime.inspect_array(y, "y")
    if -(-m // 128) > 65535:
        raise KernelArgumentError(f"{op}: at most 65535 * 128 output pixels per call, got {m}")
    name = f"conv_igemm_{_SUFFIX[xi.dtype]}"
    kern = runtime.get_kernel("conv", name, xi.device)
    runtime.set_dynamic_smem(kern, _SMEM, xi.device)
    args = (xi.ptr, wpi.ptr, yi.ptr, bi.ptr if bi else 0, ri.ptr if ri else 0, np.int32(h), np.int32(wd), np.int32(c),
            np.int32(k), np.int32(s), np.int32(oh), np.int32(ow), np.int32(st), np.int32(pad), np.int32(m),
            np.int32(kg), np.int32(_ACT[activation]))
    runtime.launch(kern, xi, (-(-k // 128), -(-m // 128), 1), (256, 1, 1), args, smem=_SMEM)
    item = ITEMSIZE[xi.dtype]
    registry.record(name, 2 * m * k * kg, (n * h * wd * c + kg * k + m * k * (2 if ri else 1)) * item,
                    n=n, h=h, w=wd, c=c, k=k, r=r, stride=st, padding=pad, dtype=xi.dtype)
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


__all__ = ["conv2d", "depthwise_conv2d", "pack_conv_weight", "LAYOUTS"]
