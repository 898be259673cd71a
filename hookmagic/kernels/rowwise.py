"""Row-wise inference kernels over the last dimension: softmax, LayerNorm, RMSNorm, bias + GELU.

Each takes a torch tensor or CuPy array (float32, float16 or bfloat16) on a GPU, runs on the
caller's current stream and returns a new array of the same kind, shape and dtype. Arithmetic is
FP32 whatever the storage. Non-contiguous inputs are copied to row-major first.

Rows whose length is a multiple of 16 bytes (and 16-byte aligned arrays) take the register-resident
kernels: the row is read from DRAM once, 16 bytes per load, into registers (a warp per row up to
256 vectors, a block per row beyond), with the rest in shared memory for rows longer than registers
hold (two 512-thread blocks an SM for rows over 2,048 vectors), reduced with warp shuffles, then
normalised and written from there. Other rows take multi-pass kernels (read, reduce, read again).
On an H100 (benchmarks/results/rowfast/) the register-resident kernels reach 91–99% of a
device-to-device copy's bandwidth on 4096-wide rows. ``impl=`` selects other designs for
comparison (the benchmark times them in one process).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from hookmagic.kernels import registry, runtime
from hookmagic.kernels.build import arch_number
from hookmagic.kernels.errors import KernelArgumentError
from hookmagic.kernels.registry import ITEMSIZE, KernelSpec, register

_DTYPES = ("float32", "float16", "bfloat16")
_SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
#: arithmetic operations per element in the kernels' source (exp and rsqrt counted as one): the
#: nominal FLOPs these memory-bound kernels declare, for the roofline's x axis
_OPS_PER_ELEMENT = {"softmax": 6, "layer_norm": 9, "rms_norm": 5, "bias_gelu": 12}

for _op, _desc in [("softmax", "online softmax: max and sum in one pass, then normalise"),
                   ("layer_norm", "LayerNorm: Welford mean/variance in one pass, then normalise"),
                   ("rms_norm", "RMSNorm: sum of squares in one pass, then normalise"),
                   ("bias_gelu", "y = gelu(x + bias), elementwise (exact erf or tanh form)")]:
    register(KernelSpec(_op, "rowwise", "rowwise", {d: f"{_op}_{s}" for d, s in _SUFFIX.items()},
                        (256, 1, 1), (1, 1), min_arch=70, description=_desc))

_MAX_GRID = 1 << 20

for _op, _desc in [("softmax", "softmax with the row held in registers: read once, max and sum reduced, written"),
                   ("layer_norm", "LayerNorm with the row held in registers: exact two-pass mean/variance, one read"),
                   ("rms_norm", "RMSNorm with the row held in registers: one read, one write")]:
    for _k in (4, 8):
        register(KernelSpec(_op, f"reg{_k}", "rowwise", {d: f"{_op}_reg{_k}_{s}" for d, s in _SUFFIX.items()},
                            (1024, 1, 1), (1, 1), min_arch=70, description=_desc + f" ({_k} vectors a thread)"))
    register(KernelSpec(_op, "rs", "rowwise", {d: f"{_op}_rs_{s}" for d, s in _SUFFIX.items()},
                        (1024, 1, 1), (1, 1), min_arch=70,
                        description=_desc.replace("in registers", "in registers and shared memory")
                        + " (4 vectors a thread in registers, the rest in dynamic shared memory)"))
    register(KernelSpec(_op, "cluster", "rowwise", {d: f"{_op}_cl_{s}" for d, s in _SUFFIX.items()},
                        (1024, 1, 1), (1, 1), min_arch=90,
                        description=_desc.replace("with the row held in registers",
                                                  "with the row spread over a cluster of 8 blocks' registers")
                        + " (sm_90+: partial results through distributed shared memory)"))
register(KernelSpec("bias_gelu", "vec", "rowwise", {d: f"bias_gelu_vec_{s}" for d, s in _SUFFIX.items()},
                    (256, 1, 1), (4, 1), min_arch=70,
                    description="y = gelu(x + bias), 16-byte vectors, a column's bias loaded once for 4 rows"))

#: which kernels the wrappers pick: "auto" (register-resident rows / vectorised bias+GELU where
#: they apply; rows over 2,048 vectors in registers + shared memory with 512-thread blocks, two
#: an SM, where that fits; rows too long for that with 1024-thread blocks; the multi-pass kernels
#: beyond), "reg" (as auto but without the two-blocks-an-SM step: registers alone up to 1024 x 8
#: vectors), "k8" (block-per-row rows with 8 vectors a thread where 4
#: would do: half the threads), "cluster" (sm_90+, rows of >= 2,048 vectors: a cluster of 8 blocks
#: a row), "rs" (as auto) or "multipass" (always the multi-pass kernels). The benchmark compares
#: them in one process through each function's ``impl=`` argument.
IMPLS = ("auto", "reg", "k8", "cluster", "rs", "multipass")
#: rows per block in warp mode, and the block size of bias+GELU
_WARP_BLOCK = 256


def _check(x: Any, op: str, xi: runtime.ArrayInfo | None = None) -> runtime.ArrayInfo:
    xi = runtime.inspect_array(x, "x") if xi is None else xi
    if xi.dtype not in _DTYPES:
        raise KernelArgumentError(f"{op}: x must be float32, float16 or bfloat16, got {xi.where()}")
    if xi.device < 0:
        raise KernelArgumentError(f"{op}: x must be on a CUDA device, got {xi.where()}")
    if len(xi.shape) == 0:
        raise KernelArgumentError(f"{op}: x must have at least one dimension, got {xi.where()}")
    return runtime.contiguous(xi)


def _param(p: Any, name: str, xi: runtime.ArrayInfo, op: str) -> runtime.ArrayInfo | None:
    if p is None:
        return None
    pi = runtime.inspect_array(p, name)
    cols = xi.shape[-1]
    if pi.kind != xi.kind or pi.device != xi.device or pi.dtype != xi.dtype or tuple(pi.shape) != (cols,):
        raise KernelArgumentError(f"{op}: {name} must be a {xi.kind} {xi.dtype}[{cols}] on the device of x "
                                  f"(the last dimension of x); {name} is {pi.where()}, x is {xi.where()}")
    return runtime.contiguous(pi)


def _threads(cols: int, nv: int) -> int:
    want = -(-cols // (nv * 4))          # about 4 vectors per thread
    return int(min(1024, max(32, -(-want // 32) * 32)))


def _vec(cols: int, dtype: str, *infos: runtime.ArrayInfo | None) -> tuple[int, int]:
    nv = 16 // ITEMSIZE[dtype]
    ok = cols % nv == 0 and all(i is None or i.ptr % 16 == 0 for i in infos)
    return nv, int(ok)


_plans: dict[tuple, tuple] = {}


def _impl(impl: str, op: str) -> str:
    if impl not in IMPLS:
        raise KernelArgumentError(f"{op}: impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    return impl


def _run(op: str, xi: runtime.ArrayInfo, params: list[runtime.ArrayInfo | None], extra: tuple,
         impl: str = "auto", call_key: tuple | None = None) -> Any:
    y, yptr = runtime.new_output(xi, xi.shape, xi.dtype)
    n = math.prod(xi.shape)
    if n == 0:
        return y
    cols = xi.shape[-1]
    nv = 16 // ITEMSIZE[xi.dtype]
    ptrs = [p.ptr if p is not None else 0 for p in params]
    aligned = xi.ptr % 16 == 0 and yptr % 16 == 0 and all(q % 16 == 0 for q in ptrs)
    vec = int(cols % nv == 0 and aligned)
    key = (op, xi.shape, xi.dtype, xi.device, vec, impl, tuple([p is None for p in params]), extra)
    plan = _plans.get(key)   # the launch of this shape/dtype/alignment, worked out once
    if plan is None:
        if len(_plans) > 4096:   # many shapes: start over rather than grow without bound
            _plans.clear()
        plan = _plans[key] = _plan(op, xi, params, extra, n, cols, nv, vec, impl)
    kern, grid, block, smem, name, tail, flops, nbytes, rows = plan
    args = (xi.ptr, *ptrs, yptr, *tail)
    runtime.launch(kern, xi, grid, block, args, smem)
    work = registry.record(name, flops, nbytes, rows=rows, cols=cols, dtype=xi.dtype)
    if call_key is not None:   # the next call with this signature takes _fast
        if len(_calls) > 4096:
            _calls.clear()
        _calls[call_key + (aligned,)] = (runtime.prepare(kern, xi.device, grid, block, args, smem), work, tail)
    return y


# --- the per-call path of a torch call whose signature was seen before ----------------------------
# The operands' signature (shape, strides, dtype, device of x and of each parameter; the options;
# whether every pointer is 16-byte aligned) keys a call plan made by the first call's checks and
# _run: the prepared launch, its declared work and the scalar arguments. A later call with that
# signature allocates the output, reads the pointers and launches: no ArrayInfo, no re-planning.
_calls: dict[tuple, tuple] = {}


class _NoTensor:   # stands for torch.Tensor until a torch tensor was seen (torch is optional)
    pass


_Tensor: type = _NoTensor
_Parameter: type = _NoTensor
_empty_like: Any = None


def _sig(p: Any) -> tuple | None:
    return None if p is None else (type(p), p.shape, p.stride(), p.dtype, p.get_device())


def _call_key(op: str, x: Any, params: tuple, options: tuple) -> tuple | None:
    """The fast path's key of a call whose operands are contiguous torch tensors (else None)."""
    global _Tensor, _Parameter, _empty_like
    if type(x).__module__.split(".")[0] != "torch" or not x.is_contiguous() \
            or any(type(o) not in (int, float, str, bool) for o in options):   # e.g. a tensor eps: values may change
        return None
    import torch
    if type(x) is not torch.Tensor or any(p is not None and (type(p) not in (torch.Tensor, torch.nn.Parameter)
                                                             or not p.is_contiguous()) for p in params):
        return None
    _Tensor, _Parameter, _empty_like = torch.Tensor, torch.nn.Parameter, torch.empty_like
    return (op, x.shape, x.stride(), x.dtype, x.get_device(), options, *[_sig(p) for p in params])


