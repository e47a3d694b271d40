#!/usr/bin/env bash
# Installs trctl's Debian dependencies (when run as root with apt-get available) and builds into build/.
# The CUDA backend is built when nvcc is found (/usr/local/cuda/bin/nvcc); otherwise a CPU-only binary.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends cmake make g++ pkg-config libyaml-cpp-dev libcli11-dev \
    libspdlog-dev libfmt-dev libturbojpeg0-dev libxxhash-dev zlib1g-dev catch2 dataset-fashion-mnist \
    gnuplot-nox >/dev/null
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${TRCTL_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
