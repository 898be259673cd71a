#!/usr/bin/env bash
# Scheduler fidelity on the GPU machine: three fresh processes, min–max (issue 18).
set -eu
python3 benchmarks/sched_fidelity.py "$OUT/sched_fidelity" --seconds ${SCHED_SECONDS:-3} --processes ${SCHED_PROCESSES:-3}
