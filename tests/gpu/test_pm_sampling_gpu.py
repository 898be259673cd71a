"""PM sampling (``hookmagic.capture(pm_sampling=True)``) on a workload with known phases.

Each run (a fresh process: ``python3 tests/gpu/test_pm_sampling_gpu.py measure OUT.json``)
warms up, then under one capture with PM sampling every :data:`INTERVAL_US` µs runs a
memory-bound phase (``COPIES`` elementwise kernels ``y = 2 x`` over 1 GiB tensors, each
reading 1 GiB and writing 1 GiB) and, after an idle
gap, a compute-bound phase (``GEMMS`` FP16 8192³ GEMMs on the tensor cores). The phases are
delimited on CUPTI's clock by ``hookmagic._native.timestamp()`` after synchronising, and each
phase's kernel span is taken from the trace's ``kernels`` table. The test asserts, for each of
three runs:

- samples arrive every INTERVAL_US within 10 % (median spacing of sample starts);
- samples lie on the kernels' clock: samples fall inside both phases' kernel spans, as many as
  span / interval (within 30 %), and the DRAM metric rises within two intervals of the copy
  phase's first kernel;
- DRAM throughput (read + write %) is high during the copies and low during the GEMMs, SM and
  tensor activity the other way round;
- against an independent reference, the mean DRAM % over the copy samples is within 15
  percentage points of bytes moved / (kernel time x peak bandwidth), the peak from the device's
  memory clock and bus width (cuDeviceGetAttribute).

``probe OUT`` (run apart, it may fail on its own) writes what PM sampling supports on this GPU
(``pm_supported.txt``), the passes of the default candidates, and whether the range profiler and
PM sampling can run at once (``probe.json``).

Run on the GPU machine: ``source benchmarks/gpu_setup.sh && python3 -m pytest
tests/gpu/test_pm_sampling_gpu.py -q`` (with ``OUT`` set the runs' JSON lands there).
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
INTERVAL_US = 100.0
COPIES = 40
GEMMS = 24
RUNS = 3


def _peak_bandwidth() -> float:
    """Bytes/s from the driver's attributes: memory clock (kHz) x bus width (bits) x 2 (DDR) / 8."""
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    clock, width = ctypes.c_int(), ctypes.c_int()
    assert cuda.cuDeviceGetAttribute(ctypes.byref(clock), 36, 0) == 0   # MEMORY_CLOCK_RATE
    assert cuda.cuDeviceGetAttribute(ctypes.byref(width), 37, 0) == 0   # GLOBAL_MEMORY_BUS_WIDTH
    return clock.value * 1e3 * 2 * width.value / 8


