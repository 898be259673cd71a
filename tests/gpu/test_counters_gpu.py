"""Hardware counters per kernel (``hookmagic.capture(counters=True)``) against Nsight Compute.

The same script (this file, run as ``python3 tests/gpu/test_counters_gpu.py ours|ncu OUT``)
launches one workload of different kernel kinds — cuBLAS FP16 GEMM, an FP32 SIMT GEMM,
elementwise add, sum reduction, softmax, SDPA attention, cuDNN conv2d, a memory-bound
transpose copy, layer_norm and GELU (plus hookmagic.kernels' SGEMM when it compiles) — after a
warm-up, under hookmagic's counters and under ``ncu --replay-mode kernel`` (which profiles
between cudaProfilerStart/Stop), in two pairings: CUPTI's kernel replay against ncu with
``--cache-control none``, and hookmagic's user replay (L2 flushed before every pass, one auto
range per replayed kernel) against ncu's default ``--cache-control all`` (DRAM bytes written
against ncu's one-pass replay of that metric alone). Launches are paired in order (their names
must agree) and
the metrics of :data:`hookmagic.cupti.counters.DEFAULT_COUNTERS` are compared within 5 %
(percent metrics: 2 percentage points): strictly those each replay is known to measure as ncu
does, and, as expected failures, the others. With OUT set, the raw runs and the per-kernel
tables (``counters_vs_ncu_<replay>.csv``) are written there.

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
    from hookmagic.cupti import counters as hw

    native_stop = hw.stop
    native_rows: dict = {}

    def stop_and_keep(native):  # the native stop's own figures (skipped launches, windows)
        rows = native_stop(native)
        native_rows.update({k: rows.get(k) for k in ("ranges", "dropped", "skipped", "first_error")})
        native_rows["windows"] = len(rows.get("window_start", []))
        return rows

    hw.stop = stop_and_keep
    t0 = time.perf_counter()
    with hookmagic.capture(counters=True, lite=True) as trace:
        run()
    wall = time.perf_counter() - t0
    wide = trace.kernel_counters()
    Path(out).write_text(json.dumps({
        "meta": {k: trace.meta.get(k) for k in ("status", "reason", "counters")},
        "replay": hw.replay_mode(), "native": native_rows,
        "wall_s": wall, "kernels": len(trace.kernels),
        "rows": wide.to_dict(orient="records")}, default=str))


# -- the test -------------------------------------------------------------------------------
from hookmagic.cupti import counters as C  # noqa: E402

#: metrics that depend on the cache state the replayed pass starts from (the duration too: in
#: two H200 runs a 70 µs reduction's replayed pass took 3.7 % and 7.2 % longer than ncu's)
STATE_DEPENDENT = (C.DRAM_BYTES_WRITE, C.DRAM_THROUGHPUT_PCT, C.L2_HIT_RATE_PCT, C.DURATION_NS)
#: metrics per unit of time or averaged over the launch's cycles (on a short launch the ramp-up
#: and tail weigh in, and a replayed pass of a 13 µs layout transform ran 11 % longer than
#: ncu's, with 2.4 points less achieved occupancy): compared strictly only for launches of
#: SHORT_NS or more
TIME_NORMALISED = (C.SM_THROUGHPUT_PCT, C.TENSOR_PIPE_PCT, C.ACHIEVED_OCCUPANCY_PCT)
SHORT_NS = 30_000
#: what user replay measures as ncu's flushed replay does on every launch of an H200 run
USER_REPLAY_AGREES = (C.ACHIEVED_OCCUPANCY_PCT, C.L1_HIT_RATE_PCT, C.TENSOR_PIPE_PCT,
                      C.FP32_INSTRUCTIONS, C.FP16_INSTRUCTIONS, C.TENSOR_INSTRUCTIONS,
                      C.TENSOR_FP16_OPS)
#: and on launches of SHORT_NS or more (a 3 µs launch read 74 KB against ncu's 83 KB; two
#: 11-12 µs layout transforms ran 8-10 % longer than ncu's passes)
USER_REPLAY_AGREES_LONG = (C.DRAM_BYTES_READ, C.DRAM_THROUGHPUT_PCT, C.DURATION_NS)
#: DRAM bytes written is compared with ncu's flushed replay of that metric alone (one pass: its
#: multi-pass replay adds ~2.4 MB to every launch, see docs/counters.md), on launches writing
#: WRITE_FLOOR bytes or more there: below, ncu's own kernel and application replays differ by up
#: to 0.15 MB (a cuBLAS GEMM: 0.168 and 0.038 MB)
WRITE_FLOOR = 1e6

def _base(name: str) -> str:
    """A kernel's function name without return type, namespace, template or parameters."""
    # an anonymous namespace: "(anonymous namespace)" in CUPTI's names, "<unnamed>" in ncu's
    name = name.strip().replace("(anonymous namespace)", "anonymous").replace("<unnamed>", "anonymous")
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


