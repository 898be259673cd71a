"""Compiling the CUDA sources of ``kernels/`` with NVRTC, and the on-disk cubin cache.

The sources ship as package data (top-level ``kernels/`` in a checkout). Each family
(``kernels/<family>.cu``) is compiled once per architecture with cuda-core's
:class:`cuda.core.Program` (NVRTC; no nvcc, no GPU needed) to a cubin, with ``ptxas -v`` so the
compile reports registers, shared memory and spill bytes of every kernel.

Cubins are cached under ``$HOOKMAGIC_KERNEL_CACHE`` (default ``$XDG_CACHE_HOME/hookmagic/kernels``
or ``~/.cache/hookmagic/kernels``), keyed by the SHA-256 of the family's source and every
``.cuh`` it may include, the target architecture, the NVRTC version and the compile options.
Entries are written to a temporary file and renamed into place, so concurrent processes never
read half an entry; each entry's metadata records the cubin's SHA-256, and an entry that does not
match it (a corrupted or truncated file) is rebuilt, not loaded.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from hookmagic.common.errors import HookmagicError
from hookmagic.kernels import constants
from hookmagic.kernels.errors import KernelCompileError, KernelsUnavailable

#: Bump when the cache layout or the compile flags' meaning changes.
CACHE_FORMAT = 1

#: Options every family is compiled with (besides the architecture and include paths).
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17", "--use_fast_math=false")

_INSTALL_HINT = ("install the optional extra: pip install 'hookmagic[kernels]' "
                 "(cuda-core, cuda-bindings, cuda-pathfinder and the NVRTC wheel)")


def source_dir() -> Path:
    """The folder holding the ``.cu``/``.cuh`` sources: the copy installed inside the package,
    or the checkout's top-level ``kernels/``."""
    here = Path(__file__).resolve().parent
    candidates = [here.parent / "data" / "cuda" / "kernels", here.parent.parent / "kernels"]
    for c in candidates:
        if c.is_dir() and any(c.glob("*.cu")):
            return c
    raise KernelsUnavailable(
        "the CUDA sources of hookmagic.kernels were not found (looked in "
        + ", ".join(str(c) for c in candidates) + "); reinstall hookmagic")


def families() -> list[str]:
    """Names of the kernel families (one ``.cu`` file each)."""
    return sorted(p.stem for p in source_dir().glob("*.cu"))


def normalize_arch(arch: Any) -> str:
    """``'sm_90a'``, ``'90'``, ``90``, ``(9, 0)``, ``'9.0'`` or ``'compute_90'`` -> ``'sm_90'``-style name."""
    if isinstance(arch, tuple):
        return f"sm_{int(arch[0])}{int(arch[1])}"
    s = str(arch).strip().lower()
    s = s.removeprefix("sm_").removeprefix("compute_").removeprefix("sm")
    m = re.fullmatch(r"(\d+)\.(\d)", s)
    if m:
        s = m.group(1) + m.group(2)
    if not re.fullmatch(r"\d{2,3}[af]?", s):
        from hookmagic.kernels.errors import KernelArgumentError
        raise KernelArgumentError(f"arch {arch!r} is not an architecture like 'sm_90', 'sm_90a' or '8.7'")
    return "sm_" + s


def arch_number(arch: str) -> int:
    """``'sm_90a'`` -> 90."""
    return int(re.sub(r"[^0-9]", "", normalize_arch(arch)))


def _core():
    try:
        from cuda.core import Program, ProgramOptions  # noqa: F401
        import cuda.core as core
    except Exception as exc:  # ImportError, or a broken binary wheel
        raise KernelsUnavailable(f"cuda-core could not be imported ({exc}); {_INSTALL_HINT}") from exc
    return core


def nvrtc_version() -> str:
    """NVRTC's version as ``'13.0'``; raises :class:`KernelsUnavailable` when NVRTC is missing."""
    try:
        from cuda.bindings import nvrtc
        err, major, minor = nvrtc.nvrtcVersion()
        if int(err) != 0:
            raise KernelsUnavailable(f"nvrtcVersion returned {err}")
    except Exception as exc:
        raise KernelsUnavailable(f"NVRTC could not be loaded ({exc}); {_INSTALL_HINT}") from exc
    return f"{major}.{minor}"


