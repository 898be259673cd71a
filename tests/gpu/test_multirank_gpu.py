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


@pytest.mark.needs("two_gpus")
@pytest.mark.parametrize("slow_rank,slow_ms", [(1, 20.0), (0, 50.0)])
def test_torchrun_two_ranks_names_the_slowed_rank_in_every_captured_step(tmp_path, slow_rank,
                                                                        slow_ms):
    """A real 2-GPU DDP job (lab/multirank/multirank_ddp.py under torchrun), captured by the
    HOOKMAGIC_CAPTURE_* variables alone: one rank sleeps before each forward pass. In every
    captured step, the first included, the straggler is that rank, the cause "host", and the
    lateness within +15 % of the sleep the rank measured itself (time.perf_counter)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, HOOKMAGIC_CAPTURE_DIR=str(tmp_path),
               HOOKMAGIC_CAPTURE_STEPS="6:10", HOOKMAGIC_CAPTURE_OPTIONS="nvml=0",
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(root / "lab" / "multirank" / "multirank_ddp.py"), "--steps", "12",
         "--slow-rank", str(slow_rank), "--slow-ms", str(slow_ms)],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    truth = json.loads((tmp_path / f"truth_rank={slow_rank}.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts = hookmagic.load_many(tmp_path)
    with ts:
        st = ts.stragglers()
    assert st["step"].tolist() == [6, 7, 8, 9], st
    assert (st["straggler_rank"] == slow_rank).all(), st
    assert (st["cause"] == "host").all(), st
    for step, late in zip(st["step"], st["lateness_ns"]):
        slept = truth["sleep_s"][step] * 1e9
        # the slowed rank reaches the collective after its sleep plus the host time to launch
        # its forward pass, less the other rank's own jitter: on 2x H200 the lateness read
        # -3.0 ... +4.4 ms off a 20 ms sleep (the first captured step included)
        assert abs(late - slept) < 0.1 * slept + 5e6, (step, late, slept)
