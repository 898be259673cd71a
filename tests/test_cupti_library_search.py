"""The CUPTI search never loads code from the working directory and never dlopens to look.

A real shared library is planted (compiled here with the C compiler that builds the native
extension): its constructor writes a marker file when anything loads it. Each case runs in a
fresh interpreter, so sys.path, the working directory and the loaded libraries are its own.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_PLANT = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char* path = getenv("HM_PLANTED_MARKER");
    FILE* f = path ? fopen(path, "a") : NULL;
    if (f) { fputs("the planted library was loaded\n", f); fclose(f); }
}
"""


def _compiler() -> str:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    pytest.skip("no C compiler to build the planted library")


def _plant(path: Path, soname: str, build_dir: Path) -> Path:
    source = build_dir / "plant.c"
    source.write_text(_PLANT)
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([_compiler(), "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(path),
                    str(source)], check=True, capture_output=True)
    return path


def _search(cwd: Path, marker: Path, code: str, env: dict | None = None) -> dict:
    """Run ``code`` (which sets ``result``) in a fresh interpreter in ``cwd``."""
    program = textwrap.dedent("""
        import json, sys
        sys.path.insert(0, {root!r})
        from hookmagic.cupti import library
        {code}
        print(json.dumps(result))
    """).format(root=str(ROOT), code=textwrap.indent(textwrap.dedent(code), "")).strip()
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("HOOKMAGIC_CUPTI", "CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX")}
    environment.update(HM_PLANTED_MARKER=str(marker), **(env or {}))
    out = subprocess.run([sys.executable, "-c", program], cwd=cwd, env=environment,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def planted(tmp_path):
    """A working directory holding libcupti where a relative search would find it."""
    cwd = tmp_path / "work"
    for rel in ("libcupti.so.13", "nvidia/cu13/lib/libcupti.so.13",
                "nvidia/cuda_cupti/lib/libcupti.so.12", "lib64/libcupti.so.13",
                "relative_site/nvidia/cu13/lib/libcupti.so.13"):
        _plant(cwd / rel, "libcupti.so.13", tmp_path)
    return cwd, tmp_path / "marker.txt"


def test_nothing_in_the_working_directory_is_found_or_loaded(planted):
    cwd, marker = planted
    result = _search(cwd, marker, """
        sys.path[1:1] = ['', '.', 'relative_site']   # as IPython/ipykernel put '' there
        path, why = library.find_cupti(13000)
        result = {"path": path, "candidates": library.candidates()}
    """, env={"CUDA_HOME": ".", "CUDA_PATH": "lib64/..", "CONDA_PREFIX": "."})
    assert not marker.exists(), marker.read_text()
    for path in result["candidates"] + [result["path"] or "/"]:
        assert os.path.isabs(path)
        assert not os.path.realpath(path).startswith(str(cwd)), path


def test_a_relative_override_is_refused(planted):
    cwd, marker = planted
    result = _search(cwd, marker, """
        path, why = library.find_cupti(13000)
        result = {"path": path, "why": why}
    """, env={"HOOKMAGIC_CUPTI": "libcupti.so.13"})
    assert result["path"] is None and "absolute path" in result["why"]
    assert not marker.exists()


def test_an_absolute_wheel_dir_is_searched_without_loading(planted, tmp_path):
    cwd, marker = planted
    site = tmp_path / "site"
    lib = _plant(site / "nvidia" / "cu13" / "lib" / "libcupti.so.13", "libcupti.so.13", tmp_path)
    code = f"""
        sys.path.insert(0, {str(site)!r})
        ok = library.find_cupti(13000)
        old_driver = library.find_cupti(12060)   # CUDA 12.6 driver: this CUPTI is too new
        result = {{"ok": ok, "old_driver": old_driver, "soname": library.elf_soname(ok[0])}}
    """
    result = _search(cwd, marker, code)
    assert result["ok"] == [str(lib), ""]
    assert result["soname"] == "libcupti.so.13"
    assert result["old_driver"][0] != str(lib)   # CUDA 13 CUPTI skipped under a 12.6 driver
    assert not marker.exists(), "the search must not dlopen candidates"


def test_the_version_rule_applies_to_an_already_loaded_cupti(tmp_path):
    """A CUPTI for CUDA 14 loaded earlier (by another library) is refused under a 13.0 driver,
    instead of being accepted because it is already there."""
    marker = tmp_path / "marker.txt"
    lib = _plant(tmp_path / "elsewhere" / "libcupti.so.2026.1.0", "libcupti.so.14", tmp_path)
    result = _search(tmp_path, marker, f"""
        import ctypes
        ctypes.CDLL({str(lib)!r})                 # someone else loaded it
        result = list(library.find_cupti(13000)) + [library.loaded_cupti()]
    """)
    assert marker.exists()  # loaded on purpose above, by the test itself
    path, why, loaded = result
    assert loaded == str(lib)
    assert path is None and "already loaded a CUPTI for CUDA 14" in why


def test_soname_reader_on_non_libraries(tmp_path):
    from hookmagic.cupti.library import elf_soname

    junk = tmp_path / "libcupti.so.13"
    junk.write_bytes(b"\x7fELF" + b"\x02\x01" + b"\xff" * 200)
    assert elf_soname(str(junk)) is None
    assert elf_soname(str(tmp_path)) is None
    assert elf_soname(str(tmp_path / "missing")) is None


def test_of_several_loaded_cuptis_the_newest_the_driver_runs_is_shared(tmp_path):
    """PyTorch for CUDA 13 with CUDA 12's wheel on the path maps libcupti.so.12 beside its own
    libcupti.so.13 (seen on a GPU machine): the capture shares the one the driver runs, newest
    first, whichever the process mapped first."""
    marker = tmp_path / "marker.txt"
    cu12 = _plant(tmp_path / "a" / "nvidia" / "cuda_cupti" / "lib" / "libcupti.so.12",
                  "libcupti.so.12", tmp_path)
    cu13 = _plant(tmp_path / "b" / "nvidia" / "cu13" / "lib" / "libcupti.so.13",
                  "libcupti.so.13", tmp_path)
    loaded, under_13, under_12 = _search(tmp_path, marker, f"""
        import ctypes
        ctypes.CDLL({str(cu12)!r})                # both loaded by someone else, CUDA 12's first
        ctypes.CDLL({str(cu13)!r})
        result = [sorted(library.loaded_cuptis()), library.find_cupti(13000)[0],
                  library.find_cupti(12080)[0]]
    """)
    assert loaded == sorted([str(cu12), str(cu13)])
    assert under_13 == str(cu13)    # a CUDA 13.0 driver: the newest
    assert under_12 == str(cu12)    # a CUDA 12.8 driver cannot run CUPTI 13