def include_paths() -> list[str]:
    """The sources' folder, then the CUDA runtime headers (cuda_fp16.h, mma.h) that
    cuda-pathfinder finds in the NVIDIA wheels or the toolkit (NVRTC's bundled headers otherwise)."""
    paths = [str(source_dir())]
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        d = find_nvidia_header_directory("cudart")
        if d:
            paths.append(str(d))
    except Exception:
        pass
    # mma.h includes crt/mma.h; some wheel layouts (CUDA 13's, on the H100 machine) ship mma.h
    # without crt/: then add a toolkit folder that has it, else NVRTC fails to compile.
    def has(d: str, name: str) -> bool:
        return os.path.isfile(os.path.join(d, name))
    if not any(has(d, os.path.join("crt", "mma.h")) for d in paths[1:]):
        for d in ("/usr/local/cuda/include", "/usr/local/cuda/targets/x86_64-linux/include",
                  "/usr/local/cuda/targets/sbsa-linux/include"):
            if has(d, "mma.h") and has(d, os.path.join("crt", "mma.h")) and d not in paths:
                paths.append(d)
                break
    return paths


def cache_dir() -> Path:
    """Where cubins are cached (created on demand)."""
    env = os.environ.get("HOOKMAGIC_KERNEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hookmagic" / "kernels"


def source_text(family: str) -> str:
    """The family's ``.cu`` source."""
    path = source_dir() / f"{family}.cu"
    if not path.is_file():
        from hookmagic.kernels.errors import KernelArgumentError
        raise KernelArgumentError(f"no kernel family {family!r}; known: {', '.join(families())}")
    return path.read_text()


def source_hash(family: str) -> str:
    """SHA-256 over the family's source and every header in the sources' folder."""
    h = hashlib.sha256()
    d = source_dir()
    for p in [d / f"{family}.cu", *sorted(d.glob("*.cuh"))]:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(family: str, arch: str, options: Iterable[str] = ()) -> str:
    """The cache key: source hash + architecture + NVRTC version + the tile constants' -D values
    + options (+ cache format)."""
    parts = [f"format={CACHE_FORMAT}", source_hash(family), normalize_arch(arch), nvrtc_version(),
             *BASE_OPTIONS, *constants.defines(family), *options]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")
_PROPS = re.compile(r"Function properties for (\S+)")


def parse_ptxas_info(log: str) -> dict[str, dict[str, int]]:
    """Per-kernel resource use from ``ptxas -v`` output: registers, static shared memory
    (bytes), stack frame, spill stores and spill loads (bytes), barriers."""
    out: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    props_of: str | None = None
    entry: str | None = None
    for line in log.splitlines():
        m = _PROPS.search(line)
        if m:
            props_of = m.group(1)
            continue
        m = _ENTRY.search(line)
        if m:
            entry = props_of = m.group(1)
            current = out.setdefault(m.group(1), {"registers": 0, "smem_bytes": 0, "stack_bytes": 0,
                                                  "spill_store_bytes": 0, "spill_load_bytes": 0,
                                                  "barriers": 0})
            continue
        if current is None:
            continue
        m = _STACK.search(line)
        if m and props_of == entry:  # not the properties of a non-inlined device function
            current["stack_bytes"], current["spill_store_bytes"], current["spill_load_bytes"] = map(int, m.groups())
        m = _USED.search(line)
        if m:
            current["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            current["smem_bytes"] = int(s.group(1)) if s else 0
            b = _BARRIERS.search(line)
            current["barriers"] = int(b.group(1)) if b else 0
    return out


@dataclass
class Compiled:
    """One family compiled for one architecture."""
    family: str
    arch: str
    cubin: bytes
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)
    log: str = ""
    key: str = ""
    from_cache: bool = False
    nvrtc: str = ""


def compile_family(family: str, arch: Any, options: Iterable[str] = (), *, use_cache: bool = True) -> Compiled:
    """Compile ``kernels/<family>.cu`` for ``arch`` (e.g. ``'sm_90a'``), from the cache when possible,
    with the tile constants of :mod:`hookmagic.kernels.constants` as ``-D`` values before ``options``.

    Raises :class:`KernelCompileError` with NVRTC's log when the source does not compile, and
    :class:`KernelsUnavailable` when cuda-core or NVRTC is missing.
    """
    arch = normalize_arch(arch)
    options = tuple(options)
    core = _core()
    src = source_text(family)  # raises for an unknown family
    key = cache_key(family, arch, options)
    cdir = trusted_cache_dir(cache_dir()) if use_cache else None
    use_cache = cdir is not None
    cdir = cdir or cache_dir()
    cubin_path, meta_path = cdir / f"{family}-{arch}-{key}.cubin", cdir / f"{family}-{arch}-{key}.json"
    if use_cache:
        hit = _read_entry(cubin_path, meta_path)
        if hit is not None:
            meta, cubin = hit
            return Compiled(family, arch, cubin, meta["kernels"], meta.get("log", ""), key, True, meta.get("nvrtc", ""))
    opts = core.ProgramOptions(arch=arch, std="c++17", include_path=include_paths(), ptxas_options=["-v"],
                               define_macro=[o.removeprefix("-D") for o in (*constants.defines(family), *options)
                                             if o.startswith("-D")] or None,
                               name=f"{family}.cu")
    logs = io.StringIO()
    try:
        prog = core.Program(src, "c++", opts)
        obj = prog.compile("cubin", logs=logs)
    except Exception as exc:
        text = str(exc).replace("\x00", "")
        head, sep, tail = text.partition("compilation log:")
        log = (logs.getvalue().replace("\x00", "") + "\n" + (tail if sep else "")).strip()
        raise KernelCompileError(f"NVRTC could not compile kernels/{family}.cu for {arch}: "
                                 f"{head.strip().rstrip(',') or type(exc).__name__}", log) from None
    log = logs.getvalue().replace("\x00", "")
    cubin = bytes(obj.code)
    info = parse_ptxas_info(log)
    meta = {"family": family, "arch": arch, "key": key, "nvrtc": nvrtc_version(), "options": list(options),
            "sha256": hashlib.sha256(cubin).hexdigest(), "kernels": info, "log": log}
    if use_cache:
        try:
            _write_entry(cdir, cubin_path, meta_path, cubin, meta)
        except OSError:
            pass  # a read-only cache is not an error: the compile result is still used
    return Compiled(family, arch, cubin, info, log, key, False, meta["nvrtc"])


def _private(st: os.stat_result) -> bool:
    """Owned by this user and writable by no one else: nobody else could have planted it."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def trusted_cache_dir(cdir: Path) -> Path | None:
    """``cdir``, created private (mode 700) if missing, when it can hold code this process will
    load: a real folder (not a symlink) of this user's that no one else can write. ``None``
    otherwise, after one warning naming the fix: kernels are then compiled without the cache."""
    try:
        cdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(cdir)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode) and _private(st):
        return cdir
    if str(cdir) not in _WARNED:
        _WARNED.add(str(cdir))
        warnings.warn(f"hookmagic.kernels: not using the kernel cache {cdir}: it is "
                      f"{'a symlink' if stat.S_ISLNK(st.st_mode) else 'not a folder' if not stat.S_ISDIR(st.st_mode) else 'writable by other users or owned by another user'}"
                      ", so anyone could plant code there. Point HOOKMAGIC_KERNEL_CACHE at a "
                      "folder of your own (chmod 700); compiling without the cache meanwhile.",
                      stacklevel=3)
    return None


_WARNED: set[str] = set()


class _NotPrivate(HookmagicError, PermissionError):
    """A cache file that this user did not write alone (caught inside this module: a cache miss)."""


def _read_private(path: Path) -> bytes:
    """A cache file's bytes, only if it is a regular file (not a symlink) that is private."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _private(st):
            raise _NotPrivate(f"{path} is not a private regular file")
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            return fh.read()
    finally:
        if fd >= 0:
            os.close(fd)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path`` as a new private file: a temporary file created exclusively (never through
    a link someone planted), then renamed over whatever is at ``path`` (a planted symlink is
    replaced, not followed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read_entry(cubin_path: Path, meta_path: Path) -> tuple[dict, bytes] | None:
    try:
        meta = json.loads(_read_private(meta_path))
        cubin = _read_private(cubin_path)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("sha256") != hashlib.sha256(cubin).hexdigest() \
            or not isinstance(meta.get("kernels"), dict) or not meta["kernels"]:
        return None  # corrupted or half-replaced entry, or one without resource lines: rebuild
    return meta, cubin


def _write_entry(cdir: Path, cubin_path: Path, meta_path: Path, cubin: bytes, meta: dict) -> None:
    # cubin first, metadata (with the cubin's hash) last: a reader that sees new metadata with
    # an old or missing cubin finds the hash wrong and rebuilds.
    _write_private(cubin_path, cubin)
    _write_private(meta_path, json.dumps(meta, indent=1).encode())


__all__ = ["Compiled", "compile_family", "families", "source_dir", "cache_dir", "cache_key",
           "nvrtc_version", "normalize_arch", "parse_ptxas_info", "include_paths"]
