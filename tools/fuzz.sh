#!/usr/bin/env bash
# Bounded fuzzing for CI: builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, CPU only) and runs each
# over its committed seed corpus (tests/fuzz/corpus/<target>/) for SECONDS_PER_TARGET (default 20), as many targets
# at once as there are cores. Prints each target's executions and whether it found anything; crash, leak, timeout
# and out-of-memory inputs are copied to $OUT/crashes/ (OUT: $TRCTL_FUZZ_OUT, default build-fuzz/fuzz-out), and the
# script exits 1 when there is any. New corpus entries go to $OUT/<target>/new-corpus; the committed corpus is only
# read. Build directory: $TRCTL_FUZZ_BUILD (default build-fuzz/ in the repo, git-ignored).
#   bash tools/fuzz.sh [SECONDS_PER_TARGET]
# Reproduce a finding: build-fuzz/tests/fuzz/<target> <input>. Corpus files: the seeds gen_corpus writes (regenerate
# after a format change: build-fuzz/tests/fuzz/gen_corpus . tests/fuzz/corpus), regress_* (inputs of fixed bugs)
# and grown-* (inputs of longer runs that reached new code, minimized with -merge=1).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
secs=${1:-20}
build=${TRCTL_FUZZ_BUILD:-$repo/build-fuzz}
out=${TRCTL_FUZZ_OUT:-$build/fuzz-out}
targets=(fuzz_spec fuzz_idx fuzz_jpeg fuzz_dts fuzz_ckpt)
start=$(date +%s)

# clang and its libFuzzer/sanitizer runtimes (Debian: clang, libclang-rt-dev), plus the libraries trctl links.
pkgs=(clang libclang-rt-dev cmake make pkg-config libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
      libturbojpeg0-dev libxxhash-dev zlib1g-dev)
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] && ! dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

# -O1 -g without NDEBUG: fast enough to build on 2 cores, checks kept, readable stacks.
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTRCTL_FUZZ=ON -DTRCTL_CUDA=OFF \
  -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
built=$(date +%s)

rm -rf "$out"
mkdir -p "$out/crashes"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_target() {
  local t=$1 dir="$out/$1"
  mkdir -p "$dir/new-corpus"
  set +e
  "$build/tests/fuzz/$t" -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/" "$dir/new-corpus" "tests/fuzz/corpus/$t" >"$dir/log" 2>&1
  echo $? >"$dir/rc"
  set -e
}

jobs_max=$(nproc)
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_target "$t" &
done
wait

failed=0
printf '%-10s %12s %8s  %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  dir="$out/$t"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  findings=()
  for f in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*; do
    [ -e "$f" ] || continue
    case "$(basename "$f")" in slow-unit-*) continue ;; esac
    cp "$f" "$out/crashes/$t-$(basename "$f")"
    findings+=("$out/crashes/$t-$(basename "$f")")
  done
  rc=$(cat "$dir/rc")
  if [ "$rc" = 0 ] && [ ${#findings[@]} = 0 ]; then
    result="ok"
  else
    result="FAILED (exit $rc, ${#findings[@]} input(s))"
    failed=1
  fi
  printf '%-10s %12s %8s  %s\n' "$t" "${runs:-?}" "${rate:-?}" "$result"
  for f in "${findings[@]}"; do echo "    $f"; done
  if [ "$result" != ok ]; then
    echo "    --- $dir/log (last 40 lines)"
    tail -40 "$dir/log" | sed 's/^/    /'
  fi
done
end=$(date +%s)
echo "fuzz.sh: build $((built - start)) s, fuzzing $((end - built)) s, total $((end - start)) s; logs in $out"
exit "$failed"
