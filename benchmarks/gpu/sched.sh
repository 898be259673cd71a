#!/usr/bin/env bash
# Issue 18 (scheduler part) on the GPU machine: simulator vs real driver in three fresh
# processes (min-max), calibration format 2 (launch/host times, per-k sharing). ~110-140 s per
# process on an H100; keep under 420 s in all.
set -eu
python3 benchmarks/sched_fidelity.py "$OUT/sched_fidelity" --seconds ${SCHED_SECONDS:-3} --processes ${SCHED_PROCESSES:-3}
# the same tables recomputed offline from what was stored (must equal the live ones)
python3 benchmarks/sched_fidelity.py --replay "$OUT/sched_fidelity" "$OUT/sched_fidelity_replay" | tail -25
