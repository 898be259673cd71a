"""``hookmagic doctor`` and :func:`hookmagic.doctor`: what this machine can do for hookmagic, and
why not. (The module is not named ``doctor``: importing a submodule of that name would replace
the function ``hookmagic.doctor`` with the module.)

One call, no GPU needed::

    import hookmagic
    report = hookmagic.doctor()      # a DoctorReport: text in a terminal, a table in Jupyter
    report.summary()                 # a Headline (.to_frame())
    report.missing()                 # the checks that failed, each with its fix
    report.to_dict()                 # what `hookmagic doctor --json` prints

It checks the NVIDIA driver (NVML and libcuda), NVML, each GPU and its architecture, CUDA's
runtime wheels and toolkits, which CUPTI a capture would load and why (the capture's own
search, :func:`hookmagic.cupti.library.find_cupti`), whether performance counters are
restricted to admin users, Python, hookmagic and its native extension, the kernel variants
each GPU can run (:mod:`hookmagic.kernels`' registry and dispatch table) and the optional
extras (:data:`hookmagic.common.optional.EXTRAS`). Whatever enters the driver runs in a child
process with a deadline (:mod:`hookmagic.machine.isolated`): no CUDA context is created here,
and a hung driver costs one section, not the call.
"""
from __future__ import annotations

import os
from typing import Any

from hookmagic.cupti import library
from hookmagic.machine import counters, packages
from hookmagic.machine.driver import cuda_version_text
from hookmagic.machine.isolated import DEFAULT_TIMEOUT_S, run_isolated
from hookmagic.machine.result import Check, DoctorReport

__all__ = ["doctor", "DoctorReport", "Check"]

#: compute capability major (and minor, where it differs) -> architecture family
ARCHITECTURES = {(7, 0): "Volta", (7, 2): "Volta (Xavier)", (7, 5): "Turing", (8, 0): "Ampere",
                 (8, 6): "Ampere", (8, 7): "Ampere (Orin)", (8, 9): "Ada Lovelace", (9, 0): "Hopper",
                 (10, 0): "Blackwell", (10, 3): "Blackwell", (11, 0): "Blackwell (Thor)",
                 (12, 0): "Blackwell", (12, 1): "Blackwell (GB10)"}

FIX_DRIVER = ("install the NVIDIA driver (your distribution's nvidia-driver package, or "
              "https://www.nvidia.com/drivers; JetPack on a Jetson); in a container, start it "
              "with the NVIDIA Container Toolkit (docker run --gpus all)")
FIX_NATIVE = ("reinstall hookmagic so its extension is built for this Python: from a clone, "
              "pip install -e . (needs a C++17 compiler and CMake), or install the wheel for "
              "this Python and platform")


def doctor(*, timeout_s: float = DEFAULT_TIMEOUT_S,
           params_path: str | os.PathLike = counters.PARAMS_PATH) -> DoctorReport:
    """Probe this machine and say what hookmagic can do here and why not.

    ``timeout_s`` bounds the probes that enter the driver (run in a child process);
    ``params_path`` is the driver's parameters file read for the admin-only counters setting.
    Never raises for a missing GPU, driver or library: each becomes a check with its reason
    and fix.
    """
    isolated = run_isolated(timeout_s)
    nvml, cuda, native = isolated["nvml"], isolated["libcuda"], isolated["native"]
    driver_cuda = int(cuda.get("cuda_driver_version") or nvml.get("cuda_driver_version") or 0)
    py = packages.python_report()
    gpus = _gpus(nvml, cuda)
    extras = packages.extras_report()
    kernels, kernels_error = _kernel_table(gpus)
    checks = [
        Check("python", "Python", "info", f"{py['python']} ({py['implementation']}, "
              f"{py['platform']}) at {py['executable']}", data=py),
        Check("hookmagic", "hookmagic", "info", f"{py['hookmagic']} at {py['hookmagic_path']}"),
        _native_check(native, py),
        _driver_check(nvml, cuda, driver_cuda),
        _nvml_check(nvml),
        _gpus_check(gpus, nvml, cuda),
        _cupti_check(driver_cuda),
        _cuda_check(driver_cuda),
        _counters_check(counters.counter_access(params_path)),
        _kernels_check(gpus, kernels, kernels_error, extras),
        _extras_check(extras),
    ]
    return DoctorReport(checks, gpus, kernels, extras, _verdict(checks))


# ---- the driver, NVML and the GPUs ------------------------------------------------------------

