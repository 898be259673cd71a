"""Flame, diff and timeline figures: what they draw, hover, search, binning and payload size."""
from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from hookmagic.views.flame import (
    FADED_COLOUR,
    MATCH_COLOUR,
    diff_figure,
    flame_figure,
    prune,
)
from hookmagic.views.timeline import timeline_figure
from tests.synthetic import synthetic

LONG = "void cutlass::Kernel<cutlass::gemm::GemmUniversal<float, 128, 128, 32, 3, true>>(Params)"


def small_trace(relu_ns=30, label="cell"):
    kernels = {"start_ns": [0, 100, 200], "duration_ns": [10, 20, relu_ns],
               "device": [0, 0, 1], "stream": [7, 8, 7], "correlation": [1, 2, 3],
               "name": [LONG, LONG, "relu"], "stack_id": [0, 0, 0], "range_id": -1}
    kernels["end_ns"] = [s + d for s, d in zip(kernels["start_ns"], kernels["duration_ns"])]
    stacks = {"stack_id": [0, 0], "depth": [0, 1], "filename": ["nb.py", "model.py"],
              "function": ["<cell>", "forward"], "line": [3, 42]}
    api = {"start_ns": [-5, 90, 150], "end_ns": [-4, 91, 151], "correlation": [1, 2, 3],
           "name": "cudaLaunchKernel", "domain": "runtime"}
    ranges = {"range_id": [0], "name": ["step"], "start_ns": [0], "end_ns": [300],
              "thread": [11], "depth": [0], "parent_id": [-1], "source": "nvtx"}
    return synthetic({"label": label, "start_ns": -10, "end_ns": 400}, kernels=kernels,
                     stacks=stacks, api=api, ranges=ranges)


def icicle(fig):
    assert isinstance(fig, go.Figure)
    (trace,) = fig.data
    assert trace.type == "icicle" and trace.branchvalues == "total"
    return trace


def test_flame_figure_draws_the_tree_with_hover():
    t = icicle(flame_figure(small_trace()))
    ids, parents, values = list(t.ids), list(t.parents), list(t.values)
    assert parents[0] == "" and values[0] == 60
    index = dict(zip(ids, range(len(ids))))
    for i, p in enumerate(parents[1:], 1):
        assert values[i] <= values[index[p]]
    hover = " ".join(t.customdata)
    # names are entity-escaped, which Plotly decodes back (html.unescape reads them the same),
    # so the template brackets show instead of being dropped as unknown tags
    assert "model.py:42" in hover and "2 calls" in hover
    assert "Kernel<cutlass" not in hover and LONG in html.unescape(hover)
    assert all(len(html.unescape(lab)) <= 60 for lab in t.labels)  # long names cut in the cell...
    assert any(lab.endswith("…") for lab in t.labels)  # ...and whole in the hover
    json.loads(flame_figure(small_trace()).to_json())  # serialisable


def test_flame_search_filter_weight_and_depth():
    fig = flame_figure(small_trace(), search="RELU", device=1, max_depth=2, weight="launches")
    t = icicle(fig)
    assert t.maxdepth == 2
    colours = dict(zip(t.labels, t.marker.colors))
    assert colours["relu"] == MATCH_COLOUR and colours["forward"] == FADED_COLOUR
    title = fig.layout.title.text
    assert "launches" in title and "device 1" in title and "1 nodes, 100.0% of total" in title
    assert "cutlass" not in " ".join(t.labels)  # device 0's kernels are filtered out


def test_prune_keeps_ancestors():
    n = 50
    kernels = {"start_ns": np.arange(n), "end_ns": np.arange(n) + np.arange(n) + 1,
               "duration_ns": np.arange(n) + 1, "device": 0, "stream": 1,
               "name": [f"k{i}" for i in range(n)], "stack_id": np.arange(n) % 5, "range_id": -1}
    stacks = {"stack_id": np.repeat(np.arange(5), 2), "depth": np.tile([0, 1], 5),
              "filename": "f.py", "function": [f"fn{i}" for i in range(10)], "line": 1}
    from hookmagic.analysis.flame import flame_tree
    nodes = flame_tree(synthetic({}, kernels=kernels, stacks=stacks))
    kept = prune(nodes, 12)
    assert len(kept) <= 12 and kept["parent"].iloc[0] == -1
    assert set(kept["parent"].iloc[1:]) <= set(kept["id"])
    fig = flame_figure(synthetic({}, kernels=kernels, stacks=stacks), max_nodes=12)
    assert "heaviest" in fig.layout.title.text and len(icicle(fig).ids) <= 12


