#!/usr/bin/env python3
"""The torch-free half of benchmarks/pytorch_cnn.py: its recipe in trctl's words and its result files in the
trctl-bench-result/1 schema of docs/report.md, one file per mode (torch_eager.json, torch_compiled.json), which
`trctl report RUN_DIR --vs torch_compiled.json --vs torch_eager.json -o DIR` reads next to a trctl run of the same
configs/<model>.yaml on synthetic data (a throughput report: images/s, ms/step, peak memory; no accuracy).

Standard library only, so that it runs (and is tested) where PyTorch is not installed:
    python3 benchmarks/cnn_result.py --selftest DIR
writes both files from a made-up measurement into DIR, checks them against the schema and checks that a failed
mode leaves no stale file (tests/tools/cnn_report_test.py runs it and then `trctl report` on the files).
"""
import json
import math
import os
import shutil
import sys
import tempfile

SCHEMA = "trctl-bench-result/1"
MODES = ("eager", "compiled")
# The training recipe of configs/{vgg16bn,resnet18,resnet50}.yaml (tools/gen_cnn_configs.py writes both sides'
# numbers): lr 0.36 at global batch 2048 scaled linearly to 256.
LR, MOMENTUM, WEIGHT_DECAY, LABEL_SMOOTHING, CLASSES, SIDE = 0.045, 0.9, 1e-4, 0.1, 1000, 224
# The lr PyTorch's timed steps run at by default: trctl's in the second of the recipe's 10 linear warm-up epochs
# (its throughput runs time epochs 2..3 at 0.009 and 0.0135), so that both sides time the same training regime.
# (Until run 64 PyTorch ran at the peak lr and its model diverged -- loss NaN, loss scale 0 -- through torch's fused
# SGD, see pytorch_cnn.make_optimizer: steps on NaN and inf values draw less power than a training step's.)
LR_MEASURE = LR * 2 / 10
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# What max_memory_allocated counts, in the words of the report's "peak memory measure" row.
MEMORY_MEASURE = ("torch.cuda.max_memory_allocated over each timed window: every tensor of the caching allocator "
                  "(weights, gradients, momentum, activations, cuDNN workspaces, the resident data pool); without "
                  "the allocator's cached slack and the CUDA context")
# torch.compile's CUDA-graph modes replay graphs whose activations live in a pool allocated while recording them,
# unseen by the allocator during the timed windows: their peak also covers the setup (model, compilation, the
# recorded first steps).
MEMORY_MEASURE_CUDAGRAPHS = ("torch.cuda.max_memory_allocated from the model's construction through each timed "
                             "window (the CUDA graphs' memory pool is allocated while they are recorded; replays do "
                             "not go through the allocator): every tensor of the caching allocator, without its "
                             "cached slack and the CUDA context")


