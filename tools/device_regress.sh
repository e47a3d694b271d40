#!/usr/bin/env bash
# The device regression run, in one command (docs/bench.md). Here, first: bash tools/device_pack.sh (builds with
# CUDA and packs .device/); then on the GPU machine (device tool, carry .device), from the repo root:
#   bash tools/device_regress.sh
# It runs tools/device_run.sh's `regress` stage alone: the GPU suites (MLP --epochs 100, the CNNs --epochs 3
# after --autotune, the data pipeline from a level-160 DTS, bench kernels, bench --layers of the MLP) with --json into $OUT/regress.tar.gz,
# each compared with benchmarks/baselines/gpu_*.json by tools/regress; the tables are in $OUT/summary.txt.
# REGRESS_SUITES="mlp cnn data kernels layers" picks suites (CNN_MODELS the CNNs). Exit code 1 when a suite regressed,
# 2 when one gave no well-formed result (its log's end is in summary.txt). A suite without a baseline file (a new
# REGRESS_LAYER_MODELS model): summary.txt prints the command that makes its JSON the first one (docs/bench.md).
set -u
cd "$(dirname "$0")/.."
[ -x .device/bin/trctl ] || [ -f .device/bin/trctl.xz ] || { echo "error: .device/bin/trctl missing: run bash tools/device_pack.sh here first" >&2; exit 2; }
STAGES=regress exec bash tools/device_run.sh
