#!/usr/bin/env bash
# Correctness after folding repeated kernel code (no timing): every wgmma schedule (tiles,
# persistent, persistent4, cluster2), every row-wise kernel design, and the
# three preprocess kernels (pixel = default, w1, w4). ~60 s on an H100.
#   bash benchmarks/gpu/run_all.sh fold:120
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
echo "fold: fail=$fail"
exit $fail
