#!/usr/bin/env bash
# Prepares the lent GPU machine: installs the carried pure-Python wheels (.whl/) and builds the
# native extension in place for that machine's Python. Source it first in every GPU command:
#   source benchmarks/gpu_setup.sh && python3 -m pytest tests/gpu
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d -t hookmagic-out.XXXXXX)}
mkdir -p "$OUT"
# wheels and the native build go to a private folder (mode 700), never a fixed name in /tmp
HOOKMAGIC_GPU_STATE=${HOOKMAGIC_GPU_STATE:-${XDG_CACHE_HOME:-${HOME:-$PWD}/.cache}/hookmagic-gpu}
mkdir -p -m 700 "$HOOKMAGIC_GPU_STATE"
# HOOKMAGIC_WHEELS names another carried wheel folder (e.g. .whl-nvdec: no duckdb, PyNvVideoCodec;
# .whl-cuda12: no duckdb, nvidia-cuda-cupti-cu12 and nvidia-cuda-runtime-cu12 for tests/gpu/test_cuda12_gpu.py)
WHEELS=${HOOKMAGIC_WHEELS:-.whl}
if [ -d "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$HOOKMAGIC_GPU_STATE/site" "$WHEELS"/*.whl >"$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; return 1 2>/dev/null || exit 1; }
fi
export PYTHONPATH=$HOOKMAGIC_GPU_STATE/site:$PWD
PYBIND11_DIR=$(python3 -c "import pybind11; print(pybind11.get_cmake_dir())")
CUDA_INC=""
for d in /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include; do
  [ -f "$d/cupti.h" ] && [ -f "$d/cuda.h" ] && CUDA_INC="$d" && break
done
cmake -S native -B "$HOOKMAGIC_GPU_STATE/build" -DSKBUILD_STATE=editable -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$(command -v python3)" -Dpybind11_DIR="$PYBIND11_DIR" \
  ${CUDA_INC:+-DHOOKMAGIC_CUDA_INCLUDE=$CUDA_INC} >>"$OUT/setup.log" 2>&1 &&
  cmake --build "$HOOKMAGIC_GPU_STATE/build" -j 16 >>"$OUT/setup.log" 2>&1 ||
  { tail -40 "$OUT/setup.log"; return 1 2>/dev/null || exit 1; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import cupy; print('cupy', cupy.__version__)" 2>/dev/null
} | tee "$OUT/machine.txt"
