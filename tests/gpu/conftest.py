"""GPU tests: every test under tests/gpu/ runs on a machine with an NVIDIA GPU (the lent GPU
machine), never in CI. Each is marked ``gpu`` and, where it cannot run, skipped with the one
reason :func:`skip_reason` gives.

A module that needs more than PyTorch with CUDA says so with ``pytestmark =
pytest.mark.needs("torchvision")`` (any of :data:`NEEDS`); a module that uses torch at import
time imports it as ``torch = pytest.importorskip("torch", reason=skip_reason())``.

Run them with ``python3 -m pytest tests/gpu -q`` (after ``source benchmarks/gpu_setup.sh`` on
the GPU machine), or all of it with the GPU benchmarks by ``bash benchmarks/gpu_suite.sh``.
"""
from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path

import pytest

#: extra needs a module may name, with what is missing when it is not there
NEEDS: dict[str, str] = {
    "torchvision": "needs torchvision (the test's models are torchvision architectures)",
    "cupy": "needs CuPy (pip install cupy-cuda12x or cupy-cuda13x)",
    "native": "needs hookmagic's native extension (pip install -e . builds it)",
    "duckdb": "needs DuckDB (pip install 'hookmagic[ranks]'; carry its wheel to the GPU machine)",
    "two_gpus": "needs two GPUs (run on a machine with several, e.g. nvidia-h100-x2)",
}


def _has(need: str) -> bool:
    if need == "two_gpus":
        import torch
        return torch.cuda.device_count() >= 2
    module = {"native": "hookmagic._native"}.get(need, need)
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


@cache
def skip_reason(*needs: str) -> str | None:
    """Why GPU tests needing PyTorch with CUDA and ``needs`` cannot run here; None when they
    can. The one place that decides it, for every test under tests/gpu/."""
    unknown = sorted(set(needs) - set(NEEDS))
    if unknown:
        raise ValueError(f"unknown GPU test needs {unknown}; known: {sorted(NEEDS)}")
    try:
        import torch
    except ImportError:
        return "needs PyTorch with CUDA (torch is not installed)"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch sees none: CI has none; these run on the GPU machine)"
    for need in needs:
        if not _has(need):
            return NEEDS[need]
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs(*what): a GPU test's needs beyond PyTorch with "
                                       f"CUDA, any of {sorted(NEEDS)}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here not in Path(item.path).parents:
            continue
        item.add_marker(pytest.mark.gpu)
        needs = tuple(n for mark in item.iter_markers("needs") for n in mark.args)
        reason = skip_reason(*sorted(set(needs)))
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
