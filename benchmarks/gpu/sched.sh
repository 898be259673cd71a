#!/usr/bin/env bash
# Issue 18 (scheduler part) on the GPU machine: simulator vs real driver in three fresh
# processes (min-max), calibration format 2 (GPU time per size, launch/host times, switch cost,
# per-k sharing fitted on calibration runs of its own). Estimated 70-130 s per process on an
# H100; keep under 420 s in all. Run it through benchmarks/gpu/run_all.sh, which bundles the
# folder into one file: the device returns at most 8 files (a direct run on 2026-11-26 lost its
# per-process records that way).
set -eu
python3 benchmarks/sched_fidelity.py "$OUT/sched_fidelity" --seconds ${SCHED_SECONDS:-3} --processes ${SCHED_PROCESSES:-3}
# the same tables recomputed offline from what was stored (must equal the live ones), and the
# per-batch evidence (sharing, launch/host times, stalls, the starved model's sensitivity)
python3 benchmarks/sched_fidelity.py --replay "$OUT/sched_fidelity" "$OUT/sched_fidelity_replay" | tail -22
python3 benchmarks/sched_fidelity_offline.py "$OUT/sched_fidelity" "$OUT/sched_fidelity/offline.md" > /dev/null || echo "offline analysis failed (tables above still stand)"
