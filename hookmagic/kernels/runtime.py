"""Loading compiled kernels on the current GPU and launching them on the caller's stream.

Arrays are torch tensors or CuPy arrays; launches go to the stream that is current for the
array's library (``torch.cuda.current_stream()`` / ``cupy.cuda.get_current_stream()``), so
they order with the caller's own work, CUDA graphs included. Loading and launching use
cuda-core (:mod:`cuda.core`), which shares the device's primary context with torch and CuPy.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from hookmagic.kernels import build
from hookmagic.kernels.errors import KernelArgumentError, KernelsUnavailable

_lock = threading.Lock()
_modules: dict[tuple[str, int, str], Any] = {}
_kernels: dict[tuple[str, int, str, str], Any] = {}
_devices: dict[int, Any] = {}


@dataclass(slots=True)
class ArrayInfo:
    """What a kernel wrapper needs to know about one operand."""
    name: str            # the operand's name in messages ("a", "b", "bias", ...)
    kind: str            # "torch" or "cupy"
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: str           # "float32", "float16", "bfloat16", "int8", "int32"
    device: int          # CUDA device ordinal, -1 for host memory
    ptr: int
    obj: Any
    _contig: bool | None = field(default=None, repr=False, compare=False)

    @property
    def contiguous(self) -> bool:
        """Row-major without gaps (strides of size-1 dimensions do not matter); computed once."""
        c = self._contig
        if c is None:
            c = self._contig = _row_major(self.shape, self.strides)
        return c

    def where(self) -> str:
        return f"{self.kind} {self.dtype}{list(self.shape)} on " + ("cpu" if self.device < 0 else f"cuda:{self.device}")


def _row_major(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    s = 1
    for n, st in zip(reversed(shape), reversed(strides)):
        if n > 1 and st != s:
            return False
        s *= n
    return True


# The per-call path below is kept to attribute reads and dictionary lookups: on small shapes the
# host's time to make a call, not the GPU, sets how fast a kernel runs.
_KINDS: dict[type, str] = {}            # operand type -> "torch" / "cupy"
_TORCH_DTYPES: dict[Any, str] = {}      # torch.float16 -> "float16"
_torch: Any = None                      # the torch module, once an operand was a tensor


def _kind(x: Any, name: str) -> str:
    global _torch
    mod = type(x).__module__.split(".")[0]
    if mod not in ("torch", "cupy") or not hasattr(x, "shape"):
        raise KernelArgumentError(f"{name} must be a torch tensor or a CuPy array, not {type(x).__name__}")
    if mod == "torch":
        import torch
        _torch = torch
    _KINDS[type(x)] = mod
    return mod


def inspect_array(x: Any, name: str) -> ArrayInfo:
    """Describe a torch tensor or CuPy array; raises :class:`KernelArgumentError` for anything else."""
    kind = _KINDS.get(type(x)) or _kind(x, name)
    if kind == "torch":
        dt = x.dtype
        dtype = _TORCH_DTYPES.get(dt)
        if dtype is None:
            dtype = _TORCH_DTYPES[dt] = str(dt).removeprefix("torch.")
        return ArrayInfo(name, "torch", tuple(x.shape), x.stride(), dtype, x.get_device(),
                         x.data_ptr(), x, x.is_contiguous())
    item = x.dtype.itemsize
    return ArrayInfo(name, "cupy", tuple(x.shape), tuple(s // item for s in x.strides),
                     "bfloat16" if x.dtype.name == "bfloat16" else x.dtype.name,
                     int(x.device.id), int(x.data.ptr), x)


def new_output(ref: ArrayInfo, shape: Sequence[int], dtype: str) -> tuple[Any, int]:
    """A new row-major array of the reference operand's kind on its device, and its address."""
    if ref.kind == "torch":
        if dtype != ref.dtype:
            x = ref.obj.new_empty(shape, dtype=getattr(_torch, dtype))
        elif shape == ref.shape:   # torch's quickest allocation
            x = _torch.empty_like(ref.obj, memory_format=_torch.contiguous_format)
        else:
            x = ref.obj.new_empty(shape)
        return x, x.data_ptr()
    import cupy
    with cupy.cuda.Device(ref.device):
        x = cupy.empty(tuple(shape), dtype=dtype)
    return x, int(x.data.ptr)


def empty_like_kind(ref: ArrayInfo, shape: Sequence[int], dtype: str) -> Any:
    """A new array of the reference operand's kind on its device."""
    return new_output(ref, shape, dtype)[0]


def contiguous(info: ArrayInfo) -> ArrayInfo:
    """A row-major copy of a strided operand (same kind), or the operand itself."""
    if info.contiguous:
        return info
    x = info.obj.contiguous() if info.kind == "torch" else __import__("cupy").ascontiguousarray(info.obj)
    return inspect_array(x, info.name)


def current_stream_handle(ref: ArrayInfo) -> int:
    """The caller's current stream for the operand's library and device, as a CUstream handle."""
    if ref.kind == "torch":
        raw = getattr(_torch._C, "_cuda_getCurrentRawStream", None)   # torch's own fast accessor
        if raw is not None:
            return int(raw(ref.device))
        return int(_torch.cuda.current_stream(ref.device).cuda_stream)
    import cupy
    with cupy.cuda.Device(ref.device):
        return int(cupy.cuda.get_current_stream().ptr)


