#!/usr/bin/env bash
# Runs the GPU test binary on a machine with an NVIDIA GPU and collects logs:
#   tools/device_check.sh [BIN_DIR]        (from the repo root; BIN_DIR holds test_gpu, default .device/bin)
# Results go under $OUT (default /tmp/out): nvidia-smi.log, test_gpu.log, memcheck.log, racecheck.log,
# summary.txt. Every stage runs even if an earlier one failed; the exit status is non-zero if any stage failed or
# if test_gpu reported "skipped" (no usable device) -- on the GPU machine a skip is a problem, not a pass.
# Environment: SKIP_SANITIZERS=1 (no compute-sanitizer stages), MEMCHECK_FILTER (Catch2 spec for memcheck only),
# TEST_TIMEOUT (s, default 1200), SANITIZER_TIMEOUT (s, default 2400), TEST_FILTER (Catch2 test spec
# for all stages, default all tests), RACECHECK_FILTER (racecheck's own spec when given, even with TEST_FILTER;
# default TEST_FILTER, else "~[gemm]": racecheck only instruments our kernels'
# shared memory, and running it over cuBLASLt kernels costs a lot of time for nothing we own).
set -u

BIN_DIR="${1:-.device/bin}"
OUT="${OUT:-/tmp/out}"
TEST_TIMEOUT="${TEST_TIMEOUT:-1200}"
SANITIZER_TIMEOUT="${SANITIZER_TIMEOUT:-2400}"
TEST_FILTER="${TEST_FILTER:-}"
RACECHECK_FILTER_GIVEN="${RACECHECK_FILTER:-}"  # set by the caller: racecheck runs it even with a TEST_FILTER
RACECHECK_FILTER="${RACECHECK_FILTER:-~[gemm]}"
TEST_BIN="$BIN_DIR/test_gpu"

mkdir -p "$OUT" || { echo "cannot create $OUT" >&2; exit 2; }
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

names=()
states=()
details=()
any_fail=0

record() {  # name state detail
  names+=("$1")
  states+=("$2")
  details+=("$3")
  case "$2" in
    PASS | N/A) ;;
    *) any_fail=1 ;;
  esac
}

have_timeout=0
command -v timeout >/dev/null 2>&1 && have_timeout=1
with_timeout() {  # seconds cmd...
  local t="$1"
  shift
  if [ "$have_timeout" = 1 ]; then timeout --signal=TERM --kill-after=30 "$t" "$@"; else "$@"; fi
}

# Catch2's final line, e.g. "test cases: 25 | 24 passed | 1 failed" or "All tests passed (...)".
catch_summary() {
  grep -E "^(All tests passed|test cases:)" "$1" 2>/dev/null | tail -n 1 | tr -s ' '
}

# Runs a test_gpu stage and classifies its exit status (77 = skipped, 124/137 = timeout).
run_stage() {  # name log timeout cmd...
  local name="$1" log="$2" t="$3"
  shift 3
  echo
  echo "=== $name: $*"
  local start end rc
  start=$(date +%s)
  with_timeout "$t" "$@" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  local secs=$((end - start)) summ
  summ="$(catch_summary "$log")"
  tail -n 25 "$log"
  if [ "$rc" = 0 ]; then
    record "$name" PASS "rc 0, ${secs}s; ${summ:-no Catch2 summary}"
  elif [ "$rc" = 77 ]; then
    record "$name" SKIPPED "rc 77 (no CUDA device seen), ${secs}s"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    record "$name" TIMEOUT "rc $rc after ${secs}s (limit ${t}s); ${summ:-no Catch2 summary}"
  else
    record "$name" FAIL "rc $rc, ${secs}s; ${summ:-no Catch2 summary}; see $log"
  fi
}

echo "=== device_check: binaries from $BIN_DIR, results in $OUT"
echo "=== host: $(uname -a)"

# 1. The GPU as the driver sees it.
echo
echo "=== nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
  if nvidia-smi >"$OUT/nvidia-smi.log" 2>&1; then
    cat "$OUT/nvidia-smi.log"
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm --format=csv \
      >>"$OUT/nvidia-smi.log" 2>&1
    record "nvidia-smi" PASS "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  else
    cat "$OUT/nvidia-smi.log"
    record "nvidia-smi" FAIL "nvidia-smi failed; see $OUT/nvidia-smi.log"
  fi
