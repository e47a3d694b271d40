#!/usr/bin/env bash
# Run ON THE GPU MACHINE (device tool), from the repo root, after tools/device_pack.sh here:
#   STAGES="tests bench torch" bash tools/device_run.sh
# Stages (space-separated, any order runs in this order):
#   tests     GPU test suite (tools/device_check.sh; SANITIZE=1 adds compute-sanitizer memcheck + racecheck);
#             TEST_SPLIT=1 (no TEST_FILTER, no sanitizers): [kernel] and ~[kernel] as two processes at once (the
#             whole suite ran ~360 s in one process, too long for one device call with anything else)
#   sanitize  compute-sanitizer over the whole GPU suite, one process per test case, SAN_JOBS (12) at once
#             (tools/sanitize_suite.py): SAN_TOOLS (memcheck,racecheck), SAN_CASE_TIMEOUT (s, 300), SAN_DEADLINE
#             (s after which no case starts, 0 = none), SAN_FILTER (Catch2 spec, default all cases);
#             racecheck instruments trctl's own kernels (SAN_RACE_KERNELS=trctl; "" = every kernel);
#             SAN_SKIP_CLEAN=FILE skips what a previous results.tsv calls clean, SAN_EXTRA="tool:args" adds arguments
#   bench     trctl: configs/mlp_fmnist.yaml, 100 epochs on the GPU (EPOCHS to change)
#   oom       a plan that does not fit the device must fail clearly (exit 2, region sizes)
#   kernels   trctl bench kernels (every CUDA kernel against the card's measured ceilings), JSON too;
#             KERNELS_ONLY: '|'-separated name parts, just those rows (`--only`), e.g. KERNELS_ONLY="wgconv|cudnn f16"
#   probe     tools/probes/cudnn_bn_backward_probe (PROBE_CASES: d w a, or all): which cuDNN engines serve the
#             batch-norm backward fusions and whether their outputs match a CPU reference (probe.txt)
#   convprobe tools/probes/cudnn_conv_engine_probe (CONVPROBE_ARGS, default "--set vgg --deadline 200"): every
#             cuDNN graph-API engine config of each plain conv direction timed against the legacy API's best
#             algorithm (convprobe.txt; the per-direction summaries in summary.txt)
#   torch     PyTorch side by side: recipe gpu (100 epochs, torch.compile) and recipe dataloader (DL_EPOCHS, default 3)
#   cnn       CNN throughput, synthetic GPU-resident data, batch 256, fp16 AMP: trctl (CNN_EPOCHS epochs of
#             CNN_TRAIN images; epochs 2.. are steady) then PyTorch eager + torch.compile (benchmarks/pytorch_cnn.py,
#             the same CNN_TRAIN images resident, CNN_TORCH_REPEATS timed windows of CNN_TORCH_STEPS steps, default
#             50, after CNN_TORCH_WARMUP, default 15: with CNN_TRAIN=25600 both sides time ~10 s of steady load;
#             CNN_TORCH_LR: its constant lr, default trctl's in its second warm-up epoch -- the peak lr diverges),
#             for each of CNN_MODELS (default "resnet50 vgg16bn resnet18"), then `trctl report` of the three (a
#             throughput report, docs/report.md) into cnn/report_<model>/ of cnn.tar.gz, its results table in
#             summary.txt
#             (without gnuplot on the device: --no-plots; `trctl report` here in the unpacked cnn/ redraws them)
#             CNN_EXTRA: more trctl overrides (e.g. train.deterministic=false), also given to autotune and the
#             CNNs' layers runs (the autotune cache is keyed by the deterministic flag)
#   epochlen  why a training epoch's step is longer than the profile's back-to-back replays: trctl train of
#             each of CNN_MODELS (3 epochs) at each epoch length of EPOCHLEN_SIZES images (default "6400 25600",
#             25 and 100 steps at batch 256) with run.log_interval 10 (a loss read every 10 steps; since
#             2026-12-05 it waits for the logged step only, the next one already queued: Backend::request_loss)
#             and 1000000 (none), nvidia-smi sampling clocks, power and throttle reasons every 100 ms
#             (epochlen.tar.gz; the steady img/s of each run in summary.txt). Run after autotune.
#   ab        whole-step A/B on one machine: trctl bench CFG --epochs AB_EPOCHS (3) for each of CNN_MODELS and each of
#             AB_VARIANTS ('|'-separated override sets, an empty one = the defaults; default "|train.conv_bn_stats=
#             separate train.conv_bn_backward=separate|": defaults, both fusions off, defaults again), with CNN_TRAIN
#             images and CNN_EXTRA; steady img/s, J per step and watts (NVML) and the fusion log lines in
#             summary.txt, logs in ab.tar.gz. Run after autotune (its cache), e.g. CNN_MODELS=vgg16bn
#             CNN_EXTRA="train.deterministic=false" STAGES="autotune ab"
#   cnnacc    configs/cnn_fmnist.yaml trained to the end (test accuracy; CNNACC_EPOCHS to change)
#   autotune  trctl bench CFG --autotune for each of CNN_MODELS (the cache in $TRCTL_AUTOTUNE_CACHE, used by the
#             stages after it; without this stage runs use cuDNN's heuristics); AUTOTUNE_ARGS: more flags (e.g.
#             --legacy-only: no graph-API engine configs), AUTOTUNE_TIMEOUT (s, default 240)
#   (CLOCK_LOG=1 logs the SM clock and power during kernels, layers, ab and cnn: see clock_log_start below)
#   layers    trctl bench CFG --layers for each of LAYER_MODELS (default: mlp, then CNN_MODELS; LAYER_VARIANTS: '|'-
#             separated override sets each CNN is profiled with too, e.g. "train.conv_bn_stats=auto" with
#             CNN_EXTRA="train.deterministic=false"): per-node times of
#             the train step next to its captured replay (a burst, and again after 3 s of replays: the clocks a
#             training run settles to); mlp = configs/mlp_fmnist.yaml on the real Fashion-MNIST. LAYER_ENERGY=S:
#             also --energy S (the step's and each node's energy from NVML, S seconds each after
#             LAYER_ENERGY_SETTLE s of the same runs, --energy-settle, default 1: ~(S + 1) x nodes more time;
#             raise LAYER_TIMEOUT, default 240 s); LAYER_REPS: --reps (default 10); LAYER_TRAIN: the CNNs' synthetic
#             training images (default 25600, as the cnn stage's long runs: over 1024 images -- 4 batches the
#             replays cycle through -- VGG16-BN's step measured 32.8 J per replay, over 25600 41.1 J, its
#             gradient convolutions 26 % more; RESULTS.md run 65)
#   data      the data pipeline (issue 5): a generated ImageNet-like JPEG folder (DATA_IMAGES, default 20000,
#             1000 classes, ~500x375), packed to DTS at full size and at level 160:90; trctl bench data
#             (RandomResizedCrop 224 + flip + normalize to fp16, 16 workers) from the reduced level streamed and in
#             RAM, the full level and the raw folder; PyTorch DataLoader + torchvision (PIL) on the same full-size
#             and reduced (PIL-resized folder) data with the same worker count
#   feed      ResNet-50 trained from that DTS file (configs/resnet50_dts.yaml, host-fed) next to the same model on
#             synthetic GPU-resident data (needs the data stage first)
#   regress   the GPU suites with --json (trctl-bench/1) compared with benchmarks/baselines/gpu_*.json by
#             tools/regress (docs/bench.md), for each of REGRESS_SUITES (default "mlp cnn data kernels layers"): mlp (bench
#             --epochs 100, fp16), cnn (autotune, then bench --epochs 3 for each of CNN_MODELS), data (bench data
#             from the level-160 DTS with REGRESS_DATA_WORKERS, default 16 as in the baseline; generates the JPEG
#             folder as the data stage does), kernels (bench kernels: compared once benchmarks/baselines/
#             gpu_kernels.json exists; until then its JSON is checked against the schema and kept for the first
#             --update, whose command summary.txt prints), layers (bench --layers of REGRESS_LAYER_MODELS, default
#             mlp_fmnist; first baseline likewise). Results and tables in regress.tar.gz; the script's exit
#             code is 1 when a suite regressed, 2 when a suite gave no well-formed result (tools/device_regress.sh
#             runs this stage alone)
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
for z in "$BIN"/*.xz; do [ -f "$z" ] && xz -df "$z"; done  # tools/device_pack.sh compresses the binaries
export TRCTL_FMNIST_ROOT="$DATA"
export TRCTL_BIN="$PWD/$BIN/trctl"  # tests that run the CLI use the device copy, not the build path baked in
# cuDNN: the GPU machine's image has it inside PyTorch's nvidia-* wheels, not in the loader's default path.
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9'; then
  NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null)
  [ -n "$NV" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(ls -d "$NV"/*/lib | tr '\n' ':')"
