#!/usr/bin/env bash
# CI regression job on the CPU machine (docs/bench.md): the compile suite (IR nodes, planned bytes per region:
# exact) for the five configs and the CPU step-time suite (fastest step over a 512^3 reference GEMM timed in the
# same run, 25 % tolerance) for the MLP and the small CNN, each compared with benchmarks/baselines/ by
# tools/regress. Exit code: 0 all within tolerance, 1 a regression or a changed exact figure, 2 bad input.
#   bash tools/ci_regress.sh [BUILD_DIR]      (default build/; builds the trctl target if needed)
# TRCTL=path/to/trctl skips the build; OUT=dir keeps the result files (default: a temp dir). To accept new
# figures deliberately: tools/regress RESULT BASELINE --update (see docs/bench.md).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
if [ -z "${TRCTL:-}" ]; then
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 2; fi
  cmake --build "$BUILD" -j"$(nproc)" --target trctl >/dev/null || exit 2
  TRCTL="$BUILD/trctl"
fi
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
BASE=benchmarks/baselines
rc=0
note() { [ "$1" -gt "$rc" ] && rc=$1; return 0; }
t0=$(date +%s)

"$TRCTL" bench compile configs/mlp_fmnist.yaml configs/cnn_fmnist.yaml configs/vgg16bn.yaml configs/resnet18.yaml \
  configs/resnet50.yaml --json "$OUT/compile.json" >"$OUT/compile.txt" 2>&1 || { cat "$OUT/compile.txt"; exit 2; }
python3 tools/regress "$OUT/compile.json" "$BASE/cpu_compile.json"; note $?

# One compute thread: the other core of a 2-core box may be busy; the reference GEMM runs on the same thread.
"$TRCTL" bench configs/mlp_fmnist.yaml train.threads=1 --steps 60 --warmup 5 --json "$OUT/step_mlp.json" \
  >"$OUT/step_mlp.txt" 2>&1 || { cat "$OUT/step_mlp.txt"; exit 2; }
python3 tools/regress "$OUT/step_mlp.json" "$BASE/cpu_step_mlp_fmnist.json"; note $?
"$TRCTL" bench configs/cnn_fmnist.yaml train.threads=1 --steps 16 --warmup 2 --json "$OUT/step_cnn.json" \
  >"$OUT/step_cnn.txt" 2>&1 || { cat "$OUT/step_cnn.txt"; exit 2; }
python3 tools/regress "$OUT/step_cnn.json" "$BASE/cpu_step_cnn_fmnist.json"; note $?

echo "ci_regress: $([ $rc = 0 ] && echo ok || echo FAILED) (rc $rc) in $(( $(date +%s) - t0 )) s; results in $OUT"
exit $rc
