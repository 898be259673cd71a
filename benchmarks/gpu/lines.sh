#!/usr/bin/env bash
# GPU tests of the lines area (issue 10: GPU time by source line, %cudahook statement and -f,
# the folded flame graph on a live capture). Run from the repo root on the GPU machine after
# `source benchmarks/gpu_setup.sh` (benchmarks/gpu/run_all.sh does both):
#   OUT=/tmp/out bash benchmarks/gpu/lines.sh
# Writes $OUT/lines_pytest.txt and $OUT/machine_lines.txt (GPU, driver, torch, date). About
# 20-40 s on an H100; give it 90 s. Fails when a test fails or skips on the GPU machine.
set -uo pipefail
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
echo "lines: machine $(date -u +%Y-%m-%dT%H:%M:%SZ)"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  date -u +%Y-%m-%dT%H:%M:%SZ
} 2>&1 | tee "$OUT/machine_lines.txt"
echo "lines: python3 -m pytest tests/gpu/test_lines_gpu.py -q"
python3 -m pytest tests/gpu/test_lines_gpu.py -q -p no:cacheprovider -rA 2>&1 | tee "$OUT/lines_pytest.txt"
rc=${PIPESTATUS[0]}
if grep -q "^SKIPPED" "$OUT/lines_pytest.txt"; then
  echo "lines: FAIL - GPU tests were skipped on the GPU machine (reasons above)"
  [ "$rc" -eq 0 ] && rc=3
fi
echo "lines: done rc=$rc $(date -u +%H:%M:%S)"
exit "$rc"
