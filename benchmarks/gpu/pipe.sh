#!/usr/bin/env bash
# hookmagic.pipeline on the GPU (issue 13, the two open points): NVDEC decoding through
# PyNvVideoCodec, and what instrumentation costs (instrument on vs off, interleaved, fresh
# processes). Run from the repo root after `source benchmarks/gpu_setup.sh` (run_all.sh does it):
#   bash benchmarks/gpu/run_all.sh pipe:180
# Needs in .whl/: pynvvideocodec-2.2.4-cp312-cp312-manylinux_2_28_x86_64.whl (NVDEC; gpu_setup
# installs every wheel there; this script installs it itself if that did not). PyAV (av) is
# optional: with it, an x264 clip is also checked against CPU decoding and NVDEC's speed is
# measured. Writes under $OUT: nvdec_tests.txt, nvdec_env.txt, pipeline_instrument.{md,csv},
# pipeline_instrument_runs.json, nvdec_speed.md (with PyAV). Budget: <= 180 s on one H100.
# To check the script on a CPU: PIPE_CONFIGS=noop,light bash benchmarks/gpu/pipe.sh
set -euo pipefail
OUT=${OUT:-/tmp/hookmagic-out}
mkdir -p "$OUT"
start=$SECONDS
say() { echo "pipe: $* ($((SECONDS - start)) s, $(date -u +%H:%M:%S))"; }

# -- NVDEC: the wheel, the driver's video libraries, the tests ---------------------------------
if ! python3 -c "import PyNvVideoCodec" >/dev/null 2>&1; then
  if ls .whl/pynvvideocodec-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --find-links .whl \
      --target "${HOOKMAGIC_GPU_STATE:-$HOME/.cache/hookmagic-gpu}/site" pynvvideocodec ||
      say "pip install of pynvvideocodec from .whl failed"
  else
    say "no .whl/pynvvideocodec-*.whl: NVDEC will be reported unavailable"
  fi
fi
{
  echo "NVIDIA_DRIVER_CAPABILITIES=${NVIDIA_DRIVER_CAPABILITIES:-<unset>}"
  ldconfig -p 2>/dev/null | grep -E "libnvcuvid|libnvidia-encode" || echo "ldconfig: no libnvcuvid / libnvidia-encode"
  python3 - <<'PY' 2>&1
try:
    import PyNvVideoCodec as nvc
    print("PyNvVideoCodec", nvc.__version__, "imports")
    fmt = nvc.cudaVideoChromaFormat
    c420 = next((getattr(fmt, m) for m in dir(fmt) if "420" in m), None)
    print("H.264 decoder caps:", nvc.GetDecoderCaps(gpuid=0, codec=nvc.cudaVideoCodec.H264,
                                                  chromaformat=c420, bitdepth=8))
except Exception as e:
    print("PyNvVideoCodec import or caps query failed:", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
try:
    import av
    print("PyAV", av.__version__)
except ImportError:
    print("PyAV absent (the x264 cross-check and the NVDEC speed table are skipped)")
PY
} >"$OUT/nvdec_env.txt" 2>&1 || true
cat "$OUT/nvdec_env.txt"
say "NVDEC tests and the pipeline's GPU tests (CUDA-event times, ranges under a capture)"
timeout 75 python3 -m pytest -q -p no:cacheprovider -o addopts="" -rs -s \
  tests/gpu/test_pipeline_nvdec.py tests/gpu/test_pipeline_gpu.py >"$OUT/nvdec_tests.txt" 2>&1 || true
grep -E "NVDEC RGB|passed|failed|SKIPPED|Error|error" "$OUT/nvdec_tests.txt" | tail -12 || true

# -- instrumentation on vs off --------------------------------------------------------------
# the third process starts only before +125 s of this script (each takes ~40 s on an H100)
budget=$((125 - (SECONDS - start)))
say "instrumentation on vs off (third process only if started before +${budget} s)"
python3 benchmarks/pipeline_instrument.py --config "${PIPE_CONFIGS:-gpu_noop,resnet50_fp16}" --processes 3 \
  --budget-s $((budget > 1 ? budget : 1)) --out "$OUT"

# -- NVDEC vs PyAV decode speed (only with PyAV: it encodes the 1080p x264 clip) --------------
if [ $((SECONDS - start)) -lt 135 ] && python3 -c "import av, PyNvVideoCodec" >/dev/null 2>&1; then
  say "NVDEC speed"
  timeout 40 python3 benchmarks/pipeline_nvdec_speed.py "$OUT" || say "NVDEC speed failed (rc $?)"
fi

say "done"

