"""Capture overhead on a GPU: no capture vs ``%%cudahook`` defaults, ``--lite``, CUPTI's own
floors, and torch.profiler (CPU+CUDA, and CUDA only).

Workloads (issues 2 and 10): (a) 20,000 tiny kernels, (b) ResNet-50 fp16 batch 16 inference,
(c) large bf16 GEMMs. Each is timed end to end, from entering the capture to having its
tables in hand (hookmagic: the Trace's DataFrames; torch.profiler CPU+CUDA: ``key_averages()``;
torch.profiler CUDA only: ``events()``), with the GPU synchronised. Each workload runs in
``--processes`` fresh processes (torch.profiler keeps CUPTI for the rest of a process, so it
runs last in each); in a process, each configuration is interleaved with a plain run and its
x is the median of the per-repetition ratios. The tables quote min–max over the processes.

    python benchmarks/bench_overhead.py --out benchmarks/results

writes overhead.md, overhead.csv (one row per process) and overhead.json there, after every
round of processes (so a run cut short keeps what it measured).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

#: hookmagic configurations: column name -> capture options
CONFIGS = {
    "defaults": {},
    "no_module_names": {"module_names": False},  # what naming nn.Modules in stacks costs
    "lite": {"lite": True},
    "lite_no_callbacks": {"lite": True, "callbacks": False},
}

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


def _time_hookmagic(run, **options) -> tuple[float, dict]:
    import hookmagic

    t0 = time.perf_counter()
    with hookmagic.capture(**options) as trace:
        run()
    n = len(trace.kernels)  # the DataFrames are in hand once the block has ended
    elapsed = time.perf_counter() - t0
    meta = trace.meta
    parts = {k: round(float(v) * 1e3, 3) for k, v in meta.get("overhead", {}).items()
             if k.endswith("_s")}
    return elapsed, {"kernels": n, "records": meta.get("records", 0), "overhead_ms": parts,
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


def _time_torch_profiler(run, cuda_only: bool = False) -> float:
    """CPU+CUDA until ``key_averages()`` returns; CUDA only until its ``events()`` are in hand."""
    from torch.profiler import ProfilerActivity, profile

    activities = ([ProfilerActivity.CUDA] if cuda_only
                  else [ProfilerActivity.CPU, ProfilerActivity.CUDA])
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        run()
    if cuda_only:
        len(prof.events())
    else:
        prof.key_averages()
    return time.perf_counter() - t0


def _warm_torch_profiler() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.zeros(16, device="cuda")
    for activities in ([ProfilerActivity.CPU, ProfilerActivity.CUDA], [ProfilerActivity.CUDA]):
        with profile(activities=activities) as prof:
            x.add_(1)
            torch.cuda.synchronize()
        prof.key_averages()


def child(name: str, repeats: int, torch_repeats: int) -> dict:
    import statistics

    from hookmagic.cupti.session import _prepare_native

    native, why = _prepare_native()
    assert native is not None, why
    kernel_kind = [native.enum_names()["activity_kind"]["concurrent_kernel"]]
    run = _workload(name)
    for _ in range(3):
        run()
    times: dict[str, list[float]] = {k: [] for k in ("base", *CONFIGS, "floor",
                                                      "floor_callbacks")}
    first_capture_x, extra, lite_extra = None, {}, {}
    for _ in range(repeats):
        times["base"].append(_time_plain(run))
        for config, options in CONFIGS.items():
            elapsed, info = _time_hookmagic(run, **options)
            times[config].append(elapsed)
            if config == "defaults":
                extra = info
                if first_capture_x is None:
                    first_capture_x = elapsed / times["base"][-1]
            elif config == "lite":
                lite_extra = info
        times["floor"].append(_time_cupti_floor(run, native, activity_kinds=kernel_kind,
                                                callbacks=False, memory=False, stacks=False))
        times["floor_callbacks"].append(_time_cupti_floor(
            run, native, activity_kinds=kernel_kind, memory=False, stacks=False,
            noop_callbacks=True))
    torch_times: dict[str, list[float]] = {"base_cpu": [], "cpu_cuda": [], "base_cuda": [],
                                           "cuda_only": []}
    _warm_torch_profiler()  # its first use in a process initialises Kineto: not timed, as ours
    for _ in range(torch_repeats):
        torch_times["base_cpu"].append(_time_plain(run))
        torch_times["cpu_cuda"].append(_time_torch_profiler(run))
        torch_times["base_cuda"].append(_time_plain(run))
        torch_times["cuda_only"].append(_time_torch_profiler(run, cuda_only=True))
    med = statistics.median

    def ratio(values, base):
        return med(t / b for t, b in zip(values, base))
    row = {"workload": name, "repeats": repeats, "torch_repeats": torch_repeats,
           "baseline_s": med(times["base"]), "first_capture_x": first_capture_x,
           "cupti_activity_x": ratio(times["floor"], times["base"]),
           "cupti_callbacks_x": ratio(times["floor_callbacks"], times["base"])}
    for config in CONFIGS:
        row[f"{config}_s"] = med(times[config])
        row[f"{config}_x"] = ratio(times[config], times["base"])
    row["hookmagic_s"], row["hookmagic_x"] = row["defaults_s"], row["defaults_x"]
    row["lite_minus_floor_x"] = row["lite_x"] - row["cupti_activity_x"]
    row["torch_profiler_s"] = med(torch_times["cpu_cuda"])
    row["torch_profiler_x"] = ratio(torch_times["cpu_cuda"], torch_times["base_cpu"])
    row["torch_cuda_only_s"] = med(torch_times["cuda_only"])
    row["torch_cuda_only_x"] = ratio(torch_times["cuda_only"], torch_times["base_cuda"])
    row["baseline_torch_phase_s"] = med(torch_times["base_cpu"] + torch_times["base_cuda"])
    row.update({k: v for k, v in extra.items() if k != "warnings"})
    row["lite_kernels"] = lite_extra.get("kernels")
    row["lite_overhead_ms"] = lite_extra.get("overhead_ms", {})  # the last lite capture's parts
    row["lite_warnings"] = lite_extra.get("warnings", [])
    row["warnings"] = extra.get("warnings", [])
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved repetitions of each hookmagic/CUPTI configuration "
                        "per process (default 5)")
    parser.add_argument("--torch-repeats", type=int, default=2,
                        help="repetitions of each torch.profiler configuration per process "
                        "(default 2: its CPU+CUDA run takes seconds on the tiny-kernel loop)")
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh processes per workload (default 3)")
    parser.add_argument("--deadline-s", type=float, default=0.0,
                        help="start no new process after this many seconds (0: no limit)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS),
                        help="which workloads (default: all)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeats, args.torch_repeats)))
        return 0
    t0 = time.monotonic()
    rows: list[dict] = []
    for round_number in range(args.processes):
        for name in args.workloads:
            if args.deadline_s and time.monotonic() - t0 > args.deadline_s:
                print(f"deadline: {name} round {round_number + 1} not started", flush=True)
                continue
            out = subprocess.run([sys.executable, __file__, "--child", name, "--repeats",
                                  str(args.repeats), "--torch-repeats", str(args.torch_repeats)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr, file=sys.stderr)
                return 1
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["process"] = round_number
            rows.append(row)
            print(f"[{time.monotonic() - t0:.0f}s] {name} process {round_number + 1}: "
                  f"defaults {row['defaults_x']:.3f}x, lite {row['lite_x']:.3f}x, "
                  f"floor {row['cupti_activity_x']:.3f}x, torch CPU+CUDA "
                  f"{row['torch_profiler_x']:.2f}x, CUDA only {row['torch_cuda_only_x']:.2f}x",
                  flush=True)
        if rows:
            write_tables(rows, Path(args.out), args)
    return 0 if rows else 1


def _span(values, digits: int = 3) -> str:
    values = [float(v) for v in values]
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" \
        else f"{low:.{digits}f}–{high:.{digits}f}"


def write_tables(rows: list[dict], out: Path, args: argparse.Namespace) -> None:
    import pandas as pd

    from benchmarks.machine import machine_line

    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df["added_defaults_s"] = df.defaults_s - df.baseline_s
    df["added_lite_s"] = df.lite_s - df.baseline_s
    df["added_torch_s"] = df.torch_profiler_s - df.baseline_torch_phase_s
    df["added_torch_cuda_s"] = df.torch_cuda_only_s - df.baseline_torch_phase_s
    df["less_added_time_x"] = df.added_torch_s / df.added_defaults_s.clip(lower=1e-9)
    df["cuda_only_vs_lite_x"] = df.added_torch_cuda_s / df.added_lite_s.clip(lower=1e-9)
    df["decode_records_per_s"] = df.records / df.decode_s.clip(lower=1e-12)
    df.drop(columns=["warnings", "lite_warnings", "overhead_ms", "lite_overhead_ms"],
            errors="ignore").to_csv(out / "overhead.csv", index=False)
    (out / "overhead.json").write_text(json.dumps(rows, indent=1))
    command = (f"python benchmarks/bench_overhead.py --out DIR --processes {args.processes} "
               f"--repeats {args.repeats} --torch-repeats {args.torch_repeats}")
    lines = [
        "# Capture overhead", "", machine_line(), "",
        f"Command: `{command}`. Each workload ran in fresh processes; in each, every "
        "configuration was interleaved with a plain run, and its x is the median of the "
        f"per-repetition ratios ({args.repeats} repetitions; torch.profiler "
        f"{args.torch_repeats}, after one untimed use of each of its configurations, as "
        "ours are timed after the first capture). Cells are min–max over the processes (one value where they "
        "agree to the digits shown). Times include getting the tables: hookmagic's "
        "DataFrames, torch.profiler CPU+CUDA's `key_averages()`, torch.profiler CUDA-only's "
        "`events()`.", "",
        "Floors are CUPTI, not hookmagic: the native session with CUPTI's kernel records only "
        "(no callbacks, no Python, attached and finalized as a capture is), and the same plus "
        "launch callbacks that return at once. `--lite` records kernels, copies, memsets and "
        "memory (CUPTI's callback API only for cuMemMap/cuMemUnmap); \"lite, no callbacks\" is "
        "`capture(lite=True, callbacks=False)`. lite − floor is the issue-10 target (≤ 0.03x).",
        "",
        "| workload | processes | no capture (ms) | %%cudahook defaults, x | "
        "defaults without module names, x | --lite, x | "
        "lite, no callbacks, x | CUPTI kernel records alone, x | + no-op launch callbacks, x | "
        "lite − floor | torch.profiler CPU+CUDA, x | torch.profiler CUDA only, x | "
        "torch CPU+CUDA added ÷ defaults added | torch CUDA-only added ÷ lite added | "
        "first capture in a process, x | kernels |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in df.groupby("workload", sort=False):
        lines.append(
            f"| {WORKLOADS.get(name, name)} | {len(g)} | {_span(g.baseline_s * 1e3, 1)} | "
            f"{_span(g.defaults_x)} | {_span(g.no_module_names_x)} | {_span(g.lite_x)} | {_span(g.lite_no_callbacks_x)} | "
            f"{_span(g.cupti_activity_x)} | {_span(g.cupti_callbacks_x)} | "
            f"{_span(g.lite_minus_floor_x)} | {_span(g.torch_profiler_x, 2)} | "
            f"{_span(g.torch_cuda_only_x, 2)} | {_span(g.less_added_time_x, 1)} | "
            f"{_span(g.cuda_only_vs_lite_x, 1)} | {_span(g.first_capture_x)} | "
            f"{_span(g.kernels, 0)} |")
    lines += ["", "Where a default capture's own time goes (last default capture of each process, "
              "ms):", ""]
    for r in rows:
        parts = r.get("overhead_ms") or {}
        shown = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in parts.items())
        lines.append(f"- {r['workload']} process {r.get('process', 0) + 1}: {shown}")
    lines += ["", "Where a lite capture's own time goes (last lite capture of each process, ms; "
              "start/stop include CUPTI's attach and finalize, take/build are hookmagic's "
              "tables):", ""]
    for r in rows:
        parts = r.get("lite_overhead_ms") or {}
        shown = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in parts.items())
        lines.append(f"- {r['workload']} process {r.get('process', 0) + 1}: {shown}")
    notes = sorted({w for r in rows for w in r.get("warnings", []) + r.get("lite_warnings", [])})
    if notes:
        lines += ["", "Notes the captures carried:", ""] + [f"- {n}" for n in notes]
    (out / "overhead.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
