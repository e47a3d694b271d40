#!/usr/bin/env python3
"""PyTorch side of the MLP Fashion-MNIST benchmark (configs/mlp_fmnist.yaml's recipe).

Recipes:
  gpu         PyTorch at its strongest: the uint8 dataset resident on the GPU, augmentation as batched GPU ops
              (pad+crop, rotation and scale as one affine grid_sample with nearest sampling, random erasing),
              fused AdamW, fp16 AMP with GradScaler, torch.compile (default mode reduce-overhead = CUDA graphs).
  dataloader  The seed framework's recipe: torchvision transforms on the CPU, DataLoader with 8 workers,
              pin_memory, eager model, fp16 AMP, fused AdamW.

Same recipe as trctl: 784-1024-512-256-10 ReLU, batch 200, AdamW lr 1e-3 betas (0.9, 0.999) eps 1e-8 wd 1e-4
without decay on biases, cosine schedule per epoch with 5 warm-up epochs to eta_min 1e-6, label smoothing 0.1,
Kaiming-uniform (fan_in, ReLU gain) weights and zero biases, validation on the 10k test set after every epoch.
Timing: every epoch is timed with a device sync; the first epoch holds torch.compile's compile time, so
`epochs_per_s_steady` excludes it (trctl's report does the same for its first epoch, which holds graph capture).
Writes one JSON object to --out: a result in the trctl-bench-result/1 schema of docs/report.md ("tool", "name",
"recipe" with every fairness-table item, "runs" with per-epoch records), which `trctl report --vs FILE` reads, plus
the earlier top-level fields (settings, "records", figures; the recipe's name is now "recipe_name"). Prints the
same one-line summary as before. The per-epoch mean training loss is read after each epoch's timing ends (the steps
only keep a reference to their loss); training top-1 would need the logits out of the compiled step, so it is null.
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root):
    return (read_idx(os.path.join(root, "train-images-idx3-ubyte.gz")),
            read_idx(os.path.join(root, "train-labels-idx1-ubyte.gz")),
            read_idx(os.path.join(root, "t10k-images-idx3-ubyte.gz")),
            read_idx(os.path.join(root, "t10k-labels-idx1-ubyte.gz")))


MEAN, STD = 0.2860, 0.3530
BASE_LR, WARMUP_EPOCHS, ETA_MIN = 1e-3, 5, 1e-6
LABEL_SMOOTHING = 0.1
SCHEMA = "trctl-bench-result/1"
# The augmentation of both recipes in trctl's words (its resolved config's train_transforms): gpu_augment and
# run_dataloader's tf_train implement these parameters.
AUGMENTATION = ("pad(padding=2), random_crop(size=28), random_rotation(degrees=20), random_scale(min=0.8, max=1.2), "
                "normalize, random_erasing(p=0.5, scale=[0.02, 0.33], ratio=[0.3, 3.3], value=0)")


def make_model():
    m = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(),
                      nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    for mod in m:
        if isinstance(mod, nn.Linear):
            nn.init.kaiming_uniform_(mod.weight, mode="fan_in", nonlinearity="relu")
            nn.init.zeros_(mod.bias)
    return m


def lr_at(epoch, epochs, base=BASE_LR, warmup=WARMUP_EPOCHS, eta_min=ETA_MIN):
    """1-based epoch, as trctl's scheduler_lr for cosine with warm-up."""
    if epoch <= warmup:
        return base * epoch / warmup
    if epochs == warmup:
        return base
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * (epoch - warmup) / (epochs - warmup))) / 2


def make_optimizer(model):
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=BASE_LR, betas=(0.9, 0.999), eps=1e-8, fused=True)


def make_training(dev):
    """Model, optimizer, GradScaler and loss of the recipe, the same for both recipes."""
    model = make_model().to(dev)
    return (model, make_optimizer(model), torch.amp.GradScaler("cuda"),
            nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING))


