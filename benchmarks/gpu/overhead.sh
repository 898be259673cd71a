#!/usr/bin/env bash
# Lite captures, scheduled windows and the capture overhead on the GPU machine (issue 10),
# within 300 s on an H100:
#   bash benchmarks/gpu/run_all.sh overhead:300     (gpu_setup.sh builds the extension first)
# 1. GPU tests: tests/gpu/test_lite_schedule_gpu.py (a lite capture against torch.profiler's
#    kernel/copy/memset records and torch.cuda.memory_reserved(); schedule windows against the
#    kernel counts each step launches, CUDA events and torch.profiler's own schedule), plus the
#    CPU tests of the same features (tests/test_lite.py, tests/test_schedule.py).
# 2. benchmarks/bench_overhead.py: defaults, --lite, lite without callbacks, CUPTI's floors,
#    torch.profiler CPU+CUDA and CUDA only; each workload in 3 fresh processes, min–max.
# Writes under $OUT: pytest_gpu.txt, overhead/overhead.{md,csv,json}, overhead.md (a copy),
# machine.txt. Exits non-zero if a test failed or the benchmark did not finish a round.
set -uo pipefail
OUT=${OUT:-$(mktemp -d -t hookmagic-overhead.XXXXXX)}
mkdir -p "$OUT"
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
step() { echo "[overhead +$(elapsed)s] $*"; }
ls hookmagic/_native*.so >/dev/null 2>&1 ||
  { echo "overhead: the extension is not built (source benchmarks/gpu_setup.sh first)"; exit 1; }
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

step "GPU tests: lite and schedule windows"
timeout 90 python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" \
  tests/gpu/test_lite_schedule_gpu.py > "$OUT/pytest_gpu.txt" 2>&1
test_rc=$?
# the CPU tests of the same features in their own process (no CUPTI loaded by a GPU test)
timeout 40 python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" \
  tests/test_lite.py tests/test_schedule.py >> "$OUT/pytest_gpu.txt" 2>&1
rc=$?
[ "$test_rc" = 0 ] && test_rc=$rc
tail -15 "$OUT/pytest_gpu.txt"
step "pytest rc=$test_rc (124: ran out of its time)"

left=$(( 290 - $(elapsed) ))
step "overhead benchmark, 3 fresh processes per workload (${left}s left)"
timeout "$left" python3 benchmarks/bench_overhead.py --out "$OUT/overhead" --processes 3 \
  --repeats 5 --torch-repeats 1 --deadline-s $(( left - 50 ))
bench_rc=$?
step "bench rc=$bench_rc (124: ran out of its time; tables of finished rounds are kept)"
if [ -f "$OUT/overhead/overhead.md" ]; then
  cp "$OUT/overhead/overhead.md" "$OUT/overhead.md"
  cat "$OUT/overhead.md"
else
  echo "overhead: no table written"; [ "$bench_rc" = 0 ] && bench_rc=1
fi
step "done"
[ "$test_rc" = 0 ] || exit "$test_rc"
exit "$bench_rc"
