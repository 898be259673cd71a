"""Paths of the real trtexec samples that ship inside the package (NVIDIA's TREx samples,
Apache-2.0; see hookmagic/data/trtexec/SOURCE.md), so every test runs from a fresh clone."""
from __future__ import annotations

from pathlib import Path

import pytest

from hookmagic.layers.samples import DATA

MOBILENET = DATA / "mobilenet_qat_titanrtx"
RESNET = DATA / "tf_resnet50_rtx3090"


def mobilenet_files() -> dict[str, Path]:
    stem = MOBILENET / "mobilenet.qat.onnx.engine"
    return {"profile": Path(f"{stem}.profile.json"), "layers": Path(f"{stem}.graph.json"),
            "times": Path(f"{stem}.timing.json")}


def resnet_files(precision: str) -> dict[str, Path]:
    stem = RESNET / precision / ("resnet-qat.onnx.engine" if precision == "qat" else "resnet.onnx.engine")
    return {"profile": Path(f"{stem}.profile.json"), "layers": Path(f"{stem}.graph.json"),
            "times": Path(f"{stem}.timing.json")}


#: the samples ship with the package, so this never skips; kept so test modules stay unchanged
needs_samples = pytest.mark.skipif(not MOBILENET.is_dir(),
                                   reason="hookmagic/data/trtexec is missing from the package")
