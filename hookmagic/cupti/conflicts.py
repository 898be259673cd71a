"""Naming the tool that holds CUPTI when CUPTI itself cannot say.

CUPTI before 13.2 (or with drivers before r610) allows one subscriber per process and only
answers "multiple subscribers". These checks find the usual holders so the message can name
them: torch.profiler running in this process, Nsight Systems, or an injected tool such as
compute-sanitizer.
"""
from __future__ import annotations

import os
import sys


def torch_profiler_running() -> bool:
    """True while a torch.profiler / autograd profiler is active in this process."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled)
    except Exception:
        return False


def cupti_holder() -> str | None:
    """A plain name for whatever is likely holding CUPTI, or None if nothing is known."""
    if torch_profiler_running():
        return "torch.profiler (running in this process)"
    environ = os.environ
    if any(key.startswith("NSYS_") for key in environ) or "nsys" in environ.get("LD_PRELOAD", ""):
        return "Nsight Systems (nsys)"
    injection = environ.get("CUDA_INJECTION64_PATH", "")
    if "sanitizer" in injection.lower():
        return "compute-sanitizer"
    if "nsys" in injection.lower() or "ToolsInjection" in injection:
        return "Nsight Systems (nsys)"
    if injection:
        return f"the CUDA injection library {injection}"
    if "ncu" in environ.get("NV_COMPUTE_PROFILER_PERFWORKS_DIR", "") or any(
        key.startswith("NV_NSIGHT_INJECTION") for key in environ
    ):
        return "Nsight Compute (ncu)"
    return None
