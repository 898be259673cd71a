"""Bring the 2-GPU runs of benchmarks/gpu/multirank.sh into the repository.

    python lab/multirank/import_multirank.py OUT_DIR --recorded-on "2x NVIDIA H200, driver D, DATE"

OUT_DIR is the unpacked multirank.tgz (it holds ``runs/<job>/rank=N`` and ``machine.txt``).
Each job's rank folders are saved as ``notebooks/recordings/multirank/<job>/rank=N.hmtrace``
(one file per rank) with ``meta["recorded_on"]`` and ``meta["description"]`` added, with
the job's ``truth_rank=N.json`` (the sleeps the job really took). Then the straggler analysis
of every job is checked against those sleeps and written to
``benchmarks/results/multirank_ddp.md``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "notebooks" / "recordings" / "multirank"
TABLE = ROOT / "benchmarks" / "results" / "multirank_ddp.md"

DESCRIPTIONS = {
    "ddp_baseline": "torchrun DDP, 2 ranks, NCCL all-reduce: a 4-layer transformer encoder "
                    "training step (batch 16 x 128 tokens, d_model 512), no straggler",
    "ddp_slow1_20ms": "the same job with rank 1 sleeping 20 ms before each forward pass",
    "ddp_slow0_50ms": "the same job with rank 0 sleeping 50 ms before each forward pass",
}


def import_runs(src: Path, recorded_on: str) -> list[str]:
    import hookmagic

    runs = src / "runs"
    done = []
    for job in sorted(p for p in runs.iterdir() if p.is_dir()):
        dest = DEST / job.name
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for item in sorted(job.iterdir()):
            if item.is_dir() and (item / "meta.json").is_file():
                trace = hookmagic.load(item)
                trace.meta["recorded_on"] = recorded_on
                trace.meta["description"] = DESCRIPTIONS.get(job.name, job.name)
                trace.save(dest / f"{item.name}.hmtrace")
            elif item.name.startswith("truth_rank="):
                shutil.copy(item, dest / item.name)
        done.append(job.name)
    return done


def check(job: str) -> dict:
    """The straggler analysis of one imported job against the sleeps it really took."""
    import hookmagic

    folder = DEST / job
    truth = {int(p.stem.split("=")[1]): json.loads(p.read_text())
             for p in folder.glob("truth_rank=*.json")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts = hookmagic.load_many(folder)
    st = ts.stragglers()
    ov = ts.overlap()
    slow = next(iter(truth.values()))["slow_rank"]
    row = {"job": job, "steps": st["step"].tolist(), "named": st["straggler_rank"].tolist(),
           "lateness_ms": (st["lateness_ns"] / 1e6).round(3).tolist(),
           "cause": st["cause"].tolist(), "slow_rank": slow,
           "overlap_pct": ov["overlap_pct"].round(1).tolist(),
           "comm_ms": (ov["comm_ns"] / 1e6).round(2).tolist()}
    if slow >= 0:
        sleeps = np.array(truth[slow]["sleep_s"]) * 1e3
        slept = np.array([sleeps[s] for s in st["step"]])
        row["slept_ms"] = slept.round(3).tolist()
        row["error_pct"] = (100 * (st["lateness_ns"].to_numpy() / 1e6 - slept) / slept).round(
            1).tolist()
    ts.close()
    return row


def write_table(rows: list[dict], recorded_on: str) -> None:
    lines = ["# Stragglers of a real 2-GPU DDP job", "",
             f"Recorded on {recorded_on} by `bash benchmarks/gpu/multirank.sh` (3 fresh "
             "`torchrun --nproc-per-node 2` jobs, steps 6-9 of 12 captured per rank by "
             "`HOOKMAGIC_CAPTURE_*` alone); analysed with `hookmagic.load_many(...)"
             ".stragglers()`; re-made by `python lab/multirank/import_multirank.py`.", "",
             "Lateness: the last rank's arrival at a step's collective minus the other's. "
             "Slept: what `time.sleep` really took on the slowed rank in that step "
             "(time.perf_counter around it), the independent reference.", "",
             "| job | step | rank named last | lateness (ms) | cause "
             "| slept on the slowed rank (ms) | error |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        for i, step in enumerate(r["steps"]):
            slept = f"{r['slept_ms'][i]:.3f}" if "slept_ms" in r else "—"
            err = f"{r['error_pct'][i]:+.1f}%" if "error_pct" in r else "—"
            lines.append(f"| {r['job']} | {step} | {r['named'][i]} | {r['lateness_ms'][i]:.3f} | "
                         f"{r['cause'][i] or '—'} | {slept} | {err} |")
    lines += ["", "Communication/computation overlap (share of NCCL kernel time during which a "
              "compute kernel also ran), per rank:", "",
              "| job | rank | NCCL kernel time (ms) | overlap |",
              "|---|---|---|---|"]
    for r in rows:
        for rank, (c, o) in enumerate(zip(r["comm_ms"], r["overlap_pct"])):
            lines.append(f"| {r['job']} | {rank} | {c:.2f} | {o:.1f}% |")
    TABLE.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--recorded-on", required=True)
    args = ap.parse_args()
    jobs = import_runs(Path(args.src), args.recorded_on)
    rows = [check(j) for j in jobs]
    for r in rows:
        print(json.dumps(r))
    write_table(rows, args.recorded_on)
    print(TABLE.read_text())


if __name__ == "__main__":
    main()
