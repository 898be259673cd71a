#!/usr/bin/env bash
# hookmagic.kernels on the GPU machine (run by benchmarks/gpu/run_all.sh after gpu_setup.sh,
# with $OUT set): NVRTC checks, correctness against torch, the GEMM benchmark vs cuBLAS over
# fresh processes, and the recording for notebooks/05_kernels.ipynb. At most ~200 s (step timeouts).
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD}
export HOOKMAGIC_KERNEL_CACHE=/tmp/hookmagic-kernel-cache   # shared by all the processes below
fail=0
t0=$(date +%s)
step() { echo "--- $1 ($(( $(date +%s) - t0 ))s)"; }

step "versions"
python3 -c "import cuda.core, cuda.bindings, torch; print('cuda.core', cuda.core.__version__, 'cuda.bindings', cuda.bindings.__version__, 'torch', torch.__version__)" 2>&1 | tee "$OUT/versions.txt"
python3 -c "from hookmagic.kernels.build import nvrtc_version, include_paths; print('nvrtc', nvrtc_version(), include_paths())" 2>&1 | tee -a "$OUT/versions.txt"

step "kernels check (NVRTC, sm_90; fills the cubin cache)"
timeout 40 python3 -m hookmagic.cli kernels check --arch sm_90 >"$OUT/check.txt" 2>&1 || { echo "FAILED: kernels check"; fail=1; }
tail -30 "$OUT/check.txt"

step "correctness vs torch (tests/gpu/test_kernels_gpu.py, test_rowwise_gpu.py)"
timeout 60 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" tests/gpu/test_kernels_gpu.py tests/gpu/test_rowwise_gpu.py \
  --junitxml="$OUT/pytest_kernels.xml" >"$OUT/pytest_kernels.txt" 2>&1 || { echo "FAILED: pytest"; fail=1; }
tail -40 "$OUT/pytest_kernels.txt"

step "recording for notebooks/05_kernels.ipynb"
timeout 35 python3 benchmarks/record_kernels.py --out "$OUT/recordings" >"$OUT/record.txt" 2>&1 || { echo "FAILED: recording"; fail=1; }
tail -5 "$OUT/record.txt"

step "benchmark vs cuBLAS (3 fresh processes; the table is rewritten after each)"
timeout 80 python3 benchmarks/bench_kernels.py --processes 3 --out "$OUT/bench" >"$OUT/bench.txt" 2>&1 || { echo "FAILED: benchmark"; fail=1; }
tail -45 "$OUT/bench.txt"

step "done, fail=$fail"
exit $fail
