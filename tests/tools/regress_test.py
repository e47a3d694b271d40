#!/usr/bin/env python3
"""tools/regress on the fixture pairs of tests/fixtures/regress: exit codes 0 / 1 / 2, the status words of its
table, per-metric and --tol tolerances, and --update. Run by ctest ("tools: regress"); stdlib only."""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGRESS = os.path.join(ROOT, "tools", "regress")
FIX = os.path.join(ROOT, "tests", "fixtures", "regress")
failures = []


def run(*args):
    p = subprocess.run([sys.executable, REGRESS] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    return p.returncode, p.stdout, p.stderr


def case(name, result, expect_rc, expect_text=(), extra=(), baseline="baseline.json"):
    rc, out, err = run(os.path.join(FIX, result), os.path.join(FIX, baseline), *extra)
    problems = []
    if rc != expect_rc:
        problems.append("exit code %d, expected %d" % (rc, expect_rc))
    for text in expect_text:
        if text not in out + err:
            problems.append("output lacks %r" % text)
    print("%s: %s" % ("ok  " if not problems else "FAIL", name))
    if problems:
        failures.append(name)
        print("  " + "; ".join(problems) + "\n  stdout:\n" + out + "  stderr:\n" + err)


case("within tolerance passes; an unchecked metric is shown, never compared", "result_ok.json", 0,
     ["info", "ok: 4 metrics, 3 checked, 0 failed"])
case("a higher-is-better metric beyond the default 5 % fails", "result_regressed.json", 1,
     ["REGRESSED", "FAIL"])
case("--tol widens the default tolerance", "result_regressed.json", 0, extra=("--tol", "15%"))
case("--tol as a fraction", "result_regressed.json", 0, extra=("--tol", "0.15"))
case("a metric's own tolerance in the baseline wins over --tol", "result_slower_step.json", 1, ["REGRESSED", "20%"],
     extra=("--tol", "50%"))
case("an improvement beyond tolerance passes and says so", "result_improved.json", 0, ["improved"])
case("an exact metric that changed fails, even for the better", "result_changed.json", 1, ["CHANGED (better)"])
case("a checked baseline metric missing from the result fails", "result_missing.json", 1, ["MISSING"])
case("malformed JSON exits 2", "result_not_json.json", 2, ["malformed JSON"])
case("a field outside the schema exits 2", "result_bad_field.json", 2, ["better must be"])
case("another suite than the baseline's exits 2", "result_other_suite.json", 2, ["suite"])
case("a missing file exits 2", "no_such_file.json", 2, ["cannot read"])
case("a bad --tol exits 2", "result_ok.json", 2, extra=("--tol", "five"))

# --update: the baseline takes the result's figures and keeps its own tolerances; the result then passes.
tmp = tempfile.mkdtemp()
try:
    base = os.path.join(tmp, "baseline.json")
    shutil.copy(os.path.join(FIX, "baseline.json"), base)
    rc, out, err = run(os.path.join(FIX, "result_changed.json"), base, "--update")
    rc2, out2, err2 = run(os.path.join(FIX, "result_changed.json"), base)
    text = open(base).read()
    ok = rc == 0 and rc2 == 0 and '"tolerance": "20%"' in text and '"check": false' in text
    print("%s: --update rewrites the baseline (own tolerances kept); the same result then passes" %
          ("ok  " if ok else "FAIL"))
    if not ok:
        failures.append("--update")
        print("  rc %d / %d\n%s%s%s%s\n%s" % (rc, rc2, out, err, out2, err2, text))
finally:
    shutil.rmtree(tmp)

# --update of a baseline that does not exist yet (bench kernels' first one): created with --tol as its tolerance.
tmp = tempfile.mkdtemp()
try:
    base = os.path.join(tmp, "gpu_first.json")
    rc, out, err = run(os.path.join(FIX, "result_ok.json"), base, "--update", "--tol", "10%")
    rc2, out2, err2 = run(os.path.join(FIX, "result_ok.json"), base)
    text = open(base).read() if os.path.exists(base) else ""
    ok = rc == 0 and rc2 == 0 and '"tolerance": "10%"' in text and '"provenance"' in text and "10%" in out2
    print("%s: --update --tol creates a first baseline with that tolerance" % ("ok  " if ok else "FAIL"))
    if not ok:
        failures.append("--update of a new baseline")
        print("  rc %d / %d\n%s%s%s%s\n%s" % (rc, rc2, out, err, out2, err2, text))
finally:
    shutil.rmtree(tmp)

print("%d failed" % len(failures))
sys.exit(1 if failures else 0)
