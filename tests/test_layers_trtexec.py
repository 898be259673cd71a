"""trtexec importer against the real samples and TREx's published figures for them."""
from __future__ import annotations

import gzip
import json
import math
import statistics

import pytest

from hookmagic.layers import LayerFileError, LayerProfile, from_trtexec
from hookmagic.layers.trtexec import read_layer_info

from .layers_samples import mobilenet_files, resnet_files


@pytest.fixture(scope="module")
def mobilenet() -> LayerProfile:
    return from_trtexec(**mobilenet_files())


def test_mobilenet_matches_trex_published_figures(mobilenet):
    # TREx on its own fixture: 0.470 ms, 72 layers, 3.3 MB weights, 15.9 MB activations (MiB)
    assert round(mobilenet.total_ms, 3) == 0.470
    assert len(mobilenet.layers) == 72
    assert round(mobilenet.weight_bytes / 2**20, 1) == 3.3
    assert round(mobilenet.activation_bytes / 2**20, 1) == 15.9


def test_mobilenet_total_equals_the_files_own_numbers(mobilenet):
    raw = json.loads(mobilenet_files()["profile"].read_text())
    assert raw[0] == {"count": 6610}
    assert len(raw) - 1 == 73                      # 73 records, one NoOp folded
    assert mobilenet.total_ms == pytest.approx(sum(r["averageMs"] for r in raw[1:]), rel=1e-12)
    assert mobilenet.meta["iterations"] == 6610
    # our pct recomputation agrees with trtexec's own percentage column
    pct = {r["name"]: r["percentage"] for r in raw[1:]}
    for name, ours in zip(mobilenet.layers["name"], mobilenet.layers["pct"]):
        assert ours == pytest.approx(pct[name], abs=1e-3)


def test_noop_is_folded_into_its_producer(mobilenet):
    last = mobilenet.layers.iloc[-1]
    assert last["folded"] == ["copied_squeeze_after_(Unnamed Layer* 850) [ElementWise]"]
    assert "NoOp" not in set(mobilenet.layers["layer_type"])


def test_mobilenet_layer_details(mobilenet):
    first = mobilenet.layers.iloc[0]
    assert (first["name"], first["type"], first["origin"]) == ("QuantizeLinear_2", "Reformat", "QDQ")
    assert (first["in_precision"], first["out_precision"]) == ("FP32", "INT8")
    conv = mobilenet.layers.iloc[1]
    assert conv["type"] == "Convolution" and conv["layer_type"] == "CaskConvolution"
    assert conv["precision"] == "INT8"
    assert conv["tactic"] == "volta_int8x4_icudnn_int8x4_128x32_relu_xregs_medium_c32_nn_v1"
    assert conv["weight_bytes"] == 864 and conv["bias_bytes"] == 32 * 4
    assert conv["in_shapes"] == "1x3x224x224" and conv["out_shapes"] == "1x32x112x112"
    assert conv["source_nodes"] == ["features.0.0.weight", "QuantizeLinear_8", "Conv_12", "Clip_16"]
    assert conv["mean_ms"] == pytest.approx(0.00872257)
    assert conv["median_ms"] == pytest.approx(0.008608)
    types = mobilenet.layers["layer_type"].value_counts().to_dict()
    assert types == {"CaskConvolution": 36, "Reformat": 18, "CudaDepthwiseConvolution": 17,
                     "TiledPooling": 1}


def test_times_give_end_to_end_latency(mobilenet):
    raw = json.loads(gzip.decompress(mobilenet_files()["times"].read_bytes()))
    lat = [r["latencyMs"] for r in raw]
    assert len(mobilenet.times) == len(raw)
    assert mobilenet.latency_ms == pytest.approx(statistics.fmean(lat))
    assert mobilenet.meta["latency_ms"]["median"] == pytest.approx(statistics.median(lat))


@pytest.mark.parametrize("precision,n_records,n_noop", [("fp32", 103, 31), ("fp16", 86, 25),
                                                          ("qat", 63, 1)])
def test_resnet_samples(precision, n_records, n_noop):
    files = resnet_files(precision)
    p = from_trtexec(**files)
    raw = json.loads(files["profile"].read_text())
    assert len(raw) - 1 == n_records
    assert len(p.layers) == n_records - n_noop
    assert p.total_ms == pytest.approx(sum(r["averageMs"] for r in raw[1:]))
    assert p.meta["warnings"] == []


def test_profile_only_and_layers_only():
    files = mobilenet_files()
    only_profile = from_trtexec(profile=files["profile"])
    assert len(only_profile.layers) == 73                    # nothing tells us which is a NoOp
    # only the reformat copy node is recognisable by its name
    assert only_profile.layers["type"].value_counts().to_dict() == {"Unknown": 72, "Reformat": 1}
    only_layers = from_trtexec(layers=files["layers"])
    assert len(only_layers.layers) == 72
    assert math.isnan(only_layers.layers["mean_ms"].iloc[0])


# ---- bad input: one clear LayerFileError -----------------------------------------------

