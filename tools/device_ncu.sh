#!/usr/bin/env bash
# Run ON THE GPU MACHINE (device tool), from the repo root, after tools/device_pack.sh here: Nsight Compute over
# the kernels of one trctl command, so that every session profiles a kernel the same way.
#   NCU_KERNELS='regex:fewc_' NCU_CMD='bench kernels' bash tools/device_ncu.sh
# NCU_KERNELS  ncu's -k filter (default regex:fewc_)
# NCU_CMD      the trctl arguments (default "bench kernels")
# NCU_COUNT    kernels profiled (--launch-count, default 4)
# NCU_SKIP     matching launches skipped first (--launch-skip, default 0)
# NCU_SET      ncu's --set (default full: occupancy, warp-state stall reasons, pipe utilisation, memory tables)
# NCU_NAME_BASE what -k matches (--kernel-name-base: function, the default; demangled: with template arguments,
#              e.g. NCU_KERNELS='regex:bn_bwd_stats.*TiledPoolGrad' NCU_NAME_BASE=demangled)
# NCU_SOURCE=1 also writes the source page with per-SASS-instruction executed counts and stall samples
#              ($OUT/ncu_sass.csv; `python3 tools/sass_counts.py ncu_sass.csv --per-marker BAR.SYNC` here sums it
#              by opcode and by region, e.g. per warp per tile of a persistent kernel: RESULTS.md run 61)
# NCU_ONLY     `bench kernels --only` texts, '|'-separated, appended to NCU_CMD (texts may hold spaces), e.g.
#              NCU_ONLY="vgg16 conv1_2 fwd wgconv ring px"
# The clocks are left as the driver sets them (--clock-control none), as in training. The report text lands in
# $OUT/ncu.txt (the raw details page, then the source-level stall summary when the set has it).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
BIN=.device/bin
for z in "$BIN"/*.xz; do [ -f "$z" ] && xz -df "$z"; done
chmod +x "$BIN"/* 2>/dev/null
NCU="$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)"
if [ -z "$NCU" ]; then echo "device_ncu: no ncu on this machine" | tee "$OUT/ncu.txt"; exit 2; fi
# ncu's injection needs the CUDA libraries the binary loads (cuBLASLt, cuDNN from the python wheels here).
LIBS="$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/*.so*")})))' 2>/dev/null)"
export LD_LIBRARY_PATH="${LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
only=()
if [ -n "${NCU_ONLY:-}" ]; then
  IFS='|' read -r -a parts <<<"$NCU_ONLY"
  for p in "${parts[@]}"; do only+=(--only "$p"); done
fi
rep=(--print-details all)  # the details page to stdout; with NCU_SOURCE=1 a report file, printed from below
[ "${NCU_SOURCE:-0}" = 1 ] && rep=(-o /tmp/device_ncu_rep -f --import-source no)
# shellcheck disable=SC2086
"$NCU" --clock-control none --kernel-name-base "${NCU_NAME_BASE:-function}" -k "${NCU_KERNELS:-regex:fewc_}" --launch-skip "${NCU_SKIP:-0}" \
  --launch-count "${NCU_COUNT:-4}" --set "${NCU_SET:-full}" "${rep[@]}" \
  "$BIN/trctl" ${NCU_CMD:-bench kernels} "${only[@]}" >"$OUT/ncu.txt" 2>&1
rc=$?
if [ "${NCU_SOURCE:-0}" = 1 ]; then  # with -o the details go to the report: print them from it, and the source page
  "$NCU" --import /tmp/device_ncu_rep.ncu-rep --page details --print-details all >>"$OUT/ncu.txt" 2>&1
  "$NCU" --import /tmp/device_ncu_rep.ncu-rep --page source --print-source sass --csv >"$OUT/ncu_sass.csv" 2>&1
  rm -f /tmp/device_ncu_rep.ncu-rep
fi
extra=""
[ "${NCU_SOURCE:-0}" = 1 ] && extra=", $OUT/ncu_sass.csv"
echo "device_ncu: exit $rc ($(grep -c 'Section:' "$OUT/ncu.txt") sections) -> $OUT/ncu.txt$extra"