def _fast(op: str, x: Any, params: tuple, options: tuple) -> Any:
    """``op``'s result through the call plan of a signature seen before, or None (the full path)."""
    y = _empty_like(x)
    xp, yp = x.data_ptr(), y.data_ptr()
    if params:
        ptrs = []
        sigs = []
        a = xp | yp
        for p in params:
            if p is None:
                ptrs.append(0)
                sigs.append(None)
            elif type(p) is _Tensor or type(p) is _Parameter:
                q = p.data_ptr()
                a |= q
                ptrs.append(q)
                sigs.append((type(p), p.shape, p.stride(), p.dtype, p.get_device()))
            else:
                return None
        key = (op, x.shape, x.stride(), x.dtype, x.get_device(), options, *sigs, not (a & 15))
    else:
        ptrs = ()
        key = (op, x.shape, x.stride(), x.dtype, x.get_device(), options, not ((xp | yp) & 15))
    c = _calls.get(key)
    if c is None:
        return None
    prep, work, tail = c
    runtime.launch_prepared(prep, "torch", key[4], (xp, *ptrs, yp, *tail))
    registry.record_work(work)
    return y


def _plan(op: str, xi: runtime.ArrayInfo, params: list, extra: tuple, n: int, cols: int, nv: int, vec: int,
          impl: str = "auto") -> tuple:
    """(kernel, grid, block, dynamic smem, name, scalar arguments after the pointers, flops, bytes,
    rows) of one launch."""
    rows = n // cols
    spec = registry.SPECS[(op, "rowwise")]
    plan = None
    if vec and impl == "cluster" and op != "bias_gelu" and cols // nv >= 2048 \
            and arch_number(runtime.device_arch(xi.device)) >= 90:
        plan = _cluster_plan(op, rows, cols // nv)
    if plan is None and vec and impl != "multipass":
        plan = _fast_plan(op, rows, cols, nv, _smem_limit(xi.device), impl)
    smem = 0
    if plan is not None:
        name, grid, threads, warp_mode, smem = plan
        name = f"{name}_{_SUFFIX[xi.dtype]}"
        kern = runtime.get_kernel(spec.family, name, xi.device)
        if smem:
            runtime.set_dynamic_smem(kern, smem, xi.device)
        if op == "bias_gelu" or "_cl_" in name:
            tail = (np.int32(rows), np.int32(cols), *extra)
        else:
            tail = (np.int32(rows), np.int32(cols), *extra, np.int32(warp_mode))
    elif op == "bias_gelu":
        name = spec.entries[xi.dtype]
        kern = runtime.get_kernel(spec.family, name, xi.device)
        threads = 256
        units = -(-n // nv) if vec else n
        grid = min(-(-units // threads), _MAX_GRID)
        tail = (np.int64(n), np.int32(cols), *extra, np.int32(vec))
    else:
        name = spec.entries[xi.dtype]
        kern = runtime.get_kernel(spec.family, name, xi.device)
        threads = _threads(cols, nv)
        grid = min(rows, _MAX_GRID)
        tail = (np.int32(rows), np.int32(cols), *extra, np.int32(vec))
    nbytes = 2 * n * ITEMSIZE[xi.dtype] + sum(cols * ITEMSIZE[xi.dtype] for p in params if p is not None)
    return (kern, (grid, 1, 1), (threads, 1, 1), smem, name, tail, _OPS_PER_ELEMENT[op] * n, nbytes, rows)


def _fast_plan(op: str, rows: int, cols: int, nv: int, smem_limit: int = 99 * 1024, impl: str = "auto"
               ) -> tuple[str, int, int, int, int] | None:
    """(kernel name without dtype suffix, grid, threads, last int argument, dynamic shared memory
    bytes) of the register-resident / vectorised kernels for an aligned row of ``cols`` elements
    (``nv`` per 16-byte vector), or None where only the multi-pass kernels apply. The last int
    argument is warp_mode for the ``reg`` kernels and the shared-memory vectors per thread for
    the ``rs`` kernels."""
    nvec = cols // nv
    if op == "bias_gelu":
        tasks = -(-rows // 4) * nvec
        return "bias_gelu_vec", max(1, min(-(-tasks // _WARP_BLOCK), _MAX_GRID)), _WARP_BLOCK, 0, 0
    grid = min(rows, _MAX_GRID)
    if impl in ("auto", "rs") and nvec > 2048:   # long rows: two 512-thread blocks an SM, 4 vectors a thread
        # in registers and the rest in shared memory (H100: 80% of copy for 65k fp16 softmax vs 76% for
        # one 1024-thread block an SM, measured on an H100: lab/kernels/targets_h100.md)
        s = -(-nvec // 512) - 4
        if s * 512 * 16 <= _RS_SMEM_2:
            return f"{op}_rs", grid, 512, s, s * 512 * 16
    if nvec <= 32 * 8:                       # a warp per row, several rows per block
        k = 4 if nvec <= 32 * 4 else 8
        rpb = _WARP_BLOCK // 32
        return f"{op}_reg{k}", max(1, min(-(-rows // rpb), _MAX_GRID)), _WARP_BLOCK, 1, 0
    for k in ((8, 4) if impl == "k8" else (4, 8)):   # a block per row, <= 1024 threads (LayerNorm at K=8: 512)
        threads = -(-nvec // k)
        if threads <= (512 if (op == "layer_norm" and k == 8) else 1024):
            return f"{op}_reg{k}", grid, -(-threads // 32) * 32, 0, 0
    s = -(-nvec // 1024) - 4                 # registers + shared memory, 1024 threads
    if s * 1024 * 16 <= smem_limit:
        return f"{op}_rs", grid, 1024, s, s * 1024 * 16
    return None


def _cluster_plan(op: str, rows: int, nvec: int) -> tuple[str, int, int, int, int] | None:
    """The cluster kernels' launch (sm_90+): 8 blocks a row, 4 vectors a thread in each."""
    chunk = -(-nvec // 8)
    threads = -(-chunk // 4)
    if threads > 1024:
        return None
    return f"{op}_cl", min(rows, _MAX_GRID // 8) * 8, max(32, -(-threads // 32) * 32), 0, 0


#: most dynamic shared memory the ``rs`` kernels ask for: one block an SM (the device's opt-in
#: limit less 1 KiB of static shared memory: 226 KiB on an H100, 162 KiB on an A100), two blocks an
#: SM (``impl='rs'``)
_RS_SMEM_2 = 100 * 1024
_optin: dict[int, int] = {}


def _smem_limit(ordinal: int) -> int:
    """The device's per-block opt-in shared memory less 1 KiB (static use), cached; 99 KiB if unknown."""
    v = _optin.get(ordinal)
    if v is None:
        try:
            v = int(runtime.device(ordinal).properties.max_shared_memory_per_block_optin) - 1024
        except Exception:
            v = 99 * 1024
        _optin[ordinal] = v
    return v


def softmax(x: Any, dim: int = -1, impl: str = "auto") -> Any:
    """``softmax(x, dim)`` like ``torch.softmax``: online (running max and sum in one pass over
    the row, a second pass writes). Any row length; a ``dim`` other than the last is moved there
    by a copy. ``impl`` picks the kernel design (:data:`IMPLS`; "auto" is the fastest measured)."""
    if type(x) is _Tensor:
        y = _fast("softmax", x, (), (dim, impl))
        if y is not None:
            return y
    _impl(impl, "softmax")
    xi = runtime.inspect_array(x, "x")
    nd = len(xi.shape)
    if nd and not -nd <= dim < nd:
        raise KernelArgumentError(f"softmax: dim {dim} is out of range for x of {nd} dimensions ({xi.where()})")
    last = nd == 0 or dim % nd == nd - 1
    if not last:
        moved = x.movedim(dim, -1) if xi.kind == "torch" else __import__("cupy").moveaxis(x, dim, -1)
        y = softmax(moved, -1, impl)
        return y.movedim(-1, dim) if xi.kind == "torch" else __import__("cupy").moveaxis(y, -1, dim)
    key = _call_key("softmax", x, (), (dim, impl)) if xi.kind == "torch" else None
    xi = _check(x, "softmax", xi)
    return _run("softmax", xi, [], (), impl, key)


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5, impl: str = "auto") -> Any:
    """``torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)``: mean and (biased)
    variance by Welford in one pass, then normalise; ``weight``/``bias`` of shape (cols,) or None."""
    if type(x) is _Tensor:
        y = _fast("layer_norm", x, (weight, bias), (eps, impl))
        if y is not None:
            return y
    _impl(impl, "layer_norm")
    key = _call_key("layer_norm", x, (weight, bias), (eps, impl))
    xi = _check(x, "layer_norm")
    return _run("layer_norm", xi, [_param(weight, "weight", xi, "layer_norm"), _param(bias, "bias", xi, "layer_norm")],
                (np.float32(eps),), impl, key)


def rms_norm(x: Any, weight: Any = None, eps: float = 1e-6, impl: str = "auto") -> Any:
    """``torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)``: ``x / sqrt(mean(x²) + eps) * weight``."""
    if type(x) is _Tensor:
        y = _fast("rms_norm", x, (weight,), (eps, impl))
        if y is not None:
            return y
    _impl(impl, "rms_norm")
    key = _call_key("rms_norm", x, (weight,), (eps, impl))
    xi = _check(x, "rms_norm")
    return _run("rms_norm", xi, [_param(weight, "weight", xi, "rms_norm")], (np.float32(eps),),
                impl, key)


def bias_gelu(x: Any, bias: Any = None, approximate: str = "none", impl: str = "auto") -> Any:
    """``gelu(x + bias)`` with ``bias`` of shape (x.shape[-1],) or None; ``approximate`` is
    ``'none'`` (exact erf, torch's default) or ``'tanh'``."""
    if type(x) is _Tensor:
        y = _fast("bias_gelu", x, (bias,), (approximate, impl))
        if y is not None:
            return y
    if approximate not in ("none", "tanh"):
        raise KernelArgumentError(f"bias_gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    _impl(impl, "bias_gelu")
    key = _call_key("bias_gelu", x, (bias,), (approximate, impl))
    xi = _check(x, "bias_gelu")
    act = 3 if approximate == "none" else 2
    return _run("bias_gelu", xi, [_param(bias, "bias", xi, "bias_gelu")], (np.int32(act),),
                impl, key)


#: per-block opt-in shared memory by architecture number (CUDA programming guide, compute
#: capabilities table), to plan a launch without a GPU
SMEM_OPTIN_BY_ARCH = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}


def explain_plan(op: str, shape: tuple[int, ...], dtype: str, arch: str, impl: str = "auto") -> str:
    """In words: the kernel a 16-byte aligned ``op`` over ``shape`` runs on ``arch`` (no GPU needed)."""
    _impl(impl, op)
    if dtype not in _DTYPES:
        raise KernelArgumentError(f"{op}: dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    if not shape:
        raise KernelArgumentError(f"{op}: give the shape of x, e.g. (8, 4096); got {shape}")
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    nv = 16 // ITEMSIZE[dtype]
    smem_limit = SMEM_OPTIN_BY_ARCH.get(arch_number(arch), 100 * 1024) - 1024
    plan = _fast_plan(op, rows, cols, nv, smem_limit, impl) if cols % nv == 0 and impl != "multipass" else None
    if plan is None:
        return (f"{op} of {rows} rows x {cols} {dtype} on {arch}: the multi-pass kernel "
                f"({registry.SPECS[(op, 'rowwise')].entries[dtype]}): the row is not a whole number of "
                f"16-byte vectors, does not fit registers + shared memory, or impl='multipass' "
                f"(16-byte aligned rows take the register-resident kernels). Override with impl=.")
    name, grid, threads, _last, smem = plan
    measured = ("H100: 80 % of a device copy's bandwidth for 65,536-column FP16 softmax" if smem else
                "H100: 91-99 % of a device copy's bandwidth on 4096-column rows")
    return (f"{op} of {rows} rows x {cols} {dtype} on {arch}: {name}_{_SUFFIX[dtype]} "
            f"(grid {grid}, {threads} threads, {smem} B dynamic shared memory) when x is 16-byte "
            f"aligned: the row is read from DRAM once into registers{' and shared memory' if smem else ''} "
            f"({measured}). Override with impl=.")
