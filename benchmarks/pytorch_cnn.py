#!/usr/bin/env python3
"""PyTorch side of the CNN training-throughput benchmark (configs/{vgg16bn,resnet18,resnet50}.yaml's recipe).

PyTorch at its strongest on one GPU: torchvision model (weights=None, then trctl's init: Kaiming-uniform fan_in
conv/linear weights, zero biases) in channels_last, a synthetic uint8 dataset resident on the GPU (--train-size
images, default 2,560 = trctl's data.synthetic.train_size, rounded up to whole batches), normalized on the GPU
every step, fp16 autocast with GradScaler (or bf16 without), cudnn.benchmark, TF32 allowed, fused SGD (momentum
buffers zero-initialised: see make_optimizer) with Nesterov momentum and weight decay on conv/linear weights
only (trctl's decay_bias_and_norm: false),
cross-entropy with label smoothing 0.1. Mode `compiled` runs torch.compile over normalize + forward + loss (and its
backward); the optimizer step and GradScaler stay eager (as in benchmarks/pytorch_mlp_fmnist.py).
Timing: after the first step (compilation, cuDNN autotuning; reported apart) and --warmup steps, --repeats
windows of --steps steps, each between CUDA events with its own memory peak. Writes one JSON object to --json
after every mode (so a later failure or timeout keeps the earlier results), prints one human line per mode, and
with --out-dir writes DIR/torch_eager.json and DIR/torch_compiled.json in the trctl-bench-result/1 schema (one run
per window; benchmarks/cnn_result.py, the torch-free half) for
    trctl report RUN_DIR --vs DIR/torch_compiled.json --vs DIR/torch_eager.json -o REPORT_DIR
"""
import argparse
import gc
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback

import torch
import torch.nn as nn
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cnn_result  # noqa: E402 -- the torch-free schema writer next to this file
import nvml_energy  # noqa: E402 -- the board's energy counter (ctypes), next to this file
from cnn_result import CLASSES, LABEL_SMOOTHING, LR_MEASURE, MEAN, MOMENTUM, SIDE, STD, WEIGHT_DECAY  # noqa: E402

MODELS = {"vgg16bn": "vgg16_bn", "resnet18": "resnet18", "resnet50": "resnet50"}


def log(msg):
    print(msg, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="resnet50")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=50, help="timed steps per window")
    p.add_argument("--repeats", type=int, default=3, help="timed windows (the report's runs)")
    p.add_argument("--warmup", type=int, default=15, help="untimed steps before timing (after the compile step)")
    p.add_argument("--train-size", type=int, default=2560,
                   help="synthetic images resident on the GPU (trctl's data.synthetic.train_size), whole batches")
    p.add_argument("--mode", choices=["eager", "compiled", "both"], default="both")
    p.add_argument("--lr", type=float, default=LR_MEASURE,
                   help="constant lr of every step (default: trctl's in the recipe's second warm-up epoch, the "
                        "regime its throughput epochs time: see cnn_result.LR_MEASURE)")
    p.add_argument("--json", default="", help="write the result object here (rewritten after every mode)")
    p.add_argument("--out-dir", default="",
                   help="write torch_eager.json and torch_compiled.json (trctl-bench-result/1) into this folder")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--amp", choices=["fp16", "bf16", "none"], default="fp16")
    p.add_argument("--compile-modes", default="max-autotune,default",
                   help="torch.compile modes tried in order until one works (comma-separated; 'default' = mode=None)")
    p.add_argument("--compile-timeout-s", type=int, default=300,
                   help="give up on a compile mode whose first step takes longer (SIGALRM, best effort); 0 = never")
    return p.parse_args()


def setup_backends():
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("high")


