#!/usr/bin/env bash
# The native session on the GPU machine (issues 10, 16, 17), within 150 s:
#   bash benchmarks/gpu/run_all.sh native:150     (gpu_setup.sh builds the extension first)
# 1. GPU tests after the native split: tests/gpu (capture vs torch.profiler, stacks, threads,
#    graphs, memory; callback syncs vs CUPTI's SYNCHRONIZATION records in one capture;
#    --no-stacks reaching the allocator recorders; backward kernels of a TransformerEncoderLayer
#    step attributed to the caller of backward(); the summary's note after torch.profiler)
#    and the decoder/options tests.
# 2. The cost of synchronisation records: overhead_probe.py on the 20,000-tiny-kernel loop,
#    "+callbacks +stacks" (syncs from callbacks, the new default) against the same with CUPTI's
#    SYNCHRONIZATION records, and kernel records alone, each in 3 fresh processes: min–max.
# Writes under $OUT: pytest_gpu.txt, sync_callbacks_vs_activity.json,
# backward_attribution.json, probe_*.json, summary.md. Exits non-zero if a test failed.
set -uo pipefail
OUT=${OUT:-$(mktemp -d -t hookmagic-native.XXXXXX)}
mkdir -p "$OUT"
t0=$(date +%s)
step() { echo "[native +$(( $(date +%s) - t0 ))s] $*"; }
ls hookmagic/_native*.so >/dev/null 2>&1 ||
  { echo "native: the extension is not built (source benchmarks/gpu_setup.sh first)"; exit 1; }

step "GPU tests: native parts"
OUT="$OUT" timeout 50 python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" \
  tests/gpu/test_native_gpu.py tests/test_cupti_decode.py tests/test_capture_options.py \
  > "$OUT/pytest_gpu.txt" 2>&1
test_rc=$?
tail -12 "$OUT/pytest_gpu.txt"
step "GPU tests: capture after the split"
timeout 45 python3 -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/gpu/test_capture_gpu.py \
  >> "$OUT/pytest_gpu.txt" 2>&1
rc=$?
[ "$test_rc" = 0 ] && test_rc=$rc
tail -12 "$OUT/pytest_gpu.txt"
step "pytest rc=$test_rc (124: ran out of its time)"

export HOOKMAGIC_PROBE_REPEATS=5
configs=("kernel activity only" "+callbacks +stacks" "+callbacks +stacks, sync activity records")
for i in 1 2 3; do
  if [ $(( $(date +%s) - t0 )) -gt 118 ]; then step "out of time: probe round $i skipped"; break; fi
  step "overhead probe, round $i (fresh processes)"
  timeout 30 python3 benchmarks/overhead_probe.py --workload tiny_kernels_20000 \
    --out "$OUT/probe_$i" --json "$OUT/probe_tiny_$i.json" --only "${configs[@]}" 2>&1 | tail -4
done

step "summary"
python3 - "$OUT" <<'PY'
import glob, json, os, subprocess, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "probe_tiny_*.json"))):
    for config, r in json.load(open(path))["rows"].items():
        rows.setdefault(config, []).append(r)
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except OSError:
    gpu = "unknown (no nvidia-smi)"
import datetime
gpu += f"; {datetime.date.today()}"
lines = ["# Native session on the GPU", "", f"GPU, driver: {gpu}", "",
         "overhead_probe.py --workload tiny_kernels_20000 (20,000 x.add_(1) + one synchronize), "
         "5 interleaved pairs per process, min–max over fresh processes:", "",
         "| configuration | processes | x (min–max) | start ms (min–max) | finish ms (min–max) |",
         "|---|---|---|---|---|"]
for config, rs in rows.items():
    x = [r["x"] for r in rs]; s = [r["start"] * 1e3 for r in rs]; f = [r["finish"] * 1e3 for r in rs]
    lines.append(f"| {config} | {len(rs)} | {min(x):.3f}–{max(x):.3f} | {min(s):.2f}–{max(s):.2f} "
                 f"| {min(f):.2f}–{max(f):.2f} |")
for name, title in (("sync_callbacks_vs_activity.json",
                     "Callback syncs vs SYNCHRONIZATION records (one capture)"),
                    ("backward_attribution.json", "TransformerEncoderLayer fp16 step, attribution")):
    path = os.path.join(out, name)
    if os.path.exists(path):
        lines += ["", title + ":", "", "```", open(path).read(), "```"]
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
step "done"
exit $test_rc
