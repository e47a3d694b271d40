#!/usr/bin/env bash
# Run ON THE GPU MACHINE (device tool), from the repo root, after tools/device_pack.sh here:
#   STAGES="tests bench torch" bash tools/device_run.sh
# Stages (space-separated, any order runs in this order):
#   tests     GPU test suite (tools/device_check.sh; SANITIZE=1 adds compute-sanitizer memcheck + racecheck)
#   bench     trctl: configs/mlp_fmnist.yaml, 100 epochs on the GPU (EPOCHS to change)
#   oom       a plan that does not fit the device must fail clearly (exit 2, region sizes)
#   kernels   trctl bench kernels (every CUDA kernel against the card's measured ceilings), JSON too
#   torch     PyTorch side by side: recipe gpu (100 epochs, torch.compile) and recipe dataloader (DL_EPOCHS, default 3)
# Everything lands in $OUT (at most 8 files come back): summary.txt last.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"
STAGES="${STAGES:-tests bench kernels torch}"
EPOCHS="${EPOCHS:-100}"
DL_EPOCHS="${DL_EPOCHS:-3}"
BIN=.device/bin
DATA="$PWD/.device/data"
mkdir -p "$OUT"
export TRCTL_FMNIST_ROOT="$DATA"
SUM="$OUT/summary.txt"
echo "device run $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), stages: $STAGES" >"$SUM"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv >>"$SUM" 2>&1
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }

if has tests; then
  if [ "${SANITIZE:-0}" = 1 ]; then san=""; else san="SKIP_SANITIZERS=1"; fi
  rm -rf /tmp/trctl_dump && mkdir -p /tmp/trctl_dump
  env $san TEST_TIMEOUT=240 SANITIZER_TIMEOUT="${SANITIZER_TIMEOUT:-150}" TRCTL_DUMP_DIR=/tmp/trctl_dump OUT="$OUT/check" bash tools/device_check.sh "$BIN" \
    >"$OUT/tests.log" 2>&1
  echo "tests: rc $?" >>"$SUM"
  cat "$OUT/check/summary.txt" >>"$SUM" 2>/dev/null
  if [ -f /tmp/trctl_dump/manifest.json ]; then  # trctl's step vs PyTorch's, from the dump of torch_dump_test
    python3 benchmarks/torch_check_mlp.py /tmp/trctl_dump >>"$SUM" 2>&1
    echo "torch check: rc $?" >>"$SUM"
  fi
  (cd "$OUT" && tar czf check.tar.gz check && rm -rf check)
fi

if has bench; then
  rm -rf /tmp/runs
  mkdir -p /tmp/runs
  for prec in ${PRECISIONS:-fp16 bf16 tf32 fp32}; do
    # train.device stays auto: a present GPU must be picked without asking
    timeout 150 "$BIN/trctl" train configs/mlp_fmnist.yaml data.root="$DATA" \
      train.epochs="$EPOCHS" train.precision=$prec run.out_dir=/tmp/runs run.name=mlp_$prec run.progress=off \
      >"/tmp/runs/trctl_mlp_$prec.log" 2>&1
    echo "trctl mlp $prec: rc $? :: $(grep -E '^done' "/tmp/runs/trctl_mlp_$prec.log")" >>"$SUM"
  done
  tar czf "$OUT/trctl_runs.tar.gz" -C /tmp runs   # logs and run dirs in one file (8 files come back at most)
fi

if has oom; then  # a plan larger than the device: a clear error with the region sizes, exit 2
  timeout 60 "$BIN/trctl" train configs/mlp_fmnist.yaml data.root="$DATA" model.layers.1.out_features=20000000 \
    train.epochs=1 run.out_dir=/tmp/runs_oom >"$OUT/oom.txt" 2>&1
  echo "oom check: rc $? :: $(grep -i error "$OUT/oom.txt" | head -n 2)" >>"$SUM"
fi

if has kernels; then
  timeout 120 "$BIN/trctl" bench kernels --json "$OUT/bench_kernels.json" >"$OUT/bench_kernels.txt" 2>&1
  echo "trctl bench kernels: rc $?" >>"$SUM"
  cat "$OUT/bench_kernels.txt" >>"$SUM"
fi

if has torch; then
  export PYTHONUNBUFFERED=1
  timeout 420 python3 benchmarks/pytorch_mlp_fmnist.py --recipe gpu --data "$DATA" --epochs "$EPOCHS" \
    --out "$OUT/torch_gpu.json" >"$OUT/torch.log" 2>&1
  echo "torch gpu recipe: rc $? :: $(tail -n 1 "$OUT/torch.log")" >>"$SUM"
  timeout 240 python3 benchmarks/pytorch_mlp_fmnist.py --recipe dataloader --data "$DATA" --epochs "$DL_EPOCHS" \
    --out "$OUT/torch_dl.json" >>"$OUT/torch.log" 2>&1
  echo "torch dataloader recipe ($DL_EPOCHS epochs): rc $? :: $(tail -n 1 "$OUT/torch.log")" >>"$SUM"
fi
cat "$SUM"
