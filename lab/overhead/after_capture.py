"""Does a program run at full speed after a capture? (a GPU benchmark)

    python lab/overhead/after_capture.py --out benchmarks/results

CUPTI cannot be returned to its never-initialised state inside one process, so each case runs
in fresh processes, alternated so that the host's drift hits all alike: "never captured" times
the workload only; the others first run one ``hookmagic.capture()`` around the workload, which
either leaves CUPTI initialised with every activity and callback disabled (detach=False) or
finalizes it (detach=True, the default). Each process keeps its fastest run (the host's noise
only ever adds time); the table gives the median of those over the processes, wall time and
the main thread's CPU time. Writes after_capture.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "never captured": None,
    "after a capture with detach=False (CUPTI left initialised, all disabled)": {"detach": False},
    "after a capture with detach=True (the default: cuptiFinalize)": {"detach": True},
}


def _child(workload: str, case: str, runs: int) -> dict:
    import hookmagic
    from benchmarks.bench_overhead import _workload

    run = _workload(workload)
    for _ in range(3):
        run()
    options = CASES[case]
    if options is not None:
        with hookmagic.capture(**options) as trace:
            run()
        assert len(trace.kernels) > 0, trace.meta.get("reason")
        run()
    wall, cpu = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.thread_time()
        run()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.thread_time() - c0)
    return {"wall": wall, "cpu": cpu}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--workloads", nargs="*",
                        default=["tiny_kernels_20000", "resnet50_fp16_b16"])
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "CASE"))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        print(json.dumps(_child(*args.child, args.runs)))
        return 0
    from benchmarks.bench_overhead import WORKLOADS
    from benchmarks.machine import machine_line

    lines = ["# Speed after a capture", "", machine_line(), "",
             f"Command: `python lab/overhead/after_capture.py` ({args.processes} fresh "
             f"processes per case, alternated; the fastest of {args.runs} runs in each; the "
             "median of those).", "",
             "| workload | case | wall (ms) | x | main thread CPU (ms) | x |",
             "|---|---|---|---|---|---|"]
    for workload in args.workloads:
        samples = {case: {"wall": [], "cpu": []} for case in CASES}
        for _ in range(args.processes):
            for case in CASES:
                out = subprocess.run([sys.executable, __file__, "--child", workload, case,
                                      "--runs", str(args.runs)], capture_output=True,
                                     text=True, cwd=str(ROOT), timeout=600)
                if out.returncode != 0:
                    print(out.stderr, file=sys.stderr)
                    return 1
                r = json.loads(out.stdout.strip().splitlines()[-1])
                samples[case]["wall"].append(min(r["wall"]))
                samples[case]["cpu"].append(min(r["cpu"]))
        base = {k: statistics.median(samples["never captured"][k]) for k in ("wall", "cpu")}
        for case, s in samples.items():
            wall, cpu = statistics.median(s["wall"]), statistics.median(s["cpu"])
            lines.append(f"| {WORKLOADS[workload]} | {case} | {wall * 1e3:.1f} | "
                         f"{wall / base['wall']:.3f} | {cpu * 1e3:.1f} | "
                         f"{cpu / base['cpu']:.3f} |")
            print(lines[-1], flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "after_capture.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