def _driver_check(nvml: dict, cuda: dict, driver_cuda: int) -> Check:
    data = {"driver_version": nvml.get("driver_version", ""), "cuda_driver_version": driver_cuda,
            "libcuda": cuda.get("path", ""), "nvml_error": nvml.get("error", ""),
            "libcuda_error": cuda.get("error", "")}
    if cuda.get("found") or nvml.get("found"):
        parts = [f"driver {data['driver_version']}" if data["driver_version"] else "driver version "
                 "unknown (NVML did not answer)"]
        if driver_cuda:
            parts.append(f"supports CUDA {cuda_version_text(driver_cuda)}")
        parts.append(f"libcuda at {data['libcuda']}" if cuda.get("found")
                     else f"libcuda not loadable ({cuda.get('error')})")
        status = "ok" if cuda.get("found") else "warning"
        fix = "" if cuda.get("found") else FIX_DRIVER
        return Check("driver", "NVIDIA driver", status, "; ".join(parts), fix, data)
    if nvml.get("timed_out") or cuda.get("timed_out"):
        return Check("driver", "NVIDIA driver", "unknown", cuda.get("error") or nvml.get("error", ""),
                     "check that `nvidia-smi` answers; a hung driver needs a reboot", data)
    return Check("driver", "NVIDIA driver", "missing",
                 f"not found: {cuda.get('error') or 'libcuda not found'}; {nvml.get('error') or 'NVML not found'}",
                 FIX_DRIVER, data)


def _nvml_check(nvml: dict) -> Check:
    data = {k: nvml.get(k) for k in ("nvml_version", "driver_version", "error")}
    if nvml.get("found"):
        return Check("nvml", "NVML", "ok", f"NVML {nvml.get('nvml_version') or '(version unknown)'}: "
                     "GPU utilisation, memory, clocks and power are sampled during captures", data=data)
    if "nvidia-ml-py" in (nvml.get("error") or ""):
        fix = "pip install nvidia-ml-py (a dependency of hookmagic: reinstalling hookmagic adds it)"
    else:
        fix = ("NVML (libnvidia-ml.so.1) comes with the NVIDIA driver: install the driver; a "
               "Jetson has none, and captures there simply have no GPU samples")
    status = "unknown" if nvml.get("timed_out") else "missing"
    return Check("nvml", "NVML", status, nvml.get("error") or "not found", fix, data)


def _gpus(nvml: dict, cuda: dict) -> list[dict[str, Any]]:
    out = []
    for d in nvml.get("devices") or cuda.get("devices") or []:
        g = dict(d)
        cc = g.get("compute_capability")
        g["arch"] = f"sm_{cc[0]}{cc[1]}" if cc else ""
        g["architecture"] = (ARCHITECTURES.get(tuple(cc)) or ARCHITECTURES.get((cc[0], 0), "")) if cc else ""
        g["defaults"] = _dispatch_defaults(cc[0] * 10 + cc[1]) if cc else []
        out.append(g)
    return out


