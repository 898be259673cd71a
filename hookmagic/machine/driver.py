"""The NVIDIA driver and its GPUs, asked through NVML and through libcuda (ctypes).

These calls enter the driver, which can hang when it misbehaves, so :mod:`hookmagic.machine.isolated`
runs them in a child process with a deadline. No CUDA context is created: NVML needs none, and
``cuDriverGetVersion`` needs no ``cuInit``. Only when NVML lists no GPU (a Jetson's integrated
GPU has no NVML) does the child call ``cuInit`` to count and describe them.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

#: the file names of the CUDA driver library, per platform
LIBCUDA = {"win32": ("nvcuda.dll",), "linux": ("libcuda.so.1", "libcuda.so")}
#: CUdevice_attribute values of the compute capability
_CC_MAJOR, _CC_MINOR = 75, 76


def cuda_version_text(version: int) -> str:
    """``13000`` -> ``'13.0'`` (CUDA's integer encoding: 1000 * major + 10 * minor)."""
    return f"{version // 1000}.{version % 1000 // 10}" if version > 0 else ""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def nvml_report() -> dict[str, Any]:
    """NVML's answer: ``found``, driver and NVML versions, the CUDA version the driver supports,
    and each GPU (name, UUID, PCI bus id, compute capability, memory); ``error`` says why not."""
    out: dict[str, Any] = {"found": False, "error": "", "driver_version": "", "nvml_version": "",
                           "cuda_driver_version": 0, "devices": []}
    try:
        import pynvml
    except ImportError as exc:
        out["error"] = f"nvidia-ml-py is not installed ({exc})"
        return out
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, _NoPermission, ...
        out["error"] = f"NVML could not start ({_text(exc)})"
        return out
    try:
        out["found"] = True
        out["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        out["cuda_driver_version"] = int(pynvml.nvmlSystemGetCudaDriverVersion())
        out["nvml_version"] = _text(_maybe(pynvml.nvmlSystemGetNVMLVersion) or "")
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            out["devices"].append(_nvml_device(pynvml, i))
    except Exception as exc:
        out["error"] = f"the NVIDIA driver did not answer NVML ({_text(exc)})"
    finally:
        _maybe(pynvml.nvmlShutdown)
    return out


def _maybe(call, *args):
    try:
        return call(*args)
    except Exception:  # a query this GPU or driver does not support (MIG, Jetson, vGPU)
        return None


def _nvml_device(pynvml, index: int) -> dict[str, Any]:
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    cc = _maybe(pynvml.nvmlDeviceGetCudaComputeCapability, h)
    memory = _maybe(pynvml.nvmlDeviceGetMemoryInfo, h)
    pci = _maybe(pynvml.nvmlDeviceGetPciInfo, h)
    return {"index": index, "name": _text(_maybe(pynvml.nvmlDeviceGetName, h) or ""),
            "uuid": _text(_maybe(pynvml.nvmlDeviceGetUUID, h) or ""),
            "pci_bus_id": _text(getattr(pci, "busId", b"") or ""),
            "compute_capability": [int(cc[0]), int(cc[1])] if cc else None,
            "memory_bytes": int(memory.total) if memory is not None else None,
            "source": "NVML"}


def libcuda_report(describe_devices: bool) -> dict[str, Any]:
    """libcuda's answer: ``found``, its ``path``, ``cuda_driver_version`` (cuDriverGetVersion,
    which needs no cuInit) and, when ``describe_devices``, each GPU after ``cuInit``."""
    out: dict[str, Any] = {"found": False, "path": "", "error": "", "cuda_driver_version": 0,
                           "devices": []}
    names = LIBCUDA.get(sys.platform, LIBCUDA["linux"])
    lib, errors = None, []
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as exc:
            errors.append(str(exc))
    if lib is None:
        out["error"] = f"the CUDA driver library ({names[0]}) is not on the library path"
        out["dlerror"] = errors
        return out
    out["found"] = True
    out["path"] = _mapped_path("libcuda") or names[0]
    version = ctypes.c_int(0)
    status = lib.cuDriverGetVersion(ctypes.byref(version))
    if status != 0:
        out["error"] = f"cuDriverGetVersion failed (CUresult {status})"
        return out
    out["cuda_driver_version"] = version.value
    if describe_devices:
        out["devices"], out["error"] = _cuda_devices(lib)
    return out


def _cuda_devices(lib) -> tuple[list[dict[str, Any]], str]:
    status = lib.cuInit(0)
    if status != 0:
        # 100 CUDA_ERROR_NO_DEVICE, 999 unknown (often a driver/library mismatch), 3 not initialized
        return [], f"cuInit failed (CUresult {status}{', no CUDA device' if status == 100 else ''})"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return [], "cuDeviceGetCount failed"
    devices = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, dev)
        major, minor, total = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_size_t(0)
        lib.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, dev)
        lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
        devices.append({"index": i, "name": name.value.decode("utf-8", "replace"), "uuid": "",
                        "pci_bus_id": "", "compute_capability": [major.value, minor.value],
                        "memory_bytes": int(total.value), "source": "libcuda"})
    return devices, ""


def _mapped_path(stem: str) -> str:
    """The absolute path of a library this process has mapped whose name starts with ``stem``."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if path.startswith("/") and os.path.basename(path).startswith(stem + "."):
                    return path
    except OSError:
        pass
    return ""
