#!/usr/bin/env python3
"""compute-sanitizer over a whole Catch2 test binary, one process per test case, several at once.

    python3 tools/sanitize_suite.py TEST_BIN OUT_DIR [--tools memcheck,racecheck] [--jobs 12]
        [--case-timeout 300] [--deadline 480] [--filter CATCH2_SPEC] [--racecheck-kernels trctl]
        [--skip-clean RESULTS.tsv [--skip-verdicts clean,...]] [--cases 1,2] [--extra TOOL:ARGS]
    python3 tools/sanitize_suite.py --merge RESULTS.tsv...   (best verdict per case over several runs)

Why one process per case: a sanitizer run of the whole binary stops at the first case that runs past its time
limit (the 20-step training tests under racecheck did, runs 6, 21, 23), and says nothing about the cases after
it. Here every case gets its own limit and its own verdict, and cases run side by side (the GPU time-slices the
processes; the sanitizers' host-side analysis is what they mostly wait on).

racecheck instruments only kernels whose name contains --racecheck-kernels ("trctl": every kernel trctl owns is
in namespace trctl, checked by the script's caller; cuBLASLt/cuDNN/NCCL kernels then run uninstrumented, as
NVIDIA's own). memcheck instruments every kernel. "" instruments everything for both.

Verdict per (tool, case): clean (the test passed and the sanitizer's summary says 0 errors / 0 hazards),
ERRORS (the sanitizer reported errors: exit 99; memcheck's reports that are all CUDA API errors raised and
handled inside libnccl count as clean, and the summary says so), SAN-INTERNAL (the sanitizer itself failed:
"Internal Sanitizer Error", no verdict on the kernels), TIMEOUT (the case ran past --case-timeout), FAILED (the test
failed under the sanitizer without a sanitizer error), UNMATCHED (the name selected no case: a bug here),
NOT RUN (the --deadline passed before it started). Writes OUT_DIR/results.tsv, OUT_DIR/<tool>/<n>.log and
prints the summary (also OUT_DIR/summary.txt). Exit code 0 when every case of every tool is clean, else 1;
2 on bad arguments or no sanitizer.
"""
import argparse
import concurrent.futures as cf
import os
import re
import shutil
import signal
import subprocess
import sys
import time


def find_sanitizer():
    s = shutil.which("compute-sanitizer")
    for cand in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if not s and os.access(cand, os.X_OK):
            s = cand
    return s


def catch2_escape(name):
    # Catch2 v2 test specs: a backslash makes the next character literal (',' '[' ']' '*' '\' are special).
    return re.sub(r'([\\,\[\]*])', r'\\\1', name)


def list_cases(test_bin, spec):
    cmd = [test_bin, "--list-test-names-only"] + ([spec] if spec else [])
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    names = [l.strip() for l in out.stdout.splitlines() if l.strip()]
    # Catch2 v2 wraps long names onto indented continuation lines in this listing only when a console width
    # applies; --list-test-names-only prints them whole. A line that is a count ("N test cases") is not a name.
    return [n for n in names if not re.match(r"^\d+ (matching )?test cases?$", n)]


def nccl_api_probes_only(text):
    """True when every error memcheck reported is a CUDA API error raised inside libnccl (NCCL probes its own
    kernels with cudaFuncGetAttributes and handles cudaErrorNoKernelImageForDevice itself): not a memory error."""
    blocks = re.split(r"\n========= (?=\S)", text)
    errs = [b for b in blocks if re.match(r"(Program hit|Invalid|Out-of-range|Misaligned|Malloc|Leaked|Barrier|"
                                          r"Cuda API|Unspecified|Internal|Race|Error)", b)]
    if not errs:
        return False
    for b in errs:
        if not b.startswith("Program hit"):
            return False
        frames = [l for l in b.splitlines() if "Host Frame" in l or re.search(r"\bin \S+\.so", l)]
        first = next((f for f in frames if "libcuda.so" not in f), "")
        if "libnccl" not in first:
            return False
    return True


