"""Finding the CUPTI library for this process, lazily, without loading anything to look.

Order: an explicit ``HOOKMAGIC_CUPTI`` path (absolute); a CUPTI the process already loaded
(PyTorch's Kineto loads one: a second copy would fight it; of several, the newest the driver
runs); NVIDIA's wheels in the absolute ``sys.path`` entries and site-packages;
``CONDA_PREFIX``; ``CUDA_HOME``/``CUDA_PATH``; the usual system locations. A CUPTI newer
than the driver cannot work, so a candidate whose major version exceeds the driver's is
skipped, and an already-loaded one is refused.

Only absolute candidate paths are ever considered: never the current directory, never a
relative ``sys.path`` entry (IPython and ipykernel put ``''`` there), never a relative
``CUDA_HOME``; a library planted in the working directory is not found. Candidates are
listed and their versions read from the file names and the ELF ``SONAME`` alone: nothing is
dlopen'ed until the chosen one is loaded by the capture.
"""
from __future__ import annotations

import glob
import os
import re
import struct
import sys
from dataclasses import dataclass
from functools import lru_cache

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


_LIBCUPTI = re.compile(r"libcupti\.so(?:\.\d+)*")


def loaded_cuptis() -> list[str]:
    """Paths of every libcupti this process has already mapped, in the order first mapped."""
    found: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if (path.startswith("/") and _LIBCUPTI.fullmatch(os.path.basename(path))
                        and path not in found):
                    found.append(path)
    except OSError:
        pass
    return found


def loaded_cupti(driver_cuda_version: int = 0) -> str | None:
    """The libcupti this process already mapped that a capture should share, if any.

    A process can hold more than one: PyTorch for CUDA 13 preloads every ``libcupti`` it finds
    under ``nvidia/cuda_cupti`` too, where CUDA 12's wheel puts its own, besides the CUDA 13
    one its profiler is linked to. The newest CUDA major the driver runs is then the one in
    use; without a driver version, the newest.
    """
    loaded = loaded_cuptis()
    if len(loaded) < 2:
        return loaded[0] if loaded else None
    driver_major = driver_cuda_version // 1000 if driver_cuda_version else None
    usable = [p for p in loaded if not _too_new(_major(p), driver_major)] or loaded
    return max(usable, key=lambda p: _major(p) or 0)


