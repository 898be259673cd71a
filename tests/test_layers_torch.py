"""PyTorch module backend, CPU side: hooks, naming, aggregation and launch-gap attribution, on
synthetic capture tables and stand-in modules (torch is not needed; the GPU test is
tests/gpu/test_layers_torch_gpu.py, marked gpu, run on the GPU machine)."""
from __future__ import annotations

import pandas as pd
import pytest

import math
import statistics

from hookmagic.layers.attribution import (ITERATION_PREFIX, OUTSIDE, WARMUP_RANGE, activity,
                                          assign_layers, busy_ms, charge_gaps, iteration_summary,
                                          kernels_in_named_ranges, layer_times)
from hookmagic.layers.model import LayerProfile
from hookmagic.layers.reconcile import reconcile
from hookmagic.layers.torch_modules import (ModuleRangeHooks, leaf_modules, precision_of_dtype,
                                            profile_from_capture)
from hookmagic.trace.schema import conform


# ---- stand-ins shaped like torch's module and hook API ------------------------------------

class StandInTensor:
    def __init__(self, shape, dtype="torch.float16"):
        self.shape, self.dtype = tuple(shape), dtype

    def element_size(self):
        return {"torch.float16": 2, "torch.float32": 4}[self.dtype]


class StandInParam(StandInTensor):
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class _Handle:
    def __init__(self, hooks, fn):
        self.hooks, self.fn = hooks, fn

    def remove(self):
        self.hooks.remove(self.fn)


class StandInModule:
    """Mimics torch.nn.Module's named_modules/children/hooks/parameters and __call__ order."""

    def __init__(self, children=(), params=(), out_shape=(1, 4), fail=False):
        self._children = dict(children)
        self._params = list(params)
        self._pre, self._post = [], []
        self.out_shape, self.fail = out_shape, fail

    def children(self):
        return iter(self._children.values())

    # the signatures are torch.nn.Module's (torch 2.x), so a call torch would reject fails here
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        yield prefix, self
        for n, c in self._children.items():
            yield from c.named_modules(prefix=f"{prefix}.{n}" if prefix else n)

    def parameters(self, recurse=True):
        return iter(self._params)

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        self._pre.append(hook)
        return _Handle(self._pre, hook)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        self._post.append(hook)
        return _Handle(self._post, hook)

    def __call__(self, *args):
        for h in list(self._pre):
            h(self, args)
        out = None
        try:
            if self.fail:
                raise RuntimeError("boom")
            for c in self._children.values():
                args = (c(*args),)
            out = args[0] if self._children else StandInTensor(self.out_shape)
            return out
        finally:
            for h in list(self._post):
                h(self, args, out)


class RecordingRange:
    log: list = []

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        RecordingRange.log.append(("enter", self.name))
        return self

    def __exit__(self, *exc):
        RecordingRange.log.append(("exit", self.name))


def _model():
    conv = StandInModule(params=[StandInParam((8, 3, 3, 3))], out_shape=(1, 8, 4, 4))
    relu = StandInModule(out_shape=(1, 8, 4, 4))
    block = StandInModule(children=[("conv", conv), ("relu", relu)])
    fc = StandInModule(params=[StandInParam((10, 8), "torch.float32")], out_shape=(1, 10))
    return StandInModule(children=[("block", block), ("fc", fc)])


def test_leaf_modules_are_qualified_and_ordered():
    assert [n for n, _ in leaf_modules(_model())] == ["block.conv", "block.relu", "fc"]


def test_hooks_open_one_range_per_leaf_call_and_record_shapes():
    RecordingRange.log = []
    model = _model()
    hooks = ModuleRangeHooks(leaf_modules(model), RecordingRange).install()
    model(StandInTensor((1, 3, 4, 4)))
    model(StandInTensor((1, 3, 4, 4)))
    assert RecordingRange.log[:6] == [("enter", "block.conv"), ("exit", "block.conv"),
                                      ("enter", "block.relu"), ("exit", "block.relu"),
                                      ("enter", "fc"), ("exit", "fc")]
    assert hooks.calls == {"block.conv": 2, "block.relu": 2, "fc": 2}
    assert hooks.shapes["block.conv"]["inputs"][0]["shape"] == [1, 3, 4, 4]
    assert hooks.shapes["block.conv"]["outputs"][0]["bytes"] == 8 * 4 * 4 * 2
    hooks.remove()
    RecordingRange.log = []
    model(StandInTensor((1, 3, 4, 4)))
    assert RecordingRange.log == []