def device(ordinal: int) -> Any:
    """The cuda-core Device for ``ordinal``, made current."""
    try:
        from cuda.core import Device
    except Exception as exc:
        raise KernelsUnavailable(f"cuda-core could not be imported ({exc}); install hookmagic[kernels]") from exc
    with _lock:
        dev = _devices.get(ordinal)
        if dev is None:
            try:
                dev = Device(ordinal)
            except Exception as exc:
                raise KernelsUnavailable(f"no CUDA device {ordinal} ({exc}): a GPU and its driver are needed") from exc
            _devices[ordinal] = dev
    dev.set_current()
    return dev


_archs: dict[tuple[int, bool], str] = {}


def device_arch(ordinal: int, needs_arch_specific: bool = False) -> str:
    """``'sm_90'`` for the device (``'sm_90a'`` when a family needs wgmma/TMA on Hopper); cached
    per device (every launch asks, through :func:`get_kernel`)."""
    arch = _archs.get((ordinal, needs_arch_specific))
    if arch is not None:
        return arch
    cc = device(ordinal).compute_capability
    arch = f"sm_{cc.major}{cc.minor}"
    if needs_arch_specific and cc.major in (9, 10, 12):
        arch += "a"
    _archs[(ordinal, needs_arch_specific)] = arch
    return arch


def get_kernel(family: str, name: str, ordinal: int, arch_specific: bool = False) -> Any:
    """The loaded cuda-core Kernel ``name`` of ``family`` on device ``ordinal`` (compiled on first use)."""
    arch = device_arch(ordinal, arch_specific)
    key = (family, ordinal, arch, name)
    k = _kernels.get(key)
    if k is not None:
        return k
    mkey = (family, ordinal, arch)
    with _lock:
        mod = _modules.get(mkey)
        if mod is None:
            from cuda.core import ObjectCode
            compiled = build.compile_family(family, arch)
            mod = ObjectCode.from_cubin(compiled.cubin)
            _modules[mkey] = mod
        k = mod.get_kernel(name)
        _kernels[key] = k
    return k


_smem_set: dict[tuple[int, int], int] = {}


def set_dynamic_smem(kernel: Any, nbytes: int, ordinal: int) -> None:
    """Allow a launch of ``kernel`` with more than 48 KiB of dynamic shared memory (once per kernel)."""
    if nbytes <= 48 * 1024 or _smem_set.get((id(kernel), ordinal), 0) >= nbytes:
        return
    from cuda.bindings import driver
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    h = kernel.handle
    # cuda-core loads cubins as libraries: its kernels are CUkernel handles (older: CUfunction)
    if isinstance(h, driver.CUfunction):
        (err,) = driver.cuFuncSetAttribute(h, attr, nbytes)
    else:
        kh = h if isinstance(h, driver.CUkernel) else driver.CUkernel(int(h))
        (err,) = driver.cuKernelSetAttribute(attr, nbytes, kh, driver.CUdevice(ordinal))
    if int(err) != 0:
        raise KernelsUnavailable(f"could not allow {nbytes} bytes of dynamic shared memory: {err}")
    _smem_set[(id(kernel), ordinal)] = nbytes


_driver_mod: Any = None
_contexts: dict[int, int] = {}   # device ordinal -> its primary context's handle


def make_current(ordinal: int) -> None:
    """The device's primary context (torch's and CuPy's own) current on this thread: one
    ``cuCtxGetCurrent`` when it already is, cuda-core's ``set_current`` when it is not."""
    global _driver_mod
    want = _contexts.get(ordinal)
    if want is not None:
        err, ctx = _driver_mod.cuCtxGetCurrent()
        if int(ctx) == want:
            return
    device(ordinal)
    from cuda.bindings import driver
    _driver_mod = driver
    err, ctx = driver.cuCtxGetCurrent()
    if int(err) != 0:
        raise KernelsUnavailable(f"cuCtxGetCurrent failed: {err}")
    _contexts[ordinal] = int(ctx)


def launch(kernel: Any, ref: ArrayInfo, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
           smem: int = 0) -> None:
    """Launch on the current stream of ``ref``'s library. ``args`` are ints (pointers) and numpy scalars."""
    global _core_launch
    make_current(ref.device)
    cfg = _configs.get((grid, block, smem))   # one LaunchConfig per launch shape
    if cfg is None:
        from cuda.core import LaunchConfig
        if len(_configs) > 4096:
            _configs.clear()
        cfg = _configs[(grid, block, smem)] = LaunchConfig(grid=grid, block=block, shmem_size=smem)
    if _core_launch is None:
        from cuda.core import launch as _core_launch
    _core_launch(_stream(current_stream_handle(ref)), cfg, kernel, *args)


_core_launch: Any = None   # cuda.core.launch, imported on the first launch


_configs: dict[tuple, Any] = {}


_streams: dict[int, Any] = {}


def _stream(handle: int) -> Any:
    """A cuda-core view of the caller's stream (handle 0: the legacy default stream, as torch's
    and CuPy's default streams are)."""
    s = _streams.get(handle)
    if s is None:
        from cuda.core import Stream
        try:
            s = Stream.from_handle(handle)
        except Exception:
            if handle != 0:
                raise
            from cuda.bindings import driver
            s = Stream.from_handle(int(driver.CU_STREAM_LEGACY))
        _streams[handle] = s
    return s
