"""The probes that enter the NVIDIA driver or load native code, run in a child process with a
deadline: a hung driver (or a crashing library) costs the report one section, never the
process asking.

The child prints one JSON line per section as soon as it has it; whatever it printed before the
deadline is kept, and each section it did not reach says so.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

#: seconds the child may take for every section together (starting Python included)
DEFAULT_TIMEOUT_S = 8.0
#: the sections, in the order the child runs them
SECTIONS = ("native", "nvml", "libcuda")

# The current directory is removed from the child's path before anything is imported, so a
# hookmagic/ or pynvml.py there is never picked up; PYTHONPATH names this package's parent.
_CHILD = "import sys; del sys.path[0]; from hookmagic.machine.isolated import main; main()"


def _sections() -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    from hookmagic.machine import driver, native

    return {"native": lambda done: native.native_report(),
            "nvml": lambda done: driver.nvml_report(),
            # describe GPUs through cuInit only when NVML listed none (no NVML on a Jetson)
            "libcuda": lambda done: driver.libcuda_report(
                describe_devices=not done.get("nvml", {}).get("devices"))}


def main() -> None:
    """The child: each section's report as one JSON line ``{"section": ..., "report": ...}``."""
    done: dict[str, Any] = {}
    for name, probe in _sections().items():
        try:
            report = probe(done)
        except Exception as exc:  # one broken probe must not hide the others
            report = {"error": f"the {name} probe failed ({type(exc).__name__}: {exc})"}
        done[name] = report
        print(json.dumps({"section": name, "report": report}, default=str), flush=True)


def run_isolated(timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """Run the child and return ``{section: report}``; a section the child did not finish has
    ``{"error": why, "timed_out": bool}``."""
    package_parent = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != "HOOKMAGIC_CAPTURE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    timed_out, status = False, 0
    try:
        child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                 cwd=package_parent, text=True, errors="replace")
    except OSError as exc:
        return {name: {"error": f"the probe process could not start ({exc})", "timed_out": False}
                for name in SECTIONS}
    try:
        out, err = child.communicate(timeout=timeout_s)
        status = child.returncode
    except subprocess.TimeoutExpired:
        timed_out = True
        child.kill()
        try:
            out, err = child.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:  # stuck in the kernel: give up on it
            out, err = "", ""
    found = _parse(out)
    for name in SECTIONS:
        if name in found:
            continue
        if timed_out:
            why = (f"no answer within {timeout_s:g} s (the driver or a library hung); "
                   "`nvidia-smi` shows whether the driver answers at all")
        else:
            tail = " ".join((err or "").split())[-300:]
            why = f"the probe process ended with status {status} before this step" + (
                f": {tail}" if tail else "")
        found[name] = {"error": why, "timed_out": timed_out}
    return found


def _parse(out: str) -> dict[str, dict[str, Any]]:
    found = {}
    for line in (out or "").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("section") in SECTIONS and isinstance(doc.get("report"), dict):
            found[doc["section"]] = doc["report"]
    return found