def test_truncated_json(tmp_path):
    text = mobilenet_files()["profile"].read_text()
    bad = tmp_path / "cut.profile.json"
    bad.write_text(text[: len(text) // 2])
    with pytest.raises(LayerFileError, match=r"cut.profile.json is not valid JSON .*line \d+"):
        from_trtexec(profile=bad)


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    with pytest.raises(LayerFileError, match="is empty"):
        from_trtexec(profile=empty)
    with pytest.raises(LayerFileError, match="does not exist"):
        from_trtexec(profile=tmp_path / "nope.json")


def test_swapped_files_say_which_argument():
    files = mobilenet_files()
    with pytest.raises(LayerFileError, match="--exportLayerInfo file, not --exportProfile; pass it as layers="):
        from_trtexec(profile=files["layers"])
    with pytest.raises(LayerFileError, match="pass it as profile= or times="):
        from_trtexec(layers=files["profile"])
    with pytest.raises(LayerFileError, match="--exportTimes file, not --exportProfile"):
        from_trtexec(profile=files["times"])


def test_wrong_shapes(tmp_path):
    f = tmp_path / "synthetic_bad.json"
    f.write_text(json.dumps([{"count": 3}, {"nam": "x"}]))
    with pytest.raises(LayerFileError, match="element 1 is not a layer record"):
        from_trtexec(profile=f)
    f.write_text(json.dumps({"Bindings": []}))
    with pytest.raises(LayerFileError, match='no "Layers" list'):
        from_trtexec(layers=f)
    assert issubclass(LayerFileError, ValueError)


# ---- formats not in the samples (synthetic documents, shaped after the notes) -----------

def _write(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def test_synthetic_trt11_layer_info(tmp_path):
    doc = {
        "Layers": [{
            "Name": "/conv/Conv + /relu/Relu", "LayerType": "CaskConvolution",
            "ParameterType": "Convolution",
            "Inputs": [{"Name": "x", "Location": "Device", "Dimensions": [1, 8, 4, 4],
                        "Format": "Row major linear", "DataType": "BFloat16"}],
            "Outputs": [{"Name": "y", "Location": "Device", "Dimensions": [1, 8, 4, 4],
                         "Format": "Row major linear", "DataType": "BFloat16", "Strides": [1]}],
            "Weights": {"Type": "BFloat16", "Count": 64},
            "Metadata": "[ONNX Layer: /conv/Conv]\x1f[ONNX Layer: /relu/Relu]",
            "TacticName": "sm90_xmma_fprop_bf16", "StreamId": 0}],
        "I/O Tensors": [{"Name": "x", "IOMode": "INPUT", "DataType": "BFloat16",
                         "Dimensions": [1, 8, 4, 4], "Location": "Device",
                         "IsShapeInferenceIO": False, "ProfileInfo": []}],
        "EngineFutureKey": 1,
    }
    prof = [{"count": 10}, {"name": "/conv/Conv + /relu/Relu", "timeMs": 1.0, "averageMs": 0.1,
                            "medianMs": 0.09, "percentage": 100.0}]
    p = from_trtexec(profile=_write(tmp_path, "synthetic.profile.json", prof),
                     layers=_write(tmp_path, "synthetic.graph.json", doc))
    row = p.layers.iloc[0]
    assert row["precision"] == "BF16"                      # TREx would say FP32
    assert row["weight_bytes"] == 128
    assert row["activation_bytes"] == 2 * 128 * 2
    assert row["source_nodes"] == ["/conv/Conv", "/relu/Relu"]
    assert p.meta["io_tensors"][0]["mode"] == "input"
    warnings = " ".join(p.meta["warnings"])
    assert "EngineFutureKey" in warnings and "Strides" in warnings


def test_synthetic_names_only_and_myelin(tmp_path):
    doc = {"Layers": ["{ForeignNode[ReduceMean_4492...Mul_4557]}", "Conv_1"], "Bindings": ["in"]}
    prof = [{"count": 2},
            {"name": "{ForeignNode[ReduceMean_4492...Mul_4557]}", "timeMs": 1.2, "averageMs": 0.6},
            {"name": "Conv_1", "timeMs": 0.4, "averageMs": 0.2}]
    p = from_trtexec(profile=_write(tmp_path, "p.json", prof), layers=_write(tmp_path, "l.json", doc))
    assert p.layers["is_myelin"].tolist() == [True, False]
    assert p.layers["source_nodes"].iloc[0] == ["ReduceMean_4492", "Mul_4557"]
    assert any("profilingVerbosity=detailed" in w for w in p.meta["warnings"])


def test_synthetic_constants_split_and_unmatched_records(tmp_path):
    doc = {"Layers": [
        {"Name": "w", "LayerType": "Constant", "Inputs": [], "Outputs": [
            {"Name": "w_out", "Dimensions": [4], "Format/Datatype": "Row major linear FP32"}]},
        {"Name": "mm", "LayerType": "gemm", "Inputs": [], "Outputs": []},
        {"Name": "never_profiled", "LayerType": "Shuffle", "Inputs": [], "Outputs": []}]}
    prof = [{"count": 1}, {"name": "w", "averageMs": 0.0}, {"name": "mm", "averageMs": 1.0},
            {"name": "ghost", "averageMs": 0.5}]
    p = from_trtexec(profile=_write(tmp_path, "p.json", prof), layers=_write(tmp_path, "l.json", doc))
    assert p.constants["name"].tolist() == ["w"]
    assert p.layers["name"].tolist() == ["mm", "never_profiled", "ghost"]
    assert p.total_ms == pytest.approx(1.5)
    text = " ".join(p.meta["warnings"])
    assert "no profile record" in text and "'ghost'" in text


def test_read_layer_info_lists_io(tmp_path):
    info = read_layer_info(mobilenet_files()["layers"])
    assert [t["name"] for t in info["io"]] == ["input1", "1179"]
