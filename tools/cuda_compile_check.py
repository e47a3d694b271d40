#!/usr/bin/env python3
"""Compile single files of this checkout with a CUDA build's exact flags, without building the rest.

On a machine without a GPU, `tools/device_pack.sh` builds everything (minutes); this checks that a few edited
files still compile (and, with --regs, how many registers / spills each kernel of a .cu gets), in seconds.
The flags come from BUILD/compile_commands.json (default /work/wt-pack/build, device_pack.sh's worktree, which
CMake configured with CMAKE_EXPORT_COMPILE_COMMANDS); a file that database does not know yet (a new test) borrows
the command of a file in the same directory. Objects go to /tmp/cuda_compile_check/.

  python3 tools/cuda_compile_check.py runtime/ops/batchnorm/batchnorm.cu tests/gpu/new_test.cpp \\
      [--regs] [--ptx] [--sass]

--sass writes each .cu's cubin and prints every kernel's SASS instruction count (its .text section's bytes / 16:
static, but after ptxas unrolled and inlined -- unlike PTX's counts, comparable with Nsight Compute's SASS lines).
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def print_ptx_counts(path):
    """Each .entry's instruction lines in the PTX at path (not labels, directives, braces or declarations)."""
    name, count = None, 0
    for line in open(path):
        t = line.strip()
        if t.startswith(".entry") or t.startswith(".visible .entry"):
            name, count = t.split()[-1].rstrip("("), 0
        elif name and t and not t.startswith((".", "//", "{", "}", "$", "(", ")")) and t.endswith(";"):
            count += 1
        if name and line.startswith("}"):
            print(f"  ptx {count:6d} instructions  {name}")
            name = None


def print_sass_counts(cubin):
    """Each kernel's SASS instructions in cubin: its .text.NAME section's size / 16 bytes (sm_90 encoding)."""
    r = subprocess.run(["readelf", "-SW", cubin], capture_output=True, text=True)
    rows = []
    for line in r.stdout.splitlines():
        m = re.search(r"\]\s+\.text\.(\S+)\s+PROGBITS\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m:
            rows.append((m.group(1), int(m.group(2), 16) // 16))
    names = subprocess.run(["c++filt"], input="\n".join(n for n, _ in rows), capture_output=True, text=True)
    pretty = names.stdout.splitlines() if names.returncode == 0 else [n for n, _ in rows]
    for (_, n), name in zip(rows, pretty):
        name = re.sub(r"trctl::\(anonymous namespace\)::", "", name)
        print(f"  sass {n:6d} instructions  {name[:150]}")


def compile_as(argv, cwd, out, flag, show):
    """The object's compile command rerun with `flag` (-ptx, -cubin) into out, then show(out)."""
    v = [a for a in argv if a not in ("-Xptxas", "-v", "-c")]
    if flag == "-cubin":  # one code instance: the SASS alone (a build's code=[compute_90,sm_90] also embeds PTX)
        v = [re.sub(r"code=\[compute_(\d+),sm_(\d+)\]", r"code=sm_\2", a) for a in v]
    v[v.index("-o") + 1] = out
    p = subprocess.run(v + [flag], cwd=cwd, capture_output=True, text=True)
    if p.returncode == 0:
        show(out)
    else:
        print(f"  {flag[1:]}: FAILED: {p.stderr[-400:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="paths relative to the repository root")
    ap.add_argument("--build", default="/work/wt-pack/build", help="a configured CUDA build directory")
    ap.add_argument("--regs", action="store_true", help=".cu files: print ptxas register and spill lines")
    ap.add_argument("--ptx", action="store_true",
                    help=".cu files: also write their PTX to /tmp/cuda_compile_check/NAME.ptx and print each entry's "
                         "static instruction lines (loops stay rolled in PTX: not the executed counts, which need "
                         "Nsight Compute on the GPU machine)")
    ap.add_argument("--sass", action="store_true",
                    help=".cu files: also write their cubin to /tmp/cuda_compile_check/NAME.cubin and print each "
                         "kernel's SASS instruction count (static, unrolled: its code size / 16)")
    args = ap.parse_args()
    db_path = os.path.join(args.build, "compile_commands.json")
    try:
        db = json.load(open(db_path))
    except OSError as e:
        sys.exit(f"{db_path}: {e} (run PACK_REF=HEAD bash tools/device_pack.sh once)")
    src_root = os.path.dirname(os.path.normpath(args.build))  # the worktree the build was configured from
    out_dir = "/tmp/cuda_compile_check"
    os.makedirs(out_dir, exist_ok=True)
    failed = 0
    for rel in args.files:
        want = os.path.join(src_root, rel)
        entry = next((e for e in db if e["file"] == want), None)
        if entry is None:  # borrow a sibling's command
            sib = next((e for e in db if os.path.dirname(e["file"]) == os.path.dirname(want)), None)
            if sib is None:
                print(f"{rel}: no compile command for it or its directory in {db_path}")
                failed += 1
                continue
            entry = dict(sib, file=want, command=sib["command"].replace(sib["file"], want))
        argv = shlex.split(entry["command"].replace(src_root + "/", ROOT + "/"))
        argv[argv.index("-o") + 1] = os.path.join(out_dir, os.path.basename(rel) + ".o")
        argv.insert(1, "-I" + ROOT)  # this checkout's headers first
        if args.regs and rel.endswith(".cu"):
            argv += ["-Xptxas", "-v"]
        r = subprocess.run(argv, cwd=entry["directory"], capture_output=True, text=True)
        if rel.endswith(".cu") and r.returncode == 0:
            for want_it, ext, flag, show in ((args.ptx, ".ptx", "-ptx", print_ptx_counts),
                                             (args.sass, ".cubin", "-cubin", print_sass_counts)):
                if want_it:
                    compile_as(argv, entry["directory"], os.path.join(out_dir, os.path.basename(rel) + ext), flag,
                               show)
        lines = (r.stdout + r.stderr).splitlines()
        keep = [l for l in lines if "error" in l or "warning" in l or (args.regs and ("Used" in l or "spill" in l or "Compiling entry" in l))]
        print(f"{rel}: {'ok' if r.returncode == 0 else 'FAILED'}")
        for l in (keep if args.regs else keep[:40]):  # --regs: every kernel
            print("  " + l)
        failed += r.returncode != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
