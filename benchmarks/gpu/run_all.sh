#!/usr/bin/env bash
# One GPU-machine call for several areas: `bash benchmarks/gpu/run_all.sh AREA[:SECONDS] ...`
# Runs benchmarks/gpu/AREA.sh for each AREA in turn, each in its own $OUT-like folder and under
# its own time limit (default 240 s), then bundles every area's files into $OUT/AREA.tgz (the
# device returns at most 8 files) and keeps one combined log, $OUT/run_all.log.
set -u
OUT=${OUT:-$(mktemp -d -t hookmagic-out.XXXXXX)}
mkdir -p "$OUT"
log="$OUT/run_all.log"
source benchmarks/gpu_setup.sh >>"$log" 2>&1 || { echo "gpu_setup failed" | tee -a "$log"; exit 1; }
for spec in "$@"; do
  area=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=240
  dir=$(mktemp -d); t0=$(date +%s)
  echo "=== $area (limit ${limit}s) $(date -u +%H:%M:%S)" | tee -a "$log"
  OUT="$dir" timeout --kill-after=10 "$limit" bash "benchmarks/gpu/$area.sh" >"$dir/stdout.txt" 2>&1
  rc=$?
  echo "=== $area rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$log"
  tail -25 "$dir/stdout.txt" | tee -a "$log"
  tar czf "$OUT/$area.tgz" -C "$dir" . 2>>"$log"
done
