"""Kineto / torch.profiler trace import against a small synthetic trace in Kineto's own fields."""
from __future__ import annotations

import gzip
import json

import pytest

from hookmagic.analysis.flame import PATH_SEP, flame_tree, node_paths
from hookmagic.analysis.occupancy import kernel_occupancy
from hookmagic.importers.kineto import TraceFileError, read_kineto
from hookmagic.trace.schema import TABLES

BASE = 1_700_000_000_000_000  # epoch microseconds, as older Kineto traces write them


def ts(us: str) -> str:
    """A raw decimal timestamp BASE + us, written into the JSON text unquoted."""
    whole, _, frac = us.partition(".")
    return f"__{BASE + int(whole)}.{frac or '0'}__"


def synthetic_kineto() -> dict:
    """A synthetic Kineto trace: one step, a Python stack, a kernel, a copy, a memset."""
    host = {"ph": "X", "pid": 4242, "tid": 4243}
    ev = [
        {"ph": "M", "name": "process_name", "pid": 4242, "args": {"name": "python"}},
        {**host, "cat": "python_function", "name": "nb.py(3): <module>", "ts": ts("0"),
         "dur": "__1000__", "args": {"Python id": 1, "Python thread": 0}},
        {**host, "cat": "python_function", "name": "model.py(20): forward", "ts": ts("50"),
         "dur": "__400__", "args": {"Python id": 2, "Python parent id": 1}},
        {**host, "cat": "python_function", "name": "nn.Module: Linear_0", "ts": ts("60"),
         "dur": "__300__", "args": {"Python id": 3, "Python parent id": 2}},
        {**host, "cat": "python_function", "name": "<built-in method addmm>", "ts": ts("115"),
         "dur": "__30__", "args": {"Python id": 4, "Python parent id": 3}},
        {**host, "cat": "user_annotation", "name": "ProfilerStep#0", "ts": ts("0"),
         "dur": "__1000__", "args": {"External id": 1}},
        {**host, "cat": "cpu_op", "name": "aten::linear", "ts": ts("100"), "dur": "__100__",
         "args": {"External id": 2}},
        {**host, "cat": "cpu_op", "name": "aten::addmm", "ts": ts("110"), "dur": "__40__",
         "args": {"External id": 3}},
        {**host, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts("120.5"),
         "dur": "__5.25__", "args": {"cbid": 211, "correlation": 11, "External id": 3}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7,
         "ts": ts("130.123"), "dur": "__20.5__",
         "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 11,
                  "registers per thread": 64, "shared memory": 8192, "blocks per SM": 0.3,
                  "warps per SM": "__2.4__", "grid": [8, 4, 1], "block": [256, 1, 1],
                  "est. achieved occupancy %": 12}},
        {**host, "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": ts("460"),
         "dur": "__3__", "args": {"cbid": 41, "correlation": 12}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
         "tid": 7, "ts": ts("465"), "dur": "__10__",
         "args": {"device": 0, "context": 1, "stream": 7, "correlation": 12, "bytes": 4096,
                  "memory bandwidth (GB/s)": "__0.41__"}},
        {**host, "cat": "cuda_runtime", "name": "cudaMemsetAsync", "ts": ts("398"),
         "dur": "__1__", "args": {"cbid": 51, "correlation": 13}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7,
         "ts": ts("400"), "dur": "__1__",
         "args": {"device": 0, "context": 1, "stream": 7, "correlation": 13, "bytes": 512}},
        {**host, "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": ts("1500"),
         "dur": "__2__", "args": {"cbid": 307, "correlation": 14}},
        {"ph": "X", "cat": "kernel", "name": "triton_fused", "pid": 0, "tid": 8,
         "ts": ts("1510"), "dur": "__4__",
         "args": {"device": 0, "stream": 8, "correlation": 14, "registers per thread": 32,
                  "shared memory": 0, "grid": [1, 1, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
         "ts": ts("600"), "dur": "__10__", "args": {"cuda_stream": 7, "correlation": 15}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#0", "pid": 0, "tid": 7,
         "ts": ts("130"), "dur": "__300__", "args": {"device": 0}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 11, "pid": 4242, "tid": 4243,
         "ts": ts("120.5")},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": 1,
         "ts": ts("0"), "dur": "__2000__"},
    ]
    return {"schemaVersion": 1, "traceName": "synthetic", "displayTimeUnit": "ms",
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85e9,
                                  "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024,
                                  "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
                                  "regsPerMultiprocessor": 65536, "warpSize": 32,
                                  "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 167936,
                                  "numSms": 108, "sharedMemPerBlockOptin": 166912}],
            "traceEvents": ev}


def write(tmp_path, doc, name="synthetic_trace.json", gz=False) -> str:
    text = json.dumps(doc).replace('"__', "").replace('__"', "")
    path = tmp_path / (name + (".gz" if gz else ""))
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return str(path)


@pytest.fixture
def imported(tmp_path):
    return read_kineto(write(tmp_path, synthetic_kineto()))


def test_tables_have_the_schema(imported):
    tables, meta = imported
    for name, frame in tables.items():
        assert list(frame.columns)[: len(TABLES[name])] == list(TABLES[name]), name
    assert meta["source"] == "import:kineto" and meta["label"] == "synthetic_trace"
    assert meta["ignored"] == {"trace": 1}