def elf_soname(path: str) -> str | None:
    """The ``DT_SONAME`` of a 64-bit little-endian ELF shared library, read from the file
    (bounded reads; the library is not loaded). None if it has none or is not such a file."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            shoff, = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
            if shentsize != 64 or not 0 < shnum <= 4096:
                return None
            f.seek(shoff)
            table = f.read(64 * shnum)
            if len(table) < 64 * shnum:
                return None
            sections = [struct.unpack_from("<IIQQQQII", table, 64 * i) for i in range(shnum)]
            for _name, kind, _flags, _addr, offset, size, link, _info in sections:
                if kind != 6 or link >= shnum:  # SHT_DYNAMIC, linked to its string table
                    continue
                f.seek(offset)
                dynamic = f.read(min(size, 1 << 20))
                str_offset = sections[link][4]
                for i in range(len(dynamic) // 16):
                    tag, value = struct.unpack_from("<qQ", dynamic, 16 * i)
                    if tag == 0:  # DT_NULL
                        break
                    if tag == 14:  # DT_SONAME
                        f.seek(str_offset + value)
                        name = f.read(256).split(b"\0", 1)[0]
                        return name.decode("ascii", "replace") or None
    except (OSError, struct.error, ValueError, OverflowError):
        return None
    return None


def _major(path: str) -> int | None:
    """The CUDA major version of a libcupti: from its SONAME (``libcupti.so.13``), else its file
    name, else a ``cu13``/``cuda-13`` directory; None if nothing says."""
    for name in (elf_soname(path), os.path.basename(path)):
        match = _SONAME.fullmatch(name or "")
        if match and match.group(1) and int(match.group(1)) < 100:
            return int(match.group(1))
    # libcupti.so.2025.1.0 style names carry no CUDA major; the directory often does
    found = re.search(r"cu(?:da[-_]?)?(\d{2})", os.path.dirname(path))
    return int(found.group(1)) if found else None


def _absolute(paths) -> list[str]:
    return [p for p in paths if p and os.path.isabs(p)]


def _wheel_dirs() -> list[str]:
    """Absolute directories that may hold NVIDIA's wheels: sys.path entries and site-packages.
    Relative entries ('' is the current directory under IPython) are never searched."""
    import site

    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # some embedded interpreters
        pass
    out, seen = [], set()
    for d in _absolute(dirs):
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def candidates() -> list[str]:
    """Absolute paths of libcupti files worth trying, best first. Nothing is opened."""
    found = []
    for entry in _wheel_dirs():
        for pattern in ("nvidia/cu*/lib/libcupti.so*", "nvidia/cuda_cupti/lib/libcupti.so*"):
            found += sorted(glob.glob(os.path.join(entry, pattern)), reverse=True)
    for prefix in _absolute([os.environ.get("CONDA_PREFIX")]):
        found += sorted(glob.glob(os.path.join(prefix, "lib", "libcupti.so*")), reverse=True)
    roots = _absolute([os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")])
    roots += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for root in roots:
        for sub in ("extras/CUPTI/lib64", "targets/*/lib", "lib64"):
            found += sorted(glob.glob(os.path.join(root, sub, "libcupti.so*")), reverse=True)
    for directory in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"):
        found += sorted(glob.glob(os.path.join(directory, "libcupti.so*")), reverse=True)
    return [p for p in found if os.path.isabs(p)]


def _too_new(major: int | None, driver_major: int | None) -> bool:
    return bool(driver_major and major and major > driver_major)


def _driver_text(driver_cuda_version: int) -> str:
    return f"CUDA {driver_cuda_version // 1000}.{driver_cuda_version % 1000 // 10}"


def find_cupti(driver_cuda_version: int = 0) -> tuple[str | None, str]:
    """Choose the libcupti to use: ``(absolute path, "")``, or ``(None, why not)``."""
    explicit = os.environ.get("HOOKMAGIC_CUPTI")
    if explicit:
        if not os.path.isabs(explicit):
            return None, (f"HOOKMAGIC_CUPTI must be an absolute path (got {explicit!r}); "
                          "libraries are never looked up relative to the current directory")
        if os.path.isfile(explicit):
            return explicit, ""
        return None, f"HOOKMAGIC_CUPTI points to {explicit}, which does not exist"
    driver_major = driver_cuda_version // 1000 if driver_cuda_version else None
    already = loaded_cupti(driver_cuda_version)
    if already:
        major = _major(already)
        if _too_new(major, driver_major):
            return None, (
                f"this process already loaded a CUPTI for CUDA {major} ({already}), newer than "
                f"the driver ({_driver_text(driver_cuda_version)}); it cannot trace, and a second "
                "CUPTI would conflict with it: restart the process with a matching CUPTI first on "
                "the library path")
        return already, ""
    seen, too_new = set(), []
    for path in candidates():
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        if _too_new(_major(path), driver_major):
            too_new.append(path)
            continue
        return path, ""
    if too_new:
        return None, (
            f"the only CUPTI found ({too_new[0]}) is newer than the driver "
            f"({_driver_text(driver_cuda_version)}); install the "
            f"matching one, e.g. pip install nvidia-cuda-cupti-cu{driver_major}"
        )
    return None, (
        "CUPTI was not found; install it with pip (nvidia-cuda-cupti for CUDA 13, "
        "nvidia-cuda-cupti-cu12 for CUDA 12), or set CUDA_HOME or HOOKMAGIC_CUPTI"
    )