fi
SUM="$OUT/summary.txt"
echo "device run $(date -u +%FT%TZ), binaries of $(cat .device/COMMIT 2>/dev/null || echo '? (no .device/COMMIT)'), stages: $STAGES" >"$SUM"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv >>"$SUM" 2>&1
echo "cudnn: $(ldd "$BIN/trctl" | grep -o 'libcudnn.so[^ ]* => [^ ]*')" >>"$SUM"
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
# CLOCK_LOG=1: the SM clock, power draw and clock-event reasons every 50 ms (nvidia-smi) while the kernels, layers,
# ab (each variant) and cnn stages run (trctl and PyTorch apart), into /tmp/prof/clocks_<stage>.csv (in
# prof.tar.gz), with the stage's mean clock and power in the summary -- to tell a kernel's speed from the clock it
# ran at (RESULTS.md run 62: our kernels ran 10-15 % slower inside `bench --layers` than in `bench kernels`,
# cuDNN's not).
clock_log_start() {
  [ "${CLOCK_LOG:-0}" = 1 ] || return 0
  mkdir -p /tmp/prof
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 50 >"/tmp/prof/clocks_$1.csv" 2>&1 &
  CLOCK_PID=$!
}
# The summary line: every sample's mean, then the loaded samples' (power >= CLOCK_LOADED_W, default 300: the
# training steps, not compilation or data setup) and how many of them the software power cap held (clock-event
# reason bit 0x4, the hex field's last digit 4-7 or c-f).
clock_log_stop() {
  [ "${CLOCK_LOG:-0}" = 1 ] || return 0
  kill "$CLOCK_PID" 2>/dev/null; wait "$CLOCK_PID" 2>/dev/null
  awk -F', ' -v tag="$1" -v lw="${CLOCK_LOADED_W:-300}" 'NF >= 3 && $2 + 0 > 0 { n++; c += $2; p += $3
      if ($3 + 0 >= lw) { ln++; lc += $2; lp += $3; if (substr($5, length($5), 1) ~ /[4-7c-fC-F]/) cap++ } }
    END { if (!n) exit
          printf "clocks during %s: %d samples, mean SM %.0f MHz, mean power %.0f W", tag, n, c / n, p / n
          if (ln) printf "; loaded (>= %d W) %d: %.0f MHz, %.0f W, power-capped in %d", lw, ln, lc / ln, lp / ln, cap
          printf "\n" }' "/tmp/prof/clocks_$1.csv" >>"$SUM"
}
has_regress() { has regress && case " ${REGRESS_SUITES:-mlp cnn data kernels layers} " in *" $1 "*) return 0 ;; esac; return 1; }

