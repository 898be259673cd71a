"""One line naming the machine a benchmark ran on: GPU, driver, CUDA, date."""
from __future__ import annotations

import datetime as dt
import platform


def machine_line() -> str:
    parts = []
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        parts.append(f"GPU: {name if isinstance(name, str) else name.decode()}")
        parts.append(f"driver {driver if isinstance(driver, str) else driver.decode()}")
        parts.append(f"CUDA {cuda // 1000}.{cuda % 1000 // 10}")
    except Exception:
        parts.append(f"CPU: {platform.processor() or platform.machine()} (no GPU)")
    try:
        import torch

        parts.append(f"torch {torch.__version__}")
    except ImportError:
        pass
    parts.append(f"Python {platform.python_version()}")
    parts.append(f"measured {dt.date.today().isoformat()}")
    return "Measured on: " + ", ".join(parts) + "."
