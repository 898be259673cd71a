#!/usr/bin/env bash
# Issue 10 on the GPU machine, quick round (≤ 245 s): the native GPU tests touched last
# (device UUIDs vs nvidia-smi, module names read by the stack walker with no global module hooks,
# ResNet-18 names, backward attribution with "backward of <op>"), the NVTX ranges test, then
# the overhead benchmark on the tiny-kernel loop and ResNet-50 (defaults, without module names,
# --lite, CUPTI floors, torch.profiler), 3 fresh processes each. Also re-records the bundled
# transformer_training recording with the current capture ($OUT/recordings/: copy it to
# hookmagic/data/recordings/ and re-run `python benchmarks/make_notebook_01_lines.py`).
#   bash benchmarks/gpu/run_all.sh capture:245
set -uo pipefail
OUT=${OUT:-$(mktemp -d -t hookmagic-capture.XXXXXX)}
mkdir -p "$OUT"
t0=$(date +%s)
step() { echo "[capture +$(( $(date +%s) - t0 ))s] $*"; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$OUT/machine.txt"
cat "$OUT/machine.txt"
step "GPU tests: uuid, module names, backward, NVTX"
timeout 110 python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/gpu/test_nvtx_gpu.py \
  tests/gpu/test_native_gpu.py tests/gpu/test_lines_gpu.py -k "uuid or modules or backward or nvtx" > "$OUT/pytest_gpu.txt" 2>&1
test_rc=$?
tail -15 "$OUT/pytest_gpu.txt"
step "re-record transformer_training"
timeout 60 python3 benchmarks/make_recordings.py --out "$OUT/recordings" --only transformer_training \
  > "$OUT/recording.txt" 2>&1
rec_rc=$?
tail -3 "$OUT/recording.txt"
left=$(( 235 - $(date +%s) + t0 ))
step "overhead benchmark (${left}s left)"
timeout "$left" python3 benchmarks/bench_overhead.py --out "$OUT/overhead" --processes 3 --repeats 5 \
  --torch-repeats 1 --workloads tiny_kernels_20000 resnet50_fp16_b16 --deadline-s $(( left - 30 ))
bench_rc=$?
[ -f "$OUT/overhead/overhead.md" ] && cat "$OUT/overhead/overhead.md"
step "done: tests rc=$test_rc, recording rc=$rec_rc, bench rc=$bench_rc"
[ "$test_rc" = 0 ] || exit "$test_rc"
[ "$rec_rc" = 0 ] || exit "$rec_rc"
exit "$bench_rc"
