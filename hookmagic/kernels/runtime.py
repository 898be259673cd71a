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

import numpy as np

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
    global _torch, _raw_stream
    mod = type(x).__module__.split(".")[0]
    if mod not in ("torch", "cupy") or not hasattr(x, "shape"):
        raise KernelArgumentError(f"{name} must be a torch tensor or a CuPy array, not {type(x).__name__}")
    if mod == "torch":
        import torch
        _torch = torch
        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)   # torch's own fast accessor
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
        if _raw_stream is not None:
            return int(_raw_stream(ref.device))
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


#: how :func:`launch` reaches the driver: "driver" (``cuLaunchKernelEx`` through ctypes, the
#: arguments packed by one cached ``struct`` format into a per-thread buffer: the per-call path) or
#: "cuda-core" (``cuda.core.launch``; also the fallback where libcuda cannot be opened or an argument
#: is not a Python/NumPy scalar). Changed with :func:`set_launcher`; the host-cost benchmark times
#: both in one process.
LAUNCHER = "driver"
LAUNCHERS = ("driver", "cuda-core")


def set_launcher(name: str) -> str:
    """Make every launch of this process go through ``name`` (:data:`LAUNCHERS`); returns the one before."""
    global LAUNCHER
    if name not in LAUNCHERS:
        raise KernelArgumentError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {name!r}")
    before, LAUNCHER = LAUNCHER, name
    return before


def launch(kernel: Any, ref: ArrayInfo, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
           smem: int = 0) -> None:
    """Launch on the current stream of ``ref``'s library. ``args`` are ints (pointers: 8 bytes),
    floats (doubles), bools and NumPy scalars (their own C type), as for ``cuda.core.launch``."""
    if LAUNCHER == "driver" and _drv is not False:
        fmt = _formats.get(tuple(map(type, args)))   # one struct format per argument-type signature
        if fmt is None:
            fmt = _format(args)
        if fmt and (_drv is not None or _open_driver()):
            tl = _tls.__dict__.get("buf") or _thread_buffers()
            if ref.kind == "torch" and _raw_stream is not None:
                stream = _raw_stream(ref.device)
            else:
                stream = current_stream_handle(ref)
            fmt.pack_into(tl[0], 0, *(_dims.get((grid, block)) or _dims_for(grid, block)), smem, stream, *args)
            h = _handles.get((id(kernel), ref.device)) or _handle(kernel, ref.device)
            if smem > 48 * 1024 and _func_smem.get(h.value, 0) < smem:
                _allow_smem(h, smem)
            if _drv.cuLaunchKernelEx(tl[1], h, tl[2], None):
                _relaunch(ref.device, tl, h, grid, block, smem)
            return
    make_current(ref.device)
    cfg = _configs.get((grid, block, smem))   # one LaunchConfig per launch shape
    if cfg is None:
        from cuda.core import LaunchConfig
        if len(_configs) > 4096:
            _configs.clear()
        cfg = _configs[(grid, block, smem)] = LaunchConfig(grid=grid, block=block, shmem_size=smem)
    global _core_launch
    if _core_launch is None:
        from cuda.core import launch as _core_launch
    _core_launch(_stream(current_stream_handle(ref)), cfg, kernel, *args)


# --- the driver path: libcuda through ctypes --------------------------------------------------
# A per-thread buffer holds a CUlaunchConfig (grid, block, shared memory, stream; no attributes)
# followed by one kernel parameter per 8-byte slot, and a parameter array that points at the slots
# once: a call packs the configuration and its arguments with one precompiled struct format and
# makes one foreign call, cuLaunchKernelEx(&config, kernel, params, NULL), whose four arguments
# are prebuilt ctypes objects (no conversion). The driver copies the parameters when the launch
# is enqueued, so the buffer is free again when the call returns.
_MAX_ARGS = 64
#: CUlaunchConfig: 7 unsigned ints, padding, the CUstream, then attrs (NULL) and numAttrs (0)
#: packed as zeros up to the first parameter slot at byte 64
_CONFIG = "=7I4xQ24x"
_CONFIG_BYTES = 64
#: struct codes of each argument type, padded to its 8-byte slot (Python ints are pointers)
_CODES: dict[type, str] = {int: "q", float: "d", bool: "?7x"}
#: struct codes (standard sizes) of NumPy scalars by (dtype kind, itemsize)
_NP_CODES = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B", ("u", 2): "H",
             ("u", 4): "I", ("u", 8): "Q", ("f", 2): "e", ("f", 4): "f", ("f", 8): "d", ("b", 1): "?"}
