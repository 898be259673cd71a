#!/usr/bin/env bash
# `hookmagic kernels check` on the GPU machine's own NVRTC, from an empty cubin cache (the H100 round
# of 2026-11-26 03:51 got an empty table there). ~20 s.   bash benchmarks/gpu/run_all.sh kcheck:40
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
export HOOKMAGIC_KERNEL_CACHE=$(mktemp -d)
python3 -c "import cuda.core, sys; print('cuda.core', getattr(cuda.core, '__version__', '?'))" 2>&1
python3 -m hookmagic.cli kernels check --arch sm_90 --arch sm_90a >"$OUT/check.txt" 2>&1
rc=$?
head -3 "$OUT/check.txt"; tail -3 "$OUT/check.txt"; echo "kernels check rc=$rc, $(wc -l < "$OUT/check.txt") lines"
exit $rc