if has tests && [ "${TEST_SPLIT:-0}" = 1 ] && [ -z "${TEST_FILTER:-}" ]; then
  # The whole suite in two processes at once on the one GPU: the kernel tests ([kernel]) and the rest (backends,
  # training runs, CLI); most cases are latency-bound, so the two overlap well and the suite fits one device call.
  rm -rf /tmp/trctl_dump /tmp/trctl_dump_k && mkdir -p /tmp/trctl_dump /tmp/trctl_dump_k
  t0=$(date +%s)
  (SKIP_SANITIZERS=1 TEST_TIMEOUT="${TEST_TIMEOUT:-240}" TEST_FILTER="[kernel]" TRCTL_DUMP_DIR=/tmp/trctl_dump_k \
    OUT="$OUT/check/kernel" bash tools/device_check.sh "$BIN" >"$OUT/tests_kernel.log" 2>&1
   echo "tests [kernel]: rc $? after $(($(date +%s) - t0)) s" >"$OUT/tests_kernel.rc") &
  (SKIP_SANITIZERS=1 TEST_TIMEOUT="${TEST_TIMEOUT:-240}" TEST_FILTER="~[kernel]" TRCTL_DUMP_DIR=/tmp/trctl_dump \
    OUT="$OUT/check/rest" bash tools/device_check.sh "$BIN" >"$OUT/tests_rest.log" 2>&1
   echo "tests ~[kernel]: rc $? after $(($(date +%s) - t0)) s" >"$OUT/tests_rest.rc") &
  wait
  for half in kernel rest; do
    cat "$OUT/tests_$half.rc" >>"$SUM"
    cat "$OUT/check/$half/summary.txt" >>"$SUM" 2>/dev/null
  done
  cat "$OUT"/tests_kernel.log "$OUT"/tests_rest.log >"$OUT/tests.log" && rm -f "$OUT"/tests_kernel.log "$OUT"/tests_rest.log "$OUT"/tests_*.rc
  if [ -f /tmp/trctl_dump/manifest.json ]; then
    python3 benchmarks/torch_check_mlp.py /tmp/trctl_dump >>"$SUM" 2>&1
    echo "torch check: rc $?" >>"$SUM"
  fi
  (cd "$OUT" && tar czf check.tar.gz check && rm -rf check)
elif has tests; then
  if [ "${SANITIZE:-0}" = 1 ]; then san=""; else san="SKIP_SANITIZERS=1"; fi
  rm -rf /tmp/trctl_dump && mkdir -p /tmp/trctl_dump
  env $san TEST_TIMEOUT="${TEST_TIMEOUT:-240}" SANITIZER_TIMEOUT="${SANITIZER_TIMEOUT:-150}" TRCTL_DUMP_DIR=/tmp/trctl_dump OUT="$OUT/check" bash tools/device_check.sh "$BIN" \
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
  ONLY=()
  if [ -n "${KERNELS_ONLY:-}" ]; then
    IFS='|' read -r -a parts <<<"$KERNELS_ONLY"
    for p in "${parts[@]}"; do ONLY+=(--only "$p"); done
  fi
  clock_log_start kernels
  timeout 240 "$BIN/trctl" bench kernels "${ONLY[@]}" --json "$OUT/bench_kernels.json" >"$OUT/bench_kernels.txt" 2>&1
  rc=$?
  clock_log_stop kernels
  echo "trctl bench kernels: rc $rc" >>"$SUM"
  cat "$OUT/bench_kernels.txt" >>"$SUM"
fi
if has probe; then
  timeout "${PROBE_TIMEOUT:-240}" "$BIN/cudnn_bn_backward_probe" ${PROBE_CASES:-all} >"$OUT/probe.txt" 2>&1
  echo "cudnn bn backward probe: rc $? :: $(grep -c ' OK ws=' "$OUT/probe.txt") engine runs, $(grep -c 'NO engine ran\|FAILED' "$OUT/probe.txt") graphs without one" >>"$SUM"