_formats: dict[tuple, Any] = {}
_dims: dict[tuple, tuple[int, ...]] = {}
_handles: dict[tuple[int, int], Any] = {}   # (id(cuda-core Kernel), device) -> its CUfunction (ctypes)
_keep: list[Any] = []             # the kernels whose handles are cached (their ids stay theirs)
_tls = threading.local()
_drv: Any = None                  # the ctypes CDLL of libcuda; False where it cannot be opened
_raw_stream: Any = None           # torch._C._cuda_getCurrentRawStream once torch was seen


def _format(args: Sequence[Any]) -> Any:
    """The cached struct format (launch configuration, then ``args``) for ``args``' types, or 0
    (the cuda-core path) for an argument type it does not cover or more than :data:`_MAX_ARGS`."""
    import struct
    codes = []
    for a in args:
        c = _CODES.get(type(a))
        if c is None:
            dt = getattr(a, "dtype", None)
            c = _NP_CODES.get((dt.kind, dt.itemsize)) if isinstance(a, np.generic) and dt is not None else None
            if c is None:
                codes = None
                break
            c += f"{8 - dt.itemsize}x" if dt.itemsize < 8 else ""
        codes.append(c)
    fmt = struct.Struct(_CONFIG + "".join(codes)) if codes is not None and len(codes) <= _MAX_ARGS else 0
    if len(_formats) > 4096:
        _formats.clear()
    _formats[tuple(map(type, args))] = fmt
    return fmt


def _thread_buffers() -> tuple[Any, ...]:
    """This thread's (config + argument slots, a pointer to the config, a pointer to the parameter
    array, the parameter array)."""
    import ctypes
    buf = (ctypes.c_char * (_CONFIG_BYTES + 8 * _MAX_ARGS))()
    base = ctypes.addressof(buf)
    params = (ctypes.c_void_p * _MAX_ARGS)(*[base + _CONFIG_BYTES + 8 * i for i in range(_MAX_ARGS)])
    tl = _tls.buf = (buf, ctypes.c_void_p(base), ctypes.c_void_p(ctypes.addressof(params)), params)
    return tl


def _dims_for(grid: Any, block: Any) -> tuple[int, ...]:
    """(gx, gy, gz, bx, by, bz) of a grid and block given as ints or 1-3 tuples, cached."""
    def three(v: Any) -> tuple[int, int, int]:
        t = (int(v),) if isinstance(v, (int, np.integer)) else tuple(int(x) for x in v)
        return (t + (1, 1, 1))[:3]   # type: ignore[return-value]
    d = three(grid) + three(block)
    if len(_dims) > 4096:
        _dims.clear()
    _dims[(grid, block)] = d
    return d


def _handle(kernel: Any, ordinal: int) -> Any:
    """The CUfunction of a cuda-core kernel in device ``ordinal``'s primary context (cuda-core loads
    cubins as libraries: its kernels are CUkernel handles, resolved once here rather than by the
    driver at every launch), as a ctypes pointer, cached."""
    import ctypes
    make_current(ordinal)
    h = kernel.handle
    if type(h).__name__ == "CUfunction":   # older cuda-core: a module's function already
        f = ctypes.c_void_p(int(h))
    else:
        f = ctypes.c_void_p()
        err = _drv.cuKernelGetFunction(ctypes.byref(f), ctypes.c_void_p(int(h)))
        if err:
            raise KernelsUnavailable(f"cuKernelGetFunction failed: {_error_name(err)}")
    _handles[(id(kernel), ordinal)] = f
    _keep.append(kernel)
    return f


