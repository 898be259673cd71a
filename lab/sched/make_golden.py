"""Write the scheduler's golden run (``tests/data/sched/h200``) from one stored process folder.

    python lab/sched/make_golden.py RUN_DIR tests/data/sched/h200 [--scenarios a,b,c]

``RUN_DIR`` is one process folder that ``sched_fidelity.py --compact --second-run`` wrote (the
golden comes from ``2026-11-26_2344_h200/run2``, kept in git history under
``benchmarks/results/sched_fidelity_runs/``). Writes what ``tests/test_sched_replay.py`` needs
to replay the run through the package alone: ``calibration.json`` (the fit, the GPU, driver
and date), ``latency_tables.csv``, the prediction table the GPU process wrote
(``fidelity.csv``, for reference), and per scenario the real run and the probe before it as
saved results (``<scenario>.real.hmsched``, ``<scenario>.probe.hmsched``; batches trimmed to
the columns the prediction reads, meta to what says where and how it ran).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sched_fidelity as SF  # noqa: E402

from hookmagic.sched.result import RunResult  # noqa: E402

BATCH_KEEP = ["batch", "model", "stream", "start_s", "end_s", "size", "dispatch_s"]
META_KEEP = ["mode", "policy", "duration_s", "seed", "clock_corrected", "clock_drift_ppm",
             "backend", "gpu", "driver", "torch", "cuda", "date"]
INFO_KEEP = ["label", "gpu", "driver", "torch", "cuda", "date", "models", "max_batch", "seconds",
             "cuda_graphs", "fit"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--scenarios", default="mixed_priorities,cameras_bursty_edf,held_out_three_streams")
    args = ap.parse_args()
    info, idle, built, real = SF.stored_run(args.run_dir)
    probes = SF.stored_side_runs(args.run_dir, built, list(idle))
    args.out.mkdir(parents=True, exist_ok=True)
    keep = {k: info[k] for k in INFO_KEEP if k in info}
    (args.out / "calibration.json").write_text(json.dumps(keep, indent=1) + "\n")
    (args.out / "latency_tables.csv").write_bytes((args.run_dir / "latency_tables.csv").read_bytes())
    names = args.scenarios.split(",")
    fid = pd.read_csv(args.run_dir / "fidelity.csv")
    fid[fid["scenario"].isin(names)].to_csv(args.out / "fidelity.csv", index=False)
    for name in names:
        for side, res in (("real", real[name]), ("probe", probes[name])):
            meta = {k: res.meta[k] for k in META_KEEP if k in res.meta}
            RunResult(res.requests, res.batches[BATCH_KEEP], meta).save(
                args.out / f"{name}.{side}.hmsched")
    total = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"{args.out}: {total / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