def pool_batches(args):
    return max(1, -(-args.train_size // args.batch))


def make_pool(batch, n_batches, dev):
    """(P, B, H, W, C) uint8 images and (P, B) int64 labels, resident on the GPU (trctl stores samples NHWC)."""
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    images = torch.randint(0, 256, (n_batches, batch, SIDE, SIDE, 3), dtype=torch.uint8, device=dev, generator=g)
    labels = torch.randint(0, CLASSES, (n_batches, batch), dtype=torch.int64, device=dev, generator=g)
    return images, labels


def init_like_trctl(model):
    """trctl's kaiming_uniform_fan_in (bound sqrt(6/fan_in)) on conv/linear weights, zero biases; batch norm 1/0."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_uniform_(m.weight, mode="fan_in", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def make_model(name, memory_format, dev):
    model = getattr(torchvision.models, MODELS[name])(weights=None)
    if name == "vgg16bn":
        model.avgpool = nn.Identity()  # AdaptiveAvgPool2d((7, 7)) on a 7x7 map: the identity (trctl omits it too)
    init_like_trctl(model)
    return model.to(dev).to(memory_format=memory_format).train()


# torchvision modules as trctl's layer types (configs/*.yaml are generated layer for layer from these models).
TRCTL_TYPES = {nn.Conv2d: "conv2d", nn.BatchNorm2d: "batch_norm", nn.ReLU: "relu", nn.MaxPool2d: "max_pool",
               nn.AdaptiveAvgPool2d: "global_avg_pool", nn.Linear: "linear", nn.Dropout: "dropout"}


def model_facts(name, dev):
    """The model in trctl's words, traced by one forward pass: every call of a leaf module is a layer (ResNet's
    ReLU module runs 2 or 3 times per block, as trctl's config has 2 or 3 relu layers), each residual block adds
    an `add`, VGG's torch.flatten before the classifier a `flatten`; parameter and weight-decay tensor counts."""
    model = make_model(name, torch.contiguous_format, dev).eval()
    counts, hooks = {}, []

    def seen(kind):
        counts[kind] = counts.get(kind, 0) + 1  # dicts keep the order of first use

    for m in model.modules():
        kind = next((t for cls, t in TRCTL_TYPES.items() if type(m) is cls), None)
        if kind is not None:
            hooks.append(m.register_forward_hook(lambda mod, i, o, kind=kind: seen(kind)))
        elif type(m).__name__ in ("BasicBlock", "Bottleneck"):
            hooks.append(m.register_forward_hook(lambda mod, i, o: seen("add")))
    if name == "vgg16bn":
        hooks.append(model.classifier.register_forward_pre_hook(lambda mod, i: seen("flatten")))
    with torch.no_grad():
        model(torch.zeros(1, 3, SIDE, SIDE, device=dev))
    for h in hooks:
        h.remove()
    params = list(model.parameters())
    facts = {"layer_counts": list(counts.items()), "parameters": sum(p.numel() for p in params),
             "decay_tensors": sum(1 for p in params if p.ndim > 1),
             "no_decay_tensors": sum(1 for p in params if p.ndim <= 1)}
    del model
    return facts


def make_optimizer(model, lr):
    """SGD, Nesterov momentum; weight decay on conv/linear weights only (not biases, not batch-norm parameters).
    Fused SGD (one kernel; with the GradScaler it reads the overflow flag on the device, where foreach SGD makes
    GradScaler.step wait for it on the host every step), its momentum buffers created as zeros here. torch 2.11's
    fused SGD otherwise allocates them uninitialised (torch.empty_like) at its first step and fills them in the
    kernel, which returns at once on a step the GradScaler skips: a skipped first step (routine at the scaler's
    initial scale 65536) leaves them holding garbage, read from the next step on -- how PyTorch's side-by-side
    model diverged (loss NaN, loss scale ~0) in most runs before RESULTS.md run 65. With dampening 0 a zero buffer
    gives the first step's update exactly (0.9 x 0 + g = g). Foreach SGD where fused is unavailable."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt, impl = torch.optim.SGD(groups, lr=lr, momentum=MOMENTUM, nesterov=True, fused=True), "fused"
    except (TypeError, RuntimeError, ValueError) as e:
        log(f"fused SGD unavailable ({e}); using foreach")
        opt, impl = torch.optim.SGD(groups, lr=lr, momentum=MOMENTUM, nesterov=True, foreach=True), "foreach"
    with torch.no_grad():
        for p in decay + no_decay:
            opt.state[p]["momentum_buffer"] = torch.zeros_like(p)  # same strides as p (channels_last weights)
    return opt, impl


class Training:
    """Model, optimizer, scaler and the forward+loss function of one mode."""

    def __init__(self, args, dev, compile_mode=None):
        # Peak memory from here on: in the CUDA-graph modes the graphs' memory pool is allocated while they are
        # recorded (the first steps) and replays never go through the allocator again (see measure()).
        torch.cuda.reset_peak_memory_stats()
        self.memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        self.model = make_model(args.model, self.memory_format, dev)
        self.opt, self.opt_impl = make_optimizer(self.model, args.lr)
        self.amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "none": None}[args.amp]
        self.scaler = torch.amp.GradScaler("cuda", enabled=args.amp == "fp16")
        self.crit = nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING)
        # Normalization folded to one multiply-add on 0..255 values: (x / 255 - mean) / std.
        self.scale = (1.0 / (255.0 * torch.tensor(STD, device=dev))).view(1, 3, 1, 1)
        self.shift = (-torch.tensor(MEAN, device=dev) / torch.tensor(STD, device=dev)).view(1, 3, 1, 1)
        self.cudagraphs = compile_mode in ("reduce-overhead", "max-autotune")
        fn = self.forward_loss
        if compile_mode is not None:
            fn = torch.compile(fn, mode=None if compile_mode == "default" else compile_mode)
        self.fn = fn

    def forward_loss(self, x_u8, y):
        x = x_u8.permute(0, 3, 1, 2)  # (B, C, H, W) view of (B, H, W, C) storage: channels_last strides
        x = torch.addcmul(self.shift, x.float(), self.scale).contiguous(memory_format=self.memory_format)
        with torch.autocast("cuda", dtype=self.amp_dtype or torch.float16, enabled=self.amp_dtype is not None):
            return self.crit(self.model(x), y)

    def step(self, x_u8, y):
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        self.opt.zero_grad(set_to_none=True)
        loss = self.fn(x_u8, y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss

    def close(self):
        del self.fn, self.model, self.opt, self.scaler


class CompileTimeout(Exception):
    pass


def on_alarm(signum, frame):
    raise CompileTimeout("compile step ran past --compile-timeout-s")


def first_step(train, pool, timeout_s):
    """Runs step 0 (compilation, cudnn autotuning) under an optional alarm; returns its seconds."""
    images, labels = pool
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    old = signal.signal(signal.SIGALRM, on_alarm) if timeout_s > 0 else None
    if timeout_s > 0:
        signal.alarm(timeout_s)
    try:
        train.step(images[0], labels[0])
        torch.cuda.synchronize()
    finally:
        if timeout_s > 0:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    return time.perf_counter() - t0


def timed_window(args, train, pool, first_index, meter):
    """--steps steps between CUDA events, the memory peaks of just these steps and the last step's loss; with an
    NVML meter (nvml_energy.NvmlEnergy, else None) the board's joules per step and mean watts over the window,
    read with the device idle on both sides as trctl reads them around its epochs' training steps."""
    images, labels = pool
    n_pool = images.shape[0]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    mj_before = meter.read_mj() if meter else None
    t0 = time.perf_counter()
    start.record()
    loss = None
    for i in range(args.steps):
        k = (first_index + i) % n_pool
        loss = train.step(images[k], labels[k])
    end.record()
    torch.cuda.synchronize()
    wall_s = time.perf_counter() - t0
    mj_after = meter.read_mj() if meter else None
    ms = start.elapsed_time(end)
    j_per_step, power_w = nvml_energy.window_energy(mj_before, mj_after, args.steps, wall_s)
    return {"steps": args.steps, "ms": ms, "img_per_s": args.batch * args.steps / (ms / 1e3),
            "ms_per_step": ms / args.steps, "wall_ms_per_step": 1e3 * wall_s / args.steps,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "last_loss": float(loss.detach().float().item()),
            "j_per_step": j_per_step, "power_w": power_w}


def measure(args, train, pool, first_s, meter):
    """Warm-up, then --repeats windows of --steps timed steps; the totals over all windows as before."""
    images, labels = pool
    n_pool = images.shape[0]
    for i in range(1, args.warmup + 1):
        train.step(images[i % n_pool], labels[i % n_pool])
    # Peak since the model was built (compilation, the first step, warm-up). A CUDA-graph mode's timed steps are
    # replays whose activations live in the pool its recording allocated: the allocator sees none of them, so a
    # window's own peak (run 51: 1.09 GiB for ResNet-50 where 13.45 GiB were reserved) omits them. There, each
    # window's peak is taken together with this one.
    setup_peak = torch.cuda.max_memory_allocated()
    windows = []
    for r in range(max(1, args.repeats)):
        w = timed_window(args, train, pool, args.warmup + 1 + r * args.steps, meter)
        w["window_peak_allocated_bytes"] = w["peak_allocated_bytes"]
        if train.cudagraphs:
            w["peak_allocated_bytes"] = max(w["peak_allocated_bytes"], setup_peak)
        windows.append(w)
    ms = sum(w["ms"] for w in windows)
    steps = args.steps * len(windows)
    last_loss = windows[-1]["last_loss"]
    joules = [w["j_per_step"] for w in windows]
    finite = all(math.isfinite(w["last_loss"]) for w in windows)
    if not finite:  # a diverged model's steps compute NaN and inf: neither a training step's work nor its power
        log(f"WARNING: the loss was not finite at the end of a timed window ({[w['last_loss'] for w in windows]}, "
            f"lr {args.lr:g}): these steps did not train, their timing is no training measurement")
    return {
        "img_per_s": args.batch * steps / (ms / 1e3),
        "ms_per_step": ms / steps,
        "wall_ms_per_step": sum(w["wall_ms_per_step"] for w in windows) / len(windows),
        "timed_steps": steps,
        "warmup_steps": args.warmup,
        "first_step_s": first_s,
        "windows": windows,
        "peak_allocated_bytes": max(w["peak_allocated_bytes"] for w in windows),
        "peak_reserved_bytes": max(w["peak_reserved_bytes"] for w in windows),
        "setup_peak_allocated_bytes": setup_peak,
        "peak_includes_setup": train.cudagraphs,
        "last_loss": last_loss,
        "loss_finite": finite,
        "loss_scale_end": float(train.scaler.get_scale()) if args.amp == "fp16" else None,
        "optimizer_impl": train.opt_impl,
        "j_per_step": sum(joules) / len(joules) if all(j is not None for j in joules) else None,
    }


def free_memory():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def run_eager(args, dev, pool, meter):
    train = Training(args, dev)
    try:
        first_s = first_step(train, pool, 0)
        res = measure(args, train, pool, first_s, meter)
        res["compile_s"] = 0.0
        return res
    finally:
        train.close()
        free_memory()


def run_compiled(args, dev, pool, meter):
    """Tries each --compile-modes entry in order; failures are recorded, not raised."""
    attempts = []
    for mode in [m.strip() for m in args.compile_modes.split(",") if m.strip()]:
        train = None
        try:
            train = Training(args, dev, compile_mode=mode)
            first_s = first_step(train, pool, args.compile_timeout_s)
            res = measure(args, train, pool, first_s, meter)
            res.update({"compile_mode": mode, "compile_s": first_s, "failed_modes": attempts})
            return res
        except Exception as e:  # noqa: BLE001 -- any compiler failure is a result to report
            tb = traceback.format_exc().strip().splitlines()
            attempts.append({"mode": mode, "error": f"{type(e).__name__}: {e}"[:2000], "traceback_tail": tb[-15:]})
            log(f"{args.model} compiled mode={mode} failed: {type(e).__name__}: {str(e)[:300]}")
        finally:
            if train is not None:
                train.close()
            del train
            torch._dynamo.reset()
            try:  # the CUDA-graph memory pools of max-autotune / reduce-overhead
                from torch._inductor import cudagraph_trees
                cudagraph_trees.reset_cudagraph_trees()
            except (AttributeError, ImportError, RuntimeError):
                pass
            free_memory()
    return {"error": "every compile mode failed", "failed_modes": attempts}


def env_info():
    info = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "gpu": torch.cuda.get_device_name(0),
        "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory,
        "python": sys.version.split()[0],
    }
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        info["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        info["driver"] = None
    return info


def legacy_recipe(args):
    """The recipe as the combined --json file has always stated it."""
    return {
        "model": f"torchvision.models.{MODELS[args.model]}(weights=None)"
                 + ("; avgpool (AdaptiveAvgPool2d 7x7 on a 7x7 map) replaced by Identity" if args.model == "vgg16bn"
                    else ""),
        "init": "trctl's kaiming_uniform_fan_in on conv/linear weights, zero biases, batch norm 1/0",
        "input": f"{SIDE}x{SIDE}x3 uint8, {pool_batches(args)} random batches resident on the GPU, random labels "
                 f"in [0, {CLASSES})",
        "normalization": {"mean": MEAN, "std": STD, "where": "GPU, every step, x/255 then (x - mean) / std"},
        "batch": args.batch,
        "memory_format": "channels_last" if args.channels_last else "contiguous",
        "loss": {"type": "cross_entropy", "label_smoothing": LABEL_SMOOTHING},
        "optimizer": {"type": "sgd", "lr": args.lr, "momentum": MOMENTUM, "nesterov": True,
                      "weight_decay": WEIGHT_DECAY,
                      "decay": "conv/linear weights only (no biases, no batch-norm parameters)",
                      "impl": "fused (foreach where unsupported), momentum buffers created as zeros before the "
                              "first step (torch's fused SGD leaves them uninitialised when the GradScaler skips it)"},
        "lr_schedule": "constant during the measurement: --lr, by default trctl's in its second warm-up epoch",
        "amp": args.amp,
        "grad_scaler": args.amp == "fp16",
        "cudnn_benchmark": True,
        "tf32": True,
        "compile_modes_tried": args.compile_modes,
        "compiled_region": "normalize + forward + loss (+ its backward); optimizer step and GradScaler eager",
        "timing": "CUDA events around each of --repeats windows of --steps steps; the first step (compile, cudnn "
                  "autotuning) and --warmup steps excluded",
    }


def write_json(args, out):
    if not args.json:
        return
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.json)


def human_line(model, mode, r):
    if "error" in r:
        return f"{model} {mode}: FAILED ({r['error']})"
    extra = f", compile {r['compile_s']:.1f} s (mode {r['compile_mode']})" if mode == "compiled" else ""
    joules = f", {r['j_per_step']:.2f} J/step" if r.get("j_per_step") is not None else ""
    return (f"{model} {mode}: {r['img_per_s']:.1f} img/s, {r['ms_per_step']:.2f} ms/step{joules}, "
            f"peak allocated {r['peak_allocated_bytes'] / 2**30:.2f} GiB, reserved "
            f"{r['peak_reserved_bytes'] / 2**30:.2f} GiB, first step {r['first_step_s']:.1f} s{extra}, "
            f"last loss {r['last_loss']:.3f}")


def open_energy_meter(dev):
    """The board's NVML energy counter of dev (by its UUID, else the only device), or None: then no joules."""
    uuid = nvml_energy.torch_device_uuid(torch.cuda.get_device_properties(dev))
    meter = nvml_energy.NvmlEnergy.open(uuid=uuid) if uuid else None
    if meter is None:
        meter = nvml_energy.NvmlEnergy.open()
    if meter is None:
        log(f"no board energy per step: {nvml_energy.NvmlEnergy.last_error}")
    return meter


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        log("error: this benchmark needs a CUDA device")
        return 2
    dev = torch.device("cuda")
    torch.manual_seed(0)
    setup_backends()
    pool = make_pool(args.batch, pool_batches(args), dev)
    env = env_info()
    meter = open_energy_meter(dev)
    out = {"model": args.model, "batch": args.batch, "results": {}, "recipe": legacy_recipe(args), "env": env,
           "pool_bytes": pool[0].numel() + pool[1].numel() * 8}
    facts = None
    if args.out_dir:
        try:
            facts = model_facts(args.model, dev)
            out["model_facts"] = facts
        except Exception as e:  # noqa: BLE001 -- the measurement still runs; the schema files are not written
            log(f"model_facts failed ({type(e).__name__}: {e}); no --out-dir files")
        free_memory()

    def write_schema_files():  # after every mode, as --json: a later timeout keeps the modes measured so far
        if not args.out_dir or facts is None:
            return
        cfg = {"model": args.model, "batch": args.batch, "train_images": pool_batches(args) * args.batch,
               "steps": args.steps, "warmup": args.warmup, "repeats": max(1, args.repeats), "lr": args.lr,
               "amp": args.amp,
               "channels_last": args.channels_last,
               "tf32": torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32}
        for path in cnn_result.write_results(args.out_dir, cfg, facts, env, out["results"]):
            log(f"wrote {path}")

    modes = ["eager", "compiled"] if args.mode == "both" else [args.mode]
    for mode in modes:
        log(f"{args.model} {mode}: batch {args.batch}, {args.warmup} warm-up + {args.steps} timed steps ...")
        try:
            res = run_eager(args, dev, pool, meter) if mode == "eager" else run_compiled(args, dev, pool, meter)
        except Exception as e:  # noqa: BLE001 -- e.g. out of memory: report it, keep the other mode
            res = {"error": f"{type(e).__name__}: {e}"[:2000],
                   "traceback_tail": traceback.format_exc().strip().splitlines()[-15:]}
            free_memory()
        out["results"][mode] = res
        log(human_line(args.model, mode, res))
        write_json(args, out)
        write_schema_files()
    if "eager" in out["results"] and "compiled" in out["results"]:
        e, c = out["results"]["eager"], out["results"]["compiled"]
        if "img_per_s" in e and "img_per_s" in c:
            out["compiled_over_eager"] = c["img_per_s"] / e["img_per_s"]
            log(f"{args.model}: compiled / eager = {out['compiled_over_eager']:.3f}")
    if meter:
        meter.close()
    write_json(args, out)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
