#!/usr/bin/env bash
# Fuzz the native CUPTI record decoder for SECONDS (default 60) under libFuzzer + ASan + UBSan.
#
#   native/fuzz/run.sh 60
#
# Needs clang++ with libFuzzer (Debian: apt-get install clang libclang-rt-14-dev) and the
# CUDA/CUPTI headers (HOOKMAGIC_CUDA_INCLUDE, NVIDIA's header wheels, or CUDA_HOME; the headers
# are installed into a private folder if none is found). Exits 0 when the time ran out with no
# finding; non-zero with the crashing input under $FUZZ_OUT (default build/fuzz) otherwise.
# Exit 77: cannot run here (no clang++/libFuzzer), said on stderr.
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${FUZZ_OUT:-$root/build/fuzz}"
mkdir -p "$out/corpus"
cxx="${FUZZ_CXX:-}"
if [ -z "$cxx" ]; then
  for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then cxx="$c"; break; fi
  done
fi
if [ -z "$cxx" ]; then
  echo "fuzz: SKIPPED: no clang++ found (install clang and its libFuzzer runtime)" >&2
  exit 77
fi
python="${PYTHON:-python3}"
include="${HOOKMAGIC_CUDA_INCLUDE:-}"
if [ -z "$include" ]; then
  include="$("$python" "$root/native/find_cuda_headers.py" 2>/dev/null || true)"
fi
if [ -z "$include" ]; then
  echo "fuzz: installing CUDA/CUPTI headers (nvidia-cuda-cupti, -runtime, -crt) into $out/headers"
  "$python" -m pip install -q --target "$out/headers" "nvidia-cuda-cupti==13.0.*" \
    "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*"
  include="$(PYTHONPATH="$out/headers" "$python" "$root/native/find_cuda_headers.py")"
fi
flags=()
IFS=';' read -ra dirs <<< "$include"
for d in "${dirs[@]}"; do flags+=("-I$d"); done
echo "fuzz: building with $cxx (libFuzzer + ASan + UBSan), headers from $include"
if ! "$cxx" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer -I"$root/native/src" -I"$root/native/testing" "${flags[@]}" \
    "$here/fuzz_decoder.cpp" "$root/native/testing/checked_decode.cpp" \
    "$root/native/src/string_table.cpp" -o "$out/fuzz_decoder" 2> "$out/build.log"; then
  if grep -q "fuzzer" "$out/build.log" && grep -qi "cannot find\|no such file" "$out/build.log"; then
    cat "$out/build.log" >&2
    echo "fuzz: SKIPPED: $cxx has no libFuzzer runtime (Debian: apt-get install libclang-rt-14-dev)" >&2
    exit 77
  fi
  cat "$out/build.log" >&2
  echo "fuzz: the build failed" >&2
  exit 1
fi
echo "fuzz: running for ${seconds}s"
cd "$out"
set +e
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
  ./fuzz_decoder -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$out/" corpus 2>&1 | tail -n 25
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  echo "fuzz: FOUND a crash or sanitizer report (exit $status); inputs in $out/" >&2
  exit "$status"
fi
echo "fuzz: ${seconds}s, no findings"
