"""Engine comparison on the RTX 3090 ResNet-50 FP32 / FP16 / INT8 (QAT) samples."""
from __future__ import annotations

import re

import pytest

from hookmagic.layers import from_trtexec
from hookmagic.layers.compare import compare_by, engines_summary, stacked

from .layers_samples import resnet_files


@pytest.fixture(scope="module")
def engines():
    return {p: from_trtexec(**resnet_files(p), name=p) for p in ("fp32", "fp16", "qat")}


def _block(name: str):
    m = re.search(r"conv\d_block\d_\d", name)
    return m.group(0) if m else None


def test_fp32_fp16_pairs_by_name(engines):
    cmp = engines["fp32"].compare(engines["fp16"])
    pairs = cmp[cmp["match"] == "name"]
    assert len(pairs) == 59
    assert (pairs["name_a"] == pairs["name_b"]).all()
    # every layer of both engines appears exactly once
    assert sorted(cmp.loc[cmp.order_a >= 0, "order_a"]) == list(range(72))
    assert sorted(cmp.loc[cmp.order_b >= 0, "order_b"]) == list(range(61))
    assert cmp["ms_a"].sum() == pytest.approx(engines["fp32"].total_ms)
    assert cmp["ms_b"].sum() == pytest.approx(engines["fp16"].total_ms)


def test_fp32_int8_pairs_convolutions_by_signature(engines):
    cmp = engines["fp32"].compare(engines["qat"])
    sig = cmp[cmp["match"] == "signature"]
    convs = sig[sig["type"] == "Convolution"]
    assert len(convs) >= 50
    # pairs land on the same ResNet block; the two 64->256 1x1 convs of conv2_block1 (projection
    # and expansion, same shapes, the residual add fused to different ones) may swap
    same_block = [(_block(a) or "")[:12] == (_block(b) or "")[:12] for a, b in
                  zip(convs["name_a"], convs["name_b"])]
    assert sum(same_block) == len(convs)
    assert convs["precision_changed"].all()
    assert (convs["precision_b"] == "INT8").all()
    assert convs["speedup"].median() > 2


def test_compare_by_type_and_summary(engines):
    by_type = compare_by(engines["fp32"], engines["fp16"], "type").set_index("type")
    conv32 = engines["fp32"].layers.query("type == 'Convolution'")["mean_ms"].sum()
    assert by_type.loc["Convolution", "ms_a"] == pytest.approx(conv32)
    summary = engines_summary(list(engines.values())).set_index("engine")
    assert summary.loc["fp32", "speedup_vs_first"] == 1
    assert summary.loc["fp16", "speedup_vs_first"] == pytest.approx(
        engines["fp32"].total_ms / engines["fp16"].total_ms)
    assert summary.loc["qat", "total_ms"] < summary.loc["fp16", "total_ms"] < summary.loc["fp32", "total_ms"]
    long = stacked(list(engines.values()), "precision")
    assert set(long["engine"]) == {"fp32", "fp16", "qat"}
    assert long.groupby("engine")["mean_ms"].sum()["qat"] == pytest.approx(engines["qat"].total_ms)
