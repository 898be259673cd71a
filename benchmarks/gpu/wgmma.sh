#!/usr/bin/env bash
# gemm(variant="wgmma") (Hopper wgmma + TMA, kernels/gemm_wgmma.cu) on the GPU machine: run by
# benchmarks/gpu/run_all.sh after gpu_setup.sh with $OUT set (`bash benchmarks/gpu/run_all.sh wgmma:150`).
# Steps (each timed, each under its own timeout; at most ~145 s in all):
#   1. NVRTC check for sm_90a (registers, spills) - fills the cubin cache
#   2. probe: single launches with structured inputs that show where a wrong element came from
#   3. correctness tests (tests/gpu/test_wgmma_gpu.py) against torch, odd shapes included
#   4. wgmma vs mma vs cuBLAS at 4096^3 and 8192^3, FP16 and BF16, 3 fresh processes
#      (without the wgmma cases when the probe found it wrong, so the mma baseline still comes back)
#   5. candidates, one process: the wgmma schedules (tiles/persistent) x b layouts, and mma.sync
#      configurations (kernels/gemm_mma_tuned.cu) vs cuBLAS, to pick defaults for the next round
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD}
export HOOKMAGIC_KERNEL_CACHE=/tmp/hookmagic-kernel-cache-wgmma   # shared by all the processes below
fail=0
t0=$(date +%s)
step() { echo "--- $1 ($(( $(date +%s) - t0 ))s)"; }

step "versions"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import cuda.core, cuda.bindings, torch; print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "from hookmagic.kernels.build import nvrtc_version; print('nvrtc', nvrtc_version())"
  git log --oneline -1; } 2>&1 | tee "$OUT/versions.txt"

step "kernels check sm_90a (NVRTC)"
timeout 45 python3 -m hookmagic.cli kernels check --arch sm_90a >"$OUT/check.txt" 2>&1 || { echo "FAILED: kernels check"; fail=1; }
grep -E "gemm_mma_(f16|bf16)|gemm_wgmma|error" "$OUT/check.txt"; tail -1 "$OUT/check.txt"

step "probe (single launches, structured inputs)"
probe_ok=1; probe_rc=0
timeout 30 python3 benchmarks/gpu/wgmma_probe.py >"$OUT/probe.txt" 2>&1 || { probe_rc=$?; echo "FAILED: probe rc=$probe_rc (124 = timeout: a hang)"; fail=1; probe_ok=0; }
cat "$OUT/probe.txt" | head -80

step "correctness vs torch (tests/gpu/test_wgmma_gpu.py)"
if [ $probe_rc = 124 ]; then
  echo "skipped: the probe hung"
elif [ $probe_ok = 1 ]; then
  timeout 40 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" -x --maxfail=5 tests/gpu/test_wgmma_gpu.py \
    --junitxml="$OUT/pytest_wgmma.xml" >"$OUT/pytest_wgmma.txt" 2>&1 || { echo "FAILED: pytest"; fail=1; }
else   # the probe failed: every test, but stop early, and show the first failures in full
  timeout 40 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" --maxfail=6 -k "128-256-64 or 17-255-33 or epilogues" \
    tests/gpu/test_wgmma_gpu.py >"$OUT/pytest_wgmma.txt" 2>&1 || { echo "FAILED: pytest"; fail=1; }
fi
grep -E "passed|failed|skipped|rror|wrong|C\[|blocks|mod 64" "$OUT/pytest_wgmma.txt" | head -60

step "benchmark: wgmma vs mma vs cuBLAS, 4096^3 and 8192^3 (3 fresh processes)"
cases="f16:mma,bf16:mma,f16:wgmma,bf16:wgmma"
[ $probe_ok = 1 ] || cases="f16:mma,bf16:mma"
timeout 55 python3 benchmarks/bench_kernels.py --processes 3 --sections gemm --shapes 4096,8192 --cases "$cases" \
  --out "$OUT/bench" >"$OUT/bench.txt" 2>&1 || { echo "FAILED: benchmark"; fail=1; }
grep -E "^\| |FAILED|Error" "$OUT/bench.txt" | tail -20

step "candidates: wgmma schedules x b layouts, mma.sync configurations (kernels/gemm_mma_tuned.cu) vs cuBLAS, FP16, one process"
wg=""; [ $probe_ok = 1 ] || wg="--no-wgmma"
timeout 35 python3 benchmarks/gpu/gemm_candidates.py --shapes 4096,8192 --dtypes f16 $wg >"$OUT/candidates.txt" 2>&1 || { echo "FAILED: candidates"; fail=1; }
cat "$OUT/candidates.txt" | tail -30

step "done, fail=$fail"
exit $fail
