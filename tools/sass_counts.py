#!/usr/bin/env python3
"""Where a kernel's instructions go, from Nsight Compute's source page exported as CSV
(`ncu --import R.ncu-rep --page source --print-source sass --csv > sass.csv`; tools/device_ncu.sh writes it with
NCU_SOURCE=1). Prints, as markdown:
  - the executed warp instructions in all, and per unit of work: --per N, or the executed count of the first
    instruction whose text contains --per-marker (e.g. "BAR.SYNC": a per-iteration barrier's count is warps x
    iterations);
  - the opcodes by executed share, with their share of the warp-stall samples;
  - regions of the listing split before each instruction containing one of the --split texts (default: the CTA
    barrier, the warpgroup arrive before a wgmma batch, and the wgmma wait), each with its instructions per unit.
Used on the wgconv ring kernel (RESULTS.md run 61: 2,480 -> 1,208 instructions per warp per tile). Stdlib only;
exits 2 with the file named when it is not such an export."""
import argparse
import csv
import sys
from collections import Counter

DEFAULT_SPLITS = ["BAR.SYNC", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR"]


def fail(path, why):
    print("sass_counts: %s: %s" % (path, why), file=sys.stderr)
    sys.exit(2)


def as_int(text):
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return 0


def read_listing(path):
    """[(source text, executed warp instructions, stall samples)] in address order."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        fail(path, "cannot read (%s)" % e.strerror)
    header = next((i for i, r in enumerate(rows) if "Source" in r and "Instructions Executed" in r), None)
    if header is None:
        fail(path, "no 'Source' and 'Instructions Executed' columns: not an ncu source-page CSV export")
    cols = rows[header]
    src, ex = cols.index("Source"), cols.index("Instructions Executed")
    stall = cols.index("Warp Stall Sampling (All Samples)") if "Warp Stall Sampling (All Samples)" in cols else None
    out = []
    for r in rows[header + 1:]:
        if len(r) <= max(src, ex):
            continue
        out.append((r[src].strip(), as_int(r[ex]), as_int(r[stall]) if stall is not None and len(r) > stall else 0))
    if not out:
        fail(path, "no instruction rows")
    return out


def opcode(text):
    words = text.split()
    if words and words[0].startswith("@"):  # a predicate guard
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--per", type=float, default=0.0, help="units of work (e.g. warps x tiles) to divide by")
    ap.add_argument("--per-marker", default="", help="divide by the executed count of the first such instruction")
    ap.add_argument("--split", action="append", default=None, help="start a region before instructions with this")
    ap.add_argument("--top", type=int, default=20, help="opcodes listed (default 20)")
    a = ap.parse_args()
    listing = read_listing(a.csv)
    total = sum(n for _, n, _ in listing)
    samples = sum(s for _, _, s in listing)
    per = a.per
    if a.per_marker:
        hit = next((n for t, n, _ in listing if a.per_marker in t and n > 0), 0)
        if hit == 0:
            fail(a.csv, "no executed instruction contains %r" % a.per_marker)
        per = float(hit)
    unit = (lambda n: "%.0f" % (n / per)) if per > 0 else (lambda n: "-")
    print("%s: %d executed warp instructions%s, %d stall samples" %
          (a.csv, total, " = %s per unit (%g units)" % (unit(total), per) if per > 0 else "", samples))
    print()
    print("| opcode | executed | share | stall samples |")
    print("|---|---:|---:|---:|")
    ops, stalls = Counter(), Counter()
    for t, n, s in listing:
        ops[opcode(t)] += n
        stalls[opcode(t)] += s
    for op, n in ops.most_common(a.top):
        print("| %s | %d | %.1f %% | %.1f %% |" %
              (op, n, 100.0 * n / max(total, 1), 100.0 * stalls[op] / max(samples, 1)))
    print()
    splits = a.split if a.split else DEFAULT_SPLITS
    print("| region (starts at) | first line | instructions | per unit | stall samples |")
    print("|---|---:|---:|---:|---:|")
    start, name, n_sum, s_sum = 0, "(entry)", 0, 0
    regions = []
    for i, (t, n, s) in enumerate(listing):
        if i > 0 and any(m in t for m in splits) and n > 0:
            regions.append((name, start, n_sum, s_sum))
            start, name, n_sum, s_sum = i, t.split(",")[0][:40], 0, 0
        n_sum += n
        s_sum += s
    regions.append((name, start, n_sum, s_sum))
    for name, line, n, s in regions:
        print("| %s | %d | %d | %s | %d |" % (name, line, n, unit(n), s))


if __name__ == "__main__":
    main()