fi
if has convprobe; then
  timeout "${CONVPROBE_TIMEOUT:-240}" "$BIN/cudnn_conv_engine_probe" ${CONVPROBE_ARGS:---set vgg --deadline 200} \
    >"$OUT/convprobe.txt" 2>&1
  echo "cudnn conv engine probe: rc $?" >>"$SUM"
  grep -E "SUMMARY|TOTAL|FAILED|done in" "$OUT/convprobe.txt" >>"$SUM"
fi
if has sanitize; then
  timeout "${SAN_TOTAL_TIMEOUT:-560}" python3 tools/sanitize_suite.py "$BIN/test_gpu" /tmp/sanitize \
    --tools "${SAN_TOOLS:-memcheck,racecheck}" --jobs "${SAN_JOBS:-12}" --case-timeout "${SAN_CASE_TIMEOUT:-300}" \
    --deadline "${SAN_DEADLINE:-0}" --filter "${SAN_FILTER:-}" --racecheck-kernels "${SAN_RACE_KERNELS-trctl}" \
    ${SAN_SKIP_CLEAN:+--skip-clean "$SAN_SKIP_CLEAN" --skip-verdicts "${SAN_SKIP_VERDICTS:-clean}"} ${SAN_EXTRA:+--extra "$SAN_EXTRA"} \
    >"$OUT/sanitize.txt" 2>&1
  echo "sanitize: rc $?" >>"$SUM"
  cat /tmp/sanitize/summary.txt >>"$SUM" 2>/dev/null || tail -n 5 "$OUT/sanitize.txt" >>"$SUM"
  tar czf "$OUT/sanitize.tar.gz" -C /tmp sanitize
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
export TRCTL_AUTOTUNE_CACHE=/tmp/trctl_autotune.txt
rm -f "$TRCTL_AUTOTUNE_CACHE"
mkdir -p /tmp/prof
if has autotune; then
  for m in ${CNN_MODELS:-resnet50 vgg16bn resnet18}; do
    timeout "${AUTOTUNE_TIMEOUT:-240}" "$BIN/trctl" bench "configs/$m.yaml" --autotune ${AUTOTUNE_ARGS:-} \
      data.synthetic.train_size=512 data.synthetic.val_size=256 ${CNN_EXTRA:-} >"/tmp/prof/autotune_$m.txt" 2>&1
    echo "trctl autotune $m: rc $? :: $(tail -n 1 "/tmp/prof/autotune_$m.txt")" >>"$SUM"
  done
fi

if has layers; then
  for m in ${LAYER_MODELS:-mlp ${CNN_MODELS:-resnet50 vgg16bn resnet18}}; do
    case "$m" in  # the MLP on its real data (resident on the GPU); the CNNs on a synthetic set (LAYER_TRAIN)
      mlp) cfg=configs/mlp_fmnist.yaml; data_args="data.root=$DATA" ;;
      *) cfg="configs/$m.yaml"
         data_args="data.synthetic.train_size=${LAYER_TRAIN:-25600} data.synthetic.val_size=256 ${CNN_EXTRA:-}" ;;
    esac
    # LAYER_VARIANTS: '|'-separated sets of further overrides, each profiled after the base run (A/B in one call),
    # e.g. LAYER_VARIANTS="train.conv_bn_stats=auto|train.conv_bn_stats=fused" with CNN_EXTRA="train.deterministic=false"
    # (the fused modes need it); the CNNs only.
    variants=("")
    if [ "$m" != mlp ] && [ -n "${LAYER_VARIANTS:-}" ]; then IFS='|' read -r -a extra <<<"$LAYER_VARIANTS"; variants+=("${extra[@]}"); fi
    for v in "${variants[@]}"; do
      tag="$m${v:+_$(echo "$v" | tr -c 'A-Za-z0-9_=.\n' '_' | tr '=' '-')}"
      clock_log_start "layers_$tag"
      timeout "${LAYER_TIMEOUT:-240}" "$BIN/trctl" bench "$cfg" --layers --reps ${LAYER_REPS:-10} $data_args $v \
        ${LAYER_ENERGY:+--energy "$LAYER_ENERGY"} ${LAYER_ENERGY_SETTLE:+--energy-settle "$LAYER_ENERGY_SETTLE"} \
        --json "/tmp/prof/layers_$tag.json" >"/tmp/prof/layers_$tag.txt" 2>&1
      rc=$?
      clock_log_stop "layers_$tag"
      echo "trctl layers $m${v:+ ($v)}: rc $rc" >>"$SUM"
      # the replay next to the node sum, then the op kinds by time
      grep -E 'step \(captured|^graph replay vs|^sustained|^graph launch|^  ' "/tmp/prof/layers_$tag.txt" | head -n 19 | sed 's/^/    /' >>"$SUM"
      grep -E -A1 '^state after the profile' "/tmp/prof/layers_$tag.txt" | sed 's/^/    /' >>"$SUM"
      # LAYER_ENERGY=S (seconds per figure): the energy section's step line and op kinds
      [ -z "${LAYER_ENERGY:-}" ] || grep -A14 '^energy (' "/tmp/prof/layers_$tag.txt" | sed 's/^/    /' >>"$SUM"
    done
  done