def test_a_failing_forward_still_closes_its_range():
    RecordingRange.log = []
    bad = StandInModule(fail=True)
    model = StandInModule(children=[("bad", bad)])
    hooks = ModuleRangeHooks(leaf_modules(model), RecordingRange).install()
    with pytest.raises(RuntimeError):
        model(StandInTensor((1,)))
    assert RecordingRange.log == [("enter", "bad"), ("exit", "bad")]
    assert hooks.open == []


def test_output_shapes_are_noted_once_a_call_succeeds():
    RecordingRange.log = []
    flaky = StandInModule(fail=True, out_shape=(2, 5))
    model = StandInModule(children=[("flaky", flaky)])
    hooks = ModuleRangeHooks(leaf_modules(model), RecordingRange).install()
    with pytest.raises(RuntimeError):
        model(StandInTensor((1,)))
    assert "outputs" not in hooks.shapes["flaky"]
    flaky.fail = False
    model(StandInTensor((1,)))
    model(StandInTensor((1,)))                  # the fast path: shapes known, range closed
    assert hooks.shapes["flaky"]["outputs"][0]["shape"] == [2, 5]
    assert RecordingRange.log == [("enter", "flaky"), ("exit", "flaky")] * 3
    assert hooks.open == [] and hooks.calls == {"flaky": 3}


def test_precision_of_dtype():
    assert precision_of_dtype("torch.bfloat16") == "BF16"
    assert precision_of_dtype("float16") == "FP16"


# ---- synthetic capture tables ------------------------------------------------------------

def synthetic_capture():
    """Two iterations; conv runs 2 kernels, relu 1, fc 1, plus one add launched in the parent's
    forward (outside leaf modules) and a warm-up kernel outside every iteration."""
    ranges = [
        # range_id, name, start, end, depth, parent
        (1, f"{ITERATION_PREFIX}0", 0, 1000, 0, -1),
        (2, "block.conv", 10, 200, 1, 1),
        (3, "block.relu", 210, 300, 1, 1),
        (4, "fc", 400, 600, 1, 1),
        (5, "user-range-inside-fc", 420, 500, 2, 4),
        (6, f"{ITERATION_PREFIX}1", 1000, 2000, 0, -1),
        (7, "block.conv", 1010, 1200, 1, 6),
        (8, "block.relu", 1210, 1300, 1, 6),
        (9, "fc", 1400, 1600, 1, 6),
    ]
    kernels = [
        # range_id, start, end, name
        (2, 100, 150, "implicit_gemm"), (2, 150, 170, "bias_add"),
        (3, 300, 310, "relu_kernel"),
        (5, 500, 540, "gemv"),
        (1, 350, 360, "add_kernel"),
        (7, 1100, 1160, "implicit_gemm"), (7, 1160, 1180, "bias_add"),
        (8, 1300, 1310, "relu_kernel"),
        (9, 1500, 1530, "gemv"),
        (-1, 5000, 5100, "warmup_kernel"),
    ]
    r = pd.DataFrame(ranges, columns=["range_id", "name", "start_ns", "end_ns", "depth", "parent_id"])
    r["duration_ns"] = r["end_ns"] - r["start_ns"]
    k = pd.DataFrame(kernels, columns=["range_id", "start_ns", "end_ns", "name"])
    k["duration_ns"] = k["end_ns"] - k["start_ns"]
    memcpy = pd.DataFrame([(4, 560, 580, "dtoh")], columns=["range_id", "start_ns", "end_ns", "kind"])
    memcpy["duration_ns"] = 20
    return {"kernels": conform("kernels", k), "ranges": conform("ranges", r),
            "memcpy": conform("memcpy", memcpy)}