def compare(ours: list[dict], theirs: list[dict]) -> list[dict]:
    """One row per (launch, metric): both values, the difference (percentage points, or
    relative), whether it agrees, and whether the metric is compared strictly for that launch
    (not :data:`STATE_DEPENDENT`, and not :data:`TIME_NORMALISED` on a launch shorter than
    :data:`SHORT_NS` by ncu's duration)."""
    assert len(ours) == len(theirs) >= 10, ([r["kernel"] for r in ours], [r["kernel"] for r in theirs])
    table = []
    for i, (mine, ref) in enumerate(zip(ours, theirs)):
        assert _base(mine["kernel"]) == _base(str(ref["kernel"])), (i, mine["kernel"], ref["kernel"])
        short = float(ref[C.DURATION_NS]) < SHORT_NS
        for metric in C.DEFAULT_COUNTERS:
            ok, off = _agree(metric, float(mine[metric]), float(ref[metric]))
            strict = metric not in STATE_DEPENDENT and not (short and metric in TIME_NORMALISED)
            table.append({"launch": i, "kernel": _base(mine["kernel"]), "metric": metric,
                          "hookmagic": float(mine[metric]), "ncu": float(ref[metric]),
                          "difference": off, "agrees": ok, "strict": strict,
                          "ncu_duration": float(ref[C.DURATION_NS])})
    return table


def _failures(table: list[dict], strict: bool) -> list[str]:
    return [f"{r['launch']} {r['kernel']} {r['metric']}: hookmagic {r['hookmagic']:.6g} "
            f"ncu {r['ncu']:.6g}" for r in table if r["strict"] == strict and not r["agrees"]]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parents[2])] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}


def _needs_gpu_and_ncu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if not Path(NCU).exists():
        pytest.skip("needs Nsight Compute (ncu)")


