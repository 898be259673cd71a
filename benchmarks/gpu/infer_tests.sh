#!/usr/bin/env bash
# Issue 12's GPU correctness tests, one pytest process per kernel family, so that a kernel that
# faults (an illegal address poisons the CUDA context) cannot hide the results of the others.
# About a minute in all; each part has its own time limit. Usage (repo root, after gpu_setup.sh):
#   timeout 140 bash benchmarks/gpu/infer_tests.sh
set -u
export PYTHONPATH=${PYTHONPATH:-$PWD}
fail=0
for part in preprocess "nms or decode" "transpose or row_" attention "conv"; do
  echo "=== tests/gpu/test_infer_gpu.py -k '$part'"
  timeout 45 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" tests/gpu/test_infer_gpu.py \
    -k "$part" 2>&1 | tail -25 || true
  [ "${PIPESTATUS[0]}" = 0 ] || fail=1
done
echo "=== infer tests done, fail=$fail"
exit $fail
