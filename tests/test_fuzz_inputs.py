"""Fuzzing every public importer and constructor, time-bounded.

Hypothesis feeds random bytes, random JSON and near-valid synthetic documents (right shape,
wrong values: NaN, infinities, negatives, text for numbers, huge integers, wrong types) to each
loader, and random arguments to each scheduler constructor. The only exceptions allowed are
the project's documented ones (:class:`hookmagic.common.errors.HookmagicError` and its kinds);
nothing may hang (a per-test alarm) and every load runs under small budgets
(``HOOKMAGIC_MAX_BYTES=16M``, ``HOOKMAGIC_MAX_ROWS=200k``), so memory stays bounded.

``HOOKMAGIC_FUZZ_EXAMPLES`` sets the examples per test (default 60: about a minute in all on
two cores); raise it for a longer local run.
"""
from __future__ import annotations

import io
import json
import math
import os
import signal
import shutil
import tempfile
import zipfile
from pathlib import Path

import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the fuzz suite needs hypothesis ([dev])")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import hookmagic  # noqa: E402
from hookmagic import sched as S  # noqa: E402
from hookmagic.common.errors import HookmagicError  # noqa: E402
from hookmagic.layers import LayerProfile, from_trtexec  # noqa: E402
from hookmagic.layers.onnxruntime import from_onnxruntime  # noqa: E402
from hookmagic.memory.torch_history import events_from_snapshot, load_snapshot  # noqa: E402
from hookmagic.trace.io import save_trace  # noqa: E402
from hookmagic.importers.kineto import read_kineto  # noqa: E402
from hookmagic.trace.model import Trace  # noqa: E402