fi
if has autotune || has layers || [ "${CLOCK_LOG:-0}" = 1 ]; then tar czf "$OUT/prof.tar.gz" -C /tmp prof; fi

if has epochlen; then
  rm -rf /tmp/epochlen && mkdir -p /tmp/epochlen
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 100 >/tmp/epochlen/smi.csv 2>&1 &
  smi_pid=$!
  for m in ${CNN_MODELS:-resnet50}; do
    for n in ${EPOCHLEN_SIZES:-6400 25600}; do
      for li in 10 1000000; do
        name="${m}_n${n}_log${li}"
        echo "$(date -u +%T.%N) start $name" >>/tmp/epochlen/marks.txt
        timeout 150 "$BIN/trctl" train "configs/$m.yaml" train.epochs=3 data.synthetic.train_size="$n" \
          data.synthetic.val_size=512 run.out_dir=/tmp/epochlen run.name="$name" run.progress=off \
          run.log_interval="$li" ${CNN_EXTRA:-} >"/tmp/epochlen/$name.log" 2>&1
        echo "epochlen $name: rc $? :: $(grep -E '^done' "/tmp/epochlen/$name.log" | grep -oE 'steady[^;]*')" >>"$SUM"
        grep -E 'epoch [23]/' "/tmp/epochlen/$name.log" | grep -oE '[0-9]+ img/s.*' | sed 's/^/    /' >>"$SUM"
      done
    done
  done
  kill "$smi_pid" 2>/dev/null
  awk -F', ' 'NR > 1 && $2+0 > 0 {n++; c += $2; p += $4} END {if (n) printf "    nvidia-smi: %d samples, mean SM clock %.0f MHz, mean power %.0f W\n", n, c/n, p/n}' \
    /tmp/epochlen/smi.csv >>"$SUM"
  tar czf "$OUT/epochlen.tar.gz" -C /tmp epochlen
fi

if has ab; then  # whole-step A/B of override sets, same machine, same autotune cache (run after autotune)
  rm -rf /tmp/ab && mkdir -p /tmp/ab
  # (read drops one trailing empty field: the extra '|' keeps a final empty set, the defaults, in the list)
  IFS='|' read -r -a ab_sets <<<"${AB_VARIANTS:-|train.conv_bn_stats=separate train.conv_bn_backward=separate|}|"
  for m in ${CNN_MODELS:-resnet50 vgg16bn resnet18}; do
    i=0
    for v in "${ab_sets[@]}"; do
      i=$((i + 1))
      clock_log_start "ab_${m}_$i"
      # shellcheck disable=SC2086
      timeout "${AB_TIMEOUT:-120}" "$BIN/trctl" bench "configs/$m.yaml" --epochs "${AB_EPOCHS:-3}" \
        data.synthetic.train_size="${CNN_TRAIN:-6400}" data.synthetic.val_size=512 ${CNN_EXTRA:-} $v \
        >"/tmp/ab/${m}_$i.log" 2>&1
      rc=$?
      clock_log_stop "ab_${m}_$i"
      echo "ab $m [${v:-defaults}]: rc $rc :: $(grep -oE '(images_per_s|j_per_step|power_w)_steady [0-9.]+(e[+-]?[0-9]+)?' "/tmp/ab/${m}_$i.log" | tr '\n' ' ')" >>"$SUM"
      grep -E 'batch norm|batch-norm' "/tmp/ab/${m}_$i.log" | sed 's/^\[[0-9:]*\] /    /' >>"$SUM"
    done
  done
  tar czf "$OUT/ab.tar.gz" -C /tmp ab
  if [ "${CLOCK_LOG:-0}" = 1 ]; then tar czf "$OUT/prof.tar.gz" -C /tmp prof; fi  # with each variant's clocks
fi