else
  echo "nvidia-smi not found"
  record "nvidia-smi" N/A "not installed"
fi

# 2. The tests.
if [ ! -x "$TEST_BIN" ]; then
  echo "missing or not executable: $TEST_BIN" | tee "$OUT/test_gpu.log"
  record "test_gpu" FAIL "binary $TEST_BIN missing"
  record "memcheck" FAIL "not run: no test binary"
  record "racecheck" FAIL "not run: no test binary"
else
  filter=()
  [ -n "$TEST_FILTER" ] && filter=("$TEST_FILTER")
  run_stage "test_gpu" "$OUT/test_gpu.log" "$TEST_TIMEOUT" \
    "$TEST_BIN" --reporter console --durations yes ${filter[@]+"${filter[@]}"}
  grep -E "WARN|warning|unsupported" "$OUT/test_gpu.log" >"$OUT/test_gpu.warnings.txt" 2>/dev/null
  grep -E "^\s+\[FAIL\]" "$OUT/test_gpu.log" >"$OUT/test_gpu.failures.txt" 2>/dev/null

  # 3. compute-sanitizer, if present.
  SAN="$(command -v compute-sanitizer 2>/dev/null || true)"
  for cand in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$SAN" ] && [ -x "$cand" ] && SAN="$cand"
  done
  if [ "${SKIP_SANITIZERS:-0}" = 1 ]; then
    record "memcheck" N/A "skipped (SKIP_SANITIZERS=1)"
    record "racecheck" N/A "skipped (SKIP_SANITIZERS=1)"
  elif [ -z "$SAN" ]; then
    echo
    echo "=== compute-sanitizer not found: memcheck and racecheck not run"
    record "memcheck" N/A "compute-sanitizer not installed"
    record "racecheck" N/A "compute-sanitizer not installed"
  else
    echo
    echo "=== $("$SAN" --version 2>&1 | tail -n 1)"
    mfilter=("${filter[@]+"${filter[@]}"}")
    [ -n "${MEMCHECK_FILTER:-}" ] && mfilter=("$MEMCHECK_FILTER")
    run_stage "memcheck" "$OUT/memcheck.log" "$SANITIZER_TIMEOUT" \
      "$SAN" --tool memcheck --error-exitcode 99 --print-limit 50 "$TEST_BIN" ${mfilter[@]+"${mfilter[@]}"}
    rfilter=()
    if [ -n "$RACECHECK_FILTER_GIVEN" ]; then rfilter=("$RACECHECK_FILTER_GIVEN"); elif [ -n "$TEST_FILTER" ]; then rfilter=("$TEST_FILTER"); elif [ -n "$RACECHECK_FILTER" ]; then rfilter=("$RACECHECK_FILTER"); fi
    run_stage "racecheck" "$OUT/racecheck.log" "$SANITIZER_TIMEOUT" \
      "$SAN" --tool racecheck --racecheck-report all --error-exitcode 99 --print-limit 50 "$TEST_BIN" ${rfilter[@]+"${rfilter[@]}"}
    for log in "$OUT/memcheck.log" "$OUT/racecheck.log"; do
      [ -f "$log" ] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 2
    done
  fi
fi

# 4. Summary, last.
{
  echo
  echo "=== summary ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  printf '%-12s %-8s %s\n' "stage" "result" "detail"
  printf '%-12s %-8s %s\n' "-----" "------" "------"
  for i in "${!names[@]}"; do
    printf '%-12s %-8s %s\n' "${names[$i]}" "${states[$i]}" "${details[$i]}"
  done
  if [ -s "$OUT/test_gpu.failures.txt" ] 2>/dev/null; then
    echo
    echo "first failing checks (from test_gpu.log):"
    head -n 15 "$OUT/test_gpu.failures.txt"
  fi
  if [ -s "$OUT/test_gpu.warnings.txt" ] 2>/dev/null; then
    echo
    echo "warnings / unsupported epilogues: $(wc -l <"$OUT/test_gpu.warnings.txt") lines in $OUT/test_gpu.warnings.txt"
  fi
} | tee "$SUMMARY"

exit "$any_fail"