EXAMPLES = int(os.environ.get("HOOKMAGIC_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
_DIR = Path(tempfile.mkdtemp(prefix="hookmagic-fuzz-"))


@pytest.fixture(scope="module", autouse=True)
def _remove_the_fuzz_folder():
    # hypothesis runs each example many times inside one test, so the files live in one
    # module-wide folder (not tmp_path); it goes when the module's tests are done
    yield
    shutil.rmtree(_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _bounded(monkeypatch):
    """Small budgets, and an alarm that turns a hang into a failure."""
    monkeypatch.setenv("HOOKMAGIC_MAX_BYTES", "16M")
    monkeypatch.setenv("HOOKMAGIC_MAX_ROWS", "200k")

    def hang(signum, frame):
        raise TimeoutError("a fuzzed input made a loader or engine hang")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(240)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _write(data: bytes, name: str) -> Path:
    path = _DIR / name
    path.write_bytes(data)
    return path


def _only_documented(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except HookmagicError:
        return None


# -- strategies ---------------------------------------------------------------------------------

_numbers = st.one_of(st.integers(min_value=-2**70, max_value=2**70),
                     st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from([0, -1, 1, 1e308, -0.0, float("nan"), float("inf")]))
_scalars = st.one_of(st.none(), st.booleans(), _numbers, st.text(max_size=12))
_json = st.recursive(_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)),
    max_leaves=25)
_dims = st.lists(st.one_of(st.integers(-3, 2**40), _scalars), max_size=4)


def _dump(doc) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


_kineto_event = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "X", "i", "B"]),
    "cat": st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver",
                            "cuda_sync", "user_annotation", "cpu_op", "gpu_user_annotation",
                            "python_function", "other", ""]),
    "name": st.one_of(st.text(max_size=20), st.sampled_from(
        ["Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "a.py(3): f", "Event Sync"])),
    "ts": _numbers, "dur": _numbers, "pid": _scalars, "tid": _scalars,
    "args": st.dictionaries(st.sampled_from(
        ["device", "stream", "correlation", "grid", "block", "bytes", "registers per thread",
         "shared memory", "Python id", "Python parent id", "context", "cuda_event"]),
        st.one_of(_scalars, _dims), max_size=6),
})
_kineto_doc = st.fixed_dictionaries(
    {"traceEvents": st.lists(_kineto_event, max_size=12)},
    optional={"deviceProperties": st.lists(st.dictionaries(st.sampled_from(
        ["id", "name", "totalGlobalMem", "numSms", "computeMajor", "computeMinor"]), _scalars),
        max_size=2), "schemaVersion": _scalars})

_tensor = st.fixed_dictionaries({"Name": _scalars, "Dimensions": st.one_of(_dims, _scalars),
                                 "Format/Datatype": st.sampled_from(
                                     ["Row major linear FP32", "Channel major FP16 format", "?"])})
_layer = st.one_of(st.text(max_size=10), st.fixed_dictionaries(
    {"Name": st.one_of(st.text(max_size=10), _scalars)},
    optional={"LayerType": st.sampled_from(["NoOp", "Constant", "CaskConvolution", "Reformat"]),
              "Inputs": st.lists(_tensor, max_size=2), "Outputs": st.lists(_tensor, max_size=2),
              "Weights": st.fixed_dictionaries({"Type": st.sampled_from(["Float", "Half"]),
                                                "Count": _scalars}),
              "Metadata": _scalars}))
_profile_doc = st.lists(st.one_of(
    st.fixed_dictionaries({"count": _scalars}),
    st.fixed_dictionaries({"name": st.text(max_size=10)},
                          optional={"averageMs": _scalars, "timeMs": _scalars,
                                    "medianMs": _scalars, "percentage": _scalars})),
    max_size=8)
_times_doc = st.lists(st.dictionaries(st.sampled_from(
    ["latencyMs", "computeMs", "startComputeMs", "h2dMs"]), _scalars, min_size=1), max_size=6)
_ort_doc = st.lists(st.fixed_dictionaries({
    "cat": st.sampled_from(["Node", "Session"]),
    "name": st.sampled_from(["conv_kernel_time", "relu_kernel_time", "model_run", "x"]),
    "ts": _numbers, "dur": _numbers,
    "args": st.dictionaries(st.sampled_from(["op_name", "provider", "parameter_size",
                                             "activation_size", "output_size",
                                             "input_type_shape"]), _json, max_size=4)}),
    max_size=10)
_snap_entry = st.fixed_dictionaries({
    "action": st.sampled_from(["alloc", "free_requested", "free_completed", "segment_alloc",
                               "segment_free", "segment_map", "segment_unmap", "oom", "x"]),
    "addr": _numbers, "size": _numbers},
    optional={"stream": _scalars, "time_us": _numbers, "device_free": _scalars,
              "frames": st.lists(st.dictionaries(st.sampled_from(["filename", "name", "line"]),
                                                 _scalars), max_size=2)})
_snapshot = st.fixed_dictionaries({
    "device_traces": st.lists(st.lists(_snap_entry, max_size=8), max_size=2),
    "segments": st.lists(st.dictionaries(st.sampled_from(
        ["address", "total_size", "device", "segment_type", "is_expandable", "blocks",
         "stream"]), _json, max_size=7), max_size=3)})


# -- importers ----------------------------------------------------------------------------------

@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_to_every_loader(data):
    path = _write(data, "random.bin")
    json_path = _write(data, "random.json")
    for fn in (hookmagic.load, read_kineto, lambda p: from_trtexec(profile=p),
               lambda p: from_trtexec(layers=p), from_onnxruntime, load_snapshot):
        _only_documented(fn, path)
    _only_documented(LayerProfile.load, json_path)
    _only_documented(LayerProfile.load, _write(data, "random.parquet"))


@FUZZ
@given(_json)
def test_random_json_to_every_loader(doc):
    path = _write(_dump(doc), "random_doc.json")
    for fn in (hookmagic.load, read_kineto, lambda p: from_trtexec(profile=p),
               lambda p: from_trtexec(layers=p), from_onnxruntime, load_snapshot,
               LayerProfile.load):
        _only_documented(fn, path)


@FUZZ
@given(_kineto_doc, st.booleans())
def test_near_valid_kineto(doc, as_list):
    path = _write(_dump(doc["traceEvents"] if as_list else doc), "synthetic_kineto.json")
    trace = _only_documented(hookmagic.load, path)
    if trace is not None:
        repr(trace)
        trace.summary()


@FUZZ
@given(_profile_doc, st.fixed_dictionaries({"Layers": st.lists(_layer, max_size=8)},
                                           optional={"Bindings": st.lists(_scalars, max_size=2)}),
       _times_doc)
def test_near_valid_trtexec_exports(profile, layers, times):
    p = _write(_dump(profile), "synthetic.profile.json")
    g = _write(_dump(layers), "synthetic.graph.json")
    t = _write(_dump(times), "synthetic.timing.json")
    for kw in ({"profile": p}, {"layers": g}, {"profile": p, "layers": g},
               {"profile": p, "layers": g, "times": t}):
        prof = _only_documented(from_trtexec, **kw)
        if prof is not None:
            repr(prof)
            json.dumps(prof.summary(), default=str)


@FUZZ
@given(_ort_doc)
def test_near_valid_onnxruntime(events):
    prof = _only_documented(from_onnxruntime, _write(_dump(events), "synthetic_ort.json"))
    if prof is not None:
        repr(prof)


@FUZZ
@given(_snapshot)
def test_near_valid_memory_snapshots(snap):
    _only_documented(events_from_snapshot, snap)
    _only_documented(load_snapshot, _write(_dump(snap), "synthetic_snapshot.json"))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, 10**6))
