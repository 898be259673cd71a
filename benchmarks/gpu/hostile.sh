#!/usr/bin/env bash
# Issue 17 item 7 on a quiet machine: importer speed at 1x, 10x, 100x synthetic inputs (CPU
# work; the GPU machine is used because it is an unloaded 16-core box, unlike the shared dev
# box). Needs no GPU and no extra wheels. About 60-120 s; writes $OUT/importers.md and .csv.
# Run from the repo root after `source benchmarks/gpu_setup.sh` (run_all.sh does that).
set -euo pipefail
OUT=${OUT:?set OUT to an empty folder}
echo "hostile: importer benchmark (1x/10x/100x, 3 fresh processes each) $(date -u +%H:%M:%S)"
python3 benchmarks/bench_importers.py --repeats 3 --scales 1,10,100 --out "$OUT"
cat "$OUT/importers.md"
echo "hostile: done $(date -u +%H:%M:%S)"
