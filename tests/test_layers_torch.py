"""PyTorch module backend, CPU side: hooks, naming and aggregation, on synthetic capture tables
and stand-in modules (torch is not needed; the GPU test is tests/gpu, run on the GPU machine)."""
from __future__ import annotations

import pandas as pd
import pytest

from hookmagic.layers.attribution import (ITERATION_PREFIX, OUTSIDE, activity, assign_layers,
                                          busy_ms, kernels_in_named_ranges, layer_times)
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

    def named_modules(self, prefix=""):
        yield prefix, self
        for n, c in self._children.items():
            yield from c.named_modules(f"{prefix}.{n}" if prefix else n)

    def parameters(self, recurse=True):
        return iter(self._params)

    def register_forward_pre_hook(self, fn):
        self._pre.append(fn)
        return _Handle(self._pre, fn)

    def register_forward_hook(self, fn, always_call=False):
        self._post.append(fn)
        return _Handle(self._post, fn)

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


def test_profile_from_capture_reconciles_with_latency():
    t = synthetic_capture()
    leaves = leaf_modules(_model())
    shapes = {"block.conv": {"inputs": [{"shape": [1, 3, 4, 4], "dtype": "torch.float16", "bytes": 96}],
                             "outputs": [{"shape": [1, 8, 4, 4], "dtype": "torch.float16", "bytes": 256}]}}
    p = profile_from_capture(t, leaves, shapes, iterations=2, latencies_ms=[0.0002, 0.0002],
                             clean_latencies_ms=[0.00015, 0.00015], meta={"name": "synthetic"})
    layers = p.layers.set_index("name")
    assert layers.loc["block.conv", "weight_bytes"] == 8 * 3 * 3 * 3 * 2
    assert layers.loc["block.conv", "precision"] == "FP16"
    assert layers.loc["block.conv", "activation_bytes"] == 96 + 256
    assert layers.loc[OUTSIDE, "type"] == "Other"
    # every attributed nanosecond is in the layer sum: (70+10+60+10) + (80+10+30) = 270 ns / 2
    assert p.total_ms == pytest.approx(270 / 2 / 1e6)
    assert p.meta["gpu_busy_ms"]["mean"] == pytest.approx(p.total_ms)   # nothing overlaps here
    assert any("outside the profiled iterations" in w for w in p.meta["warnings"])
    k = p.kernels.set_index(["layer", "kernel"])
    assert k.loc[("block.conv", "implicit_gemm"), "calls"] == 1
    r = reconcile(p).set_index("measure")
    assert r.loc["end-to-end latency", "mean_ms"] == pytest.approx(0.0002)
    assert r.loc["end-to-end latency without hooks", "mean_ms"] == pytest.approx(0.00015)


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