def run_one(san, tool, kernels, test_bin, name, log_path, case_timeout, extra=()):
    cmd = [san, "--tool", tool, "--error-exitcode", "99", "--print-limit", "20"] + list(extra)
    if tool == "racecheck":
        cmd += ["--racecheck-report", "all"]
    if kernels:
        cmd += ["--kernel-name", "kns=" + kernels]
    cmd += [test_bin, catch2_escape(name), "--reporter", "compact"]
    t0 = time.time()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=case_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
    secs = time.time() - t0
    text = open(log_path, errors="replace").read()
    summ = [l.strip() for l in text.splitlines() if re.search(r"(ERROR|RACECHECK) SUMMARY", l)]
    summary = summ[-1] if summ else ""
    m = re.search(r"ERROR SUMMARY: (\d+) error", summary)
    if rc is None:
        verdict = "TIMEOUT"
    elif "No tests ran" in text or "No test cases matched" in text:
        verdict = "UNMATCHED"
    elif "Internal Sanitizer Error" in text:  # the tool failed, not the program: no verdict on the kernels
        verdict = "SAN-INTERNAL"
    elif rc == 99 and tool == "memcheck" and m and nccl_api_probes_only(text):
        verdict = "clean"
        summary += " (all NCCL-internal API probes, not memory errors)"
    elif rc == 99:
        verdict = "ERRORS"
    elif rc != 0:
        verdict = "FAILED"
    elif re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)",
                   summary):
        verdict = "clean"
    else:  # passed, but no summary saying zero: do not call that clean
        verdict = "FAILED"
    return verdict, secs, summary


VERDICT_ORDER = ["clean", "SAN-INTERNAL", "TIMEOUT", "FAILED", "ERRORS", "UNMATCHED", "NOT RUN"]


