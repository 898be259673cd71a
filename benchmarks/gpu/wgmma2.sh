#!/usr/bin/env bash
# Round 2 of the Hopper GEMM on the GPU machine (`bash benchmarks/gpu/run_all.sh wgmma2:120`, $OUT set):
# the persistent schedule now stages its epilogue through its own shared-memory tile (3-stage ring),
# persistent4 keeps 4 stages with per-warpgroup epilogues, and the host path is shorter. Steps (each timed and under its own timeout; ~110 s expected):
#   1. probe of the tiles, persistent and persistent4 schedules (structured inputs, one process each)
#   2. tests/gpu/test_wgmma_gpu.py without cluster2 (cluster2 was correct but slow in round 1), and
#      tests/gpu/test_kernels_gpu.py + test_infer_gpu.py -k conv (mma.sync helpers now shared in tc_common.cuh)
#   3. where the time goes at 4096^3: single vs back-to-back launches vs host time, cProfile
#   4. bench: wgmma (tiles), @persistent, @persistent4 vs cuBLAS, 4096^3 and 8192^3, FP16/BF16, 3 fresh processes
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD}
export HOOKMAGIC_KERNEL_CACHE=/tmp/hookmagic-kernel-cache-wgmma2
fail=0
t0=$(date +%s)
step() { echo "--- $1 ($(( $(date +%s) - t0 ))s)"; }

step "versions"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  git log --oneline -1 2>/dev/null; } 2>&1 | tee "$OUT/versions.txt"

step "probe: tiles, persistent, persistent4"
kexpr="wgmma and not cluster2"; cases=""
for s in tiles persistent persistent4; do
  if timeout 25 python3 benchmarks/gpu/wgmma_probe.py --schedule $s >"$OUT/probe_$s.txt" 2>&1; then
    echo "probe $s: ok"
    if [ $s = tiles ]; then cases="$cases,f16:wgmma,bf16:wgmma"; else cases="$cases,f16:wgmma@$s,bf16:wgmma@$s"; fi
  else
    echo "FAILED: probe $s"; fail=1; kexpr="$kexpr and not $s"
    grep -A10 -m2 WRONG "$OUT/probe_$s.txt"; tail -3 "$OUT/probe_$s.txt"
  fi
done

step "correctness: wgmma (not cluster2), and the mma.sync GEMMs and conv after their shared-helper refactor"
echo "pytest test_wgmma_gpu.py -k \"$kexpr\"; test_kernels_gpu.py; test_infer_gpu.py -k conv"
timeout 30 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" --maxfail=8 -k "$kexpr" \
  tests/gpu/test_wgmma_gpu.py --junitxml="$OUT/pytest_wgmma.xml" >"$OUT/pytest_wgmma.txt" 2>&1 || { echo "FAILED: pytest wgmma"; fail=1; }
grep -E "passed|failed|rror|wrong|C\[|blocks" "$OUT/pytest_wgmma.txt" | head -30
timeout 50 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" --maxfail=8 tests/gpu/test_kernels_gpu.py \
  tests/gpu/test_infer_gpu.py -k "not test_infer_gpu or conv" --junitxml="$OUT/pytest_mma_conv.xml" >"$OUT/pytest_mma_conv.txt" 2>&1 || { echo "FAILED: pytest mma/conv"; fail=1; }
grep -E "passed|failed|rror" "$OUT/pytest_mma_conv.txt" | head -20

step "where the time goes at 4096^3 (one process)"
timeout 25 python3 benchmarks/gpu/wgmma_overhead.py --size 4096 >"$OUT/overhead.txt" 2>&1 || { echo "FAILED: overhead"; fail=1; }
head -60 "$OUT/overhead.txt"

step "bench: wgmma tiles / persistent / persistent4 vs cuBLAS, 4096^3 and 8192^3 (3 fresh processes)"
[ -n "$cases" ] && timeout 45 python3 benchmarks/bench_kernels.py --processes 3 --sections gemm --shapes 4096,8192 \
  --cases "${cases#,}" \
  --out "$OUT/bench" >"$OUT/bench.txt" 2>&1 || { echo "FAILED: benchmark"; fail=1; }
awk '/^\| shape/{buf=""} /^\| /{buf=buf $0 "\n"} END{printf "%s", buf}' "$OUT/bench.txt"
grep -E "FAILED|Error" "$OUT/bench.txt" | head -5

step "done, fail=$fail"
exit $fail
