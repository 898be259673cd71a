#!/usr/bin/env bash
# Memory-bound kernels (issue 12's Speed section): row-wise (softmax, LayerNorm, RMSNorm,
# bias+GELU), row reductions, transpose and fused preprocessing. Run by benchmarks/gpu/run_all.sh
# (after gpu_setup.sh, $OUT set): NVRTC check for sm_90, the GPU correctness tests of these
# kernels, then the memory-bound benchmark sections in 3 fresh processes, timed two ways:
#   --timer device : calls queued behind a sleep kernel (kernel time, the bandwidth figure) and the
#                    host's time per call as its own column
# with HOOKMAGIC_BENCH_MULTIPASS=1 adding the other designs (multi-pass row-wise, 8 vectors a thread,
# regs+smem, one pixel a thread preprocessing, 32x32-tile transposes) in the same processes; then
# the 65k-row designs incl. the sm_90 cluster kernels in their own process, and where the host
# time of a call goes. Target <= 150 s.
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD}
export HOOKMAGIC_KERNEL_CACHE=${HOOKMAGIC_KERNEL_CACHE:-/tmp/hookmagic-kernel-cache}
fail=0
t0=$(date +%s)
step() { echo "--- $1 ($(( $(date +%s) - t0 ))s)"; }

step "kernels check (NVRTC, sm_90)"
timeout 30 python3 -m hookmagic.cli kernels check --arch sm_90 >"$OUT/check.txt" 2>&1 || { echo "FAILED: kernels check"; fail=1; }
grep -E "softmax|layer_norm|rms_norm|bias_gelu|row_|transpose|preprocess|error" "$OUT/check.txt" | head -60

step "correctness: tests/gpu/test_rowwise_gpu.py"
timeout 35 python3 -m pytest -q --maxfail=10 --no-header -p no:cacheprovider -o addopts="" tests/gpu/test_rowwise_gpu.py \
  >"$OUT/pytest_rowwise.txt" 2>&1 || { echo "FAILED: rowwise tests"; fail=1; }
tail -15 "$OUT/pytest_rowwise.txt"

step "correctness: tests/gpu/test_infer_gpu.py -k 'preprocess or transpose or row_'"
timeout 30 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" tests/gpu/test_infer_gpu.py \
  -k "preprocess or transpose or row_" >"$OUT/pytest_infer.txt" 2>&1 || { echo "FAILED: infer tests"; fail=1; }
tail -15 "$OUT/pytest_infer.txt"
for impl in w1 w4; do   # the other preprocess kernels (the default, pixel, ran above)
  step "correctness: preprocess tests with HOOKMAGIC_PREPROCESS=$impl"
  HOOKMAGIC_PREPROCESS=$impl timeout 20 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" \
    tests/gpu/test_infer_gpu.py -k preprocess 2>&1 | tail -3
done

export HOOKMAGIC_BENCH_MULTIPASS=1
step "benchmark, device timer: memory-bound sections, 3 fresh processes"
timeout 70 python3 benchmarks/bench_kernels.py --sections memory --timer device --processes 3 \
  --out "$OUT/bench_device" >"$OUT/bench_device.txt" 2>&1 || { echo "FAILED: benchmark (device timer)"; fail=1; }
grep -E "^\|" "$OUT/bench_device.txt" | tail -80

step "65k-element rows: default vs regs+smem vs cluster of 8 blocks vs multi-pass (own process)"
timeout 30 python3 benchmarks/gpu/rowfast_cluster.py >"$OUT/cluster.txt" 2>&1 || { echo "FAILED: cluster comparison"; fail=1; }
cat "$OUT/cluster.txt" | head -40

step "host cost of one call, by step (benchmarks/gpu/rowfast_profile.py)"
timeout 20 python3 benchmarks/gpu/rowfast_profile.py >"$OUT/profile.txt" 2>&1 || { echo "FAILED: profile"; fail=1; }
head -60 "$OUT/profile.txt"

step "done, fail=$fail"
exit $fail
