#!/usr/bin/env bash
# The stack walker's module frames (src/python_frames.c) on every CPython this machine has:
# builds a tiny extension around the real walker for each `pythonX.Y` found (no pybind11, no
# torch) and runs check.py, a stand-in for torch's Module._call_impl whose `self` is a cell, on
# its fast and slow (nested `inner`) paths and in a generator. .ci/run runs it on 3.10-3.13:
#   bash native/testing/versions/run.sh [python3.10 python3.12 ...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/../../src"
pythons=("$@")
[ ${#pythons[@]} -gt 0 ] || pythons=(python3.10 python3.11 python3.12 python3.13)
for py in "${pythons[@]}"; do
  command -v "$py" >/dev/null || { echo "$py: not found, skipped"; continue; }
  build=$(mktemp -d)
  inc=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  suffix=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  gcc -shared -fPIC -O1 -Wall -I"$inc" -I"$src" "$src/python_frames.c" "$here/harness.c" \
    -o "$build/harness$suffix"
  PYTHONPATH="$build" "$py" "$here/check.py"
  rm -rf "$build"
done
