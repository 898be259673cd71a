"""Captures recorded on real GPUs and shipped with hookmagic, for use without a GPU.

Each is a saved :class:`~hookmagic.Trace` whose ``meta["recorded_on"]`` names the GPU, driver
and date it was made on, and ``meta["description"]`` the workload. They are re-made on a GPU
machine with ``python tools/make_recordings.py``.

    >>> import hookmagic
    >>> hookmagic.recordings.available()
    ['cupy_pipeline', 'mlp_training', 'resnet18_inference_churn', 'transformer_training']
    >>> trace = hookmagic.recordings.load("resnet18_inference_churn")

:func:`available` lists them (the ``*.hmtrace`` files in ``hookmagic/data/recordings``), so
this list is never written down twice.
"""
from __future__ import annotations

from pathlib import Path

from hookmagic.common.errors import InvalidArgument
from hookmagic.trace import Trace

FOLDER = Path(__file__).parent / "data" / "recordings"
SUFFIX = ".hmtrace"
#: a real torch.profiler (Kineto) trace of ResNet-18 inference, for ``hookmagic.load``
#: (``python tools/make_kineto_sample.py`` re-records it)
KINETO_SAMPLE = FOLDER / "kineto_resnet18.json.gz"


def available() -> list[str]:
    """Names of the bundled recordings."""
    return sorted(p.name[: -len(SUFFIX)] for p in FOLDER.glob(f"*{SUFFIX}"))


def path(name: str) -> Path:
    """The file of recording ``name``."""
    file = FOLDER / f"{name}{SUFFIX}"
    if not file.is_file():
        raise InvalidArgument(f"no bundled recording named {name!r}; available: {available()}")
    return file


def load(name: str) -> Trace:
    """Open bundled recording ``name`` (its meta says where and when it was recorded)."""
    from hookmagic.trace.io import load_trace

    trace = load_trace(path(name))
    trace.meta["replayed_from"] = f"bundled recording {name!r}"
    return trace
