"""Per-rank captures: trace folders, rank identity from launchers' environments, capture(dir=),
the HOOKMAGIC_CAPTURE_* form (in real subprocesses), NCCL kernel names. No GPU needed: without
one the captures are "unavailable" and still written, which is what a rank without data shows."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import hookmagic
from hookmagic.analysis.nccl import COLLECTIVE_SQL, classify_nccl, parse_nccl_kernel
from hookmagic.distributed import rank_identity
from hookmagic.cupti.autocapture import AutoCaptureConfigError, parse_options, parse_steps
from hookmagic.trace import TraceFileError
from hookmagic.trace.folder import is_trace_folder, load_trace_folder, save_trace_folder
from hookmagic.trace.model import Trace
from tests.synthetic import synthetic_tables

ROOT = Path(__file__).resolve().parents[1]


def _assert_same_tables(a: Trace, b: Trace) -> None:
    for name in a.tables:
        pd.testing.assert_frame_equal(a.tables[name].reset_index(drop=True),
                                      b.tables[name].reset_index(drop=True), check_dtype=True)


def test_folder_round_trip_and_duckdb_reads_it(tmp_path):
    trace = Trace(synthetic_tables(), {"label": "synthetic", "devices": [{"index": 0}]})
    path = save_trace_folder(trace, tmp_path / "rank=0")
    assert is_trace_folder(path)
    # every table is a file, empty ones included (a glob over ranks always finds them)
    files = sorted(p.name for p in Path(path).iterdir())
    assert "meta.json" in files and "samples.parquet" in files and "kernels.parquet" in files
    back = hookmagic.load(path)
    _assert_same_tables(trace, back)
    assert back.meta["label"] == "synthetic"
    # DuckDB reads the folder's Parquet as it is, with the same rows and values
    got = duckdb.sql(f"SELECT start_ns, name FROM read_parquet('{path}/kernels.parquet') "
                     "ORDER BY start_ns").df()
    want = trace.kernels.sort_values("start_ns")[["start_ns", "name"]].reset_index(drop=True)
    assert got["start_ns"].tolist() == want["start_ns"].tolist()
    assert got["name"].tolist() == want["name"].tolist()
    addr = duckdb.connect().execute(
        f"SELECT max(address) FROM read_parquet('{path}/memory.parquet')").fetchone()
    assert int(addr[0]) == int(trace.memory["address"].max())  # uint64 above 2**63 intact


def test_folder_replaces_own_folder_but_not_other_paths(tmp_path):
    t1 = Trace(synthetic_tables(), {"label": "one"})
    save_trace_folder(t1, tmp_path / "r")
    save_trace_folder(Trace(None, {"label": "two"}), tmp_path / "r")
    assert load_trace_folder(tmp_path / "r").meta["label"] == "two"
    assert len(load_trace_folder(tmp_path / "r").kernels) == 0
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(TraceFileError, match="not a trace folder"):
        save_trace_folder(t1, other)
    assert (other / "keep.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_damaged_folders_say_why(tmp_path):
    path = Path(save_trace_folder(Trace(synthetic_tables()), tmp_path / "rank=0"))
    (path / "kernels.parquet").write_bytes(b"PAR1 truncated")
    with pytest.raises(TraceFileError, match="kernels"):
        hookmagic.load(path)
    (path / "meta.json").unlink()
    with pytest.raises(TraceFileError, match="directory|meta.json"):
        hookmagic.load(path)


@pytest.mark.parametrize("env, want", [
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
      "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "job-42"},
     dict(rank=3, world_size=8, local_rank=1, local_world_size=4, job_id="job-42",
          launcher="torchrun")),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "none",
      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
     dict(rank=1, world_size=2, job_id="127.0.0.1:29500", launcher="torchrun")),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
      "SLURM_JOB_ID": "777"},
     dict(rank=5, world_size=16, local_rank=1, node_rank=2, job_id="777", launcher="slurm")),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
      "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, dict(rank=2, world_size=4, launcher="mpi")),
    ({}, dict(rank=0, world_size=1, launcher="single")),
    ({"RANK": "1", "WORLD_SIZE": "2", "HOOKMAGIC_RANK": "7", "HOOKMAGIC_JOB_ID": "mine"},
     dict(rank=7, job_id="mine")),
])
def test_rank_identity_from_launcher_environments(env, want):
    ident = rank_identity(env).as_meta()
    for key, value in want.items():
        assert ident[key] == value, key
    assert ident["host"] and ident["pid"] == os.getpid()


def test_capture_dir_writes_rank_folders_without_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "synthetic-job")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hookmagic.capture(dir=tmp_path, nvml=False) as t1:
            pass
        with hookmagic.capture(dir=tmp_path, nvml=False) as t2:
            pass
    assert Path(t1.meta["saved_to"]).name == "rank=1"
    assert Path(t2.meta["saved_to"]).name == "rank=1.1"
    back = hookmagic.load(tmp_path / "rank=1")
    assert back.meta["rank"]["rank"] == 1 and back.meta["rank"]["world_size"] == 2
    assert back.meta["rank"]["job_id"] == "synthetic-job"
    assert back.meta["rank"]["capture"] == 0
    if back.status == "unavailable":  # no GPU here: the reason travels with the folder
        assert back.meta["reason"]


def test_parse_steps_and_options():
    assert parse_steps(None) is None and parse_steps("") is None
    assert parse_steps("5:8") == (5, 8)
    assert parse_steps("3:") == (3, None)
    assert parse_steps("4") == (4, 5)
    for bad in ("x", "5:5", "-1:2"):
        with pytest.raises(AutoCaptureConfigError):
            parse_steps(bad)
    assert parse_options("stacks=0,nvml=false,buffer_mb=16,label=run") == \
        {"stacks": False, "nvml": False, "buffer_mb": 16, "label": "run"}
    with pytest.raises(AutoCaptureConfigError):
        parse_options("stacks")


_TRAIN = """
import hookmagic, torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    opt.zero_grad()
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
print("trained")
"""


@pytest.mark.parametrize("steps, want", [("2:4", [2, 3]), ("", None)])
def test_environment_capture_in_launched_ranks(tmp_path, steps, want):
    """Two real processes with torchrun's variables and HOOKMAGIC_CAPTURE_*: each writes
    its own rank folder; with steps, exactly the asked optimizer steps are marked."""
    if steps:
        pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(_TRAIN if steps else 'import hookmagic\nprint("trained")\n')
    out = tmp_path / "run"
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE="2", TORCHELASTIC_RUN_ID="synthetic-env-job",
                   HOOKMAGIC_CAPTURE_DIR=str(out), HOOKMAGIC_CAPTURE_STEPS=steps,
                   HOOKMAGIC_CAPTURE_OPTIONS="nvml=0", PYTHONWARNINGS="ignore",
                   PYTHONPATH=str(ROOT))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    for p in procs:
        text, _ = p.communicate(timeout=120)
        assert p.returncode == 0, text
        assert "trained" in text
    for rank in (0, 1):
        meta = json.loads((out / f"rank={rank}" / "meta.json").read_text())["meta"]
        assert meta["rank"]["rank"] == rank and meta["rank"]["world_size"] == 2
        assert meta["rank"]["job_id"] == "synthetic-env-job"
        if want is None:
            assert meta["steps"] == [[0, meta["steps"][0][1], meta["steps"][0][2]]]
        else:
            assert [s[0] for s in meta["steps"]] == want
            assert meta["autocapture"]["steps"] == [2, 4]


def test_environment_capture_rank_filter_and_bad_steps(tmp_path):
    out = tmp_path / "run"
    base = dict(os.environ, WORLD_SIZE="2", LOCAL_RANK="0", HOOKMAGIC_CAPTURE_DIR=str(out),
                PYTHONPATH=str(ROOT), HOOKMAGIC_CAPTURE_RANKS="1",
                HOOKMAGIC_CAPTURE_OPTIONS="nvml=0")
    r = subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-c", "import hookmagic"],
                       env=dict(base, RANK="0"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not (out / "rank=0").exists()
    r = subprocess.run([sys.executable, "-c", "import hookmagic"],
                       env=dict(base, RANK="1", HOOKMAGIC_CAPTURE_STEPS="x"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "HOOKMAGIC_CAPTURE_STEPS" in r.stderr
    assert not out.exists()


NCCL_NAMES = {
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)":
        ("all_reduce", "sum", "f32", "ring", "ll"),
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)":
        ("all_reduce", "sum", "f32", "ring", "ll"),
    "ncclAllReduceRingLLKernel_sum_f32(ncclColl)": ("all_reduce", "sum", "f32", "ring", "ll"),
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL128(ncclDevKernelArgsStorage<4096ul>)":
        ("reduce_scatter", "sum", "bf16", "ring", "ll128"),
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)":
        ("all_gather", "", "", "ring", "ll"),
    "ncclDevKernel_Broadcast_RING_SIMPLE(ncclDevKernelArgsStorage<4096ul>)":
        ("broadcast", "", "", "ring", "simple"),
    "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)": ("send_recv", "", "", "", ""),
    "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)": ("generic", "", "", "", ""),
    "void at::native::vectorized_elementwise_kernel<4>(int, float*)": ("", "", "", "", ""),
}


def test_nccl_kernel_names_python_and_sql_agree():
    for name, want in NCCL_NAMES.items():
        got = parse_nccl_kernel(name)
        assert tuple(got[k] for k in ("collective", "reduce_op", "dtype", "algorithm",
                                      "protocol")) == want, name
    names = pd.Series(list(NCCL_NAMES) * 3)
    frame = classify_nccl(names)
    assert frame["collective"].tolist() == [v[0] for v in NCCL_NAMES.values()] * 3
    df = pd.DataFrame({"name": list(NCCL_NAMES)})  # noqa: F841 (read by DuckDB)
    sql = duckdb.sql(f"SELECT {COLLECTIVE_SQL} AS c FROM df").df()["c"].tolist()
    assert sql == [v[0] for v in NCCL_NAMES.values()]
    assert np.all(frame.index == names.index)


@pytest.mark.parametrize("name,value", [("HOOKMAGIC_CAPTURE_OPTIONS", "buffer_mb=-3"),
                                        ("HOOKMAGIC_CAPTURE_RANKS", "a,b"),
                                        ("HOOKMAGIC_CAPTURE_STEPS", "x")])
def test_environment_capture_bad_option_is_one_warning(tmp_path, name, value):
    out = tmp_path / "run"
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", HOOKMAGIC_CAPTURE_DIR=str(out),
               PYTHONPATH=str(ROOT), **{name: value})
    r = subprocess.run([sys.executable, "-c", "import hookmagic; print('ran')"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ran" in r.stdout
    # the warning names the variable and its value, not Python's own conversion error
    assert "no automatic capture" in r.stderr and f"{name}={value!r}" in r.stderr
    assert "invalid literal" not in r.stderr and not out.exists()


@pytest.mark.parametrize("name,value", [("HOOKMAGIC_RANK", "abc"), ("HOOKMAGIC_RANK", "-3"),
                                        ("HOOKMAGIC_WORLD_SIZE", "-1"),
                                        ("HOOKMAGIC_WORLD_SIZE", "0"),
                                        ("HOOKMAGIC_WORLD_SIZE", str(10**12))])
def test_a_bad_override_is_one_warning_and_the_launchers_value_stays(name, value):
    from hookmagic.distributed.identity import rank_identity

    env = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", name: value}
    with pytest.warns(UserWarning, match=name) as caught:
        ident = rank_identity(env)
    assert len(caught) == 1
    assert (ident.rank, ident.world_size) == (1, 4)


def test_a_negative_launcher_value_is_not_believed():
    from hookmagic.distributed.identity import rank_identity

    ident = rank_identity({"RANK": "-1", "WORLD_SIZE": "-1"})
    assert ident.launcher == "single" and (ident.rank, ident.world_size) == (0, 1)


@pytest.mark.parametrize("text", ["²", "١", "１", "3.0", "-1", "1e3"])
def test_rank_overrides_take_ascii_whole_numbers_only(text):
    # str.isdigit() is True for "²" (and int() then fails) and for other scripts' digits
    with pytest.warns(UserWarning, match="HOOKMAGIC_RANK"):
        ident = rank_identity({"HOOKMAGIC_RANK": text, "HOOKMAGIC_WORLD_SIZE": "4"})
    assert ident.rank == 0 and ident.world_size == 4
