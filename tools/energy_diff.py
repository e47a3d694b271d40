#!/usr/bin/env python3
"""Two `trctl bench CFG --layers --energy S --json` profiles side by side: what a change did to the nodes' joules,
and how far the measurement itself repeats.

    tools/energy_diff.py A.json B.json [--same FRACTION] [--min-j J] [--top N]

Nodes are matched by name. A node in both whose time differs by at most FRACTION (default 0.05) ran the same
kernels in both profiles, so the ratio of its joules, B / A, measures the method: its median says whether the
board drifted between the profiles, its spread what a per-node difference has to exceed to be one (RESULTS.md run
66: 6 % with `--energy-settle 1`, 22 % without). The other nodes -- time changed, or only in one profile -- are what
the change touched (a node whose kernels changed but kept their time counts as unchanged: the time is the only
sign of a kernel this reads): listed by their difference in joules, most first, with the net difference and a noise band
(the spread times the root of the sum of their squared joules, as independent per-node errors). Whole-step
questions are answered by a training A/B (device_run.sh's `ab` stage), not by this; this says where a difference
sits. Nodes under --min-j joules (default 0.02) in both profiles are left out of both parts (their relative
noise is the counter's granularity) and summed in one line. Standard library only.
"""
import argparse
import json
import math
import statistics
import sys


def load(path):
    """(doc, nodes by name) of a layers profile with energy, or raises ValueError saying what is wrong."""
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("suite") != "layers" or not isinstance(doc.get("nodes"), list):
        raise ValueError("not a `trctl bench --layers --json` result")
    nodes = {}
    for n in doc["nodes"]:
        nodes[n["name"]] = n
    if not any("mj" in n for n in nodes.values()):
        raise ValueError("no per-node energy (profile with --energy S)")
    return doc, nodes


def metric(doc, name):
    for m in doc.get("metrics", []):
        if m.get("name") == name:
            return m.get("value")
    return None


def cell(node, key):
    """A node's ms, or its joules for key "mj", as a table cell; "-" where the profile lacks the node."""
    if not node or key not in node:
        return "-"
    return "%.3f" % (node[key] * (1e-3 if key == "mj" else 1))


def describe(doc, nodes):
    step_j, step_w = metric(doc, "step_j"), metric(doc, "step_w")
    details = doc.get("energy_s"), doc.get("energy_settle_s")
    text = "step %s J per replay at %s W, nodes one by one %.2f J" % (
        "%.2f" % step_j if step_j is not None else "?", "%.0f" % step_w if step_w is not None else "?",
        sum(n.get("mj", 0.0) for n in nodes.values()) * 1e-3)
    if details[0] is not None:
        text += " (%s s per figure, after %s s of settle)" % (details[0], details[1] if details[1] is not None else 0)
    return "%s (commit %s, %s)" % (text, doc.get("commit", "?"), doc.get("machine", {}).get("gpu", "?"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a_json")
    ap.add_argument("b_json")
    ap.add_argument("--same", type=float, default=0.05, help="time difference under which a node counts as unchanged")
    ap.add_argument("--min-j", type=float, default=0.02, help="nodes under this many joules in both are summed apart")
    ap.add_argument("--top", type=int, default=15, help="changed nodes to list")
    a = ap.parse_args(argv)
    profiles = []
    for path in (a.a_json, a.b_json):
        try:
            profiles.append(load(path))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print("error: %s: %s" % (path, e), file=sys.stderr)
            return 2
    (doc_a, na), (doc_b, nb) = profiles
    print("A: %s" % describe(doc_a, na))
    print("B: %s" % describe(doc_b, nb))
    print()
    same, changed = [], []
    small = [0, 0.0]  # nodes under --min-j in both, and their B - A joules
    for name in list(na) + [k for k in nb if k not in na]:
        x, y = na.get(name), nb.get(name)
        ja, jb = (x or {}).get("mj", 0.0) * 1e-3, (y or {}).get("mj", 0.0) * 1e-3
        if max(ja, jb) < a.min_j:
            small[0] += 1 if (ja or jb) else 0
            small[1] += jb - ja
            continue
        if x and y and x.get("ms", 0) > 0 and abs(y.get("ms", 0) / x["ms"] - 1) <= a.same:
            if x.get("mj", 0) > 0 and y.get("mj", 0) > 0:
                same.append((y["mj"] / x["mj"], name))
            continue
        changed.append((jb - ja, name, x, y))
    spread = None
    if len(same) >= 2:
        ratios = sorted(r for r, _ in same)
        spread = statistics.stdev(ratios)
        lo, hi = min(same), max(same)
        print("Unchanged nodes (time within %.0f %%, at least %.3f J): %d; joules B / A median %.3f, standard "
              "deviation %.3f, extremes %.3f (%s) and %.3f (%s)" %
              (100 * a.same, a.min_j, len(same), statistics.median(ratios), spread, lo[0], lo[1], hi[0], hi[1]))
    else:
        print("Unchanged nodes (time within %.0f %%, at least %.3f J): %d -- too few to say how far the figures "
              "repeat" % (100 * a.same, a.min_j, len(same)))
    print()
    if small[0]:
        print("Nodes under %.3f J in both profiles: %d, left out (B - A %+.3f J in all)" %
              (a.min_j, small[0], small[1]))
        print()
    if not changed:
        print("No node changed.")
        return 0
    changed.sort(key=lambda c: -abs(c[0]))
    print("Changed nodes (time differs, or in one profile only), by |B - A| joules:")
    print()
    print("| node | op | ms A | ms B | J A | J B | B - A |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for d, name, x, y in changed[:a.top]:
        print("| %s | %s | %s | %s | %s | %s | %+.3f |" % (name, (x or y)["op"], cell(x, "ms"), cell(y, "ms"),
                                                         cell(x, "mj"), cell(y, "mj"), d))
    if len(changed) > a.top:
        print("| ... %d more | | | | | | %+.3f |" % (len(changed) - a.top, sum(c[0] for c in changed[a.top:])))
    net = sum(c[0] for c in changed)
    text = "\nNet over the changed nodes: %+.3f J" % net
    if spread is not None:
        band = spread * math.sqrt(sum(max((c[2] or {}).get("mj", 0.0), (c[3] or {}).get("mj", 0.0)) ** 2
                                      for c in changed)) * 1e-3
        text += " (noise band +-%.3f J from the unchanged nodes' spread)" % band
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
