"""Compressed inputs that expand absurdly (a decompression bomb) are refused by their expansion
ratio as they inflate, long before the byte budget and with little memory."""
from __future__ import annotations

import resource
import zipfile
import zlib

import pytest

import hookmagic
from hookmagic.common.errors import LimitExceeded

BOMB_BYTES = 256 << 20     # what the synthetic bombs expand to


def _gzip_of_zeros(path, size=BOMB_BYTES):
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    with open(path, "wb") as fh:
        for _ in range(size // len(block)):
            fh.write(comp.compress(block))
        fh.write(comp.flush())
    return path


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_gzip_json_bomb_is_refused_by_its_ratio(tmp_path):
    bomb = _gzip_of_zeros(tmp_path / "synthetic_bomb.json.gz")
    assert bomb.stat().st_size < 1 << 20          # a few hundred kB on disk
    before = _peak_rss_mb()
    with pytest.raises(LimitExceeded, match="expands more than"):
        hookmagic.load(bomb)
    assert _peak_rss_mb() - before < 200          # stopped early, not after 256 MiB


def test_a_zip_member_bomb_is_refused_before_it_is_inflated(tmp_path):
    bomb = tmp_path / "synthetic_bomb.hmtrace"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("manifest.json", "w") as fh:
            fh.write(b'{"format": "hookmagic.trace", "meta": {}, "tables": {}}')
        with zf.open("kernels.parquet", "w", force_zip64=True) as fh:
            block = b"\0" * (1 << 20)
            for _ in range(BOMB_BYTES // len(block)):
                fh.write(block)
    from hookmagic.common.files import read_zip_member
    with zipfile.ZipFile(bomb) as zf, pytest.raises(LimitExceeded, match="expands more than"):
        read_zip_member(zf, "kernels.parquet", "synthetic bomb")


def test_ordinary_compressed_recordings_still_load():
    # a real Kineto export (gzip JSON, about 10x) and a saved trace pass the ratio check
    from hookmagic.recordings import FOLDER
    assert len(hookmagic.load(FOLDER / "kineto_resnet18.json.gz").kernels) > 0
    assert len(hookmagic.recordings.load("resnet18_inference_churn").kernels) > 0
