"""Source-node parsing and precision words (synthetic strings shaped like TensorRT's)."""
from hookmagic.layers.dtypes import precision_of, tensor_bytes
from hookmagic.layers.names import is_myelin, nodes_from_name, parse_metadata


def test_parse_metadata_separators():
    assert parse_metadata("[ONNX Layer: a]\x1f[ONNX Layer: b/c]\x1e[ONNX Layer: d]") == ["a", "b/c", "d"]
    assert parse_metadata("[ONNX Layer: a][ONNX Layer: b]") == ["a", "b"]
    assert parse_metadata("custom note") == ["custom note"]
    assert parse_metadata(None) == []


def test_nodes_from_name():
    assert nodes_from_name("PWN(PWN(Sigmoid_1), Mul_2) + Add_3") == ["Sigmoid_1", "Mul_2", "Add_3"]
    assert nodes_from_name("Reformatting CopyNode for Input Tensor 0 to Conv_1") == []
    assert nodes_from_name("{ForeignNode[ReduceMean_4492...Mul_4557]}") == ["ReduceMean_4492", "Mul_4557"]
    assert nodes_from_name("(Unnamed Layer* 849) [Shuffle] + Add_1") == ["(Unnamed Layer* 849) [Shuffle]", "Add_1"]


def test_is_myelin():
    assert is_myelin("{ForeignNode[a...b]}", "Myelin")
    assert is_myelin("__myl_AddRelu", "kgen")
    assert not is_myelin("Conv_1", "CaskConvolution")


def test_precision_words():
    assert precision_of("Thirty-two wide channel vectorized row major Int8 format") == "INT8"
    assert precision_of("Channel major FP16 format where channel % 8 == 0") == "FP16"
    assert precision_of("Row major linear FP32") == "FP32"
    assert precision_of("Half") == "FP16"
    assert precision_of("BFloat16") == "BF16"
    assert precision_of("UInt8") == "UINT8"
    assert precision_of("Row major linear") == "Unknown"
    assert tensor_bytes([2, 3], "FP16") == 12
    assert tensor_bytes([-1, 3], "FP16") != tensor_bytes([-1, 3], "FP16")   # NaN for dynamic
