#!/usr/bin/env bash
# Issue 18: where the scheduler driver's host time goes when it slows (benchmarks/sched_host_episodes.py),
# in three fresh processes; about 95 s each (H100, 2026-11-26). Run it through `bash benchmarks/gpu/run_all.sh host_episodes:330`.
set -eu
python3 benchmarks/sched_host_episodes.py "$OUT/host_episodes" --processes ${EPISODE_PROCESSES:-3} --seconds 3 --repeats 10
