"""Paths of the real trtexec samples (shared data, Apache-2.0; see SOURCE.md there)."""
from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "trtexec"
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


needs_samples = pytest.mark.skipif(not MOBILENET.is_dir(), reason="shared trtexec samples not present")
