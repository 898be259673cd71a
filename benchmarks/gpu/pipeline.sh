#!/usr/bin/env bash
# Frame pipelines on the GPU (issue 13): decode → preprocess → infer → postprocess with
# hookmagic.pipeline, three fresh processes, each run saved as a recording (.hmpipe) for
# notebooks/06_pipeline.ipynb, and the min–max table $OUT/pipeline.md.
# Run from the repo root after `source benchmarks/gpu_setup.sh` (run_all.sh does it):
#   bash benchmarks/gpu/run_all.sh pipeline:240
# Budget: about 2–3 minutes on one H100 (1080p clip encoded once, ~20 s per process).
# PyAV (`av`) must come as a wheel in .whl/ for real decoding; without it frames generated
# in-process stand in for decoding and the recordings say so.
set -euo pipefail
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT/recordings"
python3 -c "import av; print('pipeline: PyAV', av.__version__)" 2>/dev/null ||
  echo "pipeline: PyAV absent: frames generated in-process stand in for decoding"
for p in 0 1 2; do
  echo "pipeline: process $p $(date -u +%H:%M:%S)"
  python3 benchmarks/pipeline_gpu.py "$OUT/recordings" --process "$p" --frames 180
done
python3 benchmarks/pipeline_gpu.py "$OUT/recordings" --summarize
cp "$OUT/recordings/pipeline.md" "$OUT/pipeline.md"
echo "pipeline: done $(date -u +%H:%M:%S)"
