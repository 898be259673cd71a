"""Paths of the real trtexec samples shipped in hookmagic/data/trtexec (Apache-2.0; see SOURCE.md
there), so every checkout, CI included, tests against them."""
from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "hookmagic" / "data" / "trtexec"
MOBILENET = DATA / "mobilenet_qat_titanrtx"
RESNET = DATA / "tf_resnet50_rtx3090"


def mobilenet_files() -> dict[str, Path]:
    stem = MOBILENET / "mobilenet.qat.onnx.engine"
    return {"profile": Path(f"{stem}.profile.json"), "layers": Path(f"{stem}.graph.json"),
            "times": Path(f"{stem}.timing.json.gz")}


def resnet_files(precision: str) -> dict[str, Path]:
    name = "resnet-qat.onnx.engine" if precision == "qat" else "resnet.onnx.engine"
    stem = RESNET / precision / name
    return {"profile": Path(f"{stem}.profile.json"), "layers": Path(f"{stem}.graph.json"),
            "times": Path(f"{stem}.timing.json.gz")}

