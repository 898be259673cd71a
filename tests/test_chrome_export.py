"""Chrome/Perfetto export: valid JSON, one event per row, flows that pair up, Kineto fields."""
from __future__ import annotations

import gzip
import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from hookmagic.trace.model import Trace


@pytest.fixture
def synthetic_chrome(tmp_path, synthetic_trace) -> dict:
    path = synthetic_trace.to_chrome_trace(tmp_path / "synthetic.json")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)   # strict: NaN or a stray comma would fail here


def _events(doc, ph=None, cat=None):
    return [e for e in doc["traceEvents"]
            if (ph is None or e["ph"] == ph) and (cat is None or e.get("cat") == cat)]


def test_top_level_fields(synthetic_chrome, synthetic_trace):
    assert synthetic_chrome["displayTimeUnit"] == "ns"
    assert synthetic_chrome["baseTimeNanoseconds"] == synthetic_trace.meta["start_ns"]
    props = synthetic_chrome["deviceProperties"]
    assert props[0]["id"] == 0 and props[0]["name"] == "Synthetic GPU"
    assert (props[0]["computeMajor"], props[0]["computeMinor"]) == (9, 0)
    assert synthetic_chrome["hookmagic"]["label"] == "synthetic"


def test_one_event_per_row(synthetic_chrome, synthetic_trace):
    counts = Counter((e["ph"], e.get("cat")) for e in synthetic_chrome["traceEvents"])
    t = synthetic_trace
    assert counts[("X", "kernel")] == len(t.kernels)
    assert counts[("X", "gpu_memcpy")] == len(t.memcpy)
    assert counts[("X", "gpu_memset")] == len(t.memset)
    assert counts[("X", "cuda_runtime")] == (t.api["domain"] == "runtime").sum()
    assert counts[("X", "cuda_driver")] == (t.api["domain"] == "driver").sum()
    assert counts[("X", "cuda_sync")] == len(t.sync)
    assert counts[("X", "user_annotation")] == len(t.ranges)
    assert counts[("i", "gpu_memory")] == len(t.memory)
    # one counter per device-memory alloc/free (the pinned host alloc is not device memory)
    assert counts[("C", "gpu_memory")] == (t.memory["memory_kind"] != "pinned").sum()


def test_kernel_event_fields(synthetic_chrome):
    gemm = [e for e in _events(synthetic_chrome, "X", "kernel") if e["name"] == "synthetic_gemm"]
    first = min(gemm, key=lambda e: e["ts"])
    assert first["pid"] == 0 and first["tid"] == 7
    assert first["ts"] == pytest.approx(0.0) and first["dur"] == pytest.approx(2000.0)
    args = first["args"]
    assert args["correlation"] == 1 and args["grid"] == [128, 1, 1]
    assert args["block"] == [256, 1, 1] and args["registers per thread"] == 64
    assert args["shared memory"] == 3072 and args["stream"] == 7 and args["context"] == 1
    names = {e["name"] for e in _events(synthetic_chrome, "X", "kernel")}
    assert 'synthetic_relu<"quoted">' in names   # escaping survived


def test_copy_and_memset_fields(synthetic_chrome):
    htod = [e for e in _events(synthetic_chrome, "X", "gpu_memcpy") if "HtoD" in e["name"]][0]
    assert htod["name"] == "Memcpy HtoD (Pinned -> Device)"
    assert htod["args"]["bytes"] == 4_000_000
    assert htod["args"]["memory bandwidth (GB/s)"] == pytest.approx(4.0)
    assert htod["ts"] == pytest.approx(6000.0) and htod["dur"] == pytest.approx(1000.0)
    memset = _events(synthetic_chrome, "X", "gpu_memset")[0]
    assert memset["name"] == "Memset (Device)" and memset["args"]["bytes"] == 1024


def test_host_events_on_process_and_thread(synthetic_chrome):
    for e in _events(synthetic_chrome, "X", "cuda_runtime") + _events(synthetic_chrome, "X",
                                                                        "user_annotation"):
        assert (e["pid"], e["tid"]) == (4242, 101)
    launch = [e for e in _events(synthetic_chrome, "X", "cuda_runtime")
              if e["args"]["correlation"] == 1][0]
    assert launch["ts"] == pytest.approx(-50.0) and launch["dur"] == pytest.approx(5.0)


