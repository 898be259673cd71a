#!/usr/bin/env bash
# Nsight Compute's DRAM bytes written on the 14 launches of tests/gpu/test_counters_gpu.py under
# its cache controls and replay modes, with a one-pass metric set (no memory save/restore between
# passes is needed, so what differs is ncu's cache flush alone). One CSV per variant in $1:
#   ncu_<cache-control>_<replay-mode>.csv
# Run on the GPU machine after `source benchmarks/gpu_setup.sh`:
#   bash benchmarks/counters_ncu_cache.sh "$OUT" [all:kernel none:kernel all:application]
set -u
out=${1:?output folder}
shift
variants=${*:-all:kernel none:kernel all:application}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
metrics=dram__bytes_write.sum,dram__bytes_read.sum,gpu__time_duration.sum
for v in $variants; do
  cache=${v%%:*}
  replay=${v##*:}
  "$NCU" --profile-from-start off --metrics "$metrics" --csv --print-units base \
    --clock-control none --cache-control "$cache" --replay-mode "$replay" \
    python3 tests/gpu/test_counters_gpu.py ncu - >"$out/ncu_${cache}_${replay}.csv" 2>"$out/ncu_${cache}_${replay}.err"
  echo "ncu --cache-control $cache --replay-mode $replay: rc $?"
done