def test_assign_layers_walks_up_to_the_leaf_module():
    t = synthetic_capture()
    a = assign_layers(activity(t["kernels"], t["memcpy"]), t["ranges"])
    by_name = dict(zip(a["name"], a["layer"]))
    assert by_name["gemv"] == "fc"                 # nested user range counts for its module
    assert by_name["add_kernel"] == OUTSIDE
    assert a.loc[a["name"] == "warmup_kernel", "iteration"].tolist() == [-1]
    assert a.loc[a["name"] == "memcpy dtoh", "layer"].tolist() == ["fc"]


def test_layer_times_mean_median_p90_and_order():
    t = synthetic_capture()
    times = layer_times(assign_layers(activity(t["kernels"], t["memcpy"]), t["ranges"]), 2)
    assert times["layer"].tolist() == ["block.conv", "block.relu", OUTSIDE, "fc"]
    ms = dict(zip(times["layer"], times["mean_ms"]))
    assert ms["block.conv"] == pytest.approx((70 + 80) / 2 / 1e6)
    assert ms["fc"] == pytest.approx(((40 + 20) + 30) / 2 / 1e6)
    assert ms[OUTSIDE] == pytest.approx(10 / 2 / 1e6)     # ran in iteration 0 only
    row = times.set_index("layer").loc["block.conv"]
    assert row["median_ms"] == pytest.approx(75 / 1e6)
    assert row["p90_ms"] == pytest.approx((70 + 0.9 * 10) / 1e6)


# synthetic hooked-run latencies (ms): iteration 0 spans 100..580 ns, iteration 1 1100..1530 ns
HOOKED = [0.0006, 0.0005]
CLEAN = [0.00016, 0.00015]


def _synthetic_profile(**kw):
    t = synthetic_capture()
    leaves = leaf_modules(_model())
    shapes = {"block.conv": {"inputs": [{"shape": [1, 3, 4, 4], "dtype": "torch.float16", "bytes": 96}],
                             "outputs": [{"shape": [1, 8, 4, 4], "dtype": "torch.float16", "bytes": 256}]}}
    args = {"latencies_ms": HOOKED, "clean_latencies_ms": CLEAN, "meta": {"name": "synthetic"}, **kw}
    return profile_from_capture(t, leaves, shapes, iterations=2, **args)


def test_profile_from_capture_rows_and_meta():
    p = _synthetic_profile()
    layers = p.layers.set_index("name")
    assert layers.loc["block.conv", "weight_bytes"] == 8 * 3 * 3 * 3 * 2
    assert layers.loc["block.conv", "precision"] == "FP16"
    assert layers.loc["block.conv", "activation_bytes"] == 96 + 256
    assert layers.loc[OUTSIDE, "type"] == "Other"
    # every attributed nanosecond is in the layer sum: (70+10+60+10) + (80+10+30) = 270 ns / 2
    assert p.total_ms == pytest.approx(270 / 2 / 1e6)
    assert p.meta["gpu_busy_ms"]["mean"] == pytest.approx(p.total_ms)   # nothing overlaps here
    assert p.meta["layer_sum_ms"]["median"] == pytest.approx(135 / 1e6)
    assert p.meta["unattributed_activities"] == 1                       # the warm-up kernel
    assert any("outside the profiled iterations" in w for w in p.meta["warnings"])
    k = p.kernels.set_index(["layer", "kernel"])
    assert k.loc[("block.conv", "implicit_gemm"), "calls"] == 1
    # the reference latency is the clean run's; the hooked run's is kept beside it
    assert p.latency_ms == pytest.approx(statistics.mean(CLEAN))
    assert p.meta["latency_hooked_ms"]["mean"] == pytest.approx(statistics.mean(HOOKED))
    assert "without hooks" in p.meta["latency_reference"]
    assert p.times["latency_hooked_ms"].tolist() == HOOKED
    assert p.times["latency_clean_ms"].tolist() == CLEAN