def num(x):
    """A number as trctl report's recipes write it: integers in full, others as printf's %g."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:g}"


def finite(x):
    """x, or None when it is not a finite number (the schema's JSON has no NaN)."""
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def sanitized(v):
    """v with every non-finite float replaced by None: strict JSON readers (trctl report) refuse NaN."""
    if isinstance(v, dict):
        return {k: sanitized(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [sanitized(x) for x in v]
    return finite(v) if isinstance(v, float) else v


def model_text(layer_counts):
    """trctl's wording of a model of more than 12 layers: "N layers: 13 conv2d, ..." in order of first use.
    layer_counts: [(trctl layer type, count)] in that order (pytorch_cnn.model_facts traces them)."""
    total = sum(n for _, n in layer_counts)
    if total <= 12:
        return ", ".join(t for t, n in layer_counts for _ in range(n))
    return f"{total} layers: " + ", ".join(f"{n} {t}" for t, n in layer_counts)


def graph_mode(mode, compile_mode):
    if mode == "eager":
        return "none (eager)"
    if compile_mode in ("reduce-overhead", "max-autotune"):
        return (f"torch.compile mode {compile_mode}: CUDA graphs over normalize, forward and backward; "
                "optimizer and GradScaler eager")
    return f"torch.compile mode {compile_mode}: no CUDA graphs"


def precision_text(amp):
    return {"fp16": "fp16 AMP, dynamic loss scaling, fp32 master weights",
            "bf16": "bf16 AMP, fp32 master weights",
            "none": "fp32 (TF32 tensor cores)"}[amp]


def recipe(cfg, facts, env, mode, compile_mode):
    """Every fairness-table item (docs/report.md) as trctl words its own side of configs/<model>.yaml.
    cfg: the script's settings (model, batch, train_images, steps, warmup, repeats, lr, amp, channels_last, tf32);
    facts: what pytorch_cnn.model_facts found (layer_counts, parameters, decay_tensors, no_decay_tensors)."""
    compiled = mode == "compiled"
    return {
        "framework": f"torch {env.get('torch', '?')}",
        "device": env.get("gpu") or "?",
        "dataset": f"synthetic {SIDE}x{SIDE}x3, {CLASSES} classes, {cfg['train_images']} train images",
        "model": model_text(facts["layer_counts"]),
        "parameters": facts["parameters"],
        "init": "kaiming_uniform_fan_in (bound sqrt(6/fan_in)), zero biases",
        "optimizer": f"sgd lr={num(LR)} momentum={num(MOMENTUM)} dampening=0 nesterov=true",
        "weight_decay": (f"{num(WEIGHT_DECAY)} L2 on {facts['decay_tensors']} tensors, "
                         f"0 on {facts['no_decay_tensors']}"),
        "lr_schedule": (f"constant {num(cfg['lr'] / LR)} x lr = {num(cfg['lr'])} over the timed steps (trctl's "
                        f"factor in the second of its 10 warm-up epochs is 0.2)"),
        "label_smoothing": num(LABEL_SMOOTHING),
        "val_loss": "none (no validation)",
        "batch_size": cfg["batch"],
        "epochs": f"none: {cfg['repeats']} timed windows of {cfg['steps']} steps",
        "augmentation": "normalize",
        "augmentation_impl": "torchvision semantics, one op after another",
        "normalization": "mean=[" + ", ".join(num(m) for m in MEAN) + "] std=[" + ", ".join(num(s) for s in STD) + "]",
        "validation": "none (throughput steps only)",
        "precision": precision_text(cfg["amp"]),
        "tf32": "on" if cfg["tf32"] else "off",
        "memory_format": "channels_last (NHWC)" if cfg["channels_last"] else "contiguous (NCHW)",
        "graph_mode": graph_mode(mode, compile_mode),
        "compile_excluded": (f"first step ({'compilation, ' if compiled else ''}cuDNN autotuning) and "
                             f"{cfg['warmup']} warm-up steps excluded from steady"),
        "epoch_time": f"no epochs: timed windows of {cfg['steps']} training steps",
        "data_loading": "GPU-resident dataset, augmentation on the GPU",
        "conv_algorithms": "cudnn.benchmark (autotuned in the first step)",
        "memory_measure": (MEMORY_MEASURE_CUDAGRAPHS if compile_mode in ("reduce-overhead", "max-autotune")
                           else MEMORY_MEASURE),
        "seed": 0,
    }


def result_doc(cfg, facts, env, mode, res):
    """One mode's measurement (pytorch_cnn.measure's dict) as a trctl-bench-result/1 document: one run per timed
    window (images/s, ms/step, peak memory, joules per step), the whole measurement kept under "measurement"."""
    compile_mode = res.get("compile_mode") if mode == "compiled" else None
    name = "pytorch eager" if mode == "eager" else f"pytorch compiled ({compile_mode})"
    runs = [{"seed": 0, "window": i + 1, "steps": w["steps"], "images_per_s_steady": w["img_per_s"],
             "ms_per_step": w["ms_per_step"], "peak_memory_bytes": w["peak_allocated_bytes"],
             "j_per_step": w.get("j_per_step")}  # the board's energy over the window (NVML; null: not measured)
            for i, w in enumerate(res["windows"])]
    doc = {"schema": SCHEMA, "tool": "pytorch", "name": name, "model": cfg["model"],
           "recipe": recipe(cfg, facts, env, mode, compile_mode), "runs": runs,
           "measurement": {k: v for k, v in res.items() if k != "windows"}, "environment": env}
    return sanitized(doc)


def write_atomic(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(doc, indent=1, allow_nan=False))
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_results(out_dir, cfg, facts, env, results):
    """DIR/torch_<mode>.json for each mode that measured; a failed or missing mode's file is removed, so that a
    report never shows an earlier call's figures. Returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for mode in MODES:
        path = os.path.join(out_dir, f"torch_{mode}.json")
        res = results.get(mode)
        if res is None or "error" in res or not res.get("windows"):
            if os.path.exists(path):
                os.remove(path)
            continue
        write_atomic(path, result_doc(cfg, facts, env, mode, res))
        written.append(path)
    return written


def schema_problems(doc):
    """What a trctl-bench-result/1 document of this script lacks (empty when it is complete)."""
    problems = []
    for key in ("schema", "tool", "name", "recipe", "runs"):
        if key not in doc:
            problems.append(f"no {key!r}")
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}")
    documented = ("framework", "device", "dataset", "model", "parameters", "init", "optimizer", "weight_decay",
                  "lr_schedule", "label_smoothing", "val_loss", "batch_size", "epochs", "augmentation",
                  "augmentation_impl", "normalization", "validation", "precision", "tf32", "memory_format",
                  "graph_mode", "compile_excluded", "epoch_time", "data_loading", "memory_measure", "seed")
    problems += [f"recipe item {k!r} missing" for k in documented if k not in doc.get("recipe", {})]
    if not doc.get("runs"):
        problems.append("no runs")
    for i, run in enumerate(doc.get("runs", [])):
        for key in ("images_per_s_steady", "ms_per_step", "peak_memory_bytes"):
            v = run.get(key)
            if not (finite(v) is not None and v > 0):
                problems.append(f"runs[{i}].{key} is {v!r}, not a positive number")
    return problems


def fake_measurement(cfg, mode):
    """A made-up measurement shaped like pytorch_cnn.measure's (what --selftest writes)."""
    ips = {"eager": [1210.0, 1198.5, 1215.25], "compiled": [1402.0, 1395.5, 1410.75]}[mode]
    windows = [{"steps": cfg["steps"], "img_per_s": v, "ms_per_step": 1e3 * cfg["batch"] / v,
                "peak_allocated_bytes": 30 * 2**30 + i, "j_per_step": 50.0 + i} for i, v in enumerate(ips)]
    res = {"windows": windows, "img_per_s": sum(ips) / 3, "first_step_s": 2.5, "compile_s": 0.0,
           "loss_finite": True, "last_loss": float("nan")}  # NaN: must come out as null
    if mode == "compiled":
        res.update({"compile_mode": "default", "compile_s": 61.0, "failed_modes": []})
    return res


def selftest(out_dir):
    """Writes both files from a made-up VGG16-BN measurement and checks them; returns the problems found."""
    cfg = {"model": "vgg16bn", "batch": 256, "train_images": 6400, "steps": 50, "warmup": 15, "repeats": 3,
           "lr": LR_MEASURE, "amp": "fp16", "channels_last": True, "tf32": True}
    # torchvision vgg16_bn traced as pytorch_cnn.model_facts does (avgpool replaced by Identity).
    facts = {"layer_counts": [("conv2d", 13), ("batch_norm", 13), ("relu", 15), ("max_pool", 5), ("flatten", 1),
                              ("linear", 3), ("dropout", 2)],
             "parameters": 138365992, "decay_tensors": 16, "no_decay_tensors": 42}
    env = {"torch": "0.0-selftest", "gpu": "selftest GPU", "cuda": None}
    results = {m: fake_measurement(cfg, m) for m in MODES}
    problems = []
    paths = write_results(out_dir, cfg, facts, env, results)
    if len(paths) != 2:
        problems.append(f"wrote {paths}, expected torch_eager.json and torch_compiled.json")
    for path in paths:
        with open(path) as f:
            text = f.read()
        doc = json.loads(text, parse_constant=lambda c: problems.append(f"{path}: {c} in the JSON"))
        problems += [f"{path}: {p}" for p in schema_problems(doc)]
        if doc["measurement"].get("last_loss", 0) is not None:
            problems.append(f"{path}: a NaN was not written as null")
        if [r.get("j_per_step") for r in doc["runs"]] != [50.0, 51.0, 52.0]:
            problems.append(f"{path}: the windows' joules per step are not in its runs")
    # A failed compiled mode (every compile mode failed) removes the earlier file instead of keeping it.
    failed = dict(results, compiled={"error": "every compile mode failed", "failed_modes": []})
    scratch = tempfile.mkdtemp(prefix="cnn_result_selftest_")
    try:
        write_results(scratch, cfg, facts, env, results)
        left = write_results(scratch, cfg, facts, env, failed)
        if [os.path.basename(p) for p in left] != ["torch_eager.json"] or sorted(os.listdir(scratch)) != [
                "torch_eager.json"]:
            problems.append(f"a failed compiled mode left {sorted(os.listdir(scratch))}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return problems


def main(argv):
    if len(argv) != 2 or argv[0] != "--selftest":
        print("usage: cnn_result.py --selftest DIR  (the writer itself is used by benchmarks/pytorch_cnn.py)",
              file=sys.stderr)
        return 2
    problems = selftest(argv[1])
    for p in problems:
        print("FAIL:", p)
    print("selftest", "failed" if problems else "ok", "->", argv[1])
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
