#!/usr/bin/env bash
# Builds (if needed) and runs the whole test suite with ctest. GPU tests report "skipped: no CUDA device" and
# count as skipped (not passed) on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/CMakeCache.txt ]; then
  bash tools/setup.sh
else
  cmake --build build -j"$(nproc)"
fi
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