def _gpus_check(gpus: list, nvml: dict, cuda: dict) -> Check:
    data = {"count": len(gpus), "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if gpus:
        names = "; ".join(f"{g['index']}: {g['name']} ({g['arch'] or 'arch unknown'})" for g in gpus)
        return Check("gpus", "GPUs", "ok", f"{len(gpus)}: {names}", data=data)
    if not (nvml.get("found") or cuda.get("found")):
        return Check("gpus", "GPUs", "missing", "none: no NVIDIA driver to ask", FIX_DRIVER, data)
    hidden = data["CUDA_VISIBLE_DEVICES"]
    fix = (f"CUDA_VISIBLE_DEVICES={hidden!r} hides GPUs from CUDA: unset it" if hidden is not None
           else "check `nvidia-smi`; in a container, start it with --gpus all")
    why = cuda.get("error") or nvml.get("error") or "the driver lists no GPU"
    return Check("gpus", "GPUs", "missing", f"none: {why}", fix, data)


# ---- CUPTI, CUDA libraries, counters, the native extension ------------------------------------

def _cupti_origin(path: str) -> str:
    """Which rule of the capture's CUPTI search (:mod:`hookmagic.cupti.library`) chose ``path``."""
    real = os.path.realpath(path)
    if os.environ.get("HOOKMAGIC_CUPTI"):
        return "named by HOOKMAGIC_CUPTI"
    if path in library.loaded_cuptis():
        return "already loaded by this process (PyTorch's Kineto loads one; a second would conflict)"
    if os.sep + "nvidia" + os.sep in path and ("site-packages" in path or "dist-packages" in path):
        return "NVIDIA's pip wheel in this Python's site-packages"
    for var in ("CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and os.path.isabs(root) and real.startswith(os.path.realpath(root) + os.sep):
            return f"under ${var} ({root})"
    if real.startswith("/usr/local/cuda"):
        return "the CUDA toolkit under /usr/local/cuda"
    return "a system library directory"


def _cupti_check(driver_cuda: int) -> Check:
    path, why = library.find_cupti(driver_cuda)
    order = ("searched: HOOKMAGIC_CUPTI, a CUPTI this process already loaded, NVIDIA's wheels on "
             "sys.path, $CONDA_PREFIX, $CUDA_HOME/$CUDA_PATH, /usr/local/cuda*, system "
             "directories; the first whose CUDA major is not newer than the driver's")
    found = [{"path": p, "soname": library.elf_soname(p) or ""} for p in library.candidates()]
    data = {"path": path or "", "candidates": found, "search": order}
    if path:
        soname = library.elf_soname(path) or os.path.basename(path)
        data["soname"] = soname
        data["origin"] = origin = _cupti_origin(path)
        return Check("cupti", "CUPTI", "ok", f"{soname} at {path} ({origin}; "
                     f"{len(found)} candidate{'s' if len(found) != 1 else ''} found)", data=data)
    major = driver_cuda // 1000
    extra = "cuda12" if major == 12 else "cuda13"
    fix = (f"{packages.install_command(extra)}, or set HOOKMAGIC_CUPTI to the absolute path of "
           "a libcupti.so matching the driver's CUDA version")
    return Check("cupti", "CUPTI", "missing", f"{why} ({order})", fix, data)


def _cuda_check(driver_cuda: int) -> Check:
    wheels, kits = packages.cuda_wheels(), packages.toolkits()
    data = {"wheels": wheels, "toolkits": kits}
    if not wheels and not kits:
        return Check("cuda", "CUDA runtime/toolkit", "missing",
                     "no CUDA wheels or toolkit: the kernel library compiles with NVRTC and needs "
                     "the CUDA runtime (captures do not)", packages.install_command("kernels"), data)
    parts = [", ".join(f"{w['name']} {w['version']}" for w in wheels) or "no CUDA wheels"]
    parts += [f"toolkit {k['root']} ({k['version'] or 'version unknown'})" for k in kits]
    major = driver_cuda // 1000
    newer = sorted({w["cuda"] for w in wheels if w["cuda"].isdigit() and major and int(w["cuda"]) > major})
    if newer:
        extra = "cuda12" if major == 12 else f"cuda{major}"
        return Check("cuda", "CUDA runtime/toolkit", "warning",
                     "; ".join(parts) + f"; wheels for CUDA {', '.join(newer)} need a newer driver "
                     f"than this one (CUDA {cuda_version_text(driver_cuda)})",
                     f"update the driver, or use CUDA {major} libraries: {packages.install_command(extra)}",
                     data)
    return Check("cuda", "CUDA runtime/toolkit", "ok", "; ".join(parts), data=data)


def _counters_check(access: dict) -> Check:
    status = {True: "warning", False: "ok", None: "unknown"}[access["restricted"]]
    if access["restricted"] and not access["fix"]:
        status = "ok"   # root reads them anyway
    return Check("counters", "Performance counters", status, access["detail"], access["fix"], access)


def _native_check(native: dict, py: dict) -> Check:
    data = dict(native)
    if not native.get("loads"):
        status = "unknown" if native.get("timed_out") else "missing"
        return Check("native", "Native extension", status,
                     f"hookmagic._native does not load ({native.get('error')})", FIX_NATIVE, data)
    detail = f"loads: {native['path']} ({native.get('abi') or 'ABI tag unknown'})"
    if native.get("frames_supported") is False:
        return Check("native", "Native extension", "warning",
                     detail + f"; it does not read Python {py['python']}'s frames, so captures "
                     "have no Python stacks", "use CPython 3.10-3.13 for Python stacks", data)
    return Check("native", "Native extension", "ok", detail + "; reads this Python's frames "
                 "(captures get Python stacks)", data=data)


# ---- kernels and extras ------------------------------------------------------------------------

def _runs(spec, cc: int | None) -> tuple[bool, str]:
    """Whether a kernel variant runs on compute capability ``cc`` (``90`` for 9.0), and why not.
    Arch-specific code (``sm_90a``: wgmma, TMA) runs on that exact architecture only."""
    if cc is None:
        return False, "compute capability unknown"
    if spec.arch_specific:
        return (cc == spec.min_arch,
                "" if cc == spec.min_arch else f"needs sm_{spec.min_arch}a: sm_{spec.min_arch} exactly")
    return cc >= spec.min_arch, "" if cc >= spec.min_arch else f"needs sm_{spec.min_arch}+"


def _kernel_table(gpus: list[dict]) -> tuple[list[dict[str, Any]], str]:
    try:
        import hookmagic.kernels  # noqa: F401  (registers every variant)
        from hookmagic.kernels import registry
    except Exception as exc:  # a broken optional install must not stop the report
        return [], f"hookmagic.kernels could not be imported ({type(exc).__name__}: {exc})"
    rows = []
    for (op, variant), spec in registry.SPECS.items():
        runs, why = {}, {}
        for g in gpus:
            cc = g.get("compute_capability")
            ok, reason = _runs(spec, cc[0] * 10 + cc[1] if cc else None)
            runs[str(g["index"])], why[str(g["index"])] = ok, reason
        rows.append({"op": op, "variant": variant, "dtypes": sorted(spec.entries),
                     "needs": f"sm_{spec.min_arch}a only" if spec.arch_specific else f"sm_{spec.min_arch}+",
                     "runs": runs, "why_not": why})
    return rows, ""


def _dispatch_defaults(cc: int) -> list[dict[str, Any]]:
    """The variants :mod:`hookmagic.kernels.dispatch`'s table picks on compute capability
    ``cc`` when a call names none, per operation and dtypes."""
    try:
        from hookmagic.kernels.dispatch import TABLE
    except Exception:
        return []
    out, covered = [], set()
    for rule in TABLE:
        if not rule.min_arch <= cc <= rule.max_arch:
            continue
        dtypes = [d for d in rule.dtypes if (rule.op, d) not in covered]   # the first matching rule wins
        covered.update((rule.op, d) for d in dtypes)
        if dtypes:
            out.append({"op": rule.op, "dtypes": dtypes, "variant": rule.variant, "why": rule.why})
    return out


def _kernels_check(gpus: list, kernels: list, error: str, extras: list) -> Check:
    extra = next((e for e in extras if e["extra"] == "kernels"), None)
    data = {"variants": len(kernels)}
    if error:
        return Check("kernels", "Kernel library", "unknown", error, packages.install_command("kernels"), data)
    if extra is not None and extra["installed"] is False:
        return Check("kernels", "Kernel library", "missing",
                     f"the kernels extra is not installed (missing: {', '.join(extra['missing'])})",
                     extra["install"], data)
    if not gpus:
        return Check("kernels", "Kernel library", "info",
                     f"{len(kernels)} variants; none can run without a GPU "
                     "(`hookmagic kernels check` still compiles them all with NVRTC)", data=data)
    parts = []
    for g in gpus:
        n = sum(bool(k["runs"].get(str(g["index"]))) for k in kernels)
        parts.append(f"GPU {g['index']} ({g['arch'] or '?'}) runs {n} of {len(kernels)} variants")
    return Check("kernels", "Kernel library", "ok", "; ".join(parts), data=data)


def _extras_check(extras: list) -> Check:
    if any(e["installed"] is None for e in extras):
        return Check("extras", "Optional extras", "unknown",
                     "hookmagic's package metadata is missing (running from a bare source tree?)",
                     "pip install -e . in the clone", {})
    have = [e["extra"] for e in extras if e["installed"]]
    lack = [e["extra"] for e in extras if not e["installed"]]
    detail = f"installed: {', '.join(have) or 'none'}; not installed: {', '.join(lack) or 'none'}"
    return Check("extras", "Optional extras", "info", detail,
                 "pip install 'hookmagic[EXTRA]' adds one (each is listed below)" if lack else "",
                 {"installed": have, "missing": lack})


def _verdict(checks: list[Check]) -> str:
    by_key = {c.key: c for c in checks}
    blocking = [by_key[k] for k in ("native", "driver", "gpus", "cupti")
                if by_key[k].status in ("missing", "unknown")]
    if not blocking:
        return "%%cudahook and hookmagic.capture() can capture on this machine."
    first = blocking[0]
    return (f"Nothing will be captured here: {first.name}: {first.detail}. Recordings, views, the "
            "scheduler's simulator and the trtexec importer work all the same.")
