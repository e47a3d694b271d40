#!/usr/bin/env python3
"""How far each op kind of a training step is from its roofline, from `trctl bench CFG --layers --json` output.

    tools/roofline.py LAYERS.json [--bw GB/s] [--tflops TFLOP/s] [--top N]

Per node, the roofline time is max(flops / peak, bytes / bandwidth): `bytes` is what the node must read and write
at least once (its inputs and outputs, docs/bench.md), `flops` its matrix work. Defaults are the H200's ceilings
that `trctl bench kernels` measured (device copy 4,084 GB/s, cuBLASLt f16 GEMM 795 TFLOP/s, RESULTS.md runs 26/27);
pass the ones of the same run when you have them. Prints a markdown table by op kind: nodes, measured ms, share
of the node sum, roofline ms, measured / roofline, and the gap (measured - roofline), biggest gap first; then the
N nodes with the biggest gaps, and the step at roofline (what the model would reach if every node ran at its
ceiling with the same graph: passes that a fusion would remove still count). With `--energy` in the profile, the
joules by op kind, the nodes that spend the most, and those that spend the most above the median joules per FLOP
(matrix nodes) or per byte (the others) follow. Standard library only.
"""
import argparse
import json
import statistics
import sys
from collections import OrderedDict


def roofline_ms(node, bw_gbs, tflops):
    t_bytes = node.get("bytes", 0) / (bw_gbs * 1e9) * 1e3
    t_flops = node.get("flops", 0) / (tflops * 1e12) * 1e3
    return max(t_bytes, t_flops)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("layers_json")
    ap.add_argument("--bw", type=float, default=4084.0, help="memory bandwidth ceiling, GB/s")
    ap.add_argument("--tflops", type=float, default=795.0, help="matrix ceiling, TFLOP/s")
    ap.add_argument("--top", type=int, default=10, help="nodes with the largest gaps to list")
    a = ap.parse_args(argv)
    try:
        with open(a.layers_json) as f:
            doc = json.load(f)
        nodes = doc["nodes"]
        metrics = {m["name"]: m["value"] for m in doc.get("metrics", [])}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("error: %s: not a `trctl bench --layers --json` result (%s)" % (a.layers_json, e), file=sys.stderr)
        return 2
    kinds = OrderedDict()
    for n in nodes:
        k = kinds.setdefault(n["op"], {"count": 0, "ms": 0.0, "roof": 0.0, "mj": 0.0, "loaded": 0.0})
        k["count"] += 1
        k["ms"] += n["ms"]
        k["roof"] += roofline_ms(n, a.bw, a.tflops)
        k["mj"] += n.get("mj", 0.0)
        k["loaded"] += loaded_ms(n)
    total = sum(k["ms"] for k in kinds.values())
    roof_total = sum(k["roof"] for k in kinds.values())
    src = ", ".join(doc.get("sources", []))
    print("%s (commit %s, %s, batch %s): ceilings %.0f GB/s, %.0f TFLOP/s" %
          (src, doc.get("commit", "?"), doc.get("machine", {}).get("gpu", "?"), doc.get("batch", "?"), a.bw, a.tflops))
    print()
    print("| op kind | nodes | ms | share | roofline ms | measured / roofline | gap ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, k in sorted(kinds.items(), key=lambda kv: -(kv[1]["ms"] - kv[1]["roof"])):
        if k["ms"] <= 0:
            continue
        ratio = "%.2f" % (k["ms"] / k["roof"]) if k["roof"] > 0 else "-"
        print("| %s | %d | %.3f | %.1f%% | %.3f | %s | %.3f |" %
              (name, k["count"], k["ms"], 100 * k["ms"] / total, k["roof"], ratio, k["ms"] - k["roof"]))
    print("| **node sum** | %d | %.3f | 100%% | %.3f | %.2f | %.3f |" %
          (len(nodes), total, roof_total, total / roof_total if roof_total else 0, total - roof_total))
    print()
    step = metrics.get("step_ms")
    batch = doc.get("batch")
    if step and batch:
        print("Step (captured graph replay): %.3f ms = %.0f img/s; every node at its roofline: %.3f ms = %.0f img/s." %
              (step, batch / step * 1e3, roof_total, batch / roof_total * 1e3 if roof_total else 0))
        print()
    print("Largest gaps (node, op, shape, ms, roofline ms, ratio):")
    gaps = sorted(nodes, key=lambda n: -(n["ms"] - roofline_ms(n, a.bw, a.tflops)))
    for n in gaps[:a.top]:
        r = roofline_ms(n, a.bw, a.tflops)
        print("- %s, %s %s: %.3f ms vs %.3f (%s)" % (n["name"], n["op"], n["shape"], n["ms"], r,
                                                    "%.1fx" % (n["ms"] / r) if r > 0 else "-"))
    energy_table(doc, metrics, kinds, nodes, a.top)
    excess_table(nodes, a.top, a.bw, a.tflops)
    return 0


def loaded_ms(n):
    """A node's time per run in its energy loop (mJ / the board's mean power "w" there); its burst ms where the
    profile predates "w" -- under a power cap the loaded time is the longer one."""
    w = n.get("w", 0.0) or 0.0
    return n.get("mj", 0.0) / w if w > 0 else n["ms"]


def energy_table(doc, metrics, kinds, nodes, top):
    """With `bench --layers --energy S` (nodes carry "mj"): joules per step by op kind and the nodes that spend the
    most, each with the board's mean power over its runs and its time per run there (loaded ms) next to the burst's
    ms -- under a power cap the step's time follows the joules."""
    nodes_mj = sum(n.get("mj", 0.0) for n in nodes)
    if nodes_mj <= 0:
        return
    print()
    step_j, step_w = metrics.get("step_j"), metrics.get("step_w")
    if step_j:
        print("Energy: step %.2f J per replay at %.0f W; nodes one by one %.2f J." % (step_j, step_w or 0,
                                                                                      nodes_mj * 1e-3))
        print()
    print("| op kind | nodes | J | share | W | loaded ms | burst ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, k in sorted(kinds.items(), key=lambda kv: -kv[1]["mj"]):
        if k["mj"] <= 0:
            continue
        print("| %s | %d | %.3f | %.1f%% | %.0f | %.3f | %.3f |" %
              (name, k["count"], k["mj"] * 1e-3, 100 * k["mj"] / nodes_mj,
               k["mj"] / k["loaded"] if k["loaded"] > 0 else 0, k["loaded"], k["ms"]))
    print()
    print("Most energy (node, op, J, W, loaded ms, burst ms):")
    for n in sorted(nodes, key=lambda n: -n.get("mj", 0.0))[:top]:
        lms = loaded_ms(n)
        print("- %s, %s: %.3f J at %.0f W over %.3f ms (burst %.3f ms)" %
              (n["name"], n["op"], n.get("mj", 0.0) * 1e-3, n.get("mj", 0.0) / lms if lms > 0 else 0, lms, n["ms"]))


def flop_bound(n, bw_gbs, tflops):
    """Whether a node's roofline is its matrix work rather than its bytes."""
    return n.get("flops", 0) / (tflops * 1e12) >= n.get("bytes", 0) / (bw_gbs * 1e9) and n.get("flops", 0) > 0


def excess_table(nodes, top, bw_gbs, tflops):
    """Joules per unit of work (with `--energy` in the profile): each FLOP-bound node (by its roofline) against the
    median pJ per FLOP of those, each byte-bound one against the median pJ per byte; the nodes spending the most
    above their median's rate -- what the same work cost elsewhere in the step; under a power cap, where to look
    first."""
    spent = [n for n in nodes if n.get("mj", 0) > 0]
    groups = [("FLOP", [n for n in spent if flop_bound(n, bw_gbs, tflops)], "flops"),
              ("byte", [n for n in spent if not flop_bound(n, bw_gbs, tflops) and n.get("bytes", 0) > 0], "bytes")]
    rows = []
    medians = []
    for unit, group, key in groups:
        if not group:
            continue
        rates = [n["mj"] * 1e9 / n[key] for n in group]  # pJ per unit
        med = statistics.median(rates)
        medians.append("%.3f pJ/%s over %d nodes" % (med, unit, len(group)))
        for n in group:
            at_median_j = n[key] * med * 1e-12
            rows.append((n["mj"] * 1e-3 - at_median_j, n, at_median_j, n["mj"] * 1e9 / n[key], unit))
    if not rows:
        return
    print()
    print("Joules above the median rate (medians: %s; node, op, J, J at the median rate, excess):" % "; ".join(medians))
    for excess, n, at_median_j, rate, unit in sorted(rows, key=lambda r: -r[0])[:top]:
        print("- %s, %s: %.3f J vs %.3f (%+.3f J; %.3f pJ/%s)" % (n["name"], n["op"], n["mj"] * 1e-3, at_median_j,
                                                             excess, rate, unit))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
