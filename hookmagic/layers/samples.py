"""The real trtexec exports shipped with hookmagic (NVIDIA's TREx samples, Apache-2.0; see
``hookmagic/data/trtexec/SOURCE.md``), for notebooks, the demo and quick experiments."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hookmagic.common.errors import InvalidArgument

DATA = Path(__file__).resolve().parent.parent / "data" / "trtexec"


class LayerSampleUnknown(InvalidArgument, KeyError):
    """No shipped sample has that name; the message lists the names there are."""


#: sample name -> (folder, file stem)
SAMPLES: dict[str, tuple[str, str]] = {
    "mobilenet_qat": ("mobilenet_qat_titanrtx", "mobilenet.qat.onnx.engine"),
    "resnet50_fp32": ("tf_resnet50_rtx3090/fp32", "resnet.onnx.engine"),
    "resnet50_fp16": ("tf_resnet50_rtx3090/fp16", "resnet.onnx.engine"),
    "resnet50_int8": ("tf_resnet50_rtx3090/qat", "resnet-qat.onnx.engine"),
}


def sample_files(name: str) -> dict[str, Path]:
    """Paths of one sample's exports: ``profile``, ``layers``, ``times`` (for ``from_trtexec``)
    and the scraped ``build_metadata`` / ``profile_metadata``."""
    if name not in SAMPLES:
        raise LayerSampleUnknown(f"unknown sample {name!r}; choose from {sorted(SAMPLES)}")
    folder, stem = SAMPLES[name]
    base = DATA / folder / stem
    return {"profile": Path(f"{base}.profile.json"), "layers": Path(f"{base}.graph.json"),
            "times": Path(f"{base}.timing.json.gz"),
            "build_metadata": Path(f"{base}.build.metadata.json"),
            "profile_metadata": Path(f"{base}.profile.metadata.json")}


def load_sample(name: str) -> Any:
    """A :class:`LayerProfile` of a shipped sample, labelled with its name, GPU and build options."""
    from .trtexec import from_trtexec, load_logged_metadata

    f = sample_files(name)
    meta = load_logged_metadata(build=f["build_metadata"], profile=f["profile_metadata"])
    meta["provenance"] = "NVIDIA TREx sample (Apache-2.0), measured by NVIDIA; see SOURCE.md"
    return from_trtexec(profile=f["profile"], layers=f["layers"], times=f["times"], name=name,
                        meta=meta)