def analyse(trace, marks: dict, result: dict):
    """Adds the phases' figures to ``result``; returns the samples one row per sample (None
    without samples)."""
    import numpy as np

    from hookmagic.cupti import pm_sampling as P

    k = trace.kernels
    pm = trace.pm_samples
    if trace.status == "unavailable" or not len(pm):
        return None
    wide = pm.pivot_table(index=["start_ns", "end_ns"], columns="metric", values="value")
    wide = wide.reset_index()
    metrics = result["pm_sampling"]["metrics"]

    def pick(prefix):
        return next((m for m in metrics if P.short_name(m).startswith(prefix)), None)

    names = {"dram_read": pick("dramc__read") or pick("dram__read"),
             "dram_write": pick("dramc__write") or pick("dram__write"),
             "sm": pick("sm__cycles_active"), "tensor": pick("sm__pipe_tensor"),
             "issue": pick("sm__inst_executed")}
    result["names"] = names
    st = wide["start_ns"].to_numpy(np.int64)
    en = wide["end_ns"].to_numpy(np.int64)
    result["median_spacing_ns"] = float(np.median(np.diff(st)))
    result["median_width_ns"] = float(np.median(en - st))
    dram = sum(wide[names[n]].to_numpy() for n in ("dram_read", "dram_write") if names[n])
    phases = {}
    for phase in ("copy", "gemm"):
        lo, hi = marks[f"{phase}0"], marks[f"{phase}1"]
        inside = k[(k["start_ns"] >= lo) & (k["end_ns"] <= hi)]
        if not len(inside):
            phases[phase] = {"kernels": 0}
            continue
        s0, s1 = int(inside["start_ns"].min()), int(inside["end_ns"].max())
        whole = (st >= s0) & (en <= s1)
        mid = (st + en) // 2
        row = {"kernels": int(len(inside)), "span_ns": s1 - s0,
               "busy_ns": int(inside["duration_ns"].sum()),
               "samples_inside": int(whole.sum()),
               "samples_mid_inside": int(((mid >= s0) & (mid <= s1)).sum()),
               "expected_samples": (s1 - s0) / (INTERVAL_US * 1e3)}
        for n, col in names.items():
            if col:
                row[f"{n}_mean"] = float(wide[col].to_numpy()[whole].mean()) if whole.any() else None
        row["dram_mean"] = float(dram[whole].mean()) if whole.any() else None
        if phase == "copy":
            # the rising edge: the first sample over half the phase's mean DRAM %
            over = np.flatnonzero(dram > 0.5 * (row["dram_mean"] or 0))
            row["edge_minus_first_kernel_ns"] = int(en[over[0]] - s0) if len(over) else None
            achieved = COPIES * result["bytes_per_copy"] / (row["busy_ns"] / 1e9)
            row["achieved_bandwidth"] = achieved
            row["reference_dram_pct"] = 100 * achieved / result["peak_bandwidth"]
        phases[phase] = row
    result["phases"] = phases
    result["first_sample_minus_cupti_start_ns"] = int(st[0] - result["pm_sampling"]["cupti_start_ns"])
    result["last_sample_minus_cupti_stop_ns"] = int(en[-1] - result["pm_sampling"]["cupti_stop_ns"])
    return wide


def measure(out: Path) -> None:
    import torch

    import hookmagic
    from hookmagic import _native as native

    dev = "cuda"
    x = torch.empty(1 << 28, device=dev)            # 1 GiB
    y = torch.empty_like(x)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
    torch.mul(x, 2.0, out=y)   # a kernel (a plain copy_ would be a DtoD memcpy)
    a @ b
    torch.cuda.synchronize()
    marks = {}
    with hookmagic.capture(pm_sampling=True, pm_interval_us=INTERVAL_US, stacks=False,
                           nvml=False) as trace:
        torch.cuda.synchronize()
        time.sleep(0.005)
        marks["copy0"] = native.timestamp()
        for _ in range(COPIES):
            torch.mul(x, 2.0, out=y)
        torch.cuda.synchronize()
        marks["copy1"] = native.timestamp()
        time.sleep(0.005)
        marks["gemm0"] = native.timestamp()
        for _ in range(GEMMS):
            a @ b
        torch.cuda.synchronize()
        marks["gemm1"] = native.timestamp()
        time.sleep(0.005)
    result = {"status": trace.status, "reason": trace.meta.get("reason", ""),
              "warnings": trace.meta.get("warnings", []),
              "pm_sampling": trace.meta.get("pm_sampling"), "marks": marks,
              "gpu": torch.cuda.get_device_name(0), "peak_bandwidth": _peak_bandwidth(),
              "bytes_per_copy": 2 * x.numel() * x.element_size()}
    wide = analyse(trace, marks, result)
    if wide is not None:
        wide.to_csv(out.with_suffix(".csv"), index=False)
        if os.environ.get("OUT"):
            from hookmagic.views.timeline import timeline_figure

            timeline_figure(trace).write_html(out.with_suffix(".html"), include_plotlyjs="cdn")
    out.write_text(json.dumps(result, indent=1, default=str))


