"""capture(dir=...) on a real GPU: the rank folder names the GPU its kernels ran on (by UUID),
and load_many reads it back through DuckDB with the same kernels as the Trace in memory.
(The 2-GPU torchrun job is lab/multirank/multirank_ddp.py.)"""
from __future__ import annotations

import warnings

import pytest

import hookmagic

pytestmark = pytest.mark.needs("duckdb")


def test_capture_dir_names_the_gpu_and_duckdb_reads_the_kernels(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    x = torch.randn(512, 512, device="cuda")
    torch.cuda.synchronize()
    with hookmagic.capture(dir=tmp_path, nvml=False) as trace:
        for _ in range(5):
            x = torch.tanh(x @ x)
        torch.cuda.synchronize()
    assert trace.status == "complete", trace.meta.get("reason")
    ident = trace.meta["rank"]
    dev = torch.cuda.current_device()
    assert ident["device"] == dev
    want_uuid = [d["uuid"] for d in trace.meta["devices"] if d["index"] == dev][0]
    assert ident["gpu_uuid"] == want_uuid and want_uuid
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts = hookmagic.load_many(tmp_path)
    with ts:
        got = ts.sql("SELECT name, start_ns FROM kernels ORDER BY start_ns, name")
        want = trace.kernels.sort_values(["start_ns", "name"])
        assert got["name"].tolist() == want["name"].tolist()
        assert got["start_ns"].tolist() == want["start_ns"].tolist()
        assert ts.ranks["gpu_uuid"].tolist() == [want_uuid]
