"""Hostile and broken inputs: every loader refuses special files up front, stays
within its documented budgets, turns impossible numbers into the project's errors or visible
warnings, and saves atomically through symlinks while keeping permissions.

All inputs here are synthetic, built by the tests themselves.
"""
from __future__ import annotations

import gzip
import io
import json
import math
import os
import stat
import subprocess
import sys
import threading
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hookmagic
from hookmagic.common import checks, files, limits
from hookmagic.common.errors import (BadNumbers, HookmagicError, InputFileError,
                                     InvalidArgument, LimitExceeded)
from hookmagic.layers import LayerProfile, from_trtexec
from hookmagic.layers.errors import LayerFileError, LayerNumbersError
from hookmagic.layers.onnxruntime import from_onnxruntime
from hookmagic.layers.trtexec import fold_noops
from hookmagic.memory.torch_history import PickleRefused, load_snapshot
from hookmagic.trace.io import TraceFileError, TraceNumbersError, load_trace, save_trace
from hookmagic.importers.kineto import read_kineto
from hookmagic.trace.model import Trace


def _loaders():
    """Every public file loader, as (name, function of a path)."""
    return [
        ("hookmagic.load", hookmagic.load),
        ("load_trace", load_trace),
        ("read_kineto", read_kineto),
        ("from_trtexec profile", lambda p: from_trtexec(profile=p)),
        ("from_trtexec layers", lambda p: from_trtexec(layers=p)),
        ("from_trtexec times", lambda p: from_trtexec(layers=_LAYERS_FILE, times=p)),
        ("from_onnxruntime", from_onnxruntime),
        ("LayerProfile.load json", lambda p: LayerProfile.load(_renamed(p, ".json"))),
        ("load_snapshot", load_snapshot),
    ]


_LAYERS_FILE: Path | None = None


def _renamed(p, suffix):
    """LayerProfile.load picks the format by suffix; a symlink with that suffix points at p."""
    p = Path(p)
    if p.suffix == suffix:
        return p
    link = p.with_name(p.name + ".link" + suffix)
    if not os.path.lexists(link):
        os.symlink(p, link)
    return link


@pytest.fixture(autouse=True)
def _layers_file(tmp_path):
    global _LAYERS_FILE
    _LAYERS_FILE = tmp_path / "synthetic.graph.json"
    _LAYERS_FILE.write_text(json.dumps({"Layers": ["a"], "Bindings": []}))
    yield