def gpu_augment(x_u8):
    """x_u8 (B, 28, 28) uint8 on the GPU -> (B, 1, 28, 28) float normalized, augmented like the spec."""
    b = x_u8.shape[0]
    dev = x_u8.device
    x = x_u8.unsqueeze(1).float().div_(255.0)
    x = F.pad(x, (2, 2, 2, 2))  # (B, 1, 32, 32)
    # Random 28x28 crop offsets in [0, 4], rotation in [-20, 20] degrees, scale in [0.8, 1.2], one affine map.
    off = torch.randint(0, 5, (b, 2), device=dev).float()
    ang = (torch.rand(b, device=dev) * 40 - 20) * math.pi / 180
    sc = torch.rand(b, device=dev) * 0.4 + 0.8
    cos, sin = torch.cos(ang) / sc, torch.sin(ang) / sc
    # Output grid over the 28x28 crop, in the 32x32 input's normalized coordinates.
    tx = (off[:, 1] + 14 - 16) / 16
    ty = (off[:, 0] + 14 - 16) / 16
    theta = torch.stack([torch.stack([cos * 28 / 32, -sin * 28 / 32, tx], 1),
                         torch.stack([sin * 28 / 32, cos * 28 / 32, ty], 1)], 1)
    grid = F.affine_grid(theta, (b, 1, 28, 28), align_corners=False)
    x = F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)
    x = (x - MEAN) / STD
    # Random erasing, p 0.5, area 2%..33%, log-uniform aspect 0.3..3.3 (one attempt, clipped to the image).
    area = (torch.rand(b, device=dev) * 0.31 + 0.02) * 784
    logr = torch.rand(b, device=dev) * (math.log(3.3) - math.log(0.3)) + math.log(0.3)
    r = torch.exp(logr)
    h = torch.sqrt(area * r).round().clamp(1, 27)
    w = torch.sqrt(area / r).round().clamp(1, 27)
    top = (torch.rand(b, device=dev) * (28 - h + 1)).floor()
    left = (torch.rand(b, device=dev) * (28 - w + 1)).floor()
    on = torch.rand(b, device=dev) < 0.5
    ys = torch.arange(28, device=dev).view(1, 28, 1)
    xs = torch.arange(28, device=dev).view(1, 1, 28)
    box = ((ys >= top.view(b, 1, 1)) & (ys < (top + h).view(b, 1, 1)) & (xs >= left.view(b, 1, 1)) &
           (xs < (left + w).view(b, 1, 1)) & on.view(b, 1, 1))
    return x.masked_fill(box.unsqueeze(1), 0.0)


def epoch_gpu(xtr, ytr, bs, steps):
    perm = torch.randperm(xtr.shape[0], device=xtr.device)
    for i in range(steps):
        idx = perm[i * bs:(i + 1) * bs]
        yield xtr[idx], ytr[idx]


def eval_gpu(xte, yte, evaluate, cudagraphs):
    correct = 0
    loss = 0.0
    for i in range(0, xte.shape[0], 2000):
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        out = evaluate(xte[i:i + 2000]).float()
        loss += F.cross_entropy(out, yte[i:i + 2000], reduction="sum").item()
        correct += (out.argmax(1) == yte[i:i + 2000]).sum().item()
    return loss / xte.shape[0], correct / xte.shape[0]


