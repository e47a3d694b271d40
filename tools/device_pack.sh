#!/usr/bin/env bash
# Run HERE before a device call: builds with CUDA (sm_90) and gathers what the GPU machine needs into .device/
# (ignored by git; name it in the device tool's `carry`): stripped trctl and test_gpu, and the Fashion-MNIST files.
# The binaries link yaml-cpp, turbojpeg and zlib statically and spdlog/fmt header-only, so on the device they need
# only the CUDA libraries (cuBLASLt; cudart is static).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/CMakeCache.txt ]; then cmake -S . -B build -DCMAKE_BUILD_TYPE=Release; fi
cmake --build build -j"$(nproc)" --target trctl test_gpu
rm -rf .device
mkdir -p .device/bin .device/data
cp build/trctl build/tests/test_gpu .device/bin/
strip .device/bin/*
cp /usr/share/datasets/fashion-mnist/*.gz .device/data/
du -sh .device/bin/* .device/data
ldd .device/bin/trctl | grep -v -E "linux-vdso|ld-linux" | awk '{print "  needs " $1}'
