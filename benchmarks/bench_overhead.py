"""Capture overhead on a GPU: no capture vs ``%%cudahook`` defaults vs torch.profiler.

Workloads (issue #2): (a) 20,000 tiny kernels, (b) ResNet-50 fp16 batch 16 inference,
(c) large bf16 GEMMs. Each is timed end to end, from entering the capture to having its
tables in hand (hookmagic: the Trace's DataFrames; torch.profiler: ``key_averages()``), with
the GPU synchronised; medians of interleaved repetitions. torch.profiler leaves CUPTI
subscribed for the rest of its process, so each workload runs in a fresh process: first
baseline and hookmagic interleaved, then baseline and torch.profiler interleaved.

    python benchmarks/bench_overhead.py --out benchmarks/results

writes overhead.md and overhead.csv there.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

WORKLOADS = {
    "tiny_kernels_20000": "20,000 tiny kernels (x.add_(1))",
    "resnet50_fp16_b16": "ResNet-50 fp16 batch 16 inference, 20 iterations",
    "gemm_bf16_8192": "8192x8192 bf16 GEMM x 20",
}


def _workload(name: str):
    import torch

    if name == "tiny_kernels_20000":
        x = torch.zeros(16, device="cuda")

        def run():
            for _ in range(20000):
                x.add_(1)
            torch.cuda.synchronize()
    elif name == "resnet50_fp16_b16":
        import torchvision

        model = torchvision.models.resnet50().cuda().half().eval()
        data = torch.randn(16, 3, 224, 224, device="cuda", dtype=torch.half)

        def run():
            with torch.no_grad():
                for _ in range(20):
                    model(data)
            torch.cuda.synchronize()
    elif name == "gemm_bf16_8192":
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

        def run():
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
    else:
        raise ValueError(name)
    return run


def _time_plain(run) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def _time_hookmagic(run) -> tuple[float, dict]:
    import hookmagic

    t0 = time.perf_counter()
    with hookmagic.capture() as trace:
        run()
    n = len(trace.kernels)  # the DataFrames are in hand once the block has ended
    elapsed = time.perf_counter() - t0
    meta = trace.meta
    return elapsed, {"kernels": n, "records": meta.get("records", 0),
                     "decode_s": meta.get("overhead", {}).get("decode_s", 0.0),
                     "status": meta.get("status"), "warnings": meta.get("warnings", []),
                     "dropped": sum(meta.get("dropped", {}).values())}


def _time_cupti_floor(run, native, **options) -> float:
    """The native session alone with ``options``: what CUPTI itself costs, no hookmagic Python."""
    from benchmarks.native_probe import probe_start

    t0 = time.perf_counter()
    probe_start(native, **options)
    run()
    native.stop()
    native.take()
    return time.perf_counter() - t0


def _time_torch_profiler(run) -> float:
    from torch.profiler import ProfilerActivity, profile

    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
    prof.key_averages()
    return time.perf_counter() - t0


def child(name: str, repeats: int) -> dict:
    import statistics

    from hookmagic.cupti.session import _prepare_native

    native, why = _prepare_native()
    assert native is not None, why
    kernel_kind = [native.enum_names()["activity_kind"]["concurrent_kernel"]]
    run = _workload(name)
    for _ in range(3):
        run()
    base_a, hook, activity, callbacks, extra = [], [], [], [], {}
    for _ in range(repeats):
        base_a.append(_time_plain(run))
        elapsed, extra = _time_hookmagic(run)
        hook.append(elapsed)
        activity.append(_time_cupti_floor(run, native, activity_kinds=kernel_kind,
                                          callbacks=False, memory=False, stacks=False))
        callbacks.append(_time_cupti_floor(run, native, activity_kinds=kernel_kind,
                                           memory=False, stacks=False, noop_callbacks=True))
    base_b, prof = [], []
    for _ in range(repeats):
        base_b.append(_time_plain(run))
        prof.append(_time_torch_profiler(run))
    med = statistics.median

    def ratio(times, base):
        return med(t / b for t, b in zip(times, base))
    return {"workload": name, "baseline_s": med(base_a), "hookmagic_s": med(hook),
            "hookmagic_x": ratio(hook, base_a), "first_capture_x": hook[0] / base_a[0], "cupti_activity_x": ratio(activity, base_a),
            "cupti_callbacks_x": ratio(callbacks, base_a),
            "baseline_torch_phase_s": med(base_b), "torch_profiler_s": med(prof),
            "torch_profiler_x": ratio(prof, base_b), **extra}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS),
                        help="which workloads (default: all)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeats)))
        return 0
    rows = []
    for name in args.workloads:
        out = subprocess.run([sys.executable, __file__, "--child", name, "--repeats",
                              str(args.repeats)], capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    write_tables(rows, Path(args.out), args.repeats)
    return 0


def write_tables(rows: list[dict], out: Path, repeats: int) -> None:
    import pandas as pd

    from benchmarks.machine import machine_line

    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    added_hook = df.hookmagic_s - df.baseline_s
    added_torch = df.torch_profiler_s - df.baseline_torch_phase_s
    df["less_added_time_x"] = added_torch / added_hook.clip(lower=1e-9)
    df["decode_records_per_s"] = df.records / df.decode_s.clip(lower=1e-12)
    df.to_csv(out / "overhead.csv", index=False)
    lines = [
        "# Capture overhead", "", machine_line(), "",
        "Command: `python benchmarks/bench_overhead.py --out benchmarks/results` "
        f"(each workload in a fresh process; medians of {repeats} interleaved repetitions; times include getting the tables: "
        "hookmagic's DataFrames, torch.profiler's `key_averages()`). x is the median of the "
        "per-repetition ratios to the plain run beside it.", "",
        "The first capture in a process also initialises CUPTI (its own column). The two CUPTI "
        "columns are floors, not hookmagic: the native session with CUPTI's kernel records only "
        "(no callbacks, no Python), and the same plus CUPTI launch callbacks that return at "
        "once. Any CUPTI tracer that records kernels, and any that also takes a Python stack "
        "per launch, pays at least these.", "",
        "| workload | no capture (ms) | %%cudahook defaults (ms) | x | first capture in a "
        "process, x | CUPTI kernel records alone, x | + no-op launch callbacks, x | "
        "torch.profiler (ms) | x | torch.profiler's added time / ours | kernels | "
        "decode (M records/s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in df.itertuples():
        lines.append(
            f"| {WORKLOADS[r.workload]} | {r.baseline_s * 1e3:.1f} | {r.hookmagic_s * 1e3:.1f} | "
            f"{r.hookmagic_x:.3f} | {r.first_capture_x:.3f} | {r.cupti_activity_x:.3f} | "
            f"{r.cupti_callbacks_x:.3f} | "
            f"{r.torch_profiler_s * 1e3:.1f} | {r.torch_profiler_x:.3f} | "
            f"{r.less_added_time_x:.1f} | {r.kernels} | {r.decode_records_per_s / 1e6:.1f} |")
    (out / "overhead.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