def test_launch_gaps_are_charged_to_the_layer_that_follows_them():
    """Iteration 0 (ns): conv 100-150 150-170 | relu 300-310 | add 350-360 | gemv 500-540,
    dtoh 560-580; latency 600. Iteration 1: conv 1100-1160 1160-1180 | relu 1300-1310 |
    gemv 1500-1530; latency 500. Idle before each activity goes to that activity's layer; the
    edges (latency - span: 600-480, 500-430) go to the first layer."""
    p = _synthetic_profile()
    gap = p.layers.set_index("name")["gap_ms"] * 1e6          # ns per iteration (mean)
    assert gap["block.conv"] == pytest.approx((120 + 70) / 2)
    assert gap["block.relu"] == pytest.approx((130 + 120) / 2)
    assert gap[OUTSIDE] == pytest.approx(40 / 2)
    assert gap["fc"] == pytest.approx((140 + 20 + 190) / 2)
    # nothing hidden: per iteration, gaps + busy = hooked latency, so the column sums to
    # mean(hooked latency) - mean(busy), which is the layer sum when nothing overlaps
    assert p.layers["gap_ms"].sum() == pytest.approx(
        p.meta["latency_hooked_ms"]["mean"] - p.meta["gpu_busy_ms"]["mean"])
    assert p.layers["gap_ms"].sum() == pytest.approx(p.meta["latency_hooked_ms"]["mean"] - p.total_ms)
    assert p.meta["launch_gap_ms"]["median"] == pytest.approx((450 + 380) / 2 / 1e6)
    assert p.times["gap_ms"].tolist() == [pytest.approx(450 / 1e6), pytest.approx(380 / 1e6)]
    assert (p.times["gap_ms"] + p.times["busy_ms"]).tolist() == [pytest.approx(v) for v in HOOKED]
    # gaps are not layer time
    assert p.layers.set_index("name").loc["block.conv", "mean_ms"] == pytest.approx(75 / 1e6)


def test_charge_gaps_overlap_counts_no_idle_time():
    """Two streams: b (120-200) overlaps a (100-150), c (250-260) starts after both; latency
    200 ns with span 160 puts 40 ns on a."""
    a = pd.DataFrame({"iteration": [0, 0, 0, -1], "layer": ["a", "b", "c", ""],
                      "start_ns": [100, 120, 250, 900], "end_ns": [150, 200, 260, 950],
                      "duration_ns": [50, 80, 10, 50]})
    g = charge_gaps(a, [0.0002]).set_index("layer")["gap_ns"]
    assert g.to_dict() == {"a": 40.0, "b": 0.0, "c": 50.0, "": 0.0}
    s = iteration_summary(charge_gaps(a, [0.0002]), 1, [0.0002]).iloc[0]
    assert s["busy_ms"] == pytest.approx(110 / 1e6) and s["layer_sum_ms"] == pytest.approx(140 / 1e6)
    assert s["gap_ms"] == pytest.approx(s["latency_ms"] - s["busy_ms"])


def test_charge_gaps_without_latency_counts_only_inner_gaps():
    a = pd.DataFrame({"iteration": [0, 0], "layer": ["a", "b"], "start_ns": [100, 300],
                      "end_ns": [200, 400], "duration_ns": [100, 100]})
    g = charge_gaps(a).set_index("layer")["gap_ns"]
    assert g.to_dict() == {"a": 0.0, "b": 100.0}
    assert math.isnan(iteration_summary(charge_gaps(a), 1).iloc[0]["latency_ms"])


