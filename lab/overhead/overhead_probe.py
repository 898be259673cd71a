"""Which part of a capture costs what, on one of bench_overhead.py's workloads (a GPU diagnostic).

    python lab/overhead/overhead_probe.py --out benchmarks/results [--workload resnet50_fp16_b16]

Each configuration runs in a fresh process pinned to four cores, alternating the plain loop
and the loop under the configuration; x is the median of the pairs' ratios, start and finish
the medians of the time around the loop (for the native session also split into CUPTI's
subscribe+callbacks, activity enabling, drain, and detach). The "lingering" rows time the plain
loop right after a capture that ended with or without detaching CUPTI. Writes
overhead_probe_<workload>.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = int(os.environ.get("HOOKMAGIC_PROBE_REPEATS", "11"))

CONFIGS = {
    "none": "the plain loop",
    "kernel activity only": "CONCURRENT_KERNEL records, no callbacks",
    "+memcpy +memset": "CONCURRENT_KERNEL, MEMCPY, MEMSET",
    "+memcpy +memset +sync": "... and SYNCHRONIZATION",
    "+memcpy +memset +memory2": "... and MEMORY2",
    "kernel +sync": "CONCURRENT_KERNEL and SYNCHRONIZATION",
    "default activities": "all five, no callbacks",
    "+no-op callbacks": "default activities, callbacks that return at once",
    "+callbacks, runtime only": "default activities, runtime API callbacks only, no stacks",
    "+callbacks, driver only": "default activities, driver API callbacks only, no stacks",
    "+callbacks": "default activities, launch and map/unmap callbacks, no stacks",
    "+callbacks +stacks": "the native session as %%cudahook uses it",
    "+callbacks +stacks, no sync records": "the same without SYNCHRONIZATION records",
    "+callbacks +stacks, no detach": "the same, CUPTI left initialised between runs",
    "+callbacks +stacks, sync activity records": "the same with CUPTI's SYNCHRONIZATION records "
                                                 "instead of syncs from the API callbacks",
    "python thread, pynvml": "a Python thread sampling 6 NVML fields every 20 ms",
    "native NVML sampler": "hookmagic's native NVML thread, every 20 ms",
    "lingering, after detach": "plain loop just after a capture that detached CUPTI",
    "lingering, no detach": "plain loop just after a capture that left CUPTI initialised",
    "capture(nvml=False)": "hookmagic.capture, tables in hand",
    "capture()": "hookmagic.capture defaults, tables in hand",
    "torch.profiler": "torch.profiler(CPU, CUDA), until exit",
}


def _child(config: str, workload: str) -> dict:
    import torch

    import hookmagic
    from benchmarks.native_probe import probe_start
    from hookmagic.cupti.session import _prepare_native

    native, why = _prepare_native()
    assert native is not None, why
    kinds = native.enum_names()["activity_kind"]
    from benchmarks.bench_overhead import _workload

    loop = _workload(workload)

    def timed(before, after=lambda: None):
        t0 = time.perf_counter()
        before()
        t1 = time.perf_counter()
        loop()
        t2 = time.perf_counter()
        after()
        t3 = time.perf_counter()
        return {"start": t1 - t0, "loop": t2 - t1, "finish": t3 - t2}

    def session(kind_names=(), **options):
        ids = [kinds[k] for k in kind_names]

        def run():
            box = {}
            r = timed(lambda: probe_start(native, activity_kinds=ids, **options),
                      lambda: (native.stop(), box.update(native.take()["counters"])))
            return {**r, **{k: box[k] for k in ("subscribe_s", "callbacks_s", "enable_s",
                                                   "flush_s", "detach_s")}}
        return run

    def lingering(detach):
        def run():
            probe_start(native, memory=True, stacks=True, detach=detach)
            native.stop()
            native.take()
            r = timed(lambda: None)
            probe_start(native, memory=True, stacks=True, detach=True)  # back to a clean process
            native.stop()
            native.take()
            return r
        return run

    def python_thread(work):
        def run():
            stop = threading.Event()

            def body():
                while not stop.wait(0.02):
                    work()
            thread = threading.Thread(target=body, daemon=True)
            return timed(thread.start, lambda: (stop.set(), thread.join()))
        return run

    def pynvml_sample():
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)

        def sample():
            pynvml.nvmlDeviceGetUtilizationRates(h)
            pynvml.nvmlDeviceGetMemoryInfo(h)
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
            pynvml.nvmlDeviceGetPowerUsage(h)
            pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        return sample

    def full(**options):
        def run():
            box = {}

            def enter():
                box["cm"] = hookmagic.capture(**options)
                box["trace"] = box["cm"].__enter__()

            def leave():
                box["cm"].__exit__(None, None, None)
                trace = box["trace"]
                for name in ("kernels", "memcpy", "memset", "memory", "sync", "api", "ranges",
                             "stacks", "samples"):
                    getattr(trace, name)
            return timed(enter, leave)
        return run

    def profiler():
        from torch.profiler import ProfilerActivity, profile

        box = {}

        def enter():
            box["p"] = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            box["p"].__enter__()
        return timed(enter, lambda: box["p"].__exit__(None, None, None))

    lean = dict(memory=False, stacks=False, callbacks=False)
    runs = {
        "none": lambda: timed(lambda: None),
        "kernel activity only": session(["concurrent_kernel"], **lean, detach=True),
        "+memcpy +memset": session(["concurrent_kernel", "memcpy", "memset"], **lean),
        "+memcpy +memset +sync": session(["concurrent_kernel", "memcpy", "memset",
                                          "synchronization"], **lean),
        "+memcpy +memset +memory2": session(["concurrent_kernel", "memcpy", "memset",
                                             "memory2"], **lean),
        "kernel +sync": session(["concurrent_kernel", "synchronization"], **lean),
        "default activities": session(memory=True, stacks=False, callbacks=False),
        "+no-op callbacks": session(memory=True, stacks=False, noop_callbacks=True),
        "+callbacks, runtime only": session(memory=True, stacks=False, callback_domains=1),
        "+callbacks, driver only": session(memory=True, stacks=False, callback_domains=2),
        "+callbacks": session(memory=True, stacks=False),
        "+callbacks +stacks": session(memory=True, stacks=True),
        "+callbacks +stacks, no sync records": session(
            ["concurrent_kernel", "memcpy", "memset", "memory2"], memory=True, stacks=True),
        "+callbacks +stacks, no detach": session(memory=True, stacks=True, detach=False),
        "+callbacks +stacks, sync activity records": session(memory=True, stacks=True,
                                                             sync_from_callbacks=False),
        "python thread, pynvml": python_thread(pynvml_sample()),
        "native NVML sampler": lambda: timed(lambda: native.nvml_start(0.02), native.nvml_stop),
        "lingering, after detach": lingering(True),
        "lingering, no detach": lingering(False),
        "capture(nvml=False)": full(nvml=False),
        "capture()": full(),
        "torch.profiler": profiler,
    }
    run = runs[config]
    os.sched_setaffinity(0, set(list(os.sched_getaffinity(0))[2:6]))
    loop()
    run()
    plain, under = [], []
    for _ in range(REPEATS):
        plain.append(timed(lambda: None)["loop"])
        under.append(run())
    med = statistics.median
    return {"plain": med(plain), "x": med(u["loop"] / p for u, p in zip(under, plain)),
            **{k: med(r[k] for r in under) for k in under[0]}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--child")
    parser.add_argument("--workload", default="tiny_kernels_20000",
                        help="one of benchmarks/bench_overhead.py's workloads")
    parser.add_argument("--only", nargs="*", help="configurations to run (default: all)")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        print(json.dumps(_child(args.child, args.workload)))
        return 0
    from benchmarks.bench_overhead import WORKLOADS
    from benchmarks.machine import machine_line

    lines = ["# Overhead probe (diagnostic)", "", machine_line(), "",
             f"Command: `python lab/overhead/overhead_probe.py --workload {args.workload}` "
             f"(workload: {WORKLOADS[args.workload]}; each row a fresh process; medians of "
             f"{REPEATS}).", "",
             "| configuration | what | plain loop (ms) | loop under it (ms) | x | start (ms) | "
             "finish (ms) | CUPTI subscribe / callbacks / activities / drain / detach (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    results = {}
    for config, what in CONFIGS.items():
        if args.only and config not in args.only:
            continue
        out = subprocess.run([sys.executable, __file__, "--child", config, "--workload",
                              args.workload], capture_output=True,
                             text=True, cwd=str(ROOT), timeout=600)
        if out.returncode != 0:
            lines.append(f"| {config} | {what} | failed: {out.stderr.strip().splitlines()[-1]} |")
            print(lines[-1], flush=True)
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results[config] = r
        ms = {k: v * 1e3 for k, v in r.items()}
        split = " / ".join(f"{ms[k]:.2f}" for k in ("subscribe_s", "callbacks_s", "enable_s",
                                                    "flush_s", "detach_s") if k in ms)
        lines.append(f"| {config} | {what} | {ms['plain']:.1f} | {ms['loop']:.1f} | "
                     f"{r['x']:.3f} | {ms['start']:.2f} | {ms['finish']:.2f} | {split} |")
        print(lines[-1], flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"overhead_probe_{args.workload}.md").write_text("\n".join(lines) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": args.workload, "rows": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