def _finishes(fn, timeout=20.0):
    """Run fn in a daemon thread; return (finished, exception)."""
    box = {}

    def go():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            box["exc"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive(), box.get("exc")


# -- special files ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,load", _loaders(), ids=[n for n, _ in _loaders()])
def test_fifo_is_refused_up_front(tmp_path, name, load):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    done, exc = _finishes(lambda: load(fifo))
    if not done:  # unblock the reader so the thread ends, then fail
        with open(fifo, "wb"):
            pass
    assert done, f"{name} blocked on a FIFO"
    assert isinstance(exc, InputFileError) and "FIFO" in str(exc), repr(exc)


@pytest.mark.parametrize("name,load", _loaders(), ids=[n for n, _ in _loaders()])
def test_directory_says_is_a_directory(tmp_path, name, load):
    d = tmp_path / "folder.json"
    d.mkdir()
    with pytest.raises(InputFileError, match="is a directory"):
        load(d)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
@pytest.mark.parametrize("name,load", _loaders(), ids=[n for n, _ in _loaders()])
def test_dev_zero_is_refused(name, load):
    done, exc = _finishes(lambda: load("/dev/zero"))
    assert done and isinstance(exc, InputFileError) and "device" in str(exc), repr(exc)


# -- budgets ------------------------------------------------------------------------------------

def test_gzip_bomb_stops_at_the_budget_with_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", "4M")
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [' + b" " * (64 << 20) + b"]}")
    assert bomb.stat().st_size < 200_000
    tracemalloc.start()
    try:
        # refused by its expansion ratio (over 1000x), else by the byte budget
        with pytest.raises(LimitExceeded, match="HOOKMAGIC_MAX_BYTES|expands more than") as info:
            read_kineto(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"peak {peak / 2**20:.1f} MiB"
    assert "\n" not in str(info.value)


def _zip_trace(tmp_path, tables, manifest_rows=None, extra_members=()):
    """A hand-built trace ZIP (synthetic): tables as {name: pyarrow table}."""
    path = tmp_path / "synthetic.hmtrace"
    man = {"format": "hookmagic.trace", "format_version": 1, "tables": {}, "meta": {}}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, table in tables.items():
            buf = io.BytesIO()
            pq.write_table(table, buf, compression="zstd")
            zf.writestr(f"{name}.parquet", buf.getvalue())
            rows = table.num_rows if manifest_rows is None else manifest_rows
            man["tables"][name] = {"file": f"{name}.parquet", "rows": rows, "extra_columns": []}
        for member, data in extra_members:
            zf.writestr(member, data)
        zf.writestr("meta.json", json.dumps(man))
    return path


def test_tiny_trace_claiming_millions_of_rows_is_refused(tmp_path, monkeypatch):
    # zstd packs 2,000,000 identical rows into a few KB: the row budget refuses them before
    # they are decoded into pandas
    monkeypatch.setenv("HOOKMAGIC_MAX_ROWS", "1000000")
    n = 2_000_000
    table = pa.table({"start_ns": pa.array(np.zeros(n, dtype=np.int64)),
                      "end_ns": pa.array(np.zeros(n, dtype=np.int64))})
    path = _zip_trace(tmp_path, {"kernels": table})
    assert path.stat().st_size < 200_000
    with pytest.raises(LimitExceeded, match="HOOKMAGIC_MAX_ROWS"):
        hookmagic.load(path)


def test_zip_bomb_member_is_refused_by_its_declared_size(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", "1M")
    path = _zip_trace(tmp_path, {}, extra_members=[("padding.bin", b"\0" * (8 << 20))])
    with pytest.raises(LimitExceeded, match="declared"):
        load_trace(path)


def test_deep_json_is_a_limit_not_a_recursion_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    for name, load in _loaders():
        if name.startswith(("hookmagic.load", "load_trace")):
            continue  # not ZIP: covered by read_kineto through hookmagic.load below
        with pytest.raises(LimitExceeded, match="HOOKMAGIC_MAX_DEPTH"):
            load(deep)
    with pytest.raises(LimitExceeded, match="HOOKMAGIC_MAX_DEPTH"):
        hookmagic.load(deep)


def test_budget_env_vars_raise_and_lower_limits(monkeypatch):
    monkeypatch.setenv("HOOKMAGIC_MAX_ROWS", "2k")
    assert limits.MAX_ROWS.value == 2000
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", "3 MiB")
    assert limits.MAX_BYTES.value == 3 << 20
    monkeypatch.setenv("HOOKMAGIC_MAX_DEPTH", "0")
    limits.check(limits.MAX_DEPTH, 10**9, "x")  # 0: no limit
    monkeypatch.setenv("HOOKMAGIC_MAX_ROWS", "lots")
    with pytest.raises(InvalidArgument, match="HOOKMAGIC_MAX_ROWS"):
        limits.MAX_ROWS.value


def _reference_depth(text: str) -> int:
    """Independent reference: parse, then walk."""
    def walk(v, d):
        if isinstance(v, list):
            return max([walk(x, d + 1) for x in v], default=d + 1)
        if isinstance(v, dict):
            return max([walk(x, d + 1) for x in v.values()], default=d + 1)
        return d
    return walk(json.loads(text), 0)


@pytest.mark.parametrize("text", [
    '{"a": [1, {"b": "]]]}}}\\\\"}, "\\"[[["]}',
    '[[], [[]], {"k": [{"x": "\\\\\\"{"}]}]',
    '"[[[["', "3", '{"":{"":{"":[]}}}',
])
def test_json_depth_ignores_brackets_in_strings(text):
    assert files.json_depth(text) == _reference_depth(text)


# -- impossible numbers -------------------------------------------------------------------------

def _kineto(tmp_path, events):
    p = tmp_path / "synthetic_kineto.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _kernel(ts, dur):
    return {"ph": "X", "cat": "kernel", "name": "k", "ts": ts, "dur": dur, "pid": 0, "tid": 7,
            "args": {"device": 0, "stream": 7, "correlation": 1}}


def test_kineto_nan_and_infinite_times_are_errors(tmp_path):
    for ts, dur in ((float("nan"), 1), (1, float("inf")), ("soon", 1)):
        with pytest.raises(TraceNumbersError, match="not a finite number"):
            read_kineto(_kineto(tmp_path, [_kernel(ts, dur)]))


def test_kineto_negative_duration_is_refused_not_summed(tmp_path):
    path = _kineto(tmp_path, [_kernel(10, 5), _kernel(20, -3)])
    with pytest.raises(BadNumbers, match=r"traceEvents\[1\].*negative duration"):
        hookmagic.load(path)
    with pytest.raises(TraceNumbersError):
        read_kineto(path)


def test_saved_trace_with_nan_times_is_refused_not_int64_min(tmp_path):
    table = pa.table({"start_ns": pa.array([1.0, float("nan")]),
                      "end_ns": pa.array([2.0, 3.0])})
    with pytest.raises(TraceNumbersError, match="NaN"):
        load_trace(_zip_trace(tmp_path, {"kernels": table}))


def test_saved_trace_with_text_times_is_damaged(tmp_path):
    table = pa.table({"start_ns": pa.array(["soon", "later"]), "end_ns": pa.array([2, 3])})
    with pytest.raises(TraceFileError, match="schema"):
        load_trace(_zip_trace(tmp_path, {"kernels": table}))


def test_saved_trace_with_negative_durations_is_refused(tmp_path):
    table = pa.table({"start_ns": pa.array([10, 20], pa.int64()),
                      "end_ns": pa.array([15, 5], pa.int64()),
                      "duration_ns": pa.array([5, -15], pa.int64())})
    path = _zip_trace(tmp_path, {"kernels": table})
    with pytest.raises(BadNumbers) as err:
        hookmagic.load(path)
    assert "negative duration_ns" in str(err.value) and "end before they start" in str(err.value)


def test_a_trace_built_in_memory_with_negative_durations_or_sizes_is_refused():
    """Not only files: a Trace made from DataFrames (synthetic here) is held to the same rule."""
    kernels = pd.DataFrame({"name": ["synthetic_gemm", "synthetic_relu"], "start_ns": [0, 10],
                            "end_ns": [5, 15], "duration_ns": [-5, 5]})
    with pytest.raises(BadNumbers, match="negative duration_ns"):
        hookmagic.Trace({"kernels": kernels})
    copies = pd.DataFrame({"start_ns": [0], "end_ns": [5], "duration_ns": [5], "bytes": [-1]})
    with pytest.raises(BadNumbers, match="negative bytes"):
        hookmagic.Trace({"memcpy": copies})
    assert len(hookmagic.Trace({"kernels": kernels.assign(duration_ns=[5, 5])}).kernels) == 2


def test_saved_trace_folder_with_negative_durations_is_refused(tmp_path, synthetic_trace):
    from hookmagic.trace.folder import load_trace_folder, save_trace_folder
    folder = tmp_path / "rank0"
    save_trace_folder(synthetic_trace, folder)
    # the damage is written into the saved folder (a Trace in memory refuses it already)
    (part,) = folder.rglob("kernels*.parquet")
    kernels = pd.read_parquet(part)
    kernels.loc[0, "duration_ns"] = -1
    kernels.to_parquet(part)
    with pytest.raises(BadNumbers, match="negative duration_ns"):
        load_trace_folder(folder)


def _profile(tmp_path, records, name="synthetic.profile.json"):
    p = tmp_path / name
    p.write_text(json.dumps([{"count": 10}] + records))
    return p


def test_trtexec_nan_times_are_shown_not_summed_silently(tmp_path):
    p = from_trtexec(profile=_profile(tmp_path, [{"name": "a", "averageMs": float("nan")},
                                                  {"name": "b", "averageMs": float("nan")}]))
    assert "2 of 2 layer(s) have no time" in repr(p)
    assert any("NaN" in w for w in p.summary().notes)


@pytest.mark.parametrize("bad", [-4.273, float("inf"), "0.5", True])
def test_trtexec_negative_infinite_or_text_times_are_errors(tmp_path, bad):
    with pytest.raises(LayerNumbersError, match="averageMs"):
        from_trtexec(profile=_profile(tmp_path, [{"name": "a", "averageMs": bad}]))


def test_trtexec_bad_count_and_times_are_errors(tmp_path):
    p = tmp_path / "synthetic.profile.json"
    p.write_text(json.dumps([{"count": -3}, {"name": "a", "averageMs": 1.0}]))
    with pytest.raises(LayerNumbersError, match="count"):
        from_trtexec(profile=p)
    t = tmp_path / "synthetic.timing.json"
    t.write_text(json.dumps([{"latencyMs": -1.0, "computeMs": 1.0}]))
    with pytest.raises(LayerNumbersError, match="latency_ms"):
        from_trtexec(layers=_LAYERS_FILE, times=t)


def test_layer_profile_with_negative_times_says_so():
    from hookmagic.layers.model import make_layers
    p = LayerProfile(make_layers([{"name": "a", "mean_ms": -1.0}, {"name": "b", "mean_ms": 2.0}]))
    assert "negative" in repr(p) and any("negative" in w for w in p.summary().notes)


def test_onnxruntime_negative_duration_is_an_error(tmp_path):
    p = tmp_path / "synthetic_ort.json"
    p.write_text(json.dumps([{"cat": "Node", "name": "conv_kernel_time", "ts": 1, "dur": -5,
                              "args": {"op_name": "Conv"}}]))
    with pytest.raises(LayerNumbersError, match="dur"):
        from_onnxruntime(p)


def test_snapshot_pickle_refusal_is_a_project_error(tmp_path):
    import pickle
    p = tmp_path / "synthetic.pickle"
    p.write_bytes(pickle.dumps({"segments": []}))
    with pytest.raises(PickleRefused) as info:
        load_snapshot(p)
    assert isinstance(info.value, (HookmagicError, PermissionError))


def test_checks_refuse_what_they_should():
    assert checks.number("x", 2) == 2.0 and checks.integer("n", 8.0) == 8
    for bad in (float("nan"), float("inf"), "5", True, None):
        with pytest.raises(InvalidArgument, match="x"):
            checks.number("x", bad)
    with pytest.raises(InvalidArgument, match="> 0"):
        checks.number("x", 0, positive=True)
    with pytest.raises(InvalidArgument, match="integer"):
        checks.integer("n", 2.5)
    assert checks.bad_numbers([1.0, math.nan, -2.0, math.inf]) == {"NaN": 1, "infinite": 1,
                                                                   "negative": 1}
    assert checks.bad_numbers(np.array([1, "x", None], dtype=object)) == {"not numbers": 1}


# -- the CLI ------------------------------------------------------------------------------------

def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "hookmagic.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_cli_rejects_nan_max_ms_and_negative_top(tmp_path):
    prof = _profile(tmp_path, [{"name": "a", "averageMs": 1.0}])
    for args in (("--max-ms", "nan"), ("--max-ms", "inf"), ("--max-ms", "-1"), ("--top", "-2")):
        r = _cli("trt", "summary", "--profile", prof, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert _cli("trt", "summary", "--profile", prof, "--max-ms", "0.5").returncode == 3
    assert _cli("trt", "summary", "--profile", prof, "--max-ms", "5").returncode == 0


def test_max_ms_cannot_pass_a_sum_that_leaves_layers_out(tmp_path):
    # SYNTHETIC: two of three layers have no time; their sum (1 ms) would pass a 5 ms gate
    prof = _profile(tmp_path, [{"name": "a", "averageMs": float("nan")},
                               {"name": "b", "averageMs": float("nan")},
                               {"name": "c", "averageMs": 1.0}])
    r = _cli("trt", "summary", "--profile", prof, "--max-ms", "5")
    assert r.returncode == 3 and "2 of 3 layer(s) have no time" in r.stderr
    assert "cannot be checked" in r.stderr and "Traceback" not in r.stderr


def test_cli_json_is_strict_and_errors_are_one_line(tmp_path):
    prof = _profile(tmp_path, [{"name": "a", "averageMs": float("nan")},
                               {"name": "b", "averageMs": 1.0}])
    r = _cli("trt", "summary", "--profile", prof, "--json")
    assert r.returncode == 0, r.stderr

    def refuse(token):
        raise AssertionError(f"bare {token} in --json output")
    json.loads(r.stdout, parse_constant=refuse)
    r = _cli("trt", "summary", "--profile", tmp_path)
    assert r.returncode == 1 and "is a directory" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    bad = _profile(tmp_path, [{"name": "a", "averageMs": -1}], name="neg.profile.json")
    r = _cli("trt", "summary", "--profile", bad)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1


# -- saving -------------------------------------------------------------------------------------

def _small_trace():
    return Trace({"kernels": pd.DataFrame({"start_ns": [1, 5], "end_ns": [3, 9],
                                           "duration_ns": [2, 4], "name": ["a", "b"]})},
                 {"label": "synthetic"})


def test_save_follows_symlinks_and_keeps_permissions(tmp_path):
    real = tmp_path / "real.hmtrace"
    save_trace(_small_trace(), real)
    os.chmod(real, 0o640)
    link = tmp_path / "link.hmtrace"
    link.symlink_to(real)
    save_trace(_small_trace(), link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert len(load_trace(link).kernels) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_save_refuses_devices_and_folders(tmp_path):
    with pytest.raises(InvalidArgument, match="character device"):
        save_trace(_small_trace(), "/dev/null")
    with pytest.raises(InvalidArgument, match="is a directory"):
        save_trace(_small_trace(), tmp_path)
    with pytest.raises(InvalidArgument, match="is a directory"):
        files.atomic_write(tmp_path, b"x")


def test_layer_profile_json_save_is_strict_json(tmp_path):
    from hookmagic.layers.model import make_layers
    p = LayerProfile(make_layers([{"name": "a", "mean_ms": math.nan}]), meta={"x": math.inf})
    path = p.save(tmp_path / "synthetic.json")

    def refuse(token):
        raise AssertionError(token)
    json.loads(path.read_text(), parse_constant=refuse)
    assert LayerProfile.load(path).layers["name"].tolist() == ["a"]


# -- NoOp folding -------------------------------------------------------------------------------

def _fold_reference(rows):
    """The original (quadratic) folding rule, as an independent reference."""
    import copy
    rows = copy.deepcopy(rows)
    keep = [r for r in rows if r.get("layer_type") != "NoOp"]
    if len(keep) == len(rows) or not keep:
        return rows
    producer = {t: r for r in keep for t in r.get("out_tensors", [])}
    index = {id(r): i for i, r in enumerate(rows)}
    for r in rows:
        if r.get("layer_type") != "NoOp":
            continue
        target = next((producer[t] for t in r.get("in_tensors", []) if t in producer), None)
        if target is None:
            before = [k for k in keep if index[id(k)] < index[id(r)]]
            target = before[-1] if before else keep[0]
        target["folded"] = list(target.get("folded", [])) + [r["name"]]
        for col in ("mean_ms", "median_ms"):
            extra = r.get(col, math.nan)
            if extra is not None and not math.isnan(extra) and extra > 0:
                target[col] = target.get(col, 0.0) + extra
        for t in r.get("out_tensors", []):
            producer[t] = target
    return keep


def _synthetic_rows(n, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        noop = bool(rng.random() < 0.5)
        ins = [f"t{int(rng.integers(0, i))}"] if i and rng.random() < 0.7 else []
        rows.append({"name": f"l{i}", "layer_type": "NoOp" if noop else "Conv",
                     "in_tensors": ins, "out_tensors": [f"t{i}"],
                     "mean_ms": float(rng.random()), "median_ms": math.nan})
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_linear_noop_folding_matches_the_reference(seed):
    import copy
    rows = _synthetic_rows(300, seed)
    assert fold_noops(copy.deepcopy(rows)) == _fold_reference(rows)


def test_gc_paused_restores_the_collector_even_on_errors():
    import gc
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with files.gc_paused():
            assert not gc.isenabled()
            with files.gc_paused():
                pass
            assert not gc.isenabled()
            raise RuntimeError("boom")
    assert gc.isenabled()


def test_json_with_a_byte_order_mark_reads_and_utf16_is_named(tmp_path):
    import json as _json
    from hookmagic.layers import LayerFileError, from_trtexec
    records = [{"count": 10}, {"name": "a", "timeMs": 10.0, "averageMs": 1.0, "medianMs": 1.0,
                               "percentage": 100.0}]
    text = _json.dumps(records)
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())          # as some Windows editors save it
    assert from_trtexec(profile=bom).total_ms == 1.0
    wide = tmp_path / "utf16.json"
    wide.write_bytes(text.encode("utf-16"))
    with pytest.raises(LayerFileError, match="UTF-16"):
        from_trtexec(profile=wide)


def test_trtexec_exports_without_layers_are_refused(tmp_path):
    import json as _json
    from hookmagic.layers import LayerFileError, from_trtexec
    empty = tmp_path / "layers.json"
    empty.write_text(_json.dumps({"Layers": []}))
    with pytest.raises(LayerFileError, match="hold no layers"):
        from_trtexec(layers=empty)


def test_kineto_copies_of_negative_size_are_refused(tmp_path):
    from hookmagic.common.errors import BadNumbers
    # SYNTHETIC Kineto JSON: a copy of -100 bytes would shrink every copy total
    ev = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "ts": 10.0,
          "dur": 2.0, "pid": 0, "tid": 7, "args": {"bytes": -100, "device": 0, "stream": 7}}
    path = tmp_path / "synthetic_kineto.json"
    path.write_text(json.dumps({"traceEvents": [ev]}))
    with pytest.raises(BadNumbers, match="negative bytes"):
        hookmagic.load(path)


def test_running_out_of_memory_while_loading_is_a_limit_error(tmp_path):
    # a file within the budgets can still need more memory than a process may have: here a
    # child process is capped (setrlimit) at the address space it has already mapped plus
    # 128 MiB, below what a 2M-row table takes to load (23 numeric columns: about 370 MB). The cap
    # counts from what the process holds, not from a fixed size, so a small table shows the same
    # failure on any machine (its baseline mapping varies with cores and libraries); the files
    # are written by another process, whose allocators would otherwise keep the pages for reuse.
    make = """
import sys
import numpy as np, pandas as pd
from hookmagic.trace.model import Trace
from tests.synthetic import synthetic
folder = sys.argv[1]
t = synthetic()
n = 2_000_000   # SYNTHETIC: 2M identical kernels, a few kB of Parquet
cols = t.tables["kernels"]
k = pd.DataFrame({c: np.zeros(n, cols[c].dtype) for c in cols.columns if cols[c].dtype.kind in "iuf"})
Trace({**t.tables, "kernels": k.assign(name="k")}, t.meta).save(folder + "/big.hmtrace")
t.save(folder + "/small.hmtrace")
"""
    load = """
import resource, sys
import hookmagic
from hookmagic.common.errors import LimitExceeded
folder = sys.argv[1]
hookmagic.load(folder + "/small.hmtrace")   # Arrow's worker threads start before the cap
mapped = next(int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (mapped + (128 << 20), mapped + (128 << 20)))
try:
    hookmagic.load(folder + "/big.hmtrace")
except LimitExceeded as err:
    print("LimitExceeded", err)
"""
    for code in (make, load):
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                           timeout=300, cwd=Path(__file__).resolve().parents[1])
        assert r.returncode == 0, r.stderr[-2000:]
    assert "LimitExceeded" in r.stdout and "more memory" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


def test_a_budget_that_rounds_to_zero_is_refused_not_unlimited(monkeypatch):
    from hookmagic.common import limits
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", "0.5")    # 0 would mean "no limit"
    with pytest.raises(InvalidArgument, match="rounds to 0"):
        limits.limit(limits.MAX_BYTES)
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", "0")
    assert limits.limit(limits.MAX_BYTES) == 0
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", "1.5K")
    assert limits.limit(limits.MAX_BYTES) == 1536


@pytest.mark.parametrize("layout", ["file", "folder"])
def test_saved_traces_whose_durations_disagree_with_their_spans_are_refused(tmp_path, layout):
    from hookmagic.common.errors import BadNumbers
    from hookmagic.trace.folder import save_trace_folder
    t = hookmagic.recordings.load("mlp_training")
    k = t.tables["kernels"].copy()
    k.loc[k.index[0], "duration_ns"] = 2 * 10**15     # SYNTHETIC: a duration no span supports
    bad = hookmagic.Trace({**t.tables, "kernels": k}, t.meta)
    path = bad.save(tmp_path / "bad.hmtrace") if layout == "file" else \
        save_trace_folder(bad, tmp_path / "rank=0")
    with pytest.raises(BadNumbers, match="duration_ns is not end_ns - start_ns"):
        hookmagic.load(path)


def test_trtexec_layer_times_beyond_a_day_and_names_that_are_not_text_are_refused(tmp_path):
    from hookmagic.layers import LayerFileError
    from hookmagic.layers.errors import LayerNumbersError
    huge = _profile(tmp_path, [{"name": "a", "averageMs": 1e308, "medianMs": 1.0}], "huge.json")
    with pytest.raises(LayerNumbersError, match="over a day"):
        from_trtexec(profile=huge)
    listed = _profile(tmp_path, [{"name": [1, 2], "averageMs": 1.0}], "listed.json")
    with pytest.raises(LayerFileError, match="not text"):
        from_trtexec(profile=listed)