def test_warmup_range_under_the_capture_is_set_aside():
    t = synthetic_capture()
    r = t["ranges"]
    extra = pd.DataFrame([(10, WARMUP_RANGE, 4000, 6000, 0, -1), (11, "fc", 4900, 5200, 1, 10)],
                         columns=["range_id", "name", "start_ns", "end_ns", "depth", "parent_id"])
    extra["duration_ns"] = extra["end_ns"] - extra["start_ns"]
    extra = conform("ranges", extra)
    t["ranges"] = conform("ranges", pd.concat([r, extra], ignore_index=True))
    t["kernels"].loc[t["kernels"]["name"] == "warmup_kernel", "range_id"] = 11
    a = assign_layers(activity(t["kernels"]), t["ranges"])
    assert a.loc[a["name"] == "warmup_kernel", ["iteration", "layer"]].values.tolist() == [[-1, WARMUP_RANGE]]
    p = profile_from_capture(t, leaf_modules(_model()), {}, iterations=2, latencies_ms=HOOKED)
    assert p.meta["unattributed_activities"] == 0
    assert p.meta["capture_warmup_activities"] == 1
    assert "warnings" not in p.meta
    assert p.total_ms == pytest.approx(270 / 2 / 1e6)   # warm-up work is in no layer


def test_reconcile_on_medians_against_the_clean_latency():
    """A host stall in one of five hooked iterations: the mean gap is dominated by it, the
    median is not; the reference row is the clean run and diff/ratio use medians."""
    t = synthetic_capture()
    base = t["kernels"][t["kernels"]["range_id"].isin([7, 8, 9])]
    ranges, kernels = [], []
    for i in range(5):
        off = 10_000 * i
        ranges += [(100 + 10 * i, f"{ITERATION_PREFIX}{i}", off, off + 5000, 0, -1),
                   (101 + 10 * i, "block.conv", off, off + 1, 1, 100 + 10 * i),
                   (102 + 10 * i, "block.relu", off, off + 1, 1, 100 + 10 * i),
                   (103 + 10 * i, "fc", off, off + 1, 1, 100 + 10 * i)]
        for k in base.itertuples():
            kernels.append((100 + 10 * i + (k.range_id - 6), off + k.start_ns, off + k.end_ns, k.name))
    r = pd.DataFrame(ranges, columns=["range_id", "name", "start_ns", "end_ns", "depth", "parent_id"])
    r["duration_ns"] = r["end_ns"] - r["start_ns"]
    k = pd.DataFrame(kernels, columns=["range_id", "start_ns", "end_ns", "name"])
    k["duration_ns"] = k["end_ns"] - k["start_ns"]
    hooked = [0.0005, 0.0005, 0.0050, 0.0005, 0.0005]          # iteration 2 stalls
    p = profile_from_capture({"kernels": conform("kernels", k), "ranges": conform("ranges", r)},
                             leaf_modules(_model()), {}, 5, hooked, [0.000125] * 5)
    rec = reconcile(p)
    assert rec.attrs["stat"] == "median"
    assert rec["measure"].tolist() == ["layer sum", "end-to-end latency without hooks",
                                       "end-to-end latency, hooked run",
                                       "GPU busy, hooked run (union of activity)",
                                       "launch gaps, hooked run (latency - GPU busy)"]
    r2 = rec.set_index("measure")
    assert r2.loc["layer sum", "median_ms"] == pytest.approx(120 / 1e6)
    assert r2.loc["end-to-end latency without hooks", "ratio"] == pytest.approx(125 / 120)
    assert r2.loc["end-to-end latency, hooked run", "diff_ms"] == pytest.approx(380 / 1e6)
    gaps = r2.loc["launch gaps, hooked run (latency - GPU busy)"]
    assert gaps["median_ms"] == pytest.approx(380 / 1e6)
    assert gaps["mean_ms"] == pytest.approx((4 * 380 + 4880) / 5 / 1e6)
    assert math.isnan(gaps["diff_ms"]) and math.isnan(gaps["ratio"])
    # the stall is charged to the first layer of the iteration that waited
    assert p.layers.set_index("name").loc["block.conv", "gap_ms"] == pytest.approx((4 * 70 + 4570) / 5 / 1e6)
    assert reconcile(p, stat="mean").set_index("measure").loc[
        "end-to-end latency without hooks", "ratio"] == pytest.approx(125 / 120)
    with pytest.raises(ValueError):
        reconcile(p, stat="p90")


