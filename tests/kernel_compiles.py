"""Kernel families compiled once per test process, for the tests that read their resources and PTX.

A Hopper family takes NVRTC 15-35 s on two cores. Its ptxas resource report (from
``build.compile_family``, the package's own compile) and its PTX (what the code is made of) come
from ONE compile here: NVRTC keeps a program's PTX beside the cubin it was asked for, and
:func:`compiled_with_ptx` reads it from the very program ``compile_family`` compiled. Both are
cached per (family, arch), so the tests that check a family's registers and the tests that check
its instructions share that compile.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

from hookmagic.kernels import build, constants


def _ptx_of(program_handle) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetPTXSize(program_handle)
    assert int(err) == 0, err
    buf = b" " * size
    (err,) = nvrtc.nvrtcGetPTX(program_handle, buf)
    assert int(err) == 0, err
    return buf.decode(errors="replace")


@functools.cache
def compiled_with_ptx(family: str, arch: str) -> tuple[build.Compiled, str]:
    """``build.compile_family(family, arch)`` compiled afresh (the kernel cache is not used: every
    call would otherwise be a cache hit, without a compile), and the PTX of that same compile."""
    real = build._core()
    programs = []

    def program(*args, **kwargs):
        prog = real.Program(*args, **kwargs)
        programs.append(prog)            # kept alive, so its PTX can be read after the compile
        return prog

    # compile_family takes cuda.core's module from build._core(): the same module, whose Program
    # is also remembered here. Nothing else about the compile changes.
    shim = SimpleNamespace(ProgramOptions=real.ProgramOptions, Program=program)
    original = build._core
    build._core = lambda: shim
    try:
        compiled = build.compile_family(family, arch, use_cache=False)
    finally:
        build._core = original
    assert len(programs) == 1 and not compiled.from_cache
    ptx = _ptx_of(programs[0].handle)
    programs[0].close()
    return compiled, ptx


@functools.cache
def family_ptx(family: str, arch: str) -> str:
    """A kernel family's PTX for ``arch``, straight from NVRTC (cuda.core's PTX path wants a
    driver), compiled with the tile constants as build passes them."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(build.source_text(family).encode(), f"{family}.cu".encode(), 0, [], [])
    assert int(err) == 0
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"] + [f"-I{d}".encode() for d in build.include_paths()] \
        + [o.encode() for o in constants.defines(family)]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    assert int(err) == 0, err
    try:
        return _ptx_of(prog)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
