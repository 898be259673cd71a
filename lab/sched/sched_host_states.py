"""The driver's host speed and the GPU's pace through stored scheduler runs (no GPU).

For each stored process folder of ``sched_fidelity.py`` and each scenario (probe, then real run),
per quarter second: the driver's clean launch gap and launch call (medians;
``calibrate.host_times_in``), the most frequent model's GPU time over its idle table for batches
that followed the same model and ran with nothing beside them, and, where stored (since
2026-11-26 08:16 UTC), the host canary's median pass. It shows the H100 host switching between
two speeds ~2x apart within one run and a model of small kernels taking longer on the GPU while
the host is slow (its CUDA graph's submission paces it); where the driver stamped it, the CPUs
it launched from in each bin.

    python lab/sched/sched_host_states.py benchmarks/results/sched_fidelity_runs/2026-11-26_0806_h100/run2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sched_fidelity as SF  # noqa: E402

from hookmagic.sched import calibrate as C  # noqa: E402

BIN_S = 0.25


def states(res, pol, specs) -> pd.DataFrame:
    """Per BIN_S of one run: launch gap and call (µs), GPU time over table, canary pass (µs)."""
    b = C.after_previous(res)
    t = C.host_times_in(res, pol, history=b)
    t["bin"] = (t["start_s"] // BIN_S) * BIN_S
    b["bin"] = (b["start_s"] // BIN_S) * BIN_S
    model = b["model"].value_counts().index[0]
    alone = C.overlap_by_count(b, 2).sum(axis=1) <= 0
    same = b[alone & (b["model"] == model) & (b["prev"] == model)]
    ratio = 1e3 * same["dur"].to_numpy() / specs[model].latency(same["size"].to_numpy())
    out = pd.DataFrame({
        "launch gap µs": t[t["clean"]].groupby("bin")["gap_ms"].median() * 1e3,
        "launch call µs": t.groupby("bin")["call_ms"].median() * 1e3,
        f"{model} GPU / table": pd.Series(ratio, index=same["bin"].to_numpy()).groupby(level=0).median()})
    if "host_cpu" in res.batches.columns:  # stamped by the driver since 2026-11-26 08:55 UTC
        cpu = res.batches.assign(bin=(res.batches["start_s"] // BIN_S) * BIN_S)
        out["driver CPU"] = cpu.groupby("bin")["host_cpu"].agg(
            lambda c: "/".join(str(x) for x in sorted(set(c))))
    canary = res.meta.get("host_canary") or {}
    if canary.get("bins_us"):
        w = canary["width_s"]
        c = pd.Series([np.nan if x is None else x for x in canary["bins_us"]], dtype=float)
        c.index = (np.arange(len(c)) * w // BIN_S) * BIN_S
        out["canary pass µs"] = c.groupby(level=0).median()
    return out[out.index >= 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="stored process folders (run1, ...)")
    args = ap.parse_args()
    for rd in args.runs:
        info, idle, built, real = SF.stored_run(rd)
        probes = SF.stored_side_runs(rd, built, list(idle))
        for name, (wl, pol) in built.items():
            specs = {s.name: s for s in SF.sim_specs_from(info, idle, len(pol.streams))}
            for side, res in (("probe", probes.get(name)), ("real", real[name])):
                if res is None:
                    continue
                print(f"\n## {rd} — {name}, {side} (per {BIN_S} s from run time 0)\n")
                print(states(res, pol, specs).round(3).T.to_string())


if __name__ == "__main__":
    main()
