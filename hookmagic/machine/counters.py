"""Whether GPU performance counters are restricted to admin users.

On Linux the NVIDIA driver publishes its module parameters in ``/proc/driver/nvidia/params``;
``RmProfilingAdminOnly: 1`` means only root (or CAP_SYS_ADMIN) may read the counters (set by
``NVreg_RestrictProfilingToAdminUsers``; NVIDIA's ERR_NVGPUCTRPERM page). CUPTI's metrics and
Nsight Compute need them; hookmagic's tracing (kernels, copies, memory, stacks) does not.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

#: where the Linux driver publishes its module parameters
PARAMS_PATH = Path("/proc/driver/nvidia/params")
#: the most of the file read: the real one is about 2 KiB
_MAX_BYTES = 1 << 16
_SETTING = re.compile(r"^\s*RmProfilingAdminOnly\s*:\s*(\S+)\s*$", re.MULTILINE)

FIX_RESTRICTED = ("run as root, or have an admin set `options nvidia "
                  "NVreg_RestrictProfilingToAdminUsers=0` in a file under /etc/modprobe.d/ and "
                  "reload the driver (or reboot)")


def counter_access(params_path: str | os.PathLike = PARAMS_PATH, *,
                   admin: bool | None = None) -> dict[str, Any]:
    """``{"restricted": True|False|None, "source", "detail", "fix"}`` from the driver's
    parameters file ``params_path``; ``restricted`` is None (unknown) when it cannot be read or
    does not say (no driver, not Linux, a Jetson's integrated GPU). ``admin``: whether the
    reader is an admin, who may read restricted counters anyway (None: this process runs as
    root)."""
    path = Path(params_path)
    if path.exists() and not path.is_file():  # a FIFO would block the read
        return {"restricted": None, "source": str(path), "fix": "",
                "detail": f"{path} could not be read (it is not a regular file)"}
    try:
        with open(path, "rb") as f:
            text = f.read(_MAX_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        why = ("it is not there: the NVIDIA driver is not loaded"
               if isinstance(exc, FileNotFoundError) else exc.strerror or str(exc))
        return {"restricted": None, "source": str(path), "fix": "",
                "detail": f"{path} could not be read ({why})"}
    found = _SETTING.search(text)
    if not found or found.group(1) not in ("0", "1"):
        return {"restricted": None, "source": str(path), "fix": "",
                "detail": f"{path} has no RmProfilingAdminOnly setting of 0 or 1"}
    if found.group(1) == "0":
        return {"restricted": False, "source": str(path), "fix": "",
                "detail": "open to every user (RmProfilingAdminOnly: 0)"}
    root = admin if admin is not None else (hasattr(os, "geteuid") and os.geteuid() == 0)
    return {"restricted": True, "source": str(path), "fix": "" if root else FIX_RESTRICTED,
            "detail": ("restricted to admin users (RmProfilingAdminOnly: 1)"
                       + ("; an admin (root) may read them" if root else
                          "; CUPTI metrics and Nsight Compute need them, hookmagic's tracing "
                          "does not"))}
