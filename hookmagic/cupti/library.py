"""Finding the CUPTI library for this process, lazily.

Order: an explicit ``HOOKMAGIC_CUPTI`` path; a CUPTI the process already loaded (PyTorch's
Kineto loads one: a second copy would fight it); NVIDIA's wheels through cuda-pathfinder;
``CUDA_HOME``/``CUDA_PATH``; the usual system locations. A CUPTI newer than the driver cannot
work, so candidates whose major version exceeds the driver's are skipped.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_SONAME = re.compile(r"libcupti\.so(?:\.(\d+))?")


@dataclass(frozen=True)
class DriverInfo:
    """What the NVIDIA driver says about itself; ``error`` is set when there is none."""

    cuda_version: int = 0      # e.g. 13000 for CUDA 13.0
    driver_version: str = ""  # e.g. "580.159.04"
    device_count: int = 0
    error: str = ""


@lru_cache(maxsize=1)
def driver_info() -> DriverInfo:
    """Ask NVML for the driver and GPU count, without initialising CUDA in this process."""
    try:
        import pynvml
    except ImportError:
        return DriverInfo(error="nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return DriverInfo(error=f"no NVIDIA driver was found ({exc})")
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        version = pynvml.nvmlSystemGetDriverVersion()
        count = pynvml.nvmlDeviceGetCount()
    except Exception as exc:
        return DriverInfo(error=f"the NVIDIA driver did not answer ({exc})")
    if isinstance(version, bytes):
        version = version.decode()
    if count == 0:
        return DriverInfo(cuda, version, 0, "the driver sees no GPU")
    return DriverInfo(cuda, version, count)


def loaded_cupti() -> str | None:
    """Path of a libcupti this process has already mapped, if any."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if _SONAME.fullmatch(os.path.basename(path)):
                    return path
    except OSError:
        pass
    return None


def _major(path: str) -> int | None:
    match = _SONAME.fullmatch(os.path.basename(path))
    if match and match.group(1):
        return int(match.group(1))
    # libcupti.so.2025.1.0 style names carry no CUDA major; the directory often does
    found = re.search(r"cu(?:da[-_]?)?(\d{2})", path)
    return int(found.group(1)) if found else None


def _pathfinder_candidates() -> list[str]:
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return [load_nvidia_dynamic_lib("cupti").abs_path]
    except Exception:  # not installed, or no CUPTI where it looks
        return []


def _site_packages_candidates() -> list[str]:
    import sys

    found = []
    for entry in sys.path:
        for pattern in ("nvidia/cu*/lib/libcupti.so*", "nvidia/cuda_cupti/lib/libcupti.so*"):
            found += sorted(glob.glob(os.path.join(entry, pattern)), reverse=True)
    return found


def _system_candidates() -> list[str]:
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    roots += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    found = []
    for root in filter(None, roots):
        for sub in ("extras/CUPTI/lib64", "targets/*/lib", "lib64"):
            found += sorted(glob.glob(os.path.join(root, sub, "libcupti.so*")), reverse=True)
    for directory in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"):
        found += sorted(glob.glob(os.path.join(directory, "libcupti.so*")), reverse=True)
    return found


def find_cupti(driver_cuda_version: int = 0) -> tuple[str | None, str]:
    """Choose the libcupti to use: ``(path, "")``, or ``(None, why not)``."""
    explicit = os.environ.get("HOOKMAGIC_CUPTI")
    if explicit:
        if Path(explicit).is_file():
            return explicit, ""
        return None, f"HOOKMAGIC_CUPTI points to {explicit}, which does not exist"
    already = loaded_cupti()
    if already:
        return already, ""
    driver_major = driver_cuda_version // 1000 if driver_cuda_version else None
    seen, too_new = set(), []
    for path in _pathfinder_candidates() + _site_packages_candidates() + _system_candidates():
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        major = _major(path)
        if driver_major and major and major > driver_major:
            too_new.append(path)
            continue
        return path, ""
    if too_new:
        return None, (
            f"the only CUPTI found ({too_new[0]}) is newer than the driver (CUDA "
            f"{driver_cuda_version // 1000}.{driver_cuda_version % 1000 // 10}); install the "
            f"matching one, e.g. pip install nvidia-cuda-cupti-cu{driver_major}"
        )
    return None, (
        "CUPTI was not found; install it with pip (nvidia-cuda-cupti for CUDA 13, "
        "nvidia-cuda-cupti-cu12 for CUDA 12), or set CUDA_HOME or HOOKMAGIC_CUPTI"
    )


def can_open(path: str) -> bool:
    """Whether the dynamic loader can open ``path`` (used only for diagnostics)."""
    try:
        ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        return True
    except OSError:
        return False