if has cnn; then
  rm -rf /tmp/cnn && mkdir -p /tmp/cnn
  export PYTHONUNBUFFERED=1
  # trctl report draws its PNGs with gnuplot, which the device image may lack: then report.md/html without them.
  if command -v gnuplot >/dev/null 2>&1 || [ -n "${TRCTL_GNUPLOT:-}" ]; then CNN_PLOTS=""; else CNN_PLOTS="--no-plots"; fi
  for m in ${CNN_MODELS:-resnet50 vgg16bn resnet18}; do
    clock_log_start "cnn_trctl_$m"
    timeout "${CNN_TRCTL_TIMEOUT:-150}" "$BIN/trctl" train "configs/$m.yaml" train.epochs="${CNN_EPOCHS:-3}" \
      data.synthetic.train_size="${CNN_TRAIN:-6400}" data.synthetic.val_size=512 run.out_dir=/tmp/cnn \
      run.name="trctl_$m" run.progress=off ${CNN_EXTRA:-} >"/tmp/cnn/trctl_$m.log" 2>&1
    rc=$?
    clock_log_stop "cnn_trctl_$m"
    echo "trctl $m: rc $rc :: $(grep -E 'device memory' "/tmp/cnn/trctl_$m.log" | sed 's/.*device memory/device memory/')" >>"$SUM"
    grep -E 'epoch [0-9]+/|^done|error' "/tmp/cnn/trctl_$m.log" | sed 's/^/    /' >>"$SUM"
    if [ "${CNN_TORCH:-1}" = 1 ]; then
      clock_log_start "cnn_torch_$m"
      timeout "${CNN_TORCH_TIMEOUT:-300}" python3 benchmarks/pytorch_cnn.py --model "$m" --mode "${CNN_TORCH_MODE:-both}" \
        --compile-modes "${CNN_COMPILE_MODES:-default}" --train-size "${CNN_TRAIN:-6400}" \
        --repeats "${CNN_TORCH_REPEATS:-3}" --steps "${CNN_TORCH_STEPS:-50}" --warmup "${CNN_TORCH_WARMUP:-15}" \
        ${CNN_TORCH_LR:+--lr "$CNN_TORCH_LR"} \
        --json "/tmp/cnn/torch_$m.json" --out-dir "/tmp/cnn/torch_$m" \
        >"/tmp/cnn/torch_$m.log" 2>&1
      rc=$?
      clock_log_stop "cnn_torch_$m"
      echo "torch $m: rc $rc" >>"$SUM"
      grep -vE '^\s*$' "/tmp/cnn/torch_$m.log" | grep -v '^{' | tail -n 6 | sed 's/^/    /' >>"$SUM"
    fi
    # The throughput report: trctl's run dir vs each PyTorch mode that measured (a failed mode writes no file).
    # Run from /tmp/cnn so that it names its inputs relatively: in the unpacked cnn/ here the same command works.
    vs=""
    for mode in compiled eager; do
      [ -f "/tmp/cnn/torch_$m/torch_$mode.json" ] && vs="$vs --vs torch_$m/torch_$mode.json"
    done
    (cd /tmp/cnn && "$TRCTL_BIN" report "trctl_$m" $vs -o "report_$m" $CNN_PLOTS) >"/tmp/cnn/report_$m.log" 2>&1
    echo "trctl report $m: rc $? :: $(tail -n 1 "/tmp/cnn/report_$m.log")" >>"$SUM"
    [ -z "$CNN_PLOTS" ] || echo "    no gnuplot here; with PNGs, in the unpacked cnn/: trctl report trctl_$m$vs -o report_$m" >>"$SUM"
    sed -n '/^## Results/,/^- /p' "/tmp/cnn/report_$m/report.md" 2>/dev/null | grep '^|' | sed 's/^/    /' >>"$SUM"
  done
  tar czf "$OUT/cnn.tar.gz" -C /tmp cnn
  if [ "${CLOCK_LOG:-0}" = 1 ]; then tar czf "$OUT/prof.tar.gz" -C /tmp prof; fi  # with the cnn stage's clocks
fi

if has cnnacc; then
  rm -rf /tmp/cnnacc && mkdir -p /tmp/cnnacc
  timeout "${CNNACC_TIMEOUT:-300}" "$BIN/trctl" train configs/cnn_fmnist.yaml data.root="$DATA" \
    train.epochs="${CNNACC_EPOCHS:-30}" run.out_dir=/tmp/cnnacc run.name=cnn_fmnist run.progress=off \
    >/tmp/cnnacc/trctl_cnn_fmnist.log 2>&1
  echo "trctl cnn_fmnist: rc $? :: $(grep -E '^done' /tmp/cnnacc/trctl_cnn_fmnist.log)" >>"$SUM"
  tail -n 4 /tmp/cnnacc/trctl_cnn_fmnist.log | sed 's/^/    /' >>"$SUM"
  tar czf "$OUT/cnnacc.tar.gz" -C /tmp cnnacc
fi
if has data || has feed || has_regress data; then
  JF=/tmp/jf
  mkdir -p /tmp/data
  if [ ! -f /tmp/jf_train.dts ]; then
    export PYTHONUNBUFFERED=1
    ( time timeout 400 python3 tools/gen_jpeg_folder.py "$JF" --images "${DATA_IMAGES:-20000}" --val "${DATA_VAL:-2000}" \
        --classes 1000 --workers "$(nproc)" ) >/tmp/data/gen.log 2>&1
    echo "gen_jpeg_folder: rc $? :: $(grep -E '^wrote|^real' /tmp/data/gen.log | tr '\n' ' ')" >>"$SUM"
    for split in train val; do
      ( time timeout 300 "$BIN/trctl" pack-dts "$JF/$split" -o "/tmp/jf_$split.dts" --level 160:90 ) >"/tmp/data/pack_$split.log" 2>&1
      echo "pack-dts $split: rc $? :: $(grep -E '^packed|level|^real' "/tmp/data/pack_$split.log" | tr '\n' ' ')" >>"$SUM"
    done
    ( time timeout 120 "$BIN/trctl" pack-dts --verify /tmp/jf_train.dts ) >/tmp/data/verify.log 2>&1
    echo "verify: rc $? :: $(grep -E '^ok|^real' /tmp/data/verify.log | tr '\n' ' ')" >>"$SUM"
    "$BIN/trctl" dts info /tmp/jf_train.dts >/tmp/data/info.txt 2>&1
  fi
