"""The benchmark runner: one schema for every benchmark, min–max over fresh processes.

A benchmark is a module of this package defining ``DESCRIPTION`` (one line), ``PARAMS`` (default
parameters), ``NEEDS`` (what it must have: "gpu", "torch", "duckdb", ...) and
``measure(**params) -> dict[str, float]``: one fresh process's metrics, units in the names'
suffixes (``_s``, ``_ms``, ``_us``, ``_x`` for ratios, ``_pct``, ``_per_s``). The runner starts
``processes`` fresh interpreters, each running ``measure`` once, and writes
``<out>/<name>.json`` and ``<out>/<name>.md``::

    {"benchmark", "description", "command", "date", "commit", "machine", "gpu", "params",
     "processes", "metrics": {name: {"min", "max", "median", "values"}}}
"""
from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"

#: benchmark name -> module (each defines DESCRIPTION, PARAMS, NEEDS, measure)
REGISTRY = {
    "overhead": "benchmarks.bench_overhead",
    "kernels": "benchmarks.bench_kernels",
    "decode": "benchmarks.bench_decode",
    "importers": "benchmarks.bench_importers",
    "views": "benchmarks.bench_views",
    "simulator": "benchmarks.bench_simulator",
    "memory": "benchmarks.bench_memory",
    "pipeline": "benchmarks.bench_pipeline",
    "multirank": "benchmarks.bench_multirank",
    "multirank_scale": "benchmarks.multirank_scale",
    "kernels_host_cost": "benchmarks.kernels_host_cost",
    "kernels_infer": "benchmarks.kernel_infer_cases",
}


def module(name: str) -> Any:
    if name not in REGISTRY:
        raise SystemExit(f"unknown benchmark {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return importlib.import_module(REGISTRY[name])


def missing(needs: tuple[str, ...]) -> list[str]:
    """What of ``needs`` this machine lacks."""
    out = []
    for need in needs:
        if need == "gpu":
            try:
                import pynvml
                pynvml.nvmlInit()
                if pynvml.nvmlDeviceGetCount() == 0:
                    out.append("gpu")
            except Exception:
                out.append("gpu")
        elif importlib.util.find_spec(need) is None:
            out.append(need)
    return out


def machine() -> dict[str, Any]:
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    return {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "memory_bytes": memory,
            "python": platform.python_version(), "os": platform.platform()}


def gpu() -> dict[str, Any] | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        text = lambda v: v if isinstance(v, str) else v.decode()  # noqa: E731
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {"name": text(pynvml.nvmlDeviceGetName(handle)),
                "driver": text(pynvml.nvmlSystemGetDriverVersion()),
                "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
                "count": pynvml.nvmlDeviceGetCount()}
    except Exception:
        return None


def commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def measure_here(name: str, params: dict[str, Any]) -> dict[str, float]:
    """Run ``measure`` in this process and keep its numeric metrics."""
    mod = module(name)
    got = mod.measure(**{**mod.PARAMS, **params})
    return {k: float(v) for k, v in got.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def run(name: str, processes: int = 3, params: dict[str, Any] | None = None,
        out: Path = RESULTS, timeout_s: float = 1800) -> dict[str, Any]:
    """``processes`` fresh processes of benchmark ``name``; writes and returns the result."""
    mod = module(name)
    params = {**mod.PARAMS, **(params or {})}
    lacking = missing(tuple(getattr(mod, "NEEDS", ())))
    if lacking:
        print(f"{name}: skipped, this machine has no {', '.join(lacking)}")
        return {}
    values: dict[str, list[float]] = {}
    for i in range(processes):
        cmd = [sys.executable, "-m", "benchmarks", "measure", name, "--params", json.dumps(params)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
        if done.returncode != 0:
            raise SystemExit(f"{name}: process {i + 1} failed\n{done.stdout[-2000:]}\n"
                             f"{done.stderr[-4000:]}")
        metrics = json.loads(done.stdout.strip().splitlines()[-1])
        for key, value in metrics.items():
            values.setdefault(key, []).append(value)
        print(f"{name}: process {i + 1}/{processes} done")
    sets = " ".join(f"--set {k}={json.dumps(v)}" for k, v in params.items()
                    if v != mod.PARAMS.get(k))
    result = {
        "benchmark": name, "description": mod.DESCRIPTION,
        "command": f"python -m benchmarks run {name} --processes {processes}"
                   + (f" {sets}" if sets else ""),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(), "machine": machine(), "gpu": gpu(), "params": params,
        "processes": processes,
        "metrics": {k: {"min": min(v), "max": max(v), "median": statistics.median(v),
                        "values": v} for k, v in values.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    # results of the same benchmark with other parameters sit side by side
    stem = name + "".join("-" + re.sub(r"[^A-Za-z0-9_.]+", "_", str(v)).strip("_")
                          for k, v in params.items()
                          if v != mod.PARAMS.get(k) and isinstance(v, (str, int)) and k != "folder")
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(result))
    return result


def span(m: dict[str, float]) -> str:
    lo, hi = m["min"], m["max"]
    fmt = (lambda x: f"{x:.4g}")
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def markdown(result: dict[str, Any]) -> str:
    g = result["gpu"]
    where = (f"{g['name']}, driver {g['driver']} (CUDA {g['cuda']})" if g
             else f"no GPU; {result['machine']['cpu']}, {result['machine']['cores']} cores")
    lines = [f"# {result['benchmark']}", "", result["description"], "",
             f"Measured {result['date']} on {where}, Python {result['machine']['python']}, "
             f"commit {result['commit']}; {result['processes']} fresh processes, min–max.", "",
             f"Re-run: `{result['command']}`", "",
             "| metric | min–max | median |", "|---|---|---|"]
    lines += [f"| {k} | {span(m)} | {m['median']:.4g} |" for k, m in result["metrics"].items()]
    return "\n".join(lines) + "\n"
