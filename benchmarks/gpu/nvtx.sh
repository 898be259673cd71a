#!/usr/bin/env bash
# NVTX ranges from the nvtx package under capture(nvtx=True) (issue 10 item 7): what the package
# sees and which ranges arrive. Needs .whl/nvtx-*.whl (gpu_setup installs it). ~15 s.
#   bash benchmarks/gpu/run_all.sh nvtx:40
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
timeout 30 python3 benchmarks/gpu/nvtx_domains.py 2>&1 | tee "$OUT/nvtx_domains.txt"
