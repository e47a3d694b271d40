#!/usr/bin/env python3
"""tools/sass_counts.py on a hand-made ncu source-page CSV: the total and per-unit counts (--per and --per-marker),
the opcode shares with predicate guards stripped, the regions split at the default markers, and a file that is not
such an export exits 2 with the file named. Run by ctest ("tools: sass counts"); stdlib only."""
import os
import subprocess
import sys
import tempfile

from tool_check import ROOT, check, finish

TOOL = os.path.join(ROOT, "tools", "sass_counts.py")


CSV = '''"Kernel Name","k(int)",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"
"0x10","      LDC R1, c[0x0][0x28]","2","2","4"
"0x20","      IMAD R2, R3, R4, RZ","1","1","36"
"0x30","      BAR.SYNC.DEFER_BLOCKING 0x0","6","6","8"
"0x40","  @P0 IMAD R5, R6, R7, RZ","0","0","16"
"0x50","      WARPGROUP.ARRIVE","1","1","8"
"0x60","      HGMMA.64x128x16.F32 R24, gdesc[UR4], R24","10","10","8"
"0x70","      WARPGROUP.DEPBAR.LE gsb0, 0x0","3","3","8"
"0x80","      STG.E desc[UR32][R12.64], R15","1","1","16"
"0x90","      EXIT","0","0","0"
'''


def run(args):
    return subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sass.csv")
        with open(path, "w") as f:
            f.write(CSV)
        r = run([path, "--per-marker", "BAR.SYNC"])
        out = r.stdout
        check("exit 0", r.returncode == 0, r.stderr)
        check("total and per unit (the barrier's 8)", "104 executed warp instructions = 13 per unit (8 units)" in out,
              out)
        check("IMAD with its guarded one: 52 = 50.0 %", "| IMAD | 52 | 50.0 % | 4.2 % |" in out, out)
        check("regions: entry 40 = 5 per unit", "| (entry) | 0 | 40 | 5 | 3 |" in out, out)
        check("regions: barrier to arrive 24", "| BAR.SYNC.DEFER_BLOCKING 0x0 | 2 | 24 | 3 | 6 |" in out, out)
        check("regions: the wgmma batch", "| WARPGROUP.ARRIVE | 4 | 16 | 2 | 11 |" in out, out)
        check("regions: after the wait", "| WARPGROUP.DEPBAR.LE gsb0 | 6 | 24 | 3 | 4 |" in out, out)
        r = run([path, "--per", "4"])
        check("--per 4", "= 26 per unit (4 units)" in r.stdout, r.stdout)
        r = run([path])
        check("no unit: dashes", "| (entry) | 0 | 40 | - | 3 |" in r.stdout, r.stdout)
        r = run([path, "--per-marker", "NOPE"])
        check("a missing marker exits 2", r.returncode == 2 and "NOPE" in r.stderr, r.stderr)
        bad = os.path.join(d, "bad.csv")
        with open(bad, "w") as f:
            f.write("a,b\n1,2\n")
        r = run([bad])
        check("not an export: exit 2 naming the file", r.returncode == 2 and "bad.csv" in r.stderr, r.stderr)
        r = run([os.path.join(d, "missing.csv")])
        check("a missing file: exit 2", r.returncode == 2 and "missing.csv" in r.stderr, r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