fi

if has data; then
  W="${DATA_WORKERS:-$(nproc)}"
  B="${DATA_BATCHES:-100}"
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null  # cold page cache where allowed (says so below)
  echo "page cache dropped: $([ $? = 0 ] && echo yes || echo no)" >>"$SUM"
  for run in "dts160 /tmp/jf_train.dts --level 160" "dts160mem /tmp/jf_train.dts --level 160 --memory" \
             "dts0 /tmp/jf_train.dts --level 0" "folder $JF/train"; do
    set -- $run; name=$1; shift
    timeout 200 "$BIN/trctl" bench data "$@" --workers "$W" --batches "$B" --warmup 10 \
      --json "/tmp/data/trctl_$name.json" >"/tmp/data/trctl_$name.log" 2>&1
    echo "trctl bench data $name: rc $? :: $(head -n 2 "/tmp/data/trctl_$name.log" | tr '\n' ' ')" >>"$SUM"
  done
  # The same images reduced for PyTorch as the DTS level holds them: short side 160 (PIL bilinear), quality 90.
  timeout 300 python3 - "$JF/train" /tmp/jf160/train >/tmp/data/reduce.log 2>&1 <<'PY'
import os, sys
from concurrent.futures import ProcessPoolExecutor
from PIL import Image
src, dst = sys.argv[1], sys.argv[2]
def one(p):
    out = os.path.join(dst, os.path.relpath(p, src))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    im = Image.open(p).convert("RGB")
    w, h = im.size
    s = 160 / min(w, h)
    if s < 1:
        im = im.resize((160, int(160 * h / w)) if w <= h else (int(160 * w / h), 160), Image.BILINEAR)
    im.save(out, quality=90)
files = [os.path.join(r, f) for r, _, fs in os.walk(src) for f in fs if f.endswith(".jpg")]
with ProcessPoolExecutor() as ex:
    list(ex.map(one, files, chunksize=64))
print("reduced", len(files))
PY
  echo "reduce for torch: rc $? :: $(tail -n 1 /tmp/data/reduce.log)" >>"$SUM"
  export PYTHONUNBUFFERED=1
  for run in "full $JF/train" "r160 /tmp/jf160/train"; do
    set -- $run
    timeout 300 python3 benchmarks/pytorch_data.py --folder "$2" --workers "$W" --batch 256 --batches "$B" \
      --warmup 20 --json "/tmp/data/torch_$1.json" >"/tmp/data/torch_$1.log" 2>&1
    echo "torch data $1: rc $? :: $(grep -vE '^\s*[{}]|^\s*"' "/tmp/data/torch_$1.log" | tail -n 2 | tr '\n' ' ')" >>"$SUM"
  done
  tar czf "$OUT/data.tar.gz" -C /tmp data
fi

if has feed; then
  mkdir -p /tmp/feed
  for mode in stream memory; do
    timeout 300 "$BIN/trctl" train configs/resnet50_dts.yaml data.root=/tmp data.train_path=jf_train.dts \
      data.val_path=jf_val.dts data.in_memory=$([ $mode = memory ] && echo true || echo false) train.epochs=3 \
      data.workers="${DATA_WORKERS:-$(nproc)}" run.out_dir=/tmp/feed run.name=r50_dts_$mode run.progress=off \
      train.validate_every=3 >/tmp/feed/r50_dts_$mode.log 2>&1
    echo "trctl resnet50 from DTS (level 160, $mode): rc $?" >>"$SUM"
    grep -E 'epoch [0-9]+/|^done|error' /tmp/feed/r50_dts_$mode.log | sed 's/^/    /' >>"$SUM"
  done
  timeout 200 "$BIN/trctl" train configs/resnet50.yaml train.epochs=3 data.synthetic.train_size=19968 \
    data.synthetic.val_size=2000 run.out_dir=/tmp/feed run.name=r50_syn run.progress=off train.validate_every=3 \
    >/tmp/feed/r50_syn.log 2>&1
  echo "trctl resnet50 synthetic resident (same sizes): rc $?" >>"$SUM"
  grep -E 'epoch [0-9]+/|^done|error' /tmp/feed/r50_syn.log | sed 's/^/    /' >>"$SUM"
  tar czf "$OUT/feed.tar.gz" -C /tmp feed
