#!/usr/bin/env bash
# Issue 12's inference kernels on the GPU machine (run by benchmarks/gpu/run_all.sh after
# gpu_setup.sh, with $OUT set): NVRTC check, correctness against torch/torchvision
# (tests/gpu/test_infer_gpu.py), then the same-process benchmark over 3 fresh processes.
# At most ~200 s (step timeouts); the tests alone are the first 140 s.
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD}
export HOOKMAGIC_KERNEL_CACHE=${HOOKMAGIC_KERNEL_CACHE:-/tmp/hookmagic-kernel-cache}
fail=0
t0=$(date +%s)
step() { echo "--- $1 ($(( $(date +%s) - t0 ))s)"; }

step "kernels check (NVRTC, sm_90)"
timeout 60 python3 -m hookmagic.cli kernels check --arch sm_90 >"$OUT/check.txt" 2>&1 || { echo "FAILED: kernels check"; fail=1; }
grep -E "preprocess|nms|decode|transpose|row_|attention" "$OUT/check.txt" | head -40

step "correctness vs torch / torchvision (tests/gpu/test_infer_gpu.py, one process per kernel family)"
timeout 140 bash benchmarks/gpu/infer_tests.sh >"$OUT/pytest_infer.txt" 2>&1 || { echo "FAILED: pytest"; fail=1; }
cat "$OUT/pytest_infer.txt" | tail -80

step "recording: the inference kernels beside what they replace (kernel_inference.hmtrace)"
timeout 60 python3 benchmarks/record_kernels.py --what inference --out "$OUT/recordings" >"$OUT/record.txt" 2>&1 \
  || { echo "FAILED: recording"; fail=1; }
tail -5 "$OUT/record.txt"

step "benchmark: inference kernels vs torch/torchvision/copy (3 fresh processes)"
timeout 150 python3 benchmarks/bench_kernels.py --sections infer --processes 3 --out "$OUT/bench" >"$OUT/bench.txt" 2>&1 \
  || { echo "FAILED: benchmark"; fail=1; }
tail -40 "$OUT/bench.txt"

step "done, fail=$fail"
exit $fail
