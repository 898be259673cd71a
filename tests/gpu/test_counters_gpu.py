"""Hardware counters per kernel (``hookmagic.capture(counters=True)``) against Nsight Compute.

The same script (this file, run as ``python3 tests/gpu/test_counters_gpu.py ours|ncu OUT``)
launches one workload of different kernel kinds — cuBLAS FP16 GEMM, an FP32 SIMT GEMM,
elementwise add, sum reduction, softmax, SDPA attention, cuDNN conv2d, a memory-bound
transpose copy, layer_norm and GELU (plus hookmagic.kernels' SGEMM when it compiles) — after a
warm-up, once under hookmagic's counters and once under ``ncu --replay-mode kernel`` (which
profiles between cudaProfilerStart/Stop). Launches are paired in order (their names must
agree) and every metric of :data:`hookmagic.cupti.counters.DEFAULT_COUNTERS` must agree within
5 % (percent metrics: 2 percentage points). The per-kernel agreement table is written to
``$OUT/counters_vs_ncu.csv`` when OUT is set.

Run on the GPU machine: ``source benchmarks/gpu_setup.sh && python3 -m pytest
tests/gpu/test_counters_gpu.py -q``.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
NCU = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
# percent metrics: absolute tolerance in percentage points; others relative
PCT_TOLERANCE_PP = 2.0
REL_TOLERANCE = 0.05


def workload():
    """Inputs built and every kernel warmed up; returns ``run()``, which launches the measured
    kernels once each, in a fixed order."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    dev = "cuda"
    a16 = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    b16 = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    a32 = torch.randn(2048, 2048, device=dev)
    b32 = torch.randn(2048, 2048, device=dev)
    x = torch.randn(1 << 26, device=dev)
    y = torch.randn(1 << 26, device=dev)
    m = torch.randn(8192, 8192, device=dev)
    scores = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    q, k, v = (torch.randn(8, 16, 1024, 64, device=dev, dtype=torch.float16) for _ in range(3))
    img = torch.randn(32, 64, 56, 56, device=dev, dtype=torch.float16)
    weight = torch.randn(64, 64, 3, 3, device=dev, dtype=torch.float16)
    h = torch.randn(8192, 4096, device=dev, dtype=torch.float16)
    ln_w = torch.ones(4096, device=dev, dtype=torch.float16)
    ln_b = torch.zeros(4096, device=dev, dtype=torch.float16)
    sgemm = None
    try:
        from hookmagic import kernels

        sgemm = lambda: kernels.sgemm(a32, b32, variant="warptile")  # noqa: E731
        sgemm()
    except Exception:  # the kernel library is optional here
        sgemm = None

    def run():
        a16 @ b16                                   # cuBLAS FP16 GEMM (tensor cores)
        a32 @ b32                                   # cuBLAS FP32 SIMT GEMM (TF32 off)
        x + y                                       # elementwise
        m.sum()                                     # reduction
        torch.softmax(scores, dim=-1)               # softmax
        F.scaled_dot_product_attention(q, k, v)     # attention
        F.conv2d(img, weight, padding=1)            # cuDNN convolution
        m.t().contiguous()                          # memory-bound copy (transpose)
        F.layer_norm(h, (4096,), ln_w, ln_b)        # layer norm
        F.gelu(x)                                   # elementwise math
        if sgemm is not None:
            sgemm()                                 # hookmagic.kernels' own SGEMM
        torch.cuda.synchronize()

    run()
    run()
    torch.cuda.synchronize()
    return run


def main(mode: str, out: str) -> None:
    import torch

    run = workload()
    if mode == "ncu":
        torch.cuda.profiler.start()
        run()
        torch.cuda.profiler.stop()
        return
    import hookmagic

    t0 = time.perf_counter()
    detach = os.environ.get("HM_DETACH", "1") == "1"
    print("counting", flush=True)
    with hookmagic.capture(counters=True, lite=True, detach=detach) as trace:
        run()
        print("ran", flush=True)
    print("stopped", flush=True)
    wall = time.perf_counter() - t0
    wide = trace.kernel_counters()
    Path(out).write_text(json.dumps({
        "meta": {k: trace.meta.get(k) for k in ("status", "reason", "counters")},
        "wall_s": wall, "kernels": len(trace.kernels),
        "rows": wide.to_dict(orient="records")}, default=str))