#: CUfunction handle -> the dynamic shared memory its launches were allowed (beyond 48 KiB)
_func_smem: dict[int, int] = {}


def _allow_smem(f: Any, nbytes: int) -> None:
    """Allow the function ``nbytes`` of dynamic shared memory (set_dynamic_smem sets it on the
    CUkernel for the device; the function's own attribute is set too, as the driver reads it)."""
    err = _drv.cuFuncSetAttribute(f, 8, nbytes)   # 8: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if err:
        raise KernelsUnavailable(f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) failed: "
                                 f"{_error_name(err)}")
    _func_smem[f.value] = nbytes


def _relaunch(ordinal: int, tl: tuple, f: Any, grid: Any, block: Any, smem: int) -> None:
    """A launch failed: make the device's primary context current (a new thread may have none;
    another may be current) and launch once more, or raise with the driver's error."""
    make_current(ordinal)
    err = _drv.cuLaunchKernelEx(tl[1], f, tl[2], None)
    if err:
        raise KernelsUnavailable(f"cuLaunchKernelEx(grid={grid}, block={block}, smem={smem}) failed: "
                                 f"{_error_name(err)}")


def _open_driver() -> bool:
    """Open libcuda and declare the three entry points the driver path calls; False if it cannot."""
    global _drv
    import ctypes
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        # no argtypes: every argument passed is a prebuilt ctypes object (nothing to convert)
        lib.cuLaunchKernelEx.restype = ctypes.c_int
        lib.cuKernelGetFunction.restype = ctypes.c_int
        lib.cuFuncSetAttribute.restype = ctypes.c_int
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuGetErrorName.restype = ctypes.c_int
    except (OSError, AttributeError):
        _drv = False
        return False
    _drv = lib
    return True


def _error_name(err: int) -> str:
    import ctypes
    name = ctypes.c_char_p()
    if _drv and _drv.cuGetErrorName(err, ctypes.byref(name)) == 0 and name.value:
        return f"{name.value.decode()} ({err})"
    return f"CUresult {err}"


@dataclass(frozen=True, slots=True)
class Prepared:
    """One kernel's launch shape and argument format, worked out once (:func:`prepare`): a call
    then only packs its arguments and enqueues (:func:`launch_prepared`)."""
    kernel: Any
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem: int
    fmt: Any            # the struct format of config + arguments; 0: the cuda-core path
    head: tuple[int, ...]   # (gx, gy, gz, bx, by, bz, smem)
    handle: Any         # the kernel's handle as a ctypes pointer (None on the cuda-core path)
    maps: int = 0       # leading 128-byte CUtensorMap parameters (:func:`prepare_maps`)


def prepare(kernel: Any, ordinal: int, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
            smem: int = 0) -> Prepared:
    """The launch of ``kernel`` on device ``ordinal`` with arguments of the types of ``args``
    (values do not matter), ready for :func:`launch_prepared`."""
    fmt = _formats.get(tuple(map(type, args))) or _format(args)
    if fmt and _drv is None:
        _open_driver()
    drv = fmt and _drv
    h = None
    if drv:
        make_current(ordinal)
        h = _handles.get((id(kernel), ordinal)) or _handle(kernel, ordinal)
        if smem > 48 * 1024 and _func_smem.get(h.value, 0) < smem:
            _allow_smem(h, smem)
    return Prepared(kernel, grid, block, smem, fmt if drv else 0, _dims_for(grid, block) + (smem,), h)


#: bytes of a ``CUtensorMap`` (cuda.h: 16 x 64-bit words, 64-byte aligned), passed by value
MAP_BYTES = 128


