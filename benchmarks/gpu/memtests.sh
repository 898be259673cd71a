#!/usr/bin/env bash
# GPU tests of the memtests area, from tests/gpu/: the two moved there from tests/*_gpu.py
# (PyTorch layer profile, scheduler driver) and the allocator recorders with and without Python
# stacks. The capture's own GPU tests (tests/gpu/test_capture_gpu.py) run in the native area's
# script; `python3 -m pytest tests/gpu -q` runs them all. Run from the repo root on the GPU
# machine after `source benchmarks/gpu_setup.sh` (benchmarks/gpu/run_all.sh does both):
#   OUT=/tmp/out bash benchmarks/gpu/memtests.sh
# Writes $OUT/memtests_pytest.txt (the full pytest log), $OUT/memtests_junit.xml and
# $OUT/machine_memtests.txt (GPU, driver, torch, date). About 60-90 s on an H100; give it 120 s
# (the scheduler test's watchdog ends it after 100 s). Fails (non-zero exit) when a test fails or
# skips for want of what the GPU machine has (torch with CUDA, torchvision, the native extension).
set -uo pipefail
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
echo "memtests: machine $(date -u +%Y-%m-%dT%H:%M:%SZ)"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  date -u +%Y-%m-%dT%H:%M:%SZ
} 2>&1 | tee "$OUT/machine_memtests.txt"
TESTS="tests/gpu/test_allocator_recorders_gpu.py tests/gpu/test_layers_torch_gpu.py tests/gpu/test_sched_driver_gpu.py"
echo "memtests: python3 -m pytest $TESTS -q"
# shellcheck disable=SC2086
HOOKMAGIC_GPU_TEST_WATCHDOG_S=${HOOKMAGIC_GPU_TEST_WATCHDOG_S:-100} \
  python3 -m pytest $TESTS -q -p no:cacheprovider -rA --durations=15 \
  --junitxml="$OUT/memtests_junit.xml" 2>&1 | tee "$OUT/memtests_pytest.txt"
rc=${PIPESTATUS[0]}
# a GPU test that skipped on the GPU machine did not run: say so and fail
if grep -q "^SKIPPED" "$OUT/memtests_pytest.txt"; then
  echo "memtests: FAIL - GPU tests were skipped on the GPU machine (reasons above)"
  [ "$rc" -eq 0 ] && rc=3
fi
echo "memtests: done rc=$rc $(date -u +%H:%M:%S)"
exit "$rc"
