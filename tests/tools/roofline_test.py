#!/usr/bin/env python3
"""tools/roofline.py on a hand-made `bench --layers` JSON: per node the roofline is max(flops / peak, bytes / bw),
op kinds sum their nodes, the table is ordered by gap, the step-at-roofline line uses the result's batch, and a
file that is not a layers result exits 2 with the file named. Run by ctest ("tools: roofline"); stdlib only."""
import json
import os
import subprocess
import sys
import tempfile

from tool_check import ROOT, check, finish

TOOL = os.path.join(ROOT, "tools", "roofline.py")


def main():
    # bandwidth 1000 GB/s = 1e9 bytes per ms; peak 1 TFLOP/s = 1e9 flops per ms
    doc = {
        "schema": "trctl-bench/1", "suite": "layers", "sources": ["configs/x.yaml"], "commit": "abc",
        "machine": {"gpu": "TestGPU"}, "batch": 100, "reps": 1,
        "metrics": [{"name": "step_ms", "value": 10.0, "unit": "ms", "better": "lower"}],
        "nodes": [
            {"name": "bn1", "op": "batch_norm", "shape": "(4, 4)", "ms": 3.0, "flops": 0, "bytes": 1e9},   # roof 1
            {"name": "bn2", "op": "batch_norm", "shape": "(4, 4)", "ms": 2.0, "flops": 0, "bytes": 1e9},   # roof 1
            {"name": "conv", "op": "conv2d", "shape": "(4, 4)", "ms": 4.0, "flops": 2e9, "bytes": 1e9},    # roof 2
            {"name": "flat", "op": "flatten", "shape": "(4, 4)", "ms": 0.0, "flops": 0, "bytes": 0},
        ],
    }
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "layers.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        r = subprocess.run([sys.executable, TOOL, path, "--bw", "1000", "--tflops", "1"], capture_output=True, text=True)
        out = r.stdout
        check("exit 0", r.returncode == 0, r.stderr)
        check("batch norm: 2 nodes, 5 ms, roofline 2 ms, 2.50x, gap 3 ms",
              "| batch_norm | 2 | 5.000 | 55.6% | 2.000 | 2.50 | 3.000 |" in out, out)
        check("conv: roofline from flops (2 ms), not bytes (1 ms)", "| conv2d | 1 | 4.000 | 44.4% | 2.000 | 2.00 | 2.000 |" in out, out)
        check("largest gap first", out.index("| batch_norm |") < out.index("| conv2d |"), out)
        check("zero-time kinds left out", "| flatten |" not in out, out)
        check("node sum", "| **node sum** | 4 | 9.000 | 100% | 4.000 | 2.25 | 5.000 |" in out, out)
        check("step at roofline", "10.000 ms = 10000 img/s; every node at its roofline: 4.000 ms = 25000 img/s" in out, out)
        check("largest node gap listed first", out.index("- bn1,") < out.index("- conv,"), out)
        check("no energy section without --energy", "Energy" not in out and "Most energy" not in out, out)
        # --energy: joules by op kind (mJ / ms = W) and the nodes that spend the most
        for n, mj in zip(doc["nodes"], (1500.0, 1000.0, 2800.0, 0.0)):
            n["mj"] = mj
        doc["nodes"][2]["w"] = 560.0  # the conv's energy loop at 560 W: 5 ms per run under that load, burst 4 ms
        doc["metrics"] += [{"name": "step_j", "value": 5.1, "unit": "J"},
                           {"name": "step_w", "value": 510, "unit": "W"}]
        with open(path, "w") as f:
            json.dump(doc, f)
        r = subprocess.run([sys.executable, TOOL, path, "--bw", "1000", "--tflops", "1"], capture_output=True,
                           text=True)
        out = r.stdout
        check("energy: step line", "Energy: step 5.10 J per replay at 510 W; nodes one by one 5.30 J." in out, out)
        check("energy: conv first, 560 W over its loaded 5 ms", "| conv2d | 1 | 2.800 | 52.8% | 560 | 5.000 | 4.000 |"
              in out, out)
        check("energy: batch norm 2.5 J at 500 W (no \"w\": the burst ms)",
              "| batch_norm | 2 | 2.500 | 47.2% | 500 | 5.000 | 5.000 |" in out, out)
        check("energy: most-energy node first",
              "Most energy (node, op, J, W, loaded ms, burst ms):\n- conv, conv2d: 2.800 J at 560 W over 5.000 ms "
              "(burst 4.000 ms)" in out, out)
        # joules per unit of work: the conv is FLOP-bound (2 ms of flops vs 1 ms of bytes), the batch norms
        # byte-bound (1,500 and 1,000 pJ per byte, median 1,250): bn1 spends 0.25 J above it, bn2 0.25 below
        check("energy: medians by bound", "medians: 1400.000 pJ/FLOP over 1 nodes; 1250.000 pJ/byte over 2 nodes"
              in out, out)
        check("energy: most joules above the median rate first",
              "- bn1, batch_norm: 1.500 J vs 1.250 (+0.250 J; 1500.000 pJ/byte)\n- conv, conv2d: 2.800 J vs 2.800 "
              "(+0.000 J; 1400.000 pJ/FLOP)\n- bn2, batch_norm: 1.000 J vs 1.250 (-0.250 J; 1000.000 pJ/byte)" in out,
              out)
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:
            f.write("{\"schema\": 1}")
        r = subprocess.run([sys.executable, TOOL, bad], capture_output=True, text=True)
        check("not a layers result: exit 2, file named", r.returncode == 2 and "bad.json" in r.stderr, r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
