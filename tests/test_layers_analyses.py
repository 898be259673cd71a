"""Analyses over the real samples; expected values come from the export files themselves."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest

from hookmagic.layers import from_trtexec
from hookmagic.layers.advice import classify, findings
from hookmagic.layers.breakdown import memory_by_type, time_by_precision, time_by_type, top_layers
from hookmagic.layers.fusion import fusion_report, myelin_report, node_to_layer
from hookmagic.layers.reconcile import reconcile
from hookmagic.layers.reformat import reformat_layers, reformat_overhead

from .layers_samples import mobilenet_files, resnet_files


@pytest.fixture(scope="module")
def mobilenet():
    return from_trtexec(**mobilenet_files())


@pytest.fixture(scope="module")
def raw_mobilenet():
    graph = json.loads(mobilenet_files()["layers"].read_text())["Layers"]
    prof = {r["name"]: r["averageMs"] for r in json.loads(mobilenet_files()["profile"].read_text())[1:]}
    return graph, prof


def test_time_by_type_matches_a_direct_sum(mobilenet, raw_mobilenet):
    graph, prof = raw_mobilenet
    expected = defaultdict(float)
    for lay in graph:
        if lay["LayerType"] != "NoOp":
            expected[lay.get("ParameterType") or lay["LayerType"]] += prof[lay["Name"]]
    got = time_by_type(mobilenet).set_index("type")["mean_ms"].to_dict()
    assert got.keys() == expected.keys()
    for k in got:
        assert got[k] == pytest.approx(expected[k])
    assert time_by_type(mobilenet)["pct"].sum() == pytest.approx(100.0)


def test_time_by_precision_first_input_rule(mobilenet, raw_mobilenet):
    graph, prof = raw_mobilenet
    int8 = sum(prof[l["Name"]] for l in graph
               if l["LayerType"] != "NoOp" and "Int8" in l["Inputs"][0]["Format/Datatype"])
    got = time_by_precision(mobilenet).set_index("precision")["mean_ms"]
    assert got["INT8"] == pytest.approx(int8)
    assert set(got.index) == {"INT8", "FP16", "FP32"}


def test_top_layers_and_memory(mobilenet):
    assert top_layers(mobilenet, 3)["name"].tolist() == mobilenet.top(3)["name"].tolist()
    mem = memory_by_type(mobilenet)
    assert mem["weights_mib"].sum() == pytest.approx(mobilenet.weight_bytes / 2**20)
    assert mem.iloc[0]["type"] == "Convolution"


def test_reformat_overhead_mobilenet(mobilenet, raw_mobilenet):
    graph, prof = raw_mobilenet
    ref = [l for l in graph if l["LayerType"] == "Reformat"]
    ov = reformat_overhead(mobilenet).set_index("origin")
    assert ov.loc["all", "layers"] == len(ref) == 18
    assert ov.loc["all", "mean_ms"] == pytest.approx(sum(prof[l["Name"]] for l in ref))
    qdq = [l for l in ref if l.get("Origin") == "QDQ"]
    assert ov.loc["QDQ", "layers"].sum() == len(qdq)
    conv = reformat_layers(mobilenet)["conversion"].value_counts().to_dict()
    fp16_to_int8 = [l for l in ref if "FP16" in l["Inputs"][0]["Format/Datatype"]
                    and "Int8" in l["Outputs"][0]["Format/Datatype"]]
    assert conv["FP16 -> INT8"] == len(fp16_to_int8) == 13
    assert conv["layout only"] == 1          # the FP16 copy node before GlobalAveragePool


def test_fusion_report_and_node_lookup(mobilenet):
    rep = fusion_report(mobilenet)
    first = rep.iloc[0]
    assert first["name"] == "features.0.0.weight + QuantizeLinear_8 + Conv_12 + PWN(Clip_16)"
    assert first["nodes"] == 4
    lookup = node_to_layer(mobilenet).set_index("node")
    assert lookup.loc["Conv_12", "layer"] == first["name"]


def test_myelin_report_empty_on_mobilenet(mobilenet):
    rep = myelin_report(mobilenet)
    assert rep["layers"] == 0 and rep["mean_ms"] == 0


def test_classify_and_findings():
    fp32 = from_trtexec(**resnet_files("fp32"))
    c = classify(fp32)
    assert c["pattern"] == "convolution-dominated" and c["compute_pct"] > 90
    f = findings(from_trtexec(**resnet_files("fp16")))
    assert f.iloc[0]["finding"] == "profile is convolution-dominated"
    assert set(f.columns) == {"severity", "finding", "evidence", "advice"}
    qat = findings(from_trtexec(**resnet_files("qat")))
    assert qat["finding"].str.contains("INT8 layer\\(s\\) write float outputs").any()


def test_reconcile_uses_the_times_file():
    files = resnet_files("fp16")
    p = from_trtexec(**files)
    times = json.loads(gzip.decompress(files["times"].read_bytes()))
    r = reconcile(p).set_index("measure")
    mean = sum(t["latencyMs"] for t in times) / len(times)
    assert r.loc["end-to-end latency", "mean_ms"] == pytest.approx(mean)
    assert r.loc["layer sum", "mean_ms"] == pytest.approx(p.total_ms)
    assert r.loc["end-to-end latency", "diff_ms"] == pytest.approx(mean - p.total_ms)
