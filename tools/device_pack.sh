#!/usr/bin/env bash
# Run HERE before a device call: builds with CUDA (sm_90) and gathers what the GPU machine needs into .device/
# (ignored by git; name it in the device tool's `carry`): stripped trctl and test_gpu, the cuDNN batch-norm backward
# probe (tools/probes), and the Fashion-MNIST files.
# The binaries link yaml-cpp, turbojpeg and zlib statically and spdlog/fmt header-only, so on the device they need
# only the CUDA libraries (cuBLASLt; cudart is static).
# PACK_REF=<commit>: build that commit in a separate worktree (PACK_WT, default /work/wt-pack; its build/ is kept
# for incremental builds) instead of this working tree, so that others' unfinished edits here never reach the
# binaries; its tests still read configs/ from this checkout (TRCTL_TEST_SOURCE_DIR), which is the tree the device
# tool copies. .device/COMMIT records what the binaries were built from (device_run.sh prints it).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PACK_REF:-}" ]; then
  WT="${PACK_WT:-/work/wt-pack}"
  REF="$(git rev-parse --verify "$PACK_REF^{commit}")"  # resolved here: in the worktree HEAD means its own
  if [ ! -d "$WT" ]; then git worktree add --detach "$WT" "$REF"; else git -C "$WT" checkout -q --detach "$REF"; fi
  BUILD="$WT/build"
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$WT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTRCTL_TEST_SOURCE_DIR="$PWD"
  else
    cmake "$BUILD" >/dev/null  # re-configure: a target added since the last build is unknown to the old Makefiles
  fi
  COMMIT="$(git -C "$WT" rev-parse --short HEAD)"
else
  BUILD=build
  if [ ! -f build/CMakeCache.txt ]; then cmake -S . -B build -DCMAKE_BUILD_TYPE=Release; fi
  COMMIT="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . && echo '' || echo ' + uncommitted changes')"
fi
SRC_DIR="${WT:-.}"
probe=""  # the cuDNN probe exists from ea35c87 on: older PACK_REFs (A/B baselines) build without it
if grep -q cudnn_bn_backward_probe "$SRC_DIR/CMakeLists.txt"; then probe=cudnn_bn_backward_probe; fi
if grep -q cudnn_conv_engine_probe "$SRC_DIR/CMakeLists.txt"; then probe="$probe cudnn_conv_engine_probe"; fi
cmake --build "$BUILD" -j"$(nproc)" --target trctl test_gpu $probe
rm -rf .device
mkdir -p .device/bin .device/data
cp "$BUILD/trctl" "$BUILD/tests/test_gpu" .device/bin/
for p in $probe; do cp "$BUILD/$p" .device/bin/; done
echo "$COMMIT" >.device/COMMIT
strip .device/bin/*
cp /usr/share/datasets/fashion-mnist/*.gz .device/data/
# The device tool carries at most 64 MiB with the tree: the binaries travel xz-compressed (device_run.sh unpacks).
xz -T2 -6 .device/bin/trctl .device/bin/test_gpu
du -sh .device/bin/* .device/data
xz -dc .device/bin/trctl.xz >/tmp/trctl.ldd && chmod +x /tmp/trctl.ldd && ldd /tmp/trctl.ldd | grep -v -E "linux-vdso|ld-linux" | awk '{print "  needs " $1}'
