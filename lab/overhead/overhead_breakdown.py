"""Where a capture's cost goes: each option on its own, and the fixed cost of an empty capture.

    python lab/overhead/overhead_breakdown.py --out benchmarks/results

Writes overhead_breakdown.md: per configuration, the median time of 20,000 tiny kernels and of
an empty block, with the capture's own accounting (start, stop, hand-over, table building).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

CONFIGS = {
    "kernels only": dict(memory=False, stacks=False, nvml=False),
    "+ memory": dict(memory=True, stacks=False, nvml=False),
    "+ stacks": dict(memory=True, stacks=True, nvml=False),
    "defaults (+ NVML)": dict(),
    "defaults, no detach": dict(detach=False),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    import hookmagic
    from benchmarks.machine import machine_line

    x = torch.zeros(16, device="cuda")

    def tiny():
        for _ in range(20000):
            x.add_(1)
        torch.cuda.synchronize()

    def empty():
        torch.cuda.synchronize()

    for _ in range(3):
        tiny()
    rows = []
    for label, options in [("no capture", None), *CONFIGS.items()]:
        for work_name, work in (("20,000 tiny kernels", tiny), ("empty block", empty)):
            times, parts = [], []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                if options is None:
                    work()
                else:
                    with hookmagic.capture(**options) as trace:
                        work()
                    len(trace.kernels)
                    parts.append(trace.meta.get("overhead", {}))
                times.append(time.perf_counter() - t0)
            row = {"config": label, "work": work_name, "median_ms": statistics.median(times) * 1e3}
            for key in ("start_s", "stop_s", "take_s", "build_s", "decode_s"):
                if parts:
                    row[key] = statistics.median(p.get(key, 0.0) for p in parts) * 1e3
            rows.append(row)
            print(row, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Capture overhead, broken down", "", machine_line(), "",
             "Command: `python lab/overhead/overhead_breakdown.py` (medians of 7).", "",
             "| configuration | work | total (ms) | start | stop (flush, detach) | hand-over | tables | decode |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['config']} | {r['work']} | {r['median_ms']:.1f} | "
                     + " | ".join(f"{r.get(k, 0):.1f}" for k in
                                  ("start_s", "stop_s", "take_s", "build_s", "decode_s")) + " |")
    (out / "overhead_breakdown.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
