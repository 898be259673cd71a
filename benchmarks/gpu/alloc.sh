#!/usr/bin/env bash
# Issue 18 item 4 on the GPU machine: the PyTorch allocator model's peak AND device-allocation
# sequence (count, bytes, exact sizes) against three workloads, default and
# expandable_segments:True, each setting in a fresh process; every recording is kept (.hmtrace
# and the snapshot .json.gz, innermost frames only) so the model and the conversion can be
# checked offline.
# Run from the repo root after `source benchmarks/gpu_setup.sh` (benchmarks/gpu/run_all.sh does
# both):  OUT=/tmp/out bash benchmarks/gpu/alloc.sh
# About 40 s on an H100 (36 s on 2026-11-26); give it 60 s. ALLOC_SECOND_RUN=1 adds a second
# full run (fresh processes, another ~36 s), to show the figures hold on a re-run.
set -euo pipefail
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
echo "alloc: machine $(date -u +%Y-%m-%dT%H:%M:%SZ)"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  date -u +%Y-%m-%dT%H:%M:%SZ
} 2>&1 | tee "$OUT/machine_alloc.txt"
t0=$(date +%s)
echo "alloc: run 1: python3 benchmarks/memory_model_fidelity.py $OUT/memory_fidelity"
python3 benchmarks/memory_model_fidelity.py "$OUT/memory_fidelity"
took=$(( $(date +%s) - t0 ))
echo "alloc: run 1 took ${took}s"
# the same tables recomputed offline from the saved snapshots (must equal the live ones)
python3 - "$OUT/memory_fidelity" <<'PY'
import gzip, json, sys
from pathlib import Path
import pandas as pd
from hookmagic.memory.fidelity import config_of, model_fidelity
from hookmagic.memory.torch_history import events_from_snapshot
out = Path(sys.argv[1])
live = pd.read_csv(out / "fidelity.csv").set_index(["workload", "setting"])
bad = 0
for p in sorted((out / "recordings").glob("*.snapshot.json.gz")):
    doc = json.load(gzip.open(p, "rt"))
    meta = doc.pop("meta")
    ev, _ = events_from_snapshot(doc)
    f = model_fidelity(ev, config_of(meta["setting"]), capacity=meta["device_total_memory"],
                       measured_max_reserved=meta["measured_max_reserved"])
    row = live.loc[(meta["workload"].split()[0], f.setting)]
    same = (f.model_device_allocs == row.model_device_allocs
            and f.measured_device_allocs == row.measured_device_allocs
            and abs(f.device_bytes_err_pct - row.device_bytes_err_pct) < 1e-6
            and abs(f.error_pct - row.error_pct) < 1e-6)
    bad += not same
    print(f"alloc: offline {p.name}: peak {f.error_pct:+.2f}%, allocs {f.measured_device_allocs}"
          f"/{f.model_device_allocs}, bytes {f.device_bytes_err_pct:+.1f}%, "
          f"{'same as live' if same else 'DIFFERS from live'}")
sys.exit(1 if bad else 0)
PY
if [ "${ALLOC_SECOND_RUN:-0}" = 1 ]; then
  echo "alloc: run 2 (fresh processes)"
  python3 benchmarks/memory_model_fidelity.py "$OUT/memory_fidelity_run2" | tail -12
fi
echo "alloc: done $(date -u +%H:%M:%S)"