def test_flame_payload_stays_small_for_many_kernels():
    # synthetic: 200,000 kernels from 300 stacks x 40 names -> thousands of nodes, one figure
    rng = np.random.default_rng(0)
    n = 200_000
    dur = rng.integers(1_000, 50_000, n)
    start = np.cumsum(dur)
    kernels = {"start_ns": start, "end_ns": start + dur, "duration_ns": dur, "device": 0,
               "stream": 7, "name": rng.choice([f"{LONG}_{i}" for i in range(40)], n),
               "stack_id": rng.integers(0, 300, n), "range_id": -1}
    rows = [(s, d, f"/very/long/path/to/module_{(s + d) % 17}.py", f"function_{(s * d) % 50}", d)
            for s in range(300) for d in range(12)]
    stacks = pd.DataFrame(rows, columns=["stack_id", "depth", "filename", "function", "line"])
    fig = flame_figure(synthetic({}, kernels=kernels, stacks=stacks))
    assert len(fig.to_json()) < 5_000_000


def test_diff_figure_colours_faster_and_slower():
    before = small_trace(relu_ns=30, label="before")
    after = small_trace(relu_ns=120, label="after")
    after.kernels = after.kernels[after.kernels["stream"] != 8].reset_index(drop=True)
    fig = diff_figure(before, after)
    t = icicle(fig)
    shade = dict(zip(t.labels, t.marker.colors))
    assert shade["relu"] == pytest.approx(2.0)      # x4 slower -> log2 = 2 (the top)
    assert shade["forward"] > 0                     # 30 -> 120 + 10 - 20 in total
    hover = " ".join(t.customdata)
    assert "×4.00" in hover and "faster" in hover   # the long gemm lost its stream-8 launch
    long_label = next(lab for lab in t.labels if lab.startswith("void cutlass"))
    assert shade[long_label] == pytest.approx(np.log2(10 / 30))
    assert "60 ns → 130 ns (+116.7%)" in fig.layout.title.text
    assert t.marker.colorscale is not None and t.marker.cmid == 0


def test_timeline_exact_rows_and_latency():
    fig = timeline_figure(small_trace())
    rows = list(fig.layout.yaxis.ticktext)
    assert rows == ["GPU 0 · stream 7", "GPU 0 · stream 8", "GPU 1 · stream 7",
                    "GPU 0 · launch latency", "GPU 1 · launch latency", "ranges · thread 11"]
    data = [d for d in fig.data if d.x is not None and len(d.x) > 1]
    assert all(d.type == "scattergl" for d in fig.data)
    # stream 7 of GPU 0: one kernel [0, 10] ns -> ms from the capture start (-10 ns)
    k = next(d for d in data if d.name == "GPU 0 · stream 7 · kernel")
    assert list(np.asarray(k.x, dtype=float)[:2]) == pytest.approx([10e-6, 20e-6])
    # GPU 0 latency: api -5 -> kernel 0 and api 90 -> kernel 100
    lat = next(d for d in data if d.name == "GPU 0 · launch latency")
    x = np.asarray(lat.x, dtype=float)
    assert list(x[[0, 1, 3, 4]]) == pytest.approx([5e-6, 10e-6, 100e-6, 110e-6])
    assert "binned" not in fig.layout.title.text


def test_timeline_bins_busy_fraction_and_zooms_in():
    # synthetic: 10,000 kernels of 50 ns every 100 ns -> every slice is half busy
    n = 10_000
    start = np.arange(n) * 100
    tr = synthetic({"start_ns": 0, "end_ns": n * 100},
                   kernels={"start_ns": start, "end_ns": start + 50, "duration_ns": 50,
                            "device": 0, "stream": 7, "correlation": np.arange(n), "name": "k"})
    fig = timeline_figure(tr, max_events_per_row=1000, bins=100)
    assert "binned into 100 slices" in fig.layout.title.text
    (marks,) = [d for d in fig.data if d.mode == "markers"]
    assert len(marks.x) == 100
    assert np.asarray(marks.marker.color, dtype=float) == pytest.approx(np.full(100, 0.5))
    assert "100 kernels · busy 50%" in marks.hovertext[0]
    zoomed = timeline_figure(tr, start_ns=0, end_ns=50_000, max_events_per_row=1000)
    assert "binned" not in zoomed.layout.title.text
    lines = [d for d in zoomed.data if d.mode == "lines" and d.x is not None and len(d.x) > 1]
    assert len(lines[0].x) == 3 * 501  # every event in the window: start, end, break


def test_figures_on_an_empty_trace():
    empty = synthetic({})
    assert icicle(flame_figure(empty)).values[0] == 0
    fig = timeline_figure(empty)
    assert "0 GPU events" in fig.layout.title.text
    json.loads(fig.to_json())