def test_flows_pair_api_calls_with_gpu_work(synthetic_chrome):
    starts = {e["id"]: e for e in _events(synthetic_chrome, "s", "ac2g")}
    finishes = {e["id"]: e for e in _events(synthetic_chrome, "f", "ac2g")}
    # correlations 1-6 launched GPU work; 7 (cuCtxSynchronize) launched nothing
    assert set(starts) == set(finishes) == {1, 2, 3, 4, 5, 6}
    assert len(_events(synthetic_chrome, "s")) == len(_events(synthetic_chrome, "f")) == 6
    assert starts[1]["pid"] == 4242 and finishes[1]["pid"] == 0 and finishes[1]["tid"] == 7
    assert finishes[1]["bp"] == "e"
    assert all(starts[i]["ts"] <= finishes[i]["ts"] for i in starts)


def test_one_call_many_kernels_gets_unique_flow_ids(tmp_path):
    synthetic = pd.DataFrame({"start_ns": [10, 20, 30], "end_ns": [15, 25, 35], "device": 0,
                              "stream": 1, "correlation": 5, "name": "synthetic_graph_node"})
    api = pd.DataFrame({"start_ns": [1], "end_ns": [2], "domain": "runtime",
                        "name": "cudaGraphLaunch", "correlation": [5], "thread": 3})
    doc = json.loads(open(Trace({"kernels": synthetic, "api": api}).to_chrome_trace(
        tmp_path / "g.json")).read())
    ids_s = sorted(e["id"] for e in _events(doc, "s"))
    ids_f = sorted(e["id"] for e in _events(doc, "f"))
    assert ids_s == ids_f and len(set(ids_s)) == 3 and 5 in ids_s


def test_memory_counter_tracks_allocated_bytes(synthetic_chrome):
    counter = sorted(_events(synthetic_chrome, "C", "gpu_memory"), key=lambda e: e["ts"])
    assert [e["args"]["allocated"] for e in counter] == [1000, 1500, 500, 2500, 2000, 2000]
    alloc = [e for e in _events(synthetic_chrome, "i", "gpu_memory")][0]
    assert alloc["name"] == "alloc" and alloc["args"]["address"] == "0xffff800000001000"


def test_nvml_samples_are_counters_without_nan(synthetic_chrome):
    nvml = _events(synthetic_chrome, "C", "nvml")
    util = [e for e in nvml if e["name"] == "GPU utilization (%)"]
    assert [e["args"]["gpu"] for e in util] == [40, 90]
    power = [e for e in nvml if e["name"] == "power (W)"]
    assert [e["args"]["power"] for e in power] == [120.5]   # the NaN sample is left out


def test_metadata_names_processes_and_streams(synthetic_chrome):
    meta = _events(synthetic_chrome, "M")
    procs = {(e["pid"], e["args"]["name"]) for e in meta if e["name"] == "process_name"}
    assert (0, "GPU 0") in procs and any(pid == 4242 for pid, _ in procs)
    threads = {(e["pid"], e["tid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert {(0, 7, "stream 7"), (0, 8, "stream 8"), (0, 9, "stream 9")} <= threads


def test_gzip_output(tmp_path, synthetic_trace, synthetic_chrome):
    path = synthetic_trace.to_chrome_trace(tmp_path / "synthetic.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        assert json.load(fh) == synthetic_chrome


def test_empty_trace_exports_valid_json(tmp_path):
    doc = json.loads(open(Trace.empty("synthetic: no GPU").to_chrome_trace(
        tmp_path / "e.json")).read())
    assert [e["ph"] for e in doc["traceEvents"]] == ["M"]   # only the host process name
    assert doc["hookmagic"]["status"] == "unavailable"


def test_many_kernels_export_with_a_flow_each(tmp_path):
    # export speed is a benchmark's business (benchmarks/bench_views.py), not a unit test's
    n = 20_000
    i = np.arange(n)
    kernels = pd.DataFrame({"start_ns": i * 1000, "end_ns": i * 1000 + 700, "device": 0,
                            "stream": i % 4, "correlation": i + 1,
                            "name": np.where(i % 2 == 0, "synthetic_a", "synthetic_b")})
    kernels["duration_ns"] = 700
    api = pd.DataFrame({"start_ns": i * 1000 - 300, "end_ns": i * 1000 - 100,
                        "duration_ns": 200, "domain": "runtime", "name": "cudaLaunchKernel",
                        "correlation": i + 1, "thread": 1})
    trace = Trace({"kernels": kernels, "api": api}, {"start_ns": 0})
    path = trace.to_chrome_trace(tmp_path / "big.json")
    doc = json.loads(open(path).read())
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == 2 * n     # kernels + API calls
    assert sum(e["ph"] == "s" for e in doc["traceEvents"]) == n         # one flow per launch