def test_without_clean_runs_the_reference_is_the_hooked_run():
    p = _synthetic_profile(clean_latencies_ms=[])
    assert p.latency_ms == pytest.approx(statistics.mean(HOOKED))
    assert "hooked run" in p.meta["latency_reference"]
    assert "end-to-end latency without hooks" not in reconcile(p)["measure"].tolist()


def test_display_and_files_keep_the_gaps(tmp_path):
    p = _synthetic_profile()
    text = repr(p)
    assert "end-to-end without hooks median 0.000 ms" in text and "launch gaps" in text
    html = p._repr_mimebundle_()["text/html"]
    assert "gap_ms" in html and "launch gaps" in html
    for suffix in (".json", ".parquet"):
        back = LayerProfile.load(p.save(tmp_path / f"p{suffix}"))
        assert back.layers["gap_ms"].tolist() == pytest.approx(p.layers["gap_ms"].tolist())
        assert reconcile(back).equals(reconcile(p))


def test_busy_ms_counts_overlap_once():
    a = pd.DataFrame({"iteration": [0, 0, 0], "start_ns": [0, 50, 200], "end_ns": [100, 150, 210]})
    assert busy_ms(a).tolist() == [pytest.approx(160 / 1e6)]


def test_kernels_in_named_ranges_opens_a_myelin_layer():
    ranges = pd.DataFrame({"range_id": [1, 2], "name": ["{ForeignNode[a...b]}", "inner"],
                           "parent_id": [-1, 1]})
    act = pd.DataFrame({"range_id": [1, 2, 2, -1], "name": ["k1", "k2", "k2", "k3"],
                        "duration_ns": [1000, 2000, 2000, 5]})
    got = kernels_in_named_ranges(act, ranges, {"{ForeignNode[a...b]}"})
    assert dict(zip(got["kernel"], got["total_ms"])) == {"k1": 0.001, "k2": 0.004}


# ---- profile_module end to end on a synthetic GPU (a stand-in torch, capture and range) ------

class SyntheticGPU:
    """One in-order stream on a made-up clock (ns). The host advances ``host`` as it works;
    a launch starts at max(host, when the GPU frees up). Ranges cost host time, so the hooked
    run has launch gaps that the clean run does not."""

    def __init__(self, range_cost=400):
        self.host, self.free, self.range_cost = 0, 0, range_cost
        self.kernels, self.ranges, self.stack, self.ids = [], [], [], 0
        self.capturing = False

    def launch(self, name, duration):
        self.host += 50
        start = max(self.host, self.free)
        self.free = start + duration
        if self.capturing:
            self.kernels.append((self.stack[-1] if self.stack else -1, start, self.free, name))

    def mark(self):
        self.host += 10
        return max(self.host, self.free)


class SyntheticTorch:
    """Just what profile_module calls: inference_mode, cuda.Event/synchronize/get_device_name."""

    def __init__(self, gpu):
        import contextlib
        import types
        self.__version__ = "synthetic"
        self.inference_mode = contextlib.nullcontext
        gpu_ = gpu

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = gpu_.mark()

            def elapsed_time(self, end):
                return (end.t - self.t) / 1e6

        def synchronize():
            gpu_.host = max(gpu_.host, gpu_.free)

        self.cuda = types.SimpleNamespace(Event=Event, synchronize=synchronize,
                                          get_device_name=lambda d: "synthetic GPU")


class SyntheticKernelModule(StandInModule):
    def __init__(self, gpu, kernel, duration, **kw):
        super().__init__(**kw)
        self.gpu, self.kernel, self.duration = gpu, kernel, duration

    def __call__(self, *args):
        for h in list(self._pre):
            h(self, args)
        self.gpu.launch(self.kernel, self.duration)
        out = StandInTensor(self.out_shape)
        for h in list(self._post):
            h(self, args, out)
        return out


