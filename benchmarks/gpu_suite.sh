#!/usr/bin/env bash
# Everything that needs a GPU, in one call to the GPU machine: build the native extension for
# that machine's Python, run the GPU tests, then the GPU benchmarks through the runner, and
# bundle what they wrote into $OUT (the device returns at most 8 files).
#   bash benchmarks/gpu_suite.sh [STEP ...]      # steps: tests overhead kernels (default: all)
# Each step has its own time limit (HOOKMAGIC_SUITE_<STEP>_S) so one slow step cannot starve
# the rest. Logs: $OUT/suite.log; results: $OUT/results.tgz; test report: $OUT/tests.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d -t hookmagic-out.XXXXXX)}
mkdir -p "$OUT"
log="$OUT/suite.log"
res=$(mktemp -d)
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests overhead kernels)
source benchmarks/gpu_setup.sh >>"$log" 2>&1 || { echo "gpu_setup failed" | tee -a "$log"; tail -40 "$log"; exit 1; }
cp "$OUT/machine.txt" "$res/" 2>/dev/null
step() {  # step NAME DEFAULT_SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local var="HOOKMAGIC_SUITE_${name^^}_S"
  limit=${!var:-$limit}
  local t0; t0=$(date +%s)
  echo "=== $name (limit ${limit}s) $(date -u +%H:%M:%S)" | tee -a "$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  echo "=== $name rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$log"
}
for s in "${steps[@]}"; do
  case "$s" in
    tests)
      step tests 300 python3 -m pytest tests/gpu -q -p no:cacheprovider \
        -o addopts="" -rfEs --junitxml="$res/tests.xml"
      grep -E "passed|failed|error" "$log" | tail -3 > "$OUT/tests.txt" ;;
    overhead)
      for w in tiny_kernels_20000 resnet50_fp16_b16; do
        step overhead 150 python3 -m benchmarks run overhead --processes 3 --set workload=$w \
          --set repeats=3 --out "$res"
      done ;;
    kernels)
      step kernels 120 python3 -m benchmarks run kernels --processes 3 --set sections=gemm \
        --set shapes=4096 --out "$res" ;;
    *) echo "unknown step $s" | tee -a "$log" ;;
  esac
done
tar czf "$OUT/results.tgz" -C "$res" . 2>>"$log"
tail -5 "$log"
