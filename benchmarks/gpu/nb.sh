#!/usr/bin/env bash
# Recordings for notebooks/05_kernels.ipynb's bandwidth section (issue 12, "Seen through
# hookmagic"): the memory-bound kernels against a device-to-device copy and torch eager, and the
# fused frame preprocessing against the torch chain (when hookmagic.kernels.preprocess exists,
# i.e. with the `infer` branch merged). Run by benchmarks/gpu/run_all.sh after gpu_setup.sh with
# $OUT set:   bash benchmarks/gpu/run_all.sh nb:90
# Writes $OUT/recordings/{kernel_bandwidth,preprocess_fused,preprocess_torch}.hmtrace (tens of KB);
# copy them to notebooks/recordings/ and run `python benchmarks/make_notebook_05.py`. ≤ 60 s.
set -u
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT/recordings"
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD}
export HOOKMAGIC_KERNEL_CACHE=${HOOKMAGIC_KERNEL_CACHE:-/tmp/hookmagic-kernel-cache}
echo "--- nb: versions $(date -u +%H:%M:%S)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$OUT/machine.txt"
python3 -c "import torch; print('torch', torch.__version__)" 2>&1 | tee -a "$OUT/machine.txt"
echo "--- nb: bandwidth recordings"
timeout 60 python3 benchmarks/record_kernels.py --bandwidth --out "$OUT/recordings" 2>&1 | tee "$OUT/record_bandwidth.txt"
rc=${PIPESTATUS[0]}
ls -la "$OUT/recordings"
[ "$rc" = 0 ] && [ -f "$OUT/recordings/kernel_bandwidth.hmtrace" ] || { echo "FAILED: bandwidth recording (rc=$rc)"; exit 1; }
echo "--- nb: done $(date -u +%H:%M:%S)"
