#!/usr/bin/env bash
# gemm(variant="wgmma") (Hopper wgmma + TMA, kernels/gemm_wgmma.cu) on the GPU machine: run by
# benchmarks/gpu/run_all.sh after gpu_setup.sh with $OUT set (`bash benchmarks/gpu/run_all.sh wgmma:150`).
# Steps (each timed, each under its own timeout; at most ~145 s in all):
#   1. NVRTC check for sm_90a (registers, spills) - fills the cubin cache
#   2. probe: single launches with structured inputs that show where a wrong element came from
#   3. correctness tests (tests/gpu/test_wgmma_gpu.py) against torch, odd shapes included
#   4. candidates, one process: the wgmma schedules x b layouts vs cuBLAS and mma
#   5. wgmma (default schedule) vs mma vs cuBLAS at 4096^3 and 8192^3, FP16 and BF16, 3 fresh processes
#      (without the wgmma cases when the probe found it wrong, so the mma baseline still comes back)
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
timeout 70 python3 benchmarks/gpu/wgmma_probe.py --good-file "$OUT/good_schedules" >"$OUT/probe.txt" 2>&1 || { echo "FAILED: probe (some schedule wrong or hung)"; fail=1; }
grep -E "^===|WRONG|FAILED|Error|error|compiled|passed" "$OUT/probe.txt" | head -40
grep -A12 -m3 "WRONG" "$OUT/probe.txt" | head -45
good=$(cat "$OUT/good_schedules" 2>/dev/null); echo "good schedules: ${good:-none}"

step "correctness vs torch (tests/gpu/test_wgmma_gpu.py)"
# only the schedules the probe passed (a hanging one would eat the step's time)
desel=""
for s in tiles persistent cluster2; do case ",$good," in *",$s,"*) ;; *) desel="$desel and not $s";; esac; done
kexpr="wgmma${desel}"
first=${good%%,*}   # the tests without a schedule parameter run the first good one
echo "pytest -k \"$kexpr\" (HOOKMAGIC_WGMMA_SCHEDULE=${first:-none})"
[ -n "$good" ] && HOOKMAGIC_WGMMA_SCHEDULE=$first timeout 45 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" --maxfail=8 -k "$kexpr" tests/gpu/test_wgmma_gpu.py \
  --junitxml="$OUT/pytest_wgmma.xml" >"$OUT/pytest_wgmma.txt" 2>&1 || { echo "FAILED: pytest"; fail=1; }
grep -E "passed|failed|skipped|rror|wrong|C\[|blocks|mod 64" "$OUT/pytest_wgmma.txt" | head -60

step "candidates: wgmma schedules x b layouts vs cuBLAS and mma, FP16, one process"
timeout 35 python3 benchmarks/gpu/gemm_candidates.py --shapes 4096,8192 --dtypes f16 --schedules "${good}" >"$OUT/candidates.txt" 2>&1 || { echo "FAILED: candidates"; fail=1; }
cat "$OUT/candidates.txt" | tail -30

step "benchmark: wgmma vs mma vs cuBLAS, 4096^3 and 8192^3 (3 fresh processes)"
cases="f16:mma,bf16:mma,f16:wgmma,bf16:wgmma"
case ",$good," in *",tiles,"*) ;; *) cases="f16:mma,bf16:mma";; esac   # the bench uses the default schedule
timeout 55 python3 benchmarks/bench_kernels.py --processes 3 --sections gemm --shapes 4096,8192 --cases "$cases" \
  --out "$OUT/bench" >"$OUT/bench.txt" 2>&1 || { echo "FAILED: benchmark"; fail=1; }
grep -E "^\| |FAILED|Error" "$OUT/bench.txt" | tail -20

step "done, fail=$fail"
exit $fail
