"""Kernel families compiled once per test run, for the tests that read their resources and PTX.

A Hopper family takes NVRTC 10-35 s on two cores. Its ptxas resource report (from
``build.compile_family``, the package's own compile) and its PTX (what the code is made of) come
from ONE compile here: NVRTC keeps a program's PTX beside the cubin it was asked for, and
:func:`compiled_with_ptx` reads it from the very program ``compile_family`` compiled. Both are
kept per (family, arch), so the tests that check a family's registers and the tests that check
its instructions share that compile; :func:`warm` (tests/test_kernels.py's check of every family)
compiles everything on every core first, these included.
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


#: the families whose sm_90a PTX the Hopper tests read (test_kernels_wgmma, _fp8, _attention)
HOPPER_FAMILIES = ("gemm_wgmma", "gemm_fp8", "attention_wgmma")

_compiled: dict[tuple[str, str], tuple[build.Compiled, str]] = {}


def compiled_with_ptx(family: str, arch: str) -> tuple[build.Compiled, str]:
    """``build.compile_family(family, arch)`` and the PTX of that same compile; once per process
    (or taken from :func:`warm`). A kernel cache hit (an entry keyed by this source, arch, NVRTC
    and constants) compiles nothing: the PTX then comes from :func:`family_ptx`."""
    if (family, arch) not in _compiled:
        _compiled[(family, arch)] = _compile_with_ptx(family, arch)
    return _compiled[(family, arch)]


def _compile_with_ptx(family: str, arch: str) -> tuple[build.Compiled, str]:
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
        compiled = build.compile_family(family, arch)
    finally:
        build._core = original
    if compiled.from_cache:
        return compiled, family_ptx(family, arch)
    (prog,) = programs
    try:
        return compiled, _ptx_of(prog.handle)
    finally:
        prog.close()


def _into_cache(family: str, arch: str) -> None:
    build.compile_family(family, arch)


def warm(archs: tuple[str, ...]) -> None:
    """Every family compiled for every arch in ``archs`` into the kernel cache, on every core
    (spawned processes; NVRTC compiles one family on one core), the Hopper families' sm_90a
    compiles kept with their PTX for :func:`compiled_with_ptx`."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    hopper = [(f, a) for a in archs for f in HOPPER_FAMILIES if a == "sm_90a" and (f, a) not in _compiled]
    rest = [(f, a) for a in archs for f in build.families() if (f, a) not in hopper]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        kept = {key: pool.submit(_compile_with_ptx, *key) for key in hopper}   # the longest first
        done = [pool.submit(_into_cache, *key) for key in rest]
        for key, future in kept.items():
            _compiled[key] = future.result()
        for future in done:
            future.result()


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


#: a warpgroup kernel's 384 threads with one block per SM may use 65536 / 384 = 170 registers
#: each, which ptxas rounds down to its allocation unit: 168
WARPGROUP_MAX_REGISTERS = 168


def assert_warpgroup_kernels_fit(c: build.Compiled) -> None:
    """Every kernel of a Hopper producer/consumer family fits one 384-thread block per SM, spills
    nothing, and keeps its wgmmas asynchronous (ptxas warns "serialized" when it cannot)."""
    for name, info in c.kernels.items():
        assert 0 < info["registers"] <= WARPGROUP_MAX_REGISTERS, (name, info["registers"])
        assert info["spill_store_bytes"] == info["spill_load_bytes"] == info["stack_bytes"] == 0, name
    assert "serialized" not in c.log