def test_kernel_fields_and_exact_nanoseconds(imported):
    k = imported[0]["kernels"].set_index("correlation")
    g = k.loc[11]
    # 130.123 us after an epoch-scale base: a float would round this to 130.125
    assert g["start_ns"] == BASE * 1000 + 130_123 and g["duration_ns"] == 20_500
    assert g["end_ns"] == g["start_ns"] + 20_500
    assert (g["grid_x"], g["grid_y"], g["grid_z"]) == (8, 4, 1)
    assert (g["block_x"], g["registers"], g["static_smem"]) == (256, 64, 8192)
    assert (g["device"], g["stream"], g["context"], g["thread"]) == (0, 7, 1, 4243)
    assert k.loc[14, "name"] == "triton_fused" and k.loc[14, "stream"] == 8


def test_copies_memsets_api_sync(imported):
    t = imported[0]
    c = t["memcpy"].iloc[0]
    assert (c["kind"], c["src_kind"], c["dst_kind"], c["bytes"]) == ("htod", "pageable", "device", 4096)
    m = t["memset"].iloc[0]
    assert (m["bytes"], m["memory_kind"], m["correlation"]) == (512, "device", 13)
    api = t["api"].set_index("correlation")
    assert api.loc[11, "domain"] == "runtime" and api.loc[14, "domain"] == "driver"
    assert api.loc[11, "duration_ns"] == 5250 and api.loc[11, "cbid"] == 211
    s = t["sync"].iloc[0]
    assert (s["type"], s["stream"], s["duration_ns"]) == ("stream", 7, 10_000)


def test_ranges_nest_and_attach_to_kernels(imported):
    t = imported[0]
    r = t["ranges"].set_index("range_id")
    host = r[r["source"] != "gpu_user_annotation"]
    by_name = {n: i for i, n in zip(host.index, host["name"])}
    assert r.loc[by_name["aten::addmm"], "parent_id"] == by_name["aten::linear"]
    assert r.loc[by_name["aten::linear"], "parent_id"] == by_name["ProfilerStep#0"]
    assert r.loc[by_name["aten::addmm"], "depth"] == 2
    gpu = r[r["source"] == "gpu_user_annotation"]
    assert len(gpu) == 1 and gpu["thread"].iloc[0] == -1
    k = t["kernels"].set_index("correlation")
    assert k.loc[11, "range_id"] == by_name["aten::addmm"]
    assert t["memcpy"]["range_id"].iloc[0] == by_name["ProfilerStep#0"]
    assert k.loc[14, "range_id"] == -1  # launched after the step ended


def test_python_stacks_attach_to_kernels_caller_first(imported):
    t = imported[0]
    sid = t["kernels"].set_index("correlation").loc[11, "stack_id"]
    frames = t["stacks"][t["stacks"]["stack_id"] == sid].sort_values("depth")
    assert list(frames["function"]) == ["<module>", "forward", "nn.Module: Linear_0",
                                        "<built-in method addmm>"]
    assert list(frames["filename"])[:2] == ["nb.py", "model.py"]
    assert list(frames["line"])[:2] == [3, 20]
    # the copy was launched inside <module> only
    copy_sid = t["memcpy"]["stack_id"].iloc[0]
    assert list(t["stacks"][t["stacks"]["stack_id"] == copy_sid]["function"]) == ["<module>"]


def test_meta_devices_and_window(imported):
    _, meta = imported
    dev = meta["devices"][0]
    assert dev["compute_capability"] == [8, 0] and dev["multiprocessors"] == 108
    assert dev["max_smem_per_block"] == 166912 and dev["max_threads_per_sm"] == 2048
    assert meta["start_ns"] == BASE * 1000 and meta["end_ns"] == BASE * 1000 + 1_514_000


def test_views_work_on_the_import(imported):
    from hookmagic.trace.model import Trace
    tables, meta = imported
    tr = Trace(tables, meta)
    nodes = flame_tree(tr)
    paths = [p.split(PATH_SEP)[1:] for p in node_paths(nodes)]
    assert ["f:<module>@nb.py:3", "f:forward@model.py:20", "f:nn.Module: Linear_0@:0",
            "f:<built-in method addmm>@:0", "r:ProfilerStep#0", "r:aten::linear",
            "r:aten::addmm", "k:ampere_sgemm_128x64_nn"] in paths
    occ = kernel_occupancy(tr).set_index("name")
    # 256 threads, 64 regs on sm_80 -> 4 blocks = 50%
    assert occ.loc["ampere_sgemm_128x64_nn", "occupancy"] == pytest.approx(0.5)
    assert occ.loc["ampere_sgemm_128x64_nn", "limits_source"].startswith("meta + table sm_80")


def test_gzip_and_bare_array(tmp_path):
    doc = synthetic_kineto()
    tables, _ = read_kineto(write(tmp_path, doc, gz=True))
    assert len(tables["kernels"]) == 2
    tables, meta = read_kineto(write(tmp_path, doc["traceEvents"], name="bare.json"))
    assert len(tables["kernels"]) == 2 and meta["devices"] == []


@pytest.mark.parametrize("content, message", [
    (b'{"traceEvents": [', "not valid JSON"),
    (b'{"foo": 1}', "no 'traceEvents'"),
    (b'{"traceEvents": {"a": 1}}', "not a list"),
    (b'{"traceEvents": [1, 2]}', "not an event object"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k"}]}', "no valid 'ts'"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon"}]}', "no valid 'ts'"),
    (b"\x1f\x8b\x08\x00garbage", "decompressed"),
    (b"\xff\xfe\x00binary", "not text JSON"),
])
def test_bad_input_raises_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceFileError, match=message):
        read_kineto(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TraceFileError, match="no Kineto trace"):
        read_kineto(tmp_path / "nope.json")
    with pytest.raises(TraceFileError, match="directory"):
        read_kineto(tmp_path)
    assert issubclass(TraceFileError, ValueError)
