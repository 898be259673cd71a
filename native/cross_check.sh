#!/usr/bin/env bash
# The native sources compile for another architecture (default aarch64: Jetson), with zig's
# clang as the cross compiler against glibc 2.28. Compiles every translation unit of the
# extension to an object file (no link: the Python and pybind11 headers are this machine's,
# which are the same for every 64-bit Linux). Exit status 0 when all compile.
#   bash native/cross_check.sh [aarch64|x86_64]
set -euo pipefail
cd "$(dirname "$0")"
arch=${1:-aarch64}
python=${PYTHON:-python}
"$python" -c "import ziglang" 2>/dev/null || "$python" -m pip install -q ziglang
"$python" -c "import pybind11" 2>/dev/null || "$python" -m pip install -q pybind11
zig=$("$python" -c "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))")
objs=$(mktemp -d)
trap 'rm -rf "$objs"' EXIT
# the CUDA and CUPTI headers the build uses (pyproject's build requirements), in a private folder
"$python" -m pip install -q --no-deps --target "$objs/headers" \
  "nvidia-cuda-cupti==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*"
cuda=$(PYTHONPATH="$objs/headers" "$python" find_cuda_headers.py)
incs=()
IFS=';' read -r -a dirs <<< "$cuda"
for d in "${dirs[@]}"; do incs+=(-I"$d"); done
pyinc=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
pb=$("$python" -c "import pybind11; print(pybind11.get_include())")
n=0
for src in src/*.cpp src/*.c; do
  case "$src" in *.c) tool=cc; std=-std=c11 ;; *) tool=c++; std=-std=c++17 ;; esac
  "$zig" "$tool" -target "$arch-linux-gnu.2.28" $std -O2 -fPIC -Wall -Wno-unused-parameter \
    "${incs[@]}" -I"$pyinc" -I"$pb" -c "$src" -o "$objs/$(basename "$src").o"
  n=$((n + 1))
done
echo "native: $n translation units compile for $arch (glibc 2.28)"