# -- the test -------------------------------------------------------------------------------
def _base(name: str) -> str:
    """A kernel's function name without return type, namespace, template or parameters."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    for stop in "<(":
        name = name.split(stop, 1)[0]
    return name.rsplit("::", 1)[-1].strip()


def _ncu_rows(text: str) -> list[dict[str, float | str]]:
    """ncu's --csv --print-units base output as one dict per profiled launch (ID order)."""
    start = text.find('"ID"')
    if start < 0:
        raise AssertionError(f"no CSV in ncu's output:\n{text[-3000:]}")
    launches: dict[int, dict[str, float | str]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        if not row.get("ID", "").isdigit():
            continue
        launch = launches.setdefault(int(row["ID"]), {"kernel": row["Kernel Name"]})
        raw = (row.get("Metric Value") or "").replace(",", "")
        try:
            launch[row["Metric Name"]] = float(raw)
        except ValueError:
            launch[row["Metric Name"]] = math.nan
    return [launches[i] for i in sorted(launches)]


def _agree(metric: str, ours: float, theirs: float) -> tuple[bool, float]:
    if metric.endswith(".pct") or ".pct_of_peak" in metric:
        return abs(ours - theirs) <= PCT_TOLERANCE_PP, ours - theirs
    if theirs == 0:
        return ours == 0, ours
    rel = (ours - theirs) / abs(theirs)
    return abs(rel) <= REL_TOLERANCE, rel


@pytest.mark.gpu
def test_default_counters_match_nsight_compute(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if not Path(NCU).exists():
        pytest.skip("needs Nsight Compute (ncu)")
    from hookmagic.cupti.counters import DEFAULT_COUNTERS

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parents[2])] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    ours_json = tmp_path / "ours.json"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(HERE), "ours", str(ours_json)], check=True, env=env,
                   timeout=280)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ncu = subprocess.run([NCU, "--profile-from-start", "off", "--metrics", ",".join(DEFAULT_COUNTERS),
                          "--csv", "--print-units", "base", "--clock-control", "none",
                          "--cache-control", "none", "--replay-mode", "kernel",
                          sys.executable, str(HERE), "ncu", "-"],
                         capture_output=True, text=True, env=env, timeout=280)
    ncu_s = time.perf_counter() - t0
    out = os.environ.get("OUT")
    if out:  # the raw runs, for a look when the pairing fails
        shutil.copy(ours_json, Path(out) / "counters_ours.json")
        (Path(out) / "counters_ncu.csv").write_text(ncu.stdout)
    assert ncu.returncode == 0, ncu.stderr[-3000:]
    theirs = _ncu_rows(ncu.stdout)
    result = json.loads(ours_json.read_text())
    ours = result["rows"]
    info = result["meta"]["counters"]
    print(f"\nours: {len(ours)} launches, {info['passes']} passes, block {result['wall_s']:.2f} s "
          f"(process {ours_s:.1f} s); ncu: {len(theirs)} launches, process {ncu_s:.1f} s")
    assert result["meta"]["status"] == "complete", result["meta"]
    assert info["dropped"] == 0 and info["unmatched"] == 0
    assert len(ours) == len(theirs) >= 10, ([r["kernel"] for r in ours], [r["kernel"] for r in theirs])

    table, failures = [], []
    for i, (mine, ref) in enumerate(zip(ours, theirs)):
        assert _base(mine["kernel"]) == _base(str(ref["kernel"])), (i, mine["kernel"], ref["kernel"])
        for metric in DEFAULT_COUNTERS:
            ok, off = _agree(metric, float(mine[metric]), float(ref[metric]))
            table.append({"launch": i, "kernel": _base(mine["kernel"]), "metric": metric,
                          "hookmagic": mine[metric], "ncu": ref[metric], "difference": off,
                          "agrees": ok})
            if not ok:
                failures.append(f"{i} {_base(mine['kernel'])} {metric}: ours {mine[metric]:.6g} "
                                f"ncu {ref[metric]:.6g}")
    if out:
        with open(Path(out) / "counters_vs_ncu.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    assert not failures, "\n".join(failures)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