def _pair(tmp: Path, replay: str, cache_control: str) -> tuple[dict, list[dict]]:
    """hookmagic's counters with ``replay`` and ncu's with ``--cache-control cache_control``
    on the same workload: (hookmagic's result, the comparison). With $OUT set, the raw runs
    and the comparison are written there."""
    env = _env()
    out = os.environ.get("OUT")
    ours_json = tmp / f"ours_{replay}.json"
    ours = subprocess.run([sys.executable, str(HERE), "ours", str(ours_json)],
                          env={**env, "HOOKMAGIC_COUNTERS_REPLAY": replay},
                          capture_output=True, text=True, timeout=280)
    if out:  # the raw run, for a look when it fails
        (Path(out) / f"counters_{replay}.log").write_text(ours.stdout[-20000:] + ours.stderr[-20000:])
    assert ours.returncode == 0, ours.stderr[-3000:]
    if out:
        shutil.copy(ours_json, Path(out) / f"counters_{replay}.json")
    theirs = _ncu(C.DEFAULT_COUNTERS, cache_control, env, out and Path(out) / f"counters_ncu_{cache_control}.csv")
    if replay == "user":  # DRAM bytes written from ncu's replay of that metric alone (one pass)
        alone = _ncu((C.DRAM_BYTES_WRITE,), cache_control, env,
                     out and Path(out) / f"counters_ncu_{cache_control}_write_alone.csv")
        for row, one in zip(theirs, alone):
            row[C.DRAM_BYTES_WRITE] = one[C.DRAM_BYTES_WRITE]
    result = json.loads(ours_json.read_text())
    table = compare(result["rows"], theirs)
    if out:
        with open(Path(out) / f"counters_vs_ncu_{replay}.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    return result, table


def _ncu(metrics, cache_control: str, env: dict[str, str], keep: Path | None) -> list[dict]:
    """``ncu --replay-mode kernel --cache-control cache_control`` with ``metrics`` on the
    workload, one dict per launch (``keep``: where its CSV is written)."""
    ncu = subprocess.run([NCU, "--profile-from-start", "off", "--metrics", ",".join(metrics),
                          "--csv", "--print-units", "base", "--clock-control", "none",
                          "--cache-control", cache_control, "--replay-mode", "kernel",
                          sys.executable, str(HERE), "ncu", "-"],
                         capture_output=True, text=True, env=env, timeout=280)
    if keep:  # the raw run, for a look when the pairing fails
        keep.write_text(ncu.stdout)
    assert ncu.returncode == 0, ncu.stderr[-3000:]
    return _ncu_rows(ncu.stdout)


@pytest.fixture(scope="module")
def user_replay(tmp_path_factory):
    """User replay (memory restored, L2 flushed before every pass) against ncu's default,
    which flushes every cache before every pass."""
    _needs_gpu_and_ncu()
    return _pair(tmp_path_factory.mktemp("user"), "user", "all")


@pytest.fixture(scope="module")
def kernel_replay(tmp_path_factory):
    """CUPTI's kernel replay against ncu's kernel replay without cache control."""
    _needs_gpu_and_ncu()
    return _pair(tmp_path_factory.mktemp("kernel"), "kernel", "none")


def _check_complete(result: dict) -> None:
    info = result["meta"]["counters"]
    assert result["meta"]["status"] == "complete", result["meta"]
    assert info["dropped"] == 0 and info["unmatched"] == 0, (info, result.get("native"))
    assert info["passes"] >= 1 and info["kernels"] == len(result["rows"])


def _user_expected(r: dict) -> bool:
    """Whether user replay is known to measure this (launch, metric) as ncu does."""
    if r["metric"] == C.DRAM_BYTES_WRITE:
        return float(r["ncu"]) >= WRITE_FLOOR
    if r["metric"] in USER_REPLAY_AGREES_LONG:
        return float(r["ncu_duration"]) >= SHORT_NS
    return r["metric"] in USER_REPLAY_AGREES


def _user_failures(table: list[dict], agreeing: bool) -> list[str]:
    """Disagreements among the (launch, metric) pairs :func:`_user_expected` (``agreeing``) or
    among the others."""
    expected = _user_expected
    return [f"{r['launch']} {r['kernel']} {r['metric']}: hookmagic {r['hookmagic']:.6g} "
            f"ncu {r['ncu']:.6g}" for r in table if not r["agrees"] and expected(r) == agreeing]


@pytest.mark.gpu
def test_user_replay_counters_match_nsight_compute(user_replay):
    result, table = user_replay
    _check_complete(result)
    assert result["native"]["skipped"] == 0, result["native"]
    failures = _user_failures(table, agreeing=True)
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.xfail(strict=True, reason="under user replay the smsp__sass_* counts read 0, and SM "
                   "throughput runs high on elementwise kernels (8.99 % against 5.65 %)")
def test_user_replay_other_counters_match_nsight_compute(user_replay):
    failures = _user_failures(user_replay[1], agreeing=False)
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
def test_kernel_replay_counters_match_nsight_compute(kernel_replay):
    result, table = kernel_replay
    _check_complete(result)
    failures = _failures(table, strict=True)
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.xfail(strict=True, reason="CUPTI's kernel replay starts each pass from the L2 "
                   "state its save/restore leaves (dirty lines written back during the pass)")
def test_kernel_replay_state_dependent_counters_match_nsight_compute(kernel_replay):
    failures = _failures(kernel_replay[1], strict=False)
    assert not failures, "\n".join(failures)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