def merge(paths):
    """--merge RESULTS.tsv...: the best verdict of each (tool, case name) over several runs (clean first), counted
    per tool, then every pair that is not clean. Exit 0 when every pair is clean."""
    best = {}
    for path in paths:
        for line in open(path).read().splitlines()[1:]:
            f = line.split("\t")
            if len(f) < 6:
                continue
            k, v = (f[0], f[5]), f[2]
            if v not in VERDICT_ORDER:
                v = "FAILED"
            if k not in best or VERDICT_ORDER.index(v) < VERDICT_ORDER.index(best[k]):
                best[k] = v
    lines = [f"merged {len(paths)} result files: {len({n for _, n in best})} case names"]
    for t in sorted({t for t, _ in best}):
        counts = {}
        for (tt, _), v in best.items():
            if tt == t:
                counts[v] = counts.get(v, 0) + 1
        lines.append(f"{t}: " + ", ".join(f"{k} {counts[k]}" for k in VERDICT_ORDER if k in counts))
        lines += [f"  {v:12s} {n}" for (tt, n), v in sorted(best.items()) if tt == t and v != "clean"]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0 if all(v == "clean" for v in best.values()) else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--merge":
        return merge(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("test_bin")
    ap.add_argument("out_dir")
    ap.add_argument("--tools", default="memcheck,racecheck")
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--case-timeout", type=float, default=300)
    ap.add_argument("--deadline", type=float, default=0, help="seconds from start after which no case starts (0: none)")
    ap.add_argument("--filter", default="", help="Catch2 test spec selecting the cases (default: all)")
    ap.add_argument("--racecheck-kernels", default="trctl")
    ap.add_argument("--cases", default="", help="comma-separated case numbers (as in results.tsv) to run only")
    ap.add_argument("--skip-clean", default="", metavar="RESULTS_TSV",
                    help="skip the (tool, case name) pairs that a previous run's results.tsv calls clean")
    ap.add_argument("--skip-verdicts", default="clean",
                    help="with --skip-clean: the verdicts to skip (e.g. clean,SAN-INTERNAL,TIMEOUT)")
    ap.add_argument("--extra", action="append", default=[], metavar="TOOL:ARGS",
                    help="more sanitizer arguments for one tool, e.g. racecheck:--racecheck-memcpy-async=no")
    a = ap.parse_args()

    san = find_sanitizer()
    if not san:
        print("error: compute-sanitizer not found", file=sys.stderr)
        return 2
    if not os.access(a.test_bin, os.X_OK):
        print(f"error: {a.test_bin}: not an executable", file=sys.stderr)
        return 2
    tools = [t for t in a.tools.split(",") if t]
    for t in tools:
        if t not in ("memcheck", "racecheck", "initcheck", "synccheck"):
            print(f"error: --tools: unknown tool '{t}'", file=sys.stderr)
            return 2
    os.makedirs(a.out_dir, exist_ok=True)
    cases = list_cases(a.test_bin, a.filter)
    if not cases:
        print("error: no test cases selected", file=sys.stderr)
        return 2

    # Does this compute-sanitizer take the kernel-name filter? (probe; without it, racecheck checks everything)
    kernels = a.racecheck_kernels
    notes = []
    if kernels:
        probe = subprocess.run([san, "--tool", "racecheck", "--kernel-name", "kns=" + kernels, a.test_bin,
                                "--list-test-names-only"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=120)
        # (Catch2's listing exits with the number of cases, so success is the listing in the output.)
        if cases[0] not in probe.stdout:
            notes.append("--kernel-name kns=%s refused (rc %d): racecheck instruments every kernel. %s" %
                         (kernels, probe.returncode, probe.stdout.strip().splitlines()[-1:] or ""))
            kernels = ""
        else:
            notes.append(f"racecheck instruments kernels whose name contains '{kernels}' only")
    version = subprocess.run([san, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True).stdout.strip().splitlines()[-1:]

    extra = {}
    for e in a.extra:
        t, _, args = e.partition(":")
        extra.setdefault(t, []).extend(args.split())
        notes.append(f"{t} also gets: {args}")
    only = {int(c) for c in a.cases.split(",") if c.strip()} if a.cases else None
    done = set()
    if a.skip_clean:
        for line in open(a.skip_clean).read().splitlines()[1:]:
            f = line.split("\t")
            if len(f) >= 6 and f[2] in a.skip_verdicts.split(","):
                done.add((f[0], f[5]))
        notes.append(f"skipped {len(done)} (tool, case) pairs already {a.skip_verdicts} in {a.skip_clean}")
    jobs = []
    for t in tools:
        os.makedirs(os.path.join(a.out_dir, t), exist_ok=True)
        for i, n in enumerate(cases):
            if (only is None or i in only) and (t, n) not in done:
                jobs.append((t, i, n))
    # Long cases first would finish sooner overall, but their length is unknown here: interleave the tools so
    # that a deadline cuts both evenly.
    jobs.sort(key=lambda j: (j[1], j[0]))
    start = time.time()
    results = {}

    def work(job):
        t, i, n = job
        if a.deadline and time.time() - start > a.deadline:
            return job, ("NOT RUN", 0.0, "deadline")
        k = kernels if t == "racecheck" else ""
        return job, run_one(san, t, k, a.test_bin, n, os.path.join(a.out_dir, t, f"{i:03d}.log"), a.case_timeout,
                            extra.get(t, ()))

    # Each verdict is appended as it comes, so that a run stopped from outside still leaves them.
    with cf.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex, \
            open(os.path.join(a.out_dir, "results.partial.tsv"), "w") as part:
        for fut in cf.as_completed([ex.submit(work, j) for j in jobs]):
            job, res = fut.result()
            results[job] = res
            part.write(f"{job[0]}\t{job[1]:03d}\t{res[0]}\t{res[1]:.1f}\t{res[2]}\t{job[2]}\n")
            part.flush()

    with open(os.path.join(a.out_dir, "results.tsv"), "w") as f:
        f.write("tool\tcase\tverdict\tseconds\tsanitizer summary\tname\n")
        for (t, i, n), (v, s, summ) in sorted(results.items()):
            f.write(f"{t}\t{i:03d}\t{v}\t{s:.1f}\t{summ}\t{n}\n")
    lines = [f"sanitize_suite: {a.test_bin}, {len(cases)} cases, tools {','.join(tools)}, {a.jobs} at once, "
             f"{a.case_timeout:.0f} s per case, {time.time() - start:.0f} s in all; {' '.join(version)}"]
    lines += ["  " + n for n in notes]
    all_clean = True
    for t in tools:
        counts = {}
        for (tt, i, n), (v, s, summ) in results.items():
            if tt == t:
                counts[v] = counts.get(v, 0) + 1
        all_clean &= counts.get("clean", 0) == sum(1 for j in jobs if j[0] == t)
        if a.skip_clean:
            counts["skipped (" + a.skip_verdicts + " before)"] = sum(1 for d in done if d[0] == t)
        lines.append(f"{t}: " + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)))
        for (tt, i, n), (v, s, summ) in sorted(results.items()):
            if tt == t and v != "clean":
                lines.append(f"  {v:9s} {i:03d} {s:6.1f}s  {n}  {summ}")
    text = "\n".join(lines) + "\n"
    open(os.path.join(a.out_dir, "summary.txt"), "w").write(text)
    sys.stdout.write(text)
    return 0 if all_clean else 1


if __name__ == "__main__":
    sys.exit(main())
