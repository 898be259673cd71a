#!/usr/bin/env bash
# Issue 18 on the GPU machine: allocator-model fidelity (peaks and device allocations), then
# scheduler fidelity in three fresh processes (min–max).
set -eu
python3 benchmarks/memory_model_fidelity.py "$OUT/memory_fidelity"
python3 benchmarks/sched_fidelity.py "$OUT/sched_fidelity" --seconds ${SCHED_SECONDS:-3} --processes ${SCHED_PROCESSES:-3}