def test_damaged_saved_traces(flips, cut):
    """A real saved trace (of synthetic rows) with bytes flipped and its tail cut."""
    trace = Trace({"kernels": pd.DataFrame({"start_ns": [1, 5, 9], "end_ns": [3, 9, 12],
                                            "duration_ns": [2, 4, 3],
                                            "name": ["a", "b", "c"]})}, {"label": "synthetic"})
    good = Path(save_trace(trace, _DIR / "synthetic_good.hmtrace")).read_bytes()
    data = bytearray(good)
    for pos, value in flips:
        data[pos % len(data)] = value
    data = bytes(data[: max(1, len(data) - cut % len(data))]) if cut % 3 == 0 else bytes(data)
    _only_documented(hookmagic.load, _write(data, "damaged.hmtrace"))


@FUZZ
@given(st.dictionaries(st.sampled_from(["kernels", "meta.json", "x.parquet"]),
                       st.binary(max_size=64), max_size=3), _json)
def test_hand_built_zip_containers(members, manifest):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if "meta.json" not in members:
            zf.writestr("meta.json", _dump(manifest))
    _only_documented(hookmagic.load, _write(buf.getvalue(), "handmade.hmtrace"))
    # the same members as a file of the retired allocator-recording format (hookmagic.load
    # still reads those): its meta.json names that format, a member is its events table
    old = io.BytesIO()
    with zipfile.ZipFile(old, "w") as zf:
        zf.writestr("meta.json", _dump({"format": "hookmagic-allocator-recording",
                                        "meta": manifest}))
        for name, data in members.items():
            if name != "meta.json":
                zf.writestr("allocator_events.parquet" if name == "x.parquet" else name, data)
    _only_documented(hookmagic.load, _write(old.getvalue(), "handmade.recording"))


# -- scheduler constructors ---------------------------------------------------------------------

_arg = st.one_of(_numbers, st.none(), st.booleans(), st.text(max_size=4),
                 st.integers(min_value=-3, max_value=40),
                 st.floats(min_value=0.01, max_value=50, allow_nan=False))


def _build(cls, *args, **kw):
    try:
        return cls(*args, **kw)
    except HookmagicError:
        return None


@FUZZ
@given(st.lists(st.integers(-2, 40) | _arg, min_size=0, max_size=4),
       st.lists(_arg, min_size=0, max_size=4), _arg, _arg, _arg)
def test_model_spec_and_policies(sizes, lats, cv, a, b):
    _build(S.ModelSpec, "m", tuple(sizes), tuple(lats), service_cv=cv, max_batch=a)
    _build(S.ModelSpec.linear, "m", a, b, max_batch=cv)
    _build(S.Batching, a, b, (cv,) if cv is not None else ())
    _build(S.AIMD, slo_ms=a, budget=b, start=cv, max_batch=a)
    _build(S.QueuePolicy, max_size=a, timeout_ms=b)
    _build(S.CameraFairness, per_camera=a, max_frames=b)
    _build(S.Limit, ("m",), max_concurrent=a)
    _build(S.Stream, priority=a)
    _build(S.Policy, order=a if isinstance(a, str) else "fifo", streams=b)


@FUZZ
@given(_arg, _arg, _arg, _arg, st.sampled_from(["general", "fast", "auto"]),
       st.sampled_from(["fifo", "priority", "edf"]))
def test_sources_and_simulation_finish(rate, fps, lat, cv, engine, order):
    """Whatever the constructors accept, a short simulation finishes."""
    sources = [s for s in (_build(S.Poisson, "m", rate=rate, slo_ms=20),
                           _build(S.Cameras, "m", n=2, fps=fps, slo_ms=50),
                           _build(S.Bursty, "m", rate_on=rate, on_s=0.01, off_s=0.01),
                           _build(S.Replay, "m", (0.001, 0.002))) if s is not None]
    spec = _build(S.ModelSpec, "m", (1, 4), (lat, lat), service_cv=cv) \
        or S.ModelSpec.linear("m", 1.0, 0.1, 4)
    offered = sum(getattr(s, "rate", 0) or getattr(s, "rate_on", 0)
                  or getattr(s, "fps", 0) * 2 for s in sources)
    if offered * 0.02 > 20_000:
        return
    wl = _only_documented(S.make_workload, sources, 0.02, seed=1)
    if wl is None:
        return
    policy = S.Policy(order=order, batching=S.Batching(4, 0.5))
    res = _only_documented(S.simulate, [spec], wl, policy,
                           engine=engine if order != "edf" else "general")
    if res is not None:
        assert len(res.requests) == len(wl)
        res.metrics()
