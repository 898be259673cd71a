"""The kernel cache loads only code this user wrote: a cache folder others can write, an entry
someone else owns, and a symlink planted at an entry's path are each refused (real NVRTC
compiles; no GPU needed)."""
from __future__ import annotations

import os
import warnings

import pytest

build = pytest.importorskip("hookmagic.kernels.build")
try:
    build._core()
except Exception as exc:  # pragma: no cover - the [kernels] extra is part of [dev]
    pytest.fail(f"NVRTC is needed for these tests: {exc}")

FAMILY = "gemm_mma"   # the smallest family: each test compiles it once or twice
ARCH = "sm_80"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("HOOKMAGIC_KERNEL_CACHE", str(folder))
    build._WARNED.clear()
    return folder


def _entry(folder, suffix):
    key = build.cache_key(FAMILY, ARCH)
    return folder / f"{FAMILY}-{ARCH}-{key}{suffix}"


def test_a_private_cache_is_used_and_made_private(cache):
    first = build.compile_family(FAMILY, ARCH)
    assert not first.from_cache
    assert oct(cache.stat().st_mode & 0o777) == oct(0o700)
    assert oct(_entry(cache, ".cubin").stat().st_mode & 0o777) == oct(0o600)
    assert build.compile_family(FAMILY, ARCH).from_cache


def test_a_cache_others_can_write_is_not_used(cache):
    build.compile_family(FAMILY, ARCH)                 # a good entry exists
    os.chmod(cache, 0o777)
    with pytest.warns(UserWarning, match="writable by other users"):
        again = build.compile_family(FAMILY, ARCH)
    assert not again.from_cache


def test_an_entry_owned_by_someone_else_is_not_loaded(cache, monkeypatch):
    build.compile_family(FAMILY, ARCH)
    real = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: real + 4242)   # the files now belong to another
    # (the folder too: it is refused first; a folder of ours holding their files is the case)
    monkeypatch.setattr(build, "trusted_cache_dir", lambda cdir: cdir)
    assert not build.compile_family(FAMILY, ARCH).from_cache


def test_a_planted_cubin_with_a_matching_json_is_not_loaded(cache):
    build.compile_family(FAMILY, ARCH)
    cubin, meta = _entry(cache, ".cubin"), _entry(cache, ".json")
    os.chmod(cubin, 0o666)                           # as if someone else could have written it
    assert not build.compile_family(FAMILY, ARCH).from_cache
    assert oct(cubin.stat().st_mode & 0o777) == oct(0o600)   # rewritten, private again
    assert meta.exists()


def test_a_symlink_planted_at_an_entry_is_replaced_not_written_through(cache, tmp_path):
    cache.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    _entry(cache, ".cubin").symlink_to(victim)
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # nothing about the folder: it is fine
        got = build.compile_family(FAMILY, ARCH)
    assert not got.from_cache
    assert victim.read_text() == "do not touch"
    assert not _entry(cache, ".cubin").is_symlink()
    assert build.compile_family(FAMILY, ARCH).from_cache
