"""A 1 MB file that expands to 1 GiB (synthetic bombs, built from repeated flushed deflate
blocks so that making them takes milliseconds) is refused by its expansion ratio: before any
byte is inflated when its headers declare the size, within a bounded amount of memory when
they lie."""
from __future__ import annotations

import struct
import tracemalloc
import zipfile
import zlib

import pytest

import hookmagic
from hookmagic.common import files
from hookmagic.common.errors import LimitExceeded
from hookmagic.importers.kineto import read_kineto
from hookmagic.trace.io import load_trace

GIB = 1 << 30
_BLOCK = b"\0" * (1 << 20)


def _deflate_of_zeros(size: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``size`` zero bytes, and its CRC-32. After a full flush the
    compressor's state is reset, so every 1 MiB block compresses to the same bytes: the
    stream is one block's bytes repeated, then an empty final block."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = comp.compress(_BLOCK) + comp.flush(zlib.Z_FULL_FLUSH)
    count = size // len(_BLOCK)
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(_BLOCK, crc)
    return piece * count + b"\x03\x00", crc


def _gzip_bomb(path, size=GIB, trailer_size=None):
    deflate, crc = _deflate_of_zeros(size)
    isize = (size if trailer_size is None else trailer_size) & 0xFFFFFFFF
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + deflate
                     + struct.pack("<II", crc, isize))
    return path


def _zip_bomb(path, size=GIB):
    """A trace-like ZIP whose kernels.parquet member is ``size`` zeros, deflated."""
    deflate, crc = _deflate_of_zeros(size)
    name = b"kernels.parquet"
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(deflate), size,
                        len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc,
                          len(deflate), size, len(name), 0, 0, 0, 0, 0, 0) + name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central),
                      len(local) + len(deflate), 0)
    path.write_bytes(local + deflate + central + end)
    return path


def test_the_synthetic_bombs_are_what_they_claim(tmp_path):
    # the bombs themselves, checked with the standard library: ~1 MB that inflates to the size
    small = _gzip_bomb(tmp_path / "small.json.gz", size=8 << 20)
    assert len(zlib.decompress(small.read_bytes(), 31)) == 8 << 20
    with zipfile.ZipFile(_zip_bomb(tmp_path / "small.hmtrace", size=8 << 20)) as zf:
        assert zf.testzip() is None and len(zf.read("kernels.parquet")) == 8 << 20
    big = _gzip_bomb(tmp_path / "big.json.gz")
    assert big.stat().st_size < 1_100_000


def test_a_1mb_gzip_claiming_1gib_is_refused_before_inflating(tmp_path, monkeypatch):
    bomb = _gzip_bomb(tmp_path / "synthetic_bomb.json.gz")

    def never(*a, **k):
        raise AssertionError("inflated a gzip stream whose trailer declares a bomb")
    monkeypatch.setattr(files.zlib, "decompressobj", never)
    with pytest.raises(LimitExceeded, match="expands more than 200x.*declare"):
        hookmagic.load(bomb)
    with pytest.raises(LimitExceeded, match="expands more than"):
        read_kineto(bomb)


def test_a_gzip_bomb_with_a_forged_trailer_stops_early_in_bounded_memory(tmp_path):
    # the trailer claims 1 KiB; the stream still inflates to 1 GiB
    bomb = _gzip_bomb(tmp_path / "synthetic_forged.json.gz", trailer_size=1024)
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded, match="expands more than 200x"):
            hookmagic.load(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the compressed file (1 MB) plus about RATIO_FLOOR inflated, not 1 GiB (nor 200 MB)
    assert peak < files.RATIO_FLOOR + (16 << 20), f"peak {peak / 2**20:.0f} MiB"


def test_a_1mb_trace_zip_claiming_1gib_is_refused_before_reading_a_member(tmp_path,
                                                                         monkeypatch):
    bomb = _zip_bomb(tmp_path / "synthetic_bomb.hmtrace")
    assert bomb.stat().st_size < 1_100_000

    def never(*a, **k):
        raise AssertionError("opened a member of a ZIP whose headers declare a bomb")
    monkeypatch.setattr(zipfile.ZipFile, "open", never)
    with pytest.raises(LimitExceeded, match="expands more than 200x.*declare"):
        load_trace(bomb)
    with pytest.raises(LimitExceeded, match="expands more than 200x"):
        hookmagic.load(bomb)


def test_ratio_bound_leaves_real_compression_alone():
    # JSON traces compress 3-30x: far under the bound; so does an incompressible payload
    files.check_ratio(30 * (64 << 20), 64 << 20, "synthetic")
    files.check_ratio(files.RATIO_FLOOR, 1, "synthetic")        # small outputs never refused
    with pytest.raises(LimitExceeded):
        files.check_ratio(files.RATIO_FLOOR + 1, 1, "synthetic")
