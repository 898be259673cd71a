#!/usr/bin/env bash
# GPU tests of the memtests area: every test under tests/gpu/ (moved there from tests/*_gpu.py),
# including the allocator recorders with and without Python stacks. Run from the repo root on
# the GPU machine after `source benchmarks/gpu_setup.sh` (benchmarks/gpu/run_all.sh does both):
#   OUT=/tmp/out bash benchmarks/gpu/memtests.sh
# Writes $OUT/memtests_pytest.txt (the full pytest log), $OUT/memtests_junit.xml and
# $OUT/machine_memtests.txt (GPU, driver, torch, date). Takes about 2-3 minutes on an H100;
# give it 300 s. Fails (non-zero exit) when any GPU test fails, or skips for want of what the
# GPU machine has (torch with CUDA, torchvision, CuPy, the native extension); only the
# two-GPU test may skip on a one-GPU machine.
set -uo pipefail
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
echo "memtests: machine $(date -u +%Y-%m-%dT%H:%M:%SZ)"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  date -u +%Y-%m-%dT%H:%M:%SZ
} 2>&1 | tee "$OUT/machine_memtests.txt"
echo "memtests: python3 -m pytest tests/gpu -q"
HOOKMAGIC_GPU_TEST_WATCHDOG_S=${HOOKMAGIC_GPU_TEST_WATCHDOG_S:-240} \
  python3 -m pytest tests/gpu -q -p no:cacheprovider -rA --durations=15 \
  --junitxml="$OUT/memtests_junit.xml" 2>&1 | tee "$OUT/memtests_pytest.txt"
rc=${PIPESTATUS[0]}
# a GPU test that skipped on the GPU machine did not run: say so and fail
if grep "^SKIPPED" "$OUT/memtests_pytest.txt" | grep -vq "needs two GPUs"; then
  echo "memtests: FAIL - GPU tests were skipped on the GPU machine (reasons above)"
  [ "$rc" -eq 0 ] && rc=3
fi
echo "memtests: done rc=$rc $(date -u +%H:%M:%S)"
exit "$rc"
