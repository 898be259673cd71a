"""Figures and the explorer panel draw exactly the analysis tables they are given."""
from __future__ import annotations

import pytest

from hookmagic.layers import from_trtexec
from hookmagic.layers.breakdown import filter_layers, time_by_type, top_layers
from hookmagic.layers.compare import compare_layers, stacked
from hookmagic.layers.reconcile import reconcile
from hookmagic.views import layers as views
from hookmagic.views.layers_explorer import LayerExplorer, layer_details_html

from .layers_samples import mobilenet_files, resnet_files


@pytest.fixture(scope="module")
def mobilenet():
    return from_trtexec(**mobilenet_files())


def test_layer_bars_hold_the_top_layers(mobilenet):
    top = top_layers(mobilenet, 10)
    fig = views.layer_bars(top)
    xs = sorted(x for tr in fig.data for x in tr.x)
    assert xs == sorted(top["mean_ms"])
    assert {tr.name for tr in fig.data} == set(top["precision"])


def test_hierarchies_sum_to_the_layer_sum(mobilenet):
    for fig in (views.treemap(mobilenet.layers), views.sunburst(mobilenet.layers)):
        tr = fig.data[0]
        assert tr.values[0] == pytest.approx(mobilenet.total_ms)
        leaves = [v for i, v in zip(tr.ids, tr.values) if i not in set(tr.parents)]
        assert sum(leaves) == pytest.approx(mobilenet.total_ms)
        assert len(set(tr.ids)) == len(tr.ids)


def test_other_figures(mobilenet):
    by = time_by_type(mobilenet)
    assert list(views.time_by_bars(by, "type").data[0].y) == list(by["mean_ms"])
    assert list(views.reconcile_bars(reconcile(mobilenet)).data[0].y)[0] == pytest.approx(mobilenet.total_ms)
    a, b = (from_trtexec(**resnet_files(p), name=p) for p in ("fp32", "fp16"))
    fig = views.engines_stacked(stacked([a, b], "precision"), "precision")
    assert sum(sum(tr.y) for tr in fig.data) == pytest.approx(a.total_ms + b.total_ms)
    cmp = compare_layers(a, b)
    sp = views.speedup_bars(cmp)
    assert len(sp.data[0].y) == int(((cmp.order_a >= 0) & (cmp.order_b >= 0)).sum())
    assert "fp32 → fp16" in sp.layout.title.text


def test_filter_layers(mobilenet):
    conv = filter_layers(mobilenet, types=["Convolution"], precisions=["INT8"], n=5)
    assert len(conv) == 5 and set(conv["type"]) == {"Convolution"}
    assert conv["mean_ms"].is_monotonic_decreasing
    q = filter_layers(mobilenet, pattern="quantizelinear_(2|98)$", sort_by="order")
    assert q["name"].tolist() == ["QuantizeLinear_2", "QuantizeLinear_98"]
    assert len(filter_layers(mobilenet, pattern="((")) == 0     # bad regex matches literally


def test_explorer_filters_and_details(mobilenet):
    ex = LayerExplorer(mobilenet, n=10)
    assert len(ex.filtered()) == 10
    ex.types.value = ("Reformat",)
    assert set(ex.filtered()["type"]) == {"Reformat"}
    assert all(o in set(ex.filtered()["order"]) for _, o in ex.layer.options)
    ex.layer.value = 0
    assert "QuantizeLinear_2" in ex.details.value and "QDQ" in ex.details.value
    ex.chart.value = "treemap"
    assert ex.figure().data[0].type == "treemap"
    ex.pattern.value = "no-such-layer"
    assert ex.layer.options == () and "0 layer(s)" in ex.status.value
    assert layer_details_html(mobilenet, None) == ""