def prepare_maps(kernel: Any, ordinal: int, grid: tuple[int, ...], block: tuple[int, ...], maps: int,
                 args: Sequence[Any], smem: int = 0) -> Prepared:
    """Like :func:`prepare`, for a kernel whose first ``maps`` parameters are ``CUtensorMap``
    values (the TMA kernels) followed by parameters of the types of ``args``; launched with
    :func:`launch_prepared_maps`. ``fmt`` is 0 (use another launcher) where the driver path is off."""
    import struct
    p = prepare(kernel, ordinal, grid, block, args, smem)
    if not p.fmt:
        return p
    fmt = struct.Struct(_CONFIG + f"{MAP_BYTES}s" * maps + p.fmt.format[len(_CONFIG):])
    return Prepared(kernel, grid, block, smem, fmt, p.head, p.handle, maps)


def _map_buffers(maps: int) -> tuple[Any, ...]:
    """This thread's buffer for launches with ``maps`` leading tensor maps: (buffer, offset of the
    64-byte aligned config in it, a pointer to the config, a pointer to the parameter array, the
    array), the maps in 128-byte slots after the config and the other parameters in 8-byte slots."""
    import ctypes
    buf = (ctypes.c_char * (64 + _CONFIG_BYTES + MAP_BYTES * maps + 8 * _MAX_ARGS))()
    off = -ctypes.addressof(buf) % 64
    first = ctypes.addressof(buf) + off + _CONFIG_BYTES
    ptrs = [first + MAP_BYTES * i for i in range(maps)] + [first + MAP_BYTES * maps + 8 * j for j in range(_MAX_ARGS)]
    params = (ctypes.c_void_p * len(ptrs))(*ptrs)
    tl = (buf, off, ctypes.c_void_p(first - _CONFIG_BYTES), ctypes.c_void_p(ctypes.addressof(params)), params)
    setattr(_tls, f"maps{maps}", tl)
    return tl


def launch_prepared_maps(p: Prepared, kind: str, ordinal: int, maps: Sequence[bytes], args: Sequence[Any]) -> None:
    """Launch a kernel prepared by :func:`prepare_maps` (with a nonzero ``fmt``) through the driver
    path: ``maps`` are the tensor maps' 128 bytes each, ``args`` the remaining parameters (of the
    types it was prepared with), on the current stream of the ``kind`` library on ``ordinal``."""
    tl = _tls.__dict__.get(f"maps{p.maps}") or _map_buffers(p.maps)
    if kind == "torch" and _raw_stream is not None:
        stream = _raw_stream(ordinal)
    else:
        stream = current_stream_handle(ArrayInfo("", kind, (), (), "", ordinal, 0, None))
    p.fmt.pack_into(tl[0], tl[1], *p.head, stream, *maps, *args)
    if _drv.cuLaunchKernelEx(tl[2], p.handle, tl[3], None):
        make_current(ordinal)   # as _relaunch: a thread without the primary context current
        err = _drv.cuLaunchKernelEx(tl[2], p.handle, tl[3], None)
        if err:
            raise KernelsUnavailable(f"cuLaunchKernelEx(grid={p.grid}, block={p.block}, smem={p.smem}) failed: "
                                     f"{_error_name(err)}")


def launch_prepared(p: Prepared, kind: str, ordinal: int, args: Sequence[Any]) -> None:
    """Launch a :class:`Prepared` kernel with ``args`` (of the types it was prepared with) on the
    current stream of the ``kind`` library ("torch"/"cupy") on device ``ordinal``."""
    if p.fmt and LAUNCHER == "driver":
        tl = _tls.__dict__.get("buf") or _thread_buffers()
        if kind == "torch" and _raw_stream is not None:
            stream = _raw_stream(ordinal)
        else:
            stream = current_stream_handle(ArrayInfo("", kind, (), (), "", ordinal, 0, None))
        p.fmt.pack_into(tl[0], 0, *p.head, stream, *args)
        if _drv.cuLaunchKernelEx(tl[1], p.handle, tl[2], None):
            _relaunch(ordinal, tl, p.handle, p.grid, p.block, p.smem)
        return
    launch(p.kernel, ArrayInfo("", kind, (), (), "", ordinal, 0, None), p.grid, p.block, args, p.smem)


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