fi
if has regress; then
  R=/tmp/regress
  rm -rf "$R" && mkdir -p "$R"
  REGRESS_RC=0
  compare() {  # compare RESULT BASELINE: the table into the summary, the worst exit code kept
    if [ ! -s "$1" ]; then  # the bench command failed or timed out: no figures to compare (exit 2, not "ok")
      echo "regress $2: no result ($1 missing); the end of ${1%.json}.log:" >>"$SUM"
      tail -n 5 "${1%.json}.log" 2>/dev/null | sed 's/^/    /' >>"$SUM"
      [ "$REGRESS_RC" -lt 2 ] && REGRESS_RC=2
      return
    fi
    python3 tools/regress "$1" "benchmarks/baselines/$2" >"$R/${2%.json}.regress.txt" 2>&1
    local rc=$?
    echo "regress $2: rc $rc" >>"$SUM"
    sed 's/^/    /' "$R/${2%.json}.regress.txt" >>"$SUM"
    [ "$rc" -gt "$REGRESS_RC" ] && REGRESS_RC=$rc
  }
  if has_regress mlp; then
    timeout 150 "$BIN/trctl" bench configs/mlp_fmnist.yaml --epochs 100 data.root="$DATA" train.precision=fp16 \
      --json "$R/train_mlp_fmnist.json" >"$R/train_mlp_fmnist.log" 2>&1
    echo "trctl bench mlp --epochs 100: rc $?" >>"$SUM"
    compare "$R/train_mlp_fmnist.json" gpu_train_mlp_fmnist.json
  fi
  if has_regress cnn; then
    for m in ${CNN_MODELS:-resnet50 vgg16bn resnet18}; do
      # the baselines were measured with autotuned cuDNN algorithms (TRCTL_AUTOTUNE_CACHE, set above)
      timeout 240 "$BIN/trctl" bench "configs/$m.yaml" --autotune data.synthetic.train_size=512 \
        data.synthetic.val_size=256 >"$R/autotune_$m.log" 2>&1
      echo "trctl bench $m --autotune: rc $?" >>"$SUM"
      timeout "${CNN_TRCTL_TIMEOUT:-150}" "$BIN/trctl" bench "configs/$m.yaml" --epochs 3 \
        data.synthetic.train_size=6400 data.synthetic.val_size=512 --json "$R/train_$m.json" >"$R/train_$m.log" 2>&1
      echo "trctl bench $m --epochs 3: rc $?" >>"$SUM"
      compare "$R/train_$m.json" "gpu_train_$m.json"
    done
  fi
  if has_regress data; then
    sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
    echo "page cache dropped: $([ $? = 0 ] && echo yes || echo no)" >>"$SUM"
    # 16 workers: the baseline's (run 16 on the 16-core H200 machine), whatever this machine has
    timeout 200 "$BIN/trctl" bench data /tmp/jf_train.dts --level 160 --workers "${REGRESS_DATA_WORKERS:-16}" \
      --batches 100 --warmup 10 --json "$R/data_dts160.json" >"$R/data_dts160.log" 2>&1
    echo "trctl bench data dts160: rc $?" >>"$SUM"
    compare "$R/data_dts160.json" gpu_data_dts160.json
  fi
  # compare_or_first RESULT BASELINE: compare when the baseline exists; else check RESULT against the schema
  # and print the command that makes it the first baseline (docs/bench.md)
  compare_or_first() {
    if [ -f "benchmarks/baselines/$2" ] || [ ! -s "$1" ]; then compare "$1" "$2"; return; fi
    python3 tools/regress "$1" "$1" >"${1%.json}.selfcheck.txt" 2>&1
    local rc=$?
    echo "regress $2: no baseline yet; $(basename "$1") $([ $rc = 0 ] && echo "well-formed, $(tail -n 1 "${1%.json}.selfcheck.txt" | grep -oE '[0-9]+ metrics')" || echo "MALFORMED (rc $rc)")" >>"$SUM"
    [ $rc = 0 ] || { sed 's/^/    /' "${1%.json}.selfcheck.txt" | tail -n 5 >>"$SUM"; [ "$REGRESS_RC" -lt 2 ] && REGRESS_RC=2; }
    [ $rc = 0 ] && echo "    first baseline, here: tar xzf regress.tar.gz && python3 tools/regress regress/$(basename "$1") benchmarks/baselines/$2 --update --tol ${3:-10%}" >>"$SUM"
  }
  if has_regress kernels; then
    timeout 240 "$BIN/trctl" bench kernels --json "$R/kernels.json" >"$R/kernels.log" 2>&1
    echo "trctl bench kernels: rc $?" >>"$SUM"
    compare_or_first "$R/kernels.json" gpu_kernels.json 10%
  fi
  if has_regress layers; then  # per-node times of a step (bench --layers) for each of REGRESS_LAYER_MODELS
    for m in ${REGRESS_LAYER_MODELS:-mlp_fmnist}; do
      case "$m" in
        mlp_fmnist) data_args="data.root=$DATA train.precision=fp16" ;;
        *) data_args="data.synthetic.train_size=1024 data.synthetic.val_size=256" ;;
      esac
      timeout 240 "$BIN/trctl" bench "configs/$m.yaml" --layers --reps 10 $data_args --json "$R/layers_$m.json" \
        >"$R/layers_$m.log" 2>&1
      echo "trctl bench $m --layers: rc $?" >>"$SUM"
      compare_or_first "$R/layers_$m.json" "gpu_layers_$m.json" 15%
    done
  fi
  echo "regress: $([ "$REGRESS_RC" = 0 ] && echo ok || echo FAILED) (rc $REGRESS_RC)" >>"$SUM"
  tar czf "$OUT/regress.tar.gz" -C /tmp regress
fi
cat "$SUM"
exit "${REGRESS_RC:-0}"
