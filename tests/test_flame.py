"""Flame tree: hand-worked trees, an independent per-event reference, filters, weights, diff."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from hookmagic.analysis.flame import PATH_SEP, flame_diff, flame_tree, node_paths
from hookmagic.analysis.kernels import kernel_summary
from tests.synthetic import synthetic

STACKS = {"stack_id": [0, 0, 1, 1, 1], "depth": [0, 1, 0, 1, 2],
          "filename": ["nb.py", "nb.py", "nb.py", "model.py", "model.py"],
          "function": ["<cell>", "step", "<cell>", "forward", "linear"],
          "line": [3, 10, 4, 20, 30]}
RANGES = {"range_id": [5, 6], "name": ["epoch", "fwd"], "start_ns": [0, 0],
          "end_ns": [1000, 900], "parent_id": [-1, 5], "depth": [0, 1], "source": "nvtx"}


def small_trace(label="cell 1"):
    # four kernels on device 0 (two streams) and one on device 1, two copies, one memset
    kernels = {"start_ns": [0, 100, 200, 300, 400], "duration_ns": [10, 20, 30, 40, 50],
               "device": [0, 0, 0, 0, 1], "stream": [7, 7, 8, 7, 7],
               "name": ["gemm", "gemm", "relu", "gemm", "gemm"],
               "stack_id": [0, 0, 1, -1, 1], "range_id": [6, 6, -1, -1, 5]}
    kernels["end_ns"] = [s + d for s, d in zip(kernels["start_ns"], kernels["duration_ns"])]
    memcpy = {"start_ns": [500, 600], "end_ns": [505, 700], "duration_ns": [5, 100],
              "device": 0, "stream": 7, "bytes": [4096, 1_000_000], "kind": ["htod", "dtoh"],
              "stack_id": [0, -1], "range_id": -1}
    memset = {"start_ns": [800], "end_ns": [802], "duration_ns": [2], "device": 0, "stream": 7,
              "bytes": [64], "stack_id": -1, "range_id": -1}
    return synthetic({"label": label}, kernels=kernels, memcpy=memcpy, memset=memset,
                     stacks=STACKS, ranges=RANGES)


def by_path(nodes):
    return {tuple(p.split(PATH_SEP)[1:]): row for p, row in
            zip(node_paths(nodes), nodes.to_dict("records"))}


def test_hand_worked_time_tree():
    nodes = flame_tree(small_trace())
    t = by_path(nodes)
    root = t[()]
    assert root["label"] == "cell 1" and root["kind"] == "root"
    assert root["value"] == 10 + 20 + 30 + 40 + 50 + 5 + 100 + 2 and root["calls"] == 8
    cell = ("f:<cell>@nb.py:3",)
    step = cell + ("f:step@nb.py:10",)
    # kernels 0 and 1 (gemm, range fwd inside epoch) and the 4 kB htod copy come from stack 0
    assert t[cell]["value"] == 35 and t[step]["file_line"] == "nb.py:10"
    assert t[step + ("r:epoch",)]["value"] == 30
    leaf = t[step + ("r:epoch", "r:fwd", "k:gemm")]
    assert (leaf["value"], leaf["calls"], leaf["self_value"]) == (30, 2, 30)
    assert t[step + ("m:Memcpy HtoD",)]["value"] == 5
    # stack 1: relu (no range) and the device-1 gemm inside epoch, caller-first order
    lin = ("f:<cell>@nb.py:4", "f:forward@model.py:20", "f:linear@model.py:30")
    assert t[lin]["value"] == 80 and t[lin + ("k:relu",)]["value"] == 30
    assert t[lin + ("r:epoch", "k:gemm")]["value"] == 50
    # no stack, no range: straight under the root
    assert t[("k:gemm",)]["value"] == 40
    assert t[("m:Memcpy DtoH",)]["value"] == 100 and t[("m:Memset",)]["value"] == 2
    assert t[cell]["share"] == pytest.approx(35 / 257)


def test_tree_invariants():
    nodes = flame_tree(small_trace())
    value = dict(zip(nodes["id"], nodes["value"]))
    kids = nodes[nodes["parent"] >= 0].groupby("parent")["value"].sum()
    for pid, total in kids.items():
        assert total <= value[pid]
    assert nodes["self_value"].sum() == nodes["value"].iloc[0]
    assert (nodes["self_value"] >= 0).all()
    # parents precede children and depth is parent depth + 1
    pos = dict(zip(nodes["id"], range(len(nodes))))
    depth = dict(zip(nodes["id"], nodes["depth"]))
    for nid, parent in zip(nodes["id"][1:], nodes["parent"][1:]):
        assert pos[parent] < pos[nid] and depth[nid] == depth[parent] + 1


def test_filters_and_weights():
    tr = small_trace()
    dev1 = flame_tree(tr, device=1)
    assert dev1["value"].iloc[0] == 50 and dev1["calls"].iloc[0] == 1
    s8 = flame_tree(tr, stream=[8])
    assert s8["value"].iloc[0] == 30 and set(s8["label"]) >= {"relu", "linear"}
    launches = flame_tree(tr, "launches")
    assert launches["value"].iloc[0] == 8
    nbytes = by_path(flame_tree(tr, "bytes"))
    assert nbytes[()]["value"] == 1_004_096
    assert all(not k or not k[-1].startswith("k:") for k in nbytes)  # kernels copy nothing
    with pytest.raises(ValueError):
        flame_tree(tr, "joules")


def test_empty_trace_is_a_lone_root():
    nodes = flame_tree(synthetic({}))
    assert len(nodes) == 1 and nodes["value"].iloc[0] == 0 and nodes["label"].iloc[0] == "capture"


def naive_tree(kernels, stacks, ranges):
    """Independent reference: walk every event in Python and add it along its path."""
    frames = defaultdict(list)
    for row in stacks.sort_values(["stack_id", "depth"]).itertuples():
        frames[row.stack_id].append(f"f:{row.function}@{row.filename}:{row.line}")
    parent = dict(zip(ranges["range_id"], ranges["parent_id"]))
    rname = dict(zip(ranges["range_id"], ranges["name"]))
    totals = defaultdict(int)
    for k in kernels.itertuples():
        chain, r = [], k.range_id
        while r >= 0:
            chain.append(f"r:{rname[r]}")
            r = parent[r]
        path = tuple(frames.get(k.stack_id, [])) + tuple(reversed(chain)) + (f"k:{k.name}",)
        for i in range(len(path) + 1):
            totals[path[:i]] += k.duration_ns
    return totals


def test_matches_per_event_reference_on_random_trace():
    rng = np.random.default_rng(7)
    n = 20_000
    stack_rows = []
    for sid in range(40):
        depth = rng.integers(1, 6)
        for d in range(depth):
            f = int(rng.integers(0, 6))
            stack_rows.append((sid, d, f"file{f % 3}.py", f"fn{f}", int(rng.integers(1, 4))))
    stacks = pd.DataFrame(stack_rows, columns=["stack_id", "depth", "filename", "function", "line"])
    parents = [-1, -1, 0, 0, 2, 1, 5, -1]
    ranges = pd.DataFrame({"range_id": np.arange(8) + 100, "name": [f"r{i % 5}" for i in range(8)],
                           "parent_id": [p + 100 if p >= 0 else -1 for p in parents],
                           "start_ns": 0, "end_ns": 1})
    dur = rng.integers(1, 10_000, n)
    start = np.cumsum(dur + 5)
    kernels = pd.DataFrame({"start_ns": start, "end_ns": start + dur, "duration_ns": dur,
                            "device": 0, "stream": 7,
                            "name": rng.choice(["a", "b", "c", "d"], n),
                            "stack_id": rng.integers(-1, 40, n),
                            "range_id": rng.choice(np.r_[-1, np.arange(8) + 100], n)})
    tr = synthetic({}, kernels=kernels, stacks=stacks, ranges=ranges)
    expected = naive_tree(tr.kernels, tr.stacks, tr.ranges)
    got = {k: v["value"] for k, v in by_path(flame_tree(tr)).items()}
    assert got == dict(expected)


def test_kernel_summary_matches_numpy():
    rng = np.random.default_rng(3)
    n = 5000
    dur = rng.integers(100, 100_000, n)
    names = rng.choice(["x", "y", "z"], n, p=[0.6, 0.3, 0.1])
    tr = synthetic({}, kernels={"start_ns": np.arange(n), "end_ns": np.arange(n) + dur,
                                "duration_ns": dur, "device": 0, "stream": 1, "name": names})
    s = kernel_summary(tr).set_index("name")
    for name in "xyz":
        d = dur[names == name]
        row = s.loc[name]
        assert row["count"] == d.size and row["total_ns"] == d.sum()
        assert row["mean_ns"] == pytest.approx(d.mean())
        assert row["p50_ns"] == pytest.approx(np.percentile(d, 50))
        assert row["p99_ns"] == pytest.approx(np.percentile(d, 99))
        assert row["min_ns"] == d.min() and row["max_ns"] == d.max()
        assert row["share"] == pytest.approx(d.sum() / dur.sum())
    assert list(s.index) == list(s.sort_values("total_ns", ascending=False).index)


def test_diff_aligns_paths_and_ignores_line_shifts():
    before = small_trace("before")
    after = small_trace("after")
    k = after.kernels.copy()
    k.loc[k["name"] == "relu", "duration_ns"] = 90        # 30 -> 90: slower
    k = k[k["stack_id"] != -1].reset_index(drop=True)      # the stackless gemm (40) is gone
    after.kernels = k
    s = after.stacks.copy()
    s["line"] = s["line"] + 2                              # an edit shifted every line
    after.stacks = s
    d = flame_diff(before, after)
    t = by_path(d)
    root = t[()]
    assert root["label"] == "before → after"
    assert (root["value_a"], root["value_b"]) == (257, 257 + 60 - 40)
    relu = t[("f:<cell>@nb.py", "f:forward@model.py", "f:linear@model.py", "k:relu")]
    assert (relu["value_a"], relu["value_b"], relu["delta"]) == (30, 90, 60)
    assert relu["ratio"] == pytest.approx(3.0) and relu["status"] == "slower"
    gone = t[("k:gemm",)]
    assert (gone["value_b"], gone["status"], gone["ratio"]) == (0, "gone", 0.0)
    # additive width: every parent holds its children
    kids = d[d["parent"] >= 0].groupby("parent")["value"].sum()
    value = dict(zip(d["id"], d["value"]))
    assert all(total <= value[p] for p, total in kids.items())