def _synthetic_hookmagic(gpu):
    import inspect
    import types

    import hookmagic
    real = {"capture": inspect.signature(hookmagic.capture),   # before the test swaps them
            "range": inspect.signature(hookmagic.range)}

    class Range:
        def __init__(self, name):
            real["range"].bind(name)
            self.name = name

        def __enter__(self):
            gpu.host += gpu.range_cost // 2
            gpu.ids += 1
            self.id, self.parent, self.depth = gpu.ids, gpu.stack[-1] if gpu.stack else -1, len(gpu.stack)
            self.start = gpu.host
            gpu.stack.append(self.id)
            return self

        def __exit__(self, *exc):
            gpu.host += gpu.range_cost // 2
            gpu.stack.pop()
            if gpu.capturing:
                gpu.ranges.append((self.id, self.name, self.start, gpu.host, 0, self.depth, self.parent))

    class Capture:
        def __init__(self, **kw):
            real["capture"].bind(**kw)   # only options the real capture takes
            self.status, self.meta, self.tables = "complete", {}, {}

        def __enter__(self):
            gpu.capturing = True
            return self

        def __exit__(self, *exc):
            gpu.capturing = False
            r = pd.DataFrame(gpu.ranges, columns=["range_id", "name", "start_ns", "end_ns",
                                                  "thread", "depth", "parent_id"])
            r["duration_ns"] = r["end_ns"] - r["start_ns"]
            k = pd.DataFrame(gpu.kernels, columns=["range_id", "start_ns", "end_ns", "name"])
            k["duration_ns"] = k["end_ns"] - k["start_ns"]
            self.tables = {"kernels": conform("kernels", k), "ranges": conform("ranges", r)}

    return types.SimpleNamespace(range=Range, capture=Capture)


def test_profile_module_on_a_synthetic_gpu(monkeypatch):
    import sys

    from hookmagic import cupti
    from hookmagic.layers.torch_modules import profile_module

    gpu = SyntheticGPU(range_cost=6000)   # hooks slower than the GPU: it waits for launches
    fake = _synthetic_hookmagic(gpu)
    monkeypatch.setitem(sys.modules, "torch", SyntheticTorch(gpu))
    monkeypatch.setattr(cupti, "range", fake.range)
    monkeypatch.setattr(cupti, "capture", fake.capture)
    conv = SyntheticKernelModule(gpu, "conv_kernel", 5000, params=[StandInParam((8, 3, 3, 3))])
    relu = SyntheticKernelModule(gpu, "relu_kernel", 100)       # short: the host falls behind
    fc = SyntheticKernelModule(gpu, "gemv", 1000)
    model = StandInModule(children=[("conv", conv), ("relu", relu), ("fc", fc)])
    model.training, model.eval, model.train = True, lambda: None, lambda mode: None
    p = profile_module(model, StandInTensor((1, 3, 4, 4)), iterations=6, warmup=1,
                       name="synthetic", capture_warmup=1)
    assert p.layers["name"].tolist() == ["conv", "relu", "fc"]
    assert p.total_ms == pytest.approx(6100 / 1e6)
    assert p.meta["unattributed_activities"] == 0 and p.meta["capture_warmup_activities"] == 3
    assert p.meta["calls_per_iteration"] == {"conv": 1, "relu": 1, "fc": 1}
    assert p.meta["latency_clean_ms"]["n"] == p.meta["latency_hooked_ms"]["n"] == 6
    assert p.meta["gpu_busy_ms"]["median"] == pytest.approx(6100 / 1e6)
    # the range bookkeeping makes the GPU wait for relu's and fc's launches: gaps charged to them
    gap = p.layers.set_index("name")["gap_ms"]
    assert gap["fc"] > gap["relu"] > 0
    assert gap.sum() == pytest.approx(p.meta["latency_hooked_ms"]["mean"] - p.total_ms)
    assert p.meta["latency_hooked_ms"]["median"] > p.meta["latency_clean_ms"]["median"]
    assert p.latency_ms == p.meta["latency_clean_ms"]["mean"]
    r = reconcile(p).set_index("measure")
    assert r.loc["end-to-end latency without hooks", "median_ms"] == p.meta["latency_clean_ms"]["median"]
