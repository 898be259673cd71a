#!/usr/bin/env bash
# Issue 14 on a 2-GPU machine (nvidia-h200-x2 / nvidia-h100-x2): a real torchrun DDP job
# (2 ranks, NCCL all-reduce, a transformer training step) captured per rank by the
# HOOKMAGIC_CAPTURE_* variables alone (benchmarks/multirank_ddp.py only imports hookmagic).
# Runs, each a fresh `torchrun --standalone --nproc-per-node 2`:
#   ddp_baseline      no straggler
#   ddp_slow1_20ms    rank 1 sleeps 20 ms before each forward (the deliberate straggler)
#   ddp_slow0_50ms    rank 0 sleeps 50 ms
# Each run leaves $OUT/<run>/rank=0, rank=1 (trace folders) and truth_rank=<N>.json (the sleeps
# really taken). Then, if `ray` imports here, a Ray run (2 GPU actors) into $OUT/ray_actors.
# (run_all.sh bundles $OUT as multirank.tgz.) Takes about 60-100 s; limit 150 s.
# Dry run without GPUs (a stub nvidia-smi on PATH): MULTIRANK_CPU=1 runs the same jobs on gloo/CPU.
# Run: source benchmarks/gpu_setup.sh && OUT=/tmp/out bash benchmarks/gpu/multirank.sh
set -euo pipefail
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD}
ngpu=$(nvidia-smi -L | wc -l)
echo "multirank: $ngpu GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
if [ "$ngpu" -lt 2 ]; then echo "multirank: FAILED: needs 2 GPUs, found $ngpu" >&2; exit 1; fi
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1 || true
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee "$OUT/versions.txt"

run() {  # name, then multirank_ddp.py arguments
  local name=$1; shift
  local dir="$OUT/runs/$name"
  echo "multirank: $name $* ($(date -u +%H:%M:%S))"
  local t0=$(date +%s)
  mkdir -p "$OUT/runs"
  if ! HOOKMAGIC_CAPTURE_DIR="$dir" HOOKMAGIC_CAPTURE_STEPS=6:10 HOOKMAGIC_CAPTURE_OPTIONS="nvml=1" \
      NCCL_DEBUG=WARN timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
      benchmarks/multirank_ddp.py --steps 12 --out "$dir" ${MULTIRANK_CPU:+--cpu} "$@" \
      >"$OUT/runs/$name.log" 2>&1; then
    tail -30 "$OUT/runs/$name.log"
    echo "multirank: FAILED: $name: torchrun failed or ran past 60 s (log above)" >&2
    exit 1
  fi
  grep -E "^rank [0-9]/" "$OUT/runs/$name.log" || true
  for r in 0 1; do
    [ -f "$dir/rank=$r/meta.json" ] || { echo "multirank: FAILED: $name has no rank=$r trace" >&2; exit 1; }
  done
  python3 - "$dir" <<'PY'
import json, sys, pyarrow.parquet as pq
d = sys.argv[1]
for r in (0, 1):
    m = json.load(open(f"{d}/rank={r}/meta.json"))
    k = pq.read_table(f"{d}/rank={r}/kernels.parquet", columns=["name", "duration_ns"]).to_pandas()
    nccl = k[k["name"].str.startswith("nccl")]
    print(f"  rank {r}: status {m['meta']['status']}, {len(k)} kernels, {len(nccl)} NCCL "
          f"({nccl['duration_ns'].sum() / 1e6:.2f} ms), steps {[s[0] for s in m['meta'].get('steps', [])]}, "
          f"gpu {m['meta']['rank'].get('gpu_uuid', '')[:12]}, reason {m['meta'].get('reason', '')!r}")
    if m["meta"]["status"] == "unavailable" and not __import__("os").environ.get("MULTIRANK_CPU"):
        sys.exit(f"multirank: FAILED: rank {r} captured nothing: {m['meta'].get('reason')}")
PY
  echo "multirank: $name done in $(( $(date +%s) - t0 )) s"
}

run ddp_baseline
run ddp_slow1_20ms --slow-rank 1 --slow-ms 20
run ddp_slow0_50ms --slow-rank 0 --slow-ms 50

if python3 -c "import ray" 2>/dev/null; then
  echo "multirank: ray run ($(date -u +%H:%M:%S))"
  timeout 40 python3 benchmarks/multirank_ray.py --out "$OUT/runs/ray_actors" 2>&1 | tail -20 ||
    echo "multirank: ray run FAILED (rc=$?)"
else
  echo "multirank: ray is not installed here: the Ray run is skipped"
fi
du -sh "$OUT/runs"
echo "multirank: OK"
