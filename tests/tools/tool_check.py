"""What the tool tests (tests/tools/*_test.py, run by ctest as scripts, so this directory is on sys.path) share: the
repository root, check() that prints "ok" or "FAIL" per check and records the failures, and finish() that prints the
tally and gives the exit code."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(name, ok, detail=""):
    print("%s: %s" % ("ok  " if ok else "FAIL", name))
    if not ok:
        failures.append(name)
        if detail:
            print("  " + detail.replace("\n", "\n  "))


def finish(all_ok_text="all passed"):
    print("%d failed" % len(failures) if failures else all_ok_text)
    return 1 if failures else 0
