#!/usr/bin/env python3
"""The CNN throughput report of tools/device_run.sh's `cnn` stage, without a GPU: benchmarks/cnn_result.py
--selftest writes torch_eager.json and torch_compiled.json as pytorch_cnn.py --out-dir would, a trctl run
directory of configs/vgg16bn.yaml on synthetic data is assembled from `trctl validate` (config.resolved.yaml),
`trctl compile --dump=after:memplan` (plan.txt) and three epoch records with a meaningless val top-1, and
`trctl report RUN --vs torch_compiled.json --vs torch_eager.json -o DIR` must give a throughput report: images/s,
ms/step and peak memory, no accuracy anywhere, the recipes equal where both sides run the same training step.
Run by ctest ("tools: cnn report") as: cnn_report_test.py TRCTL_BINARY; stdlib only."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from tool_check import ROOT, check, finish

CONFIG = os.path.join(ROOT, "configs", "vgg16bn.yaml")
OVERRIDES = ["train.device=cuda", "train.epochs=3", "data.synthetic.train_size=6400", "data.synthetic.val_size=512"]
def run(cmd, cwd=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def write_run_dir(trctl, run_dir):
    """config.resolved.yaml and plan.txt from trctl itself; metrics.jsonl as `trctl train` writes it."""
    os.makedirs(run_dir)
    rc, out, err = run([trctl, "validate", CONFIG] + OVERRIDES)
    if rc != 0:
        raise SystemExit("trctl validate failed: " + err)
    with open(os.path.join(run_dir, "config.resolved.yaml"), "w") as f:
        f.write(out)
    rc, out, err = run([trctl, "compile", CONFIG, "--dump=after:memplan"] + OVERRIDES)
    if rc != 0:
        raise SystemExit("trctl compile failed: " + err)
    with open(os.path.join(run_dir, "plan.txt"), "w") as f:
        f.write(out)
    seconds = 0.0
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for epoch, (ips, train_s) in enumerate([(2100.0, 6.0), (3600.0, 1.8), (3650.0, 1.75)], start=1):
            epoch_s = train_s + 0.3
            seconds += epoch_s
            f.write(json.dumps({"kind": "epoch", "epoch": epoch, "step": 25 * epoch, "loss": 6.9, "lr": 0.0045 * epoch,
                                "train_loss": 6.9, "train_top1": 0.0011, "val_loss": 6.91, "val_top1": 0.0123,
                                "val_top5": 0.05, "images_per_s": ips, "epoch_seconds": epoch_s,
                                "seconds": seconds, "skipped_steps": 0, "loss_scale": 65536}) + "\n")


def row(md, label):
    """The fairness-table row of `label` (its cells), or None."""
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].strip("*") == label:
            return cells
    return None


def main(argv):
    if len(argv) != 1:
        print("usage: cnn_report_test.py TRCTL_BINARY", file=sys.stderr)
        return 2
    trctl = argv[0]
    tmp = tempfile.mkdtemp(prefix="trctl_cnn_report_")
    try:
        torch_dir = os.path.join(tmp, "torch_vgg16bn")
        rc, out, err = run([sys.executable, os.path.join(ROOT, "benchmarks", "cnn_result.py"), "--selftest",
                            torch_dir])
        check("cnn_result.py --selftest writes both result files", rc == 0, out + err)
        if rc != 0:
            return 1
        write_run_dir(trctl, os.path.join(tmp, "trctl_vgg16bn"))
        plots = shutil.which("gnuplot") is not None or bool(os.environ.get("TRCTL_GNUPLOT"))
        if not plots:
            print("note: gnuplot not installed, the PNG checks are skipped")
        # As the cnn stage runs it: from the folder holding the inputs, so that the report names them relatively.
        rc, out, err = run([trctl, "report", "trctl_vgg16bn", "--vs", "torch_vgg16bn/torch_compiled.json", "--vs",
                            "torch_vgg16bn/torch_eager.json", "-o", "report_vgg16bn"] + ([] if plots else
                                                                                         ["--no-plots"]), cwd=tmp)
        check("trctl report exits 0", rc == 0, out + err)
        if rc != 0:
            return 1
        check("the summary line says throughput only", "throughput only (synthetic data)" in out, out)
        rep = os.path.join(tmp, "report_vgg16bn")
        with open(os.path.join(rep, "report.md")) as f:
            md = f.read()
        with open(os.path.join(rep, "report.html")) as f:
            html = f.read()
        check("no accuracy in report.md", "top-1" not in md and "time to" not in md, md)
        check("no accuracy in report.html", "top-1" not in html, "")
        check("the meaningless val top-1 (1.23 %) is nowhere", "1.23" not in md and "1.23" not in html, "")
        check("results header: images/s, ms/step, peak memory",
              "| tool | runs | images/s (steady) | ms/step (steady) | peak memory |" in md, md)
        trctl_row = row(md, "trctl")
        # steady: epochs 2..3, harmonic mean of 3600 and 3650 = 3624.8; ms/step = 1000 * 256 / that = 70.62
        check("trctl's row: steady images/s, ms/step from the batch, the planned bytes",
              trctl_row is not None and trctl_row[1:4] == ["1", "3625", "70.62"] and trctl_row[4].endswith("GiB"),
              str(trctl_row))
        eager = row(md, "pytorch eager")
        check("pytorch eager: the median of 3 windows with min-max",
              eager is not None and eager[1] == "3" and eager[2] == "1210 (1198–1215)", str(eager))
        # the selftest's windows spent 50, 51, 52 J per step (NVML in pytorch_cnn.py); this trctl run measured none
        check("pytorch eager: joules per step, median with min-max and the watts they imply",
              eager is not None and eager[-1].startswith("51.00 (50.00–52.00) at ") and eager[-1].endswith(" W"),
              str(eager))
        check("trctl without energy records: a dash", trctl_row is not None and trctl_row[-1] == "—", str(trctl_row))
        check("ratio rows divide images/s and ms/step",
              "| *trctl / pytorch compiled (default)* |" in md and "| *trctl / pytorch eager* |" in md, md)
        for label in ("dataset", "model", "parameters", "init", "optimizer", "weight decay groups",
                      "label smoothing", "batch size", "augmentation", "normalization", "precision",
                      "memory format", "data loading"):
            r = row(md, label)
            check("fairness: %s equal on all sides" % label, r is not None and r[-1] == "=", str(r))
        for label in ("epochs", "lr schedule", "validation", "validation loss", "epoch time covers"):
            r = row(md, label)
            check("fairness: %s not compared in a throughput report" % label,
                  r is not None and r[-1].startswith("(info: throughput report"), str(r))
        for label in ("graph mode", "compile-time exclusion", "TF32"):
            r = row(md, label)
            check("fairness: %s differs (and says so)" % label, r is not None and r[-1].startswith("≠"), str(r))
        r = row(md, "peak memory measure")
        check("fairness: each side's memory measure, informational", r is not None and r[-1] == "(info)", str(r))
        if plots:
            for png in ("throughput.png", "throughput_epochs.png"):
                path = os.path.join(rep, png)
                with open(path, "rb") as f:
                    head = f.read(8)
                check("%s written and linked" % png, head == b"\x89PNG\r\n\x1a\n" and "](%s)" % png in md, png)
            check("no loss, accuracy or lr figure", not any(
                os.path.exists(os.path.join(rep, p)) for p in ("accuracy.png", "loss.png", "lr.png")), "")
        check("inputs named relative to the folder", "`trctl_vgg16bn`" in md and
              "`torch_vgg16bn/torch_eager.json run 1`" in md, md)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish("all ok")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
