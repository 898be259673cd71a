"""GPU tests: they run on a machine with an NVIDIA GPU (the lent GPU machine), never in CI."""
from __future__ import annotations

import pytest


def _gpu_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "needs PyTorch with CUDA"
    if not torch.cuda.is_available():
        return "no NVIDIA GPU visible (CI has none; these run on the GPU machine)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
