#!/usr/bin/env bash
# Correctness after folding repeated kernel code (no timing): every wgmma schedule (tiles,
# persistent, persistent4, cluster2), every row-wise kernel design, and the
# three preprocess kernels (pixel = default, w1, w4); then the memory/infer benchmark code in one
# process (its own correctness column). ~150 s on an H100.
#   bash benchmarks/gpu/run_all.sh fold:200
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
export HOOKMAGIC_KERNEL_CACHE=$(mktemp -d)
fail=0
t() { echo "--- $1"; shift; timeout 60 python3 -m pytest -q --no-header -p no:cacheprovider -o addopts="" "$@" 2>&1 | tail -4 | tee -a "$OUT/pytest.txt"; [ "${PIPESTATUS[0]}" = 0 ] || fail=1; }
t "wgmma, all schedules" tests/gpu/test_wgmma_gpu.py
t "row-wise kernels" tests/gpu/test_rowwise_gpu.py
for impl in pixel w1 w4; do
  HOOKMAGIC_PREPROCESS=$impl t "preprocess, rows, transposes (HOOKMAGIC_PREPROCESS=$impl)" tests/gpu/test_infer_gpu.py -k "preprocess or row_ or transpose"
done
echo "--- benchmark code of the memory and infer sections, one process (does it run, are its checks ok)"
timeout 110 python3 benchmarks/bench_kernels.py --sections memory,infer --processes 1 --out "$OUT/bench" >"$OUT/bench.txt" 2>&1 \
  || { echo "FAILED: bench"; fail=1; }
grep -cE "\| (yes|no) \|$" "$OUT/bench.txt" | sed 's/^/table rows: /'; grep -E "\| no \|$|Error|Traceback" "$OUT/bench.txt" | head -10
echo "fold: fail=$fail"
exit $fail