def train_loop(args, model, opt, batches, evaluate):
    records = []
    for e in range(1, args.epochs + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(e, args.epochs)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.train()
        losses = []
        for xb, yb in batches(e):
            loss = args.step(xb, yb)
            losses.append(loss)  # a reference to the step's own loss tensor: no kernel, no sync
        torch.cuda.synchronize()
        t_train = time.perf_counter() - t0
        model.eval()
        val_loss, val_top1 = evaluate()
        torch.cuda.synchronize()
        t_epoch = time.perf_counter() - t0
        train_loss = torch.stack(losses).float().mean().item()  # after the epoch's timing
        records.append({"epoch": e, "train_seconds": t_train, "epoch_seconds": t_epoch, "val_loss": val_loss,
                        "val_top1": val_top1, "last_loss": float(loss), "lr": lr_at(e, args.epochs),
                        "train_loss": train_loss, "images_per_s": args.steps * args.batch / t_train})
        print(f"epoch {e}: {t_epoch:.3f} s, val top1 {100 * val_top1:.2f}%", file=sys.stderr, flush=True)
    return records


def finite(x):
    """x, or None when it is not a finite number (the schema's JSON has no NaN)."""
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def sanitized(v):
    """v with every non-finite float replaced by None: strict JSON readers (trctl report) refuse NaN."""
    if isinstance(v, dict):
        return {k: sanitized(x) for k, x in v.items()}
    if isinstance(v, list):
        return [sanitized(x) for x in v]
    return finite(v) if isinstance(v, float) else v


def num(x):
    """A number as trctl report's recipes write it: integers in full, others as printf's %g."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:g}"


def model_text(model):
    """The layers in trctl's words: type(params) as its resolved config lists them, without names."""
    parts = []
    for m in model:
        if isinstance(m, nn.Linear):
            parts.append(f"linear(out_features={m.out_features}, bias={'true' if m.bias is not None else 'false'})")
        elif isinstance(m, nn.Flatten):
            parts.append("flatten")
        elif isinstance(m, nn.ReLU):
            parts.append("relu")
        else:
            parts.append(type(m).__name__.lower())
    return ", ".join(parts)


def graph_mode(args):
    if args.recipe != "gpu" or args.compile_mode == "none":
        return "none (eager)"
    if args.compile_mode in ("reduce-overhead", "max-autotune"):
        return (f"torch.compile mode {args.compile_mode}: CUDA graphs over augmentation, forward and backward; "
                "optimizer and GradScaler eager")
    return f"torch.compile mode {args.compile_mode}: no CUDA graphs"


def recipe_of(args, model, opt):
    """Every item of trctl report's fairness table (docs/report.md), worded as trctl words its own side."""
    gpu = args.recipe == "gpu"
    decayed = [g for g in opt.param_groups if g["weight_decay"] > 0]
    plain = [g for g in opt.param_groups if g["weight_decay"] == 0]
    wd = decayed[0]["weight_decay"] if decayed else 0
    b1, b2 = opt.defaults["betas"]
    return {
        "framework": f"torch {torch.__version__}",
        "device": torch.cuda.get_device_name(),
        "dataset": "fashion_mnist",
        "model": model_text(model),
        "parameters": sum(p.numel() for p in model.parameters()),
        "init": "kaiming_uniform_fan_in (bound sqrt(6/fan_in)), zero biases",
        "optimizer": f"adamw lr={num(BASE_LR)} betas=({num(b1)}, {num(b2)}) eps={num(opt.defaults['eps'])}",
        "weight_decay": (f"{num(wd)} decoupled on {sum(len(g['params']) for g in decayed)} tensors, "
                         f"0 on {sum(len(g['params']) for g in plain)}") if decayed else "0",
        "lr_schedule": f"cosine to eta_min={num(ETA_MIN)}, linear warm-up {WARMUP_EPOCHS} epochs, per epoch",
        "label_smoothing": num(LABEL_SMOOTHING),
        "val_loss": "cross_entropy, label_smoothing=0",
        "batch_size": args.batch,
        "epochs": args.epochs,
        "augmentation": AUGMENTATION,
        "augmentation_impl": ("crop, rotation and scale as one affine map (one nearest sampling), one erasing attempt"
                              if gpu else "torchvision semantics, one op after another"),
        "normalization": f"mean=[{num(MEAN)}] std=[{num(STD)}]",
        "validation": "every epoch, batch 2000, transforms: normalize",
        "precision": "fp16 AMP, dynamic loss scaling, fp32 master weights",
        "tf32": "on" if torch.backends.cuda.matmul.allow_tf32 else "off",
        "graph_mode": graph_mode(args),
        "compile_excluded": "epoch 1 excluded from steady",
        "epoch_time": "training + validation",
        "data_loading": ("GPU-resident dataset, augmentation on the GPU" if gpu else
                         f"DataLoader, {args.workers} workers, pin_memory, augmentation on the CPU"),
        "seed": args.seed,
    }


def schema_run(args, records, secs, steady):
    """One entry of the schema's "runs": per-epoch records and the run's figures."""
    epochs = [{"epoch": r["epoch"], "train_loss": finite(r["train_loss"]), "train_top1": None,
               "val_loss": finite(r["val_loss"]), "val_top1": finite(r["val_top1"]), "lr": r["lr"],
               "images_per_s": finite(r["images_per_s"]), "seconds": r["epoch_seconds"],
               "train_seconds": r["train_seconds"]} for r in records]
    train = [r["train_seconds"] for r in records]
    steady_train = sum(train[1:]) if len(train) > 1 else train[0]
    return {"seed": args.seed, "epochs": epochs, "final_val_top1": finite(records[-1]["val_top1"]),
            "best_val_top1": finite(max(r["val_top1"] for r in records)), "epochs_per_s_steady": steady,
            "epochs_per_s_overall": args.epochs / sum(secs),
            "images_per_s_steady": args.steps * args.batch * max(len(train) - 1, 1) / steady_train,
            "seconds": sum(secs), "first_epoch_seconds": secs[0]}


def run_dataloader(args, data):
    import torchvision.transforms as T
    from PIL import Image
    dev = torch.device("cuda")
    xtr, ytr, xte, yte = data

    class DS(torch.utils.data.Dataset):
        def __init__(self, x, y, tf):
            self.x, self.y, self.tf = x, y, tf

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.tf(Image.fromarray(self.x[i])), int(self.y[i])

    tf_train = T.Compose([T.Pad(2), T.RandomCrop(28), T.RandomRotation(20), T.RandomAffine(0, scale=(0.8, 1.2)),
                          T.ToTensor(), T.Normalize((MEAN,), (STD,)), T.RandomErasing(0.5)])
    tf_val = T.Compose([T.ToTensor(), T.Normalize((MEAN,), (STD,))])
    dl = torch.utils.data.DataLoader(DS(xtr, ytr, tf_train), batch_size=args.batch, shuffle=True, drop_last=True,
                                     num_workers=args.workers, pin_memory=True, persistent_workers=True)
    dv = torch.utils.data.DataLoader(DS(xte, yte, tf_val), batch_size=2000, num_workers=args.workers,
                                     pin_memory=True, persistent_workers=True)
    model, opt, scaler, crit = make_training(dev)

    def fwd_loss(xb, yb):
        with torch.autocast("cuda", dtype=torch.float16):
            return crit(model(xb.to(dev, non_blocking=True)), yb.to(dev, non_blocking=True))

    def evaluate():
        correct, loss, n = 0, 0.0, 0
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            for xb, yb in dv:
                out = model(xb.to(dev, non_blocking=True)).float()
                yb = yb.to(dev)
                loss += F.cross_entropy(out, yb, reduction="sum").item()
                correct += (out.argmax(1) == yb).sum().item()
                n += len(yb)
        return loss / n, correct / n

    return model, opt, scaler, fwd_loss, (lambda e: iter(dl)), evaluate, len(dl)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", choices=["gpu", "dataloader"], default="gpu")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile-mode", default="reduce-overhead",
                    help="torch.compile mode for the gpu recipe: default, reduce-overhead, max-autotune, none")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    data = load(args.data)
    t_start = time.perf_counter()
    if args.recipe == "gpu":
        dev = torch.device("cuda")
        xtr, ytr, xte, yte = data
        xtr_d = torch.from_numpy(xtr.copy()).to(dev)
        ytr_d = torch.from_numpy(ytr.astype(np.int64)).to(dev)
        xte_d = ((torch.from_numpy(xte.copy()).to(dev).float() / 255 - MEAN) / STD).unsqueeze(1)
        yte_d = torch.from_numpy(yte.astype(np.int64)).to(dev)
        model, opt, scaler, crit = make_training(dev)

        def fwd_loss(xb, yb):
            with torch.autocast("cuda", dtype=torch.float16):
                return crit(model(gpu_augment(xb)), yb)

        def infer(x):
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                return model(x)

        if args.compile_mode != "none":
            mode = None if args.compile_mode == "default" else args.compile_mode
            fwd_loss = torch.compile(fwd_loss, mode=mode)
            infer = torch.compile(infer, mode=mode)
        steps = xtr_d.shape[0] // args.batch
        batches = lambda e: epoch_gpu(xtr_d, ytr_d, args.batch, steps)
        evaluate = lambda: eval_gpu(xte_d, yte_d, infer, args.compile_mode in ("reduce-overhead", "max-autotune"))
    else:
        model, opt, scaler, fwd_loss, batches, evaluate, steps = run_dataloader(args, data)

    cudagraphs = args.recipe == "gpu" and args.compile_mode in ("reduce-overhead", "max-autotune")

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        loss = fwd_loss(xb, yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach().clone() if cudagraphs else loss.detach()

    args.step = step
    args.steps = steps
    records = train_loop(args, model, opt, batches, evaluate)
    total = time.perf_counter() - t_start
    secs = [r["epoch_seconds"] for r in records]
    steady = (len(secs) - 1) / sum(secs[1:]) if len(secs) > 1 else 1 / secs[0]
    res = {
        "framework": "pytorch", "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
        "recipe": args.recipe, "compile_mode": args.compile_mode if args.recipe == "gpu" else "none",
        "epochs": args.epochs, "batch": args.batch, "workers": args.workers, "amp": "fp16", "optimizer": "adamw fused",
        "total_seconds": total, "train_epoch_seconds_sum": sum(secs),
        "epochs_per_s_total": args.epochs / sum(secs), "epochs_per_s_steady": steady,
        "first_epoch_seconds": secs[0],
        "final_val_top1": records[-1]["val_top1"], "best_val_top1": max(r["val_top1"] for r in records),
        "records": records,
    }
    name = f"pytorch {args.recipe}" + (f" {args.compile_mode}" if args.recipe == "gpu" else "")
    doc = {"schema": SCHEMA, "tool": "pytorch", "name": name, **res, "recipe": recipe_of(args, model, opt),
           "recipe_name": args.recipe, "runs": [schema_run(args, records, secs, steady)],
           "environment": {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": res["gpu"]}}
    text = json.dumps(sanitized(doc), indent=1, allow_nan=False)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(json.dumps({k: v for k, v in res.items() if k != "records"}))


if __name__ == "__main__":
    main()
