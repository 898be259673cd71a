"""Python, hookmagic, NVIDIA's CUDA wheels, CUDA toolkits on disk, and hookmagic's extras.

Everything here reads package metadata and files; nothing is imported or loaded to look. The
packages each extra brings are read from hookmagic's installed metadata (``Requires-Dist``,
written from pyproject.toml), so pyproject.toml stays their one source.
"""
from __future__ import annotations

import glob
import importlib.metadata as metadata
import json
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

from hookmagic.common.optional import EXTRAS, install_command
from hookmagic.common.version import __version__

#: distributions that carry CUDA libraries (NVIDIA's wheels, cuda-python, CuPy)
_CUDA_WHEEL = re.compile(r"^(nvidia-cuda-.*|nvidia-nvjitlink.*|cuda-toolkit|cuda-bindings|cuda-core|"
                         r"cupy-cuda\d+x)$")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_SELF = re.compile(r"^hookmagic\s*\[([^\]]*)\]")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def python_report() -> dict[str, Any]:
    """This interpreter and hookmagic: versions and where they live."""
    v = sys.version_info
    return {"python": f"{v.major}.{v.minor}.{v.micro}", "implementation": platform.python_implementation(),
            "executable": sys.executable, "platform": f"{platform.system()} {platform.machine()}",
            "hookmagic": __version__, "hookmagic_path": str(Path(__file__).resolve().parents[1])}


def cuda_wheels() -> list[dict[str, str]]:
    """NVIDIA's CUDA wheels installed in this environment: name, version and the CUDA major
    version each targets (a ``-cu12`` suffix, else the version's major)."""
    out = {}
    for dist in metadata.distributions():
        name = _canonical(dist.metadata.get("Name") or "")
        if not _CUDA_WHEEL.match(name) or name in out:
            continue
        version = dist.version or ""
        suffix = re.search(r"cu(?:da)?(\d{2})x?$", name)
        major = suffix.group(1) if suffix else (version.split(".")[0] if name.startswith("nvidia-") else "")
        out[name] = {"name": name, "version": version, "cuda": major}
    return [out[k] for k in sorted(out)]


def toolkits() -> list[dict[str, str]]:
    """CUDA toolkits on disk (``CUDA_HOME``, ``CUDA_PATH``, ``/usr/local/cuda*``): root and
    version (from its version.json or version.txt)."""
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    roots += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    out, seen = [], set()
    for root in roots:
        if not root or not os.path.isabs(root) or not os.path.isdir(root):
            continue
        real = os.path.realpath(root)
        if real in seen:
            continue
        seen.add(real)
        out.append({"root": root, "version": _toolkit_version(Path(root))})
    return out


def _toolkit_version(root: Path) -> str:
    try:
        doc = json.loads((root / "version.json").read_text()[:1 << 20])
        return str(doc.get("cuda", {}).get("version", ""))
    except (OSError, ValueError, AttributeError):
        pass
    try:
        found = re.search(r"(\d+\.\d+(?:\.\d+)?)", (root / "version.txt").read_text()[:4096])
        return found.group(1) if found else ""
    except OSError:
        return ""


def _checkout_extras() -> dict[str, list[str]] | None:
    """extra -> requirements from the pyproject.toml of the source checkout this hookmagic runs
    from (PYTHONPATH pointing at a clone, nothing installed); None where there is none."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return None
    path = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8")[:1 << 20])
    except (OSError, ValueError):
        return None
    project = doc.get("project", {})
    extras = project.get("optional-dependencies")
    if project.get("name") != "hookmagic" or not isinstance(extras, dict):
        return None
    return {str(k): [str(r).split(";")[0].strip() for r in v] for k, v in extras.items()}


def _requirements() -> dict[str, list[str]] | None:
    """extra -> the requirement strings it adds (extras named inside it expanded), from
    hookmagic's installed metadata, else from the checkout's pyproject.toml; None when neither
    is there."""
    try:
        lines = metadata.requires("hookmagic") or []
    except metadata.PackageNotFoundError:
        lines = None
    direct: dict[str, list[str]] = {}
    for line in lines or []:
        req, _, marker = line.partition(";")
        found = _EXTRA_MARKER.search(marker)
        if found:
            direct.setdefault(found.group(1), []).append(req.strip())
    if lines is None:
        checkout = _checkout_extras()
        if checkout is None:
            return None
        direct = checkout

    def expand(extra: str, seen: frozenset[str]) -> list[str]:
        out = []
        for req in direct.get(extra, []):
            nested = _SELF.match(req)
            if nested:
                for inner in nested.group(1).split(","):
                    if inner.strip() and inner.strip() not in seen:
                        out += expand(inner.strip(), seen | {inner.strip()})
            elif req not in out:
                out.append(req)
        return out

    return {extra: expand(extra, frozenset({extra})) for extra in direct}


def _distribution_name(requirement: str) -> str:
    return _canonical(re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0])


def _modules_by_distribution() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            out.setdefault(_canonical(dist), []).append(module)
    return out


def extras_report() -> list[dict[str, Any]]:
    """For each extra of :data:`hookmagic.common.optional.EXTRAS`: what it is for, whether every
    distribution it brings is installed (``installed`` is None when hookmagic's metadata is
    missing), each distribution's version and import names, and the command that adds it."""
    requirements = _requirements()
    modules = _modules_by_distribution() if requirements is not None else {}
    out = []
    for extra, purpose in EXTRAS.items():
        row: dict[str, Any] = {"extra": extra, "purpose": purpose, "installed": None,
                               "packages": [], "missing": [], "install": install_command(extra)}
        if requirements is not None:
            for req in requirements.get(extra, []):
                name = _distribution_name(req)
                if any(p["name"] == name for p in row["packages"]):
                    continue   # named twice (ray and ranks both bring duckdb)
                try:
                    version = metadata.version(name)
                except metadata.PackageNotFoundError:
                    version = ""
                    row["missing"].append(name)
                row["packages"].append({"name": name, "requirement": req, "version": version,
                                        "installed": bool(version),
                                        "modules": sorted(modules.get(name, [])) if version else []})
            row["installed"] = not row["missing"]
        out.append(row)
    return out
