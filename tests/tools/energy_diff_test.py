#!/usr/bin/env python3
"""tools/energy_diff.py on two hand-made `bench --layers --energy` JSONs: unchanged nodes (time within --same) give
the ratio's median and spread, the others are listed by their joules' difference with the net and the noise band,
small nodes are summed apart, and a profile without per-node energy or a file that is not a layers result exits 2
naming it. Run by ctest ("tools: energy diff"); stdlib only."""
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

from tool_check import ROOT, check, finish

TOOL = os.path.join(ROOT, "tools", "energy_diff.py")


def profile(nodes, step_j):
    return {"schema": "trctl-bench/1", "suite": "layers", "sources": ["configs/x.yaml"], "commit": "abc",
            "machine": {"gpu": "TestGPU"}, "batch": 256, "reps": 5, "energy_s": 0.7, "energy_settle_s": 1,
            "metrics": [{"name": "step_j", "value": step_j, "unit": "J"},
                        {"name": "step_w", "value": 700, "unit": "W"}],
            "nodes": [{"name": n, "op": op, "shape": "(1)", "ms": ms, "flops": 0, "bytes": 0, "mj": mj, "w": 700}
                      for n, op, ms, mj in nodes]}


def run(*args):
    return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)


def main():
    a = [("c1", "conv2d", 1.0, 1000.0), ("c2", "conv2d", 1.0, 500.0), ("c3", "conv2d", 2.0, 800.0),
         ("bn", "batch_norm", 1.0, 700.0), ("tiny", "zero_fill", 0.01, 5.0), ("gone", "batch_norm", 0.5, 300.0)]
    b = [("c1", "conv2d", 1.02, 1100.0), ("c2", "conv2d", 0.99, 450.0), ("c3", "conv2d", 2.0, 800.0),
         ("bn", "batch_norm", 1.5, 900.0), ("tiny", "zero_fill", 0.01, 9.0), ("new", "conv2d", 0.3, 250.0)]
    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        for path, nodes, step in ((pa, a, 3.3), (pb, b, 3.5)):
            with open(path, "w") as f:
                json.dump(profile(nodes, step), f)
        r = run(pa, pb)
        out = r.stdout
        check("exit 0", r.returncode == 0, r.stderr)
        check("each profile described with its settle",
              "A: step 3.30 J per replay at 700 W, nodes one by one 3.31 J (0.7 s per figure, after 1 s of settle)"
              in out, out)
        # unchanged: c1 (time +2 %: 1.1), c2 (-1 %: 0.9), c3 (1.0); tiny is under --min-j
        ratios = [1.1, 0.9, 1.0]
        check("unchanged nodes: median and spread of B / A",
              "Unchanged nodes (time within 5 %%, at least 0.020 J): 3; joules B / A median 1.000, standard deviation "
              "%.3f, extremes 0.900 (c2) and 1.100 (c1)" % statistics.stdev(ratios) in out, out)
        check("small nodes summed apart", "Nodes under 0.020 J in both profiles: 1, left out (B - A +0.004 J in all)"
              in out, out)
        check("gone first (|-0.3| > |+0.25| > |+0.2|), then new, then bn",
              out.index("| gone |") < out.index("| new |") < out.index("| bn |"), out)
        check("a changed node's row", "| bn | batch_norm | 1.000 | 1.500 | 0.700 | 0.900 | +0.200 |" in out, out)
        check("a node in one profile only", "| new | conv2d | - | 0.300 | - | 0.250 | +0.250 |" in out, out)
        band = statistics.stdev(ratios) * math.sqrt(0.9 ** 2 + 0.3 ** 2 + 0.25 ** 2)
        check("net and noise band", "Net over the changed nodes: +0.150 J (noise band +-%.3f J" % band in out, out)
        r = run(pa, pb, "--top", "1")
        check("--top: the rest summed", "| ... 2 more | | | | | | +0.450 |" in r.stdout, r.stdout)
        # no energy in B: exit 2 naming it
        doc = profile(b, 3.5)
        for n in doc["nodes"]:
            del n["mj"]
        with open(pb, "w") as f:
            json.dump(doc, f)
        r = run(pa, pb)
        check("no per-node energy: exit 2 naming the file", r.returncode == 2 and pb in r.stderr and
              "no per-node energy (profile with --energy S)" in r.stderr, r.stderr)
        with open(pb, "w") as f:
            json.dump({"suite": "train"}, f)
        r = run(pa, pb)
        check("not a layers result: exit 2", r.returncode == 2 and "not a `trctl bench --layers --json` result" in
              r.stderr, r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