def probe(out_dir: Path) -> None:
    import torch

    import hookmagic
    from hookmagic import _native as native
    from hookmagic.cupti import pm_sampling as P

    out_dir.mkdir(parents=True, exist_ok=True)
    torch.zeros(1, device="cuda")
    found: dict = {}
    with hookmagic.capture(stacks=False, nvml=False):
        try:
            supported = list(native.pm_supported())
            (out_dir / "pm_supported.txt").write_text("\n".join(supported))
            found["supported"] = len(supported)
        except Exception as exc:
            found["supported_error"] = repr(exc)
        for quantity, candidates in P.DEFAULT_QUANTITIES.items():
            row = {}
            for name in candidates:
                try:
                    row[name] = int(native.pm_passes([name]))
                except Exception as exc:
                    row[name] = repr(exc)
            found[quantity] = row
        try:
            found["default"] = P.default_metrics(native)
        except Exception as exc:
            found["default"] = repr(exc)
        # the range profiler and PM sampling at once
        try:
            native.counters_start(["dram__bytes_read.sum"], 16, "kernel")
            try:
                native.pm_start([P.DRAM_READ_PCT[0]], 100_000, 64 << 20, 4096, 20)
                found["both"] = "PM sampling started beside the range profiler"
                native.pm_stop()
            except Exception as exc:
                found["both"] = f"pm_start beside the range profiler: {exc!r}"
            native.counters_stop()
        except Exception as exc:
            found["both"] = f"counters_start: {exc!r}"
    (out_dir / "probe.json").write_text(json.dumps(found, indent=1, default=str))
    print(json.dumps(found, default=str)[:3000])


def _runs(tmp_path: Path) -> list[dict]:
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else tmp_path
    runs = []
    for i in range(RUNS):
        path = out_dir / f"pm_run{i}.json"
        subprocess.run([sys.executable, str(HERE), "measure", str(path)], check=True,
                       timeout=120)
        runs.append(json.loads(path.read_text()))
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.gpu.conftest import skip_reason

    why = skip_reason("native")
    if why:
        pytest.skip(why)
    return _runs(tmp_path_factory.mktemp("pm"))


def test_samples_arrive_at_the_interval_asked(runs):
    for r in runs:
        assert r["status"] != "unavailable", r["reason"]
        assert r["pm_sampling"]["error"] == "" and r["pm_sampling"]["overflow"] == 0
        assert abs(r["median_spacing_ns"] - INTERVAL_US * 1e3) <= 0.1 * INTERVAL_US * 1e3, r


def test_samples_lie_on_the_kernels_clock(runs):
    for r in runs:
        for phase in ("copy", "gemm"):
            p = r["phases"][phase]
            assert p["samples_mid_inside"] == pytest.approx(p["expected_samples"], rel=0.3), p
        edge = r["phases"]["copy"]["edge_minus_first_kernel_ns"]
        assert edge is not None and -2 * INTERVAL_US * 1e3 <= edge <= 2 * INTERVAL_US * 1e3, edge


def test_dram_is_busy_in_the_copies_and_the_tensor_cores_in_the_gemms(runs):
    for r in runs:
        copy, gemm = r["phases"]["copy"], r["phases"]["gemm"]
        assert copy["dram_mean"] > 60 and gemm["dram_mean"] < 30, (copy, gemm)
        assert gemm["sm_mean"] > 85, gemm
        if r["names"]["tensor"]:
            assert gemm["tensor_mean"] > 30 and copy["tensor_mean"] < 2, (copy, gemm)


def test_dram_percent_agrees_with_bytes_over_time_and_peak(runs):
    for r in runs:
        copy = r["phases"]["copy"]
        assert copy["dram_mean"] == pytest.approx(copy["reference_dram_pct"], abs=15), copy


if __name__ == "__main__":
    if sys.argv[1] == "measure":
        measure(Path(sys.argv[2]))
    else:
        probe(Path(sys.argv[2]))
