#!/usr/bin/env python3
"""Checks a `trctl export` file from the PyTorch side: loads it with the `safetensors` package (or, when that is
not installed, by parsing the safetensors header with json and the data with numpy; the JSON says which path ran),
builds the torch model the config describes as nn.Sequential(OrderedDict((layer.name, module) ...)) -- whose
state_dict names are the export's -- checks every name, shape and dtype against it, loads the weights and runs
the Fashion-MNIST test images (IDX files) through it, printing one JSON object with top-1 and top-5 accuracy.
Exit status 1 when a name, shape or dtype disagrees (BN's num_batches_tracked is expected to be absent).

    trctl train configs/mlp_fmnist.yaml ... && trctl export runs/mlp_fmnist --format safetensors -o mlp.safetensors
    python3 benchmarks/load_safetensors_check.py mlp.safetensors --config configs/mlp_fmnist.yaml \\
        --data-root /usr/share/datasets/fashion-mnist [--images 10000]

Supported layers: flatten, linear, relu, dropout, conv2d, batch_norm, max_pool, avg_pool, global_avg_pool (a
sequential model; `add` needs a graph, not nn.Sequential)."""
import argparse
import collections
import gzip
import json
import os
import re
import struct
import sys

import numpy as np
import torch
import torch.nn as nn


def read_config(path):
    """(layers, mean, std) of a trctl spec: with PyYAML when installed, else from its flow-style layer lines."""
    text = open(path).read()
    try:
        import yaml
        spec = yaml.safe_load(text)
        layers = spec["model"]["layers"]
        norm = (spec.get("data") or {}).get("normalization") or {}
        mean, std = norm.get("mean", [0.2860]), norm.get("std", [0.3530])
        return layers, mean, std
    except ImportError:
        pass
    layers, in_layers = [], False
    for line in text.splitlines():
        s = line.split("#", 1)[0].rstrip()
        if re.match(r"^\s*layers:\s*$", s):
            in_layers = True
            continue
        if in_layers:
            m = re.match(r"^\s*-\s*\{(.*)\}\s*$", s)
            if not m:
                if s.strip():
                    in_layers = False
                continue
            layer = {}
            for kv in m.group(1).split(","):
                k, v = (p.strip() for p in kv.split(":", 1))
                layer[k] = v.strip("'\"")
            layers.append(layer)
    mm = re.search(r"normalization:\s*\{mean:\s*\[([^\]]*)\],\s*std:\s*\[([^\]]*)\]\}", text)
    mean = [float(v) for v in mm.group(1).split(",")] if mm else [0.2860]
    std = [float(v) for v in mm.group(2).split(",")] if mm else [0.3530]
    return layers, mean, std


def build_model(layers, in_shape):
    """nn.Sequential(OrderedDict) named like the config's layers; shapes found by running a dummy input."""
    mods = collections.OrderedDict()
    x = torch.zeros((1,) + tuple(in_shape))
    for i, l in enumerate(layers):
        kind = l["type"]
        name = l.get("name") or f"{kind}{i}"
        geti = lambda k, d: int(l.get(k, d))
        flag = lambda k, d: str(l.get(k, d)).lower() in ("true", "1")
        if kind == "flatten":
            m = nn.Flatten()
        elif kind == "linear":
            m = nn.Linear(x.shape[1], geti("out_features", 0), bias=flag("bias", True))
        elif kind == "relu":
            m = nn.ReLU()
        elif kind == "dropout":
            m = nn.Dropout(float(l.get("p", 0.5)))
        elif kind == "conv2d":
            m = nn.Conv2d(x.shape[1], geti("out_channels", 0), geti("kernel_size", 1), stride=geti("stride", 1) or 1,
                          padding=geti("padding", 0), dilation=geti("dilation", 1), groups=geti("groups", 1),
                          bias=flag("bias", True))
        elif kind == "batch_norm":
            m = nn.BatchNorm2d(x.shape[1], eps=float(l.get("eps", 1e-5)), momentum=float(l.get("momentum", 0.1)))
        elif kind in ("max_pool", "avg_pool"):
            k = geti("kernel_size", 1)
            cls = nn.MaxPool2d if kind == "max_pool" else nn.AvgPool2d
            m = cls(k, stride=geti("stride", 0) or k, padding=geti("padding", 0))
        elif kind == "global_avg_pool":
            m = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        else:
            raise SystemExit(f"layer type {kind!r} ({name}) does not fit an nn.Sequential model")
        if l.get("inputs"):
            raise SystemExit(f"layer {name} names its inputs: not a sequential model")
        mods[name] = m
        with torch.no_grad():
            x = m.eval()(x)
    return nn.Sequential(mods)


def load_with_package(path):
    from safetensors import safe_open
    tensors = {}
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        for k in f.keys():
            tensors[k] = f.get_tensor(k)
    return tensors, meta


def load_by_header(path):
    """The safetensors layout by hand: u64 LE header length, JSON header, little-endian row-major data."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        buf = raw[base + b:base + e]
        if t["dtype"] == "F32":
            a = torch.from_numpy(np.frombuffer(buf, dtype="<f4").copy())
        elif t["dtype"] == "F16":
            a = torch.from_numpy(np.frombuffer(buf, dtype="<f2").copy())
        elif t["dtype"] == "BF16":
            a = torch.from_numpy(np.frombuffer(buf, dtype="<i2").copy()).view(torch.bfloat16)
        else:
            raise SystemExit(f"{path}: tensor {name} has dtype {t['dtype']}, not one trctl exports")
        tensors[name] = a.reshape(t["shape"])
    return tensors, meta


def read_idx(path):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(n, rows, cols)
    if magic == 2049:
        return np.frombuffer(data, dtype=np.uint8, offset=8)[:n]
    raise SystemExit(f"{path}: not an IDX images/labels file (magic {magic})")


def find(root, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(root, name)):
            return os.path.join(root, name)
    raise SystemExit(f"{stem}[.gz] not found under {root}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "..", "configs", "mlp_fmnist.yaml"))
    ap.add_argument("--data-root", default=os.environ.get("TRCTL_FMNIST_ROOT", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--images", type=int, default=10000)
    ap.add_argument("--loader", choices=["auto", "package", "header"], default="auto")
    args = ap.parse_args()

    loader = args.loader
    if loader == "auto":
        try:
            import safetensors  # noqa: F401
            loader = "package"
        except ImportError:
            loader = "header"
    tensors, meta = load_with_package(args.file) if loader == "package" else load_by_header(args.file)

    layers, mean, std = read_config(args.config)
    images = read_idx(find(args.data_root, "t10k-images-idx3-ubyte"))[:args.images]
    labels = read_idx(find(args.data_root, "t10k-labels-idx1-ubyte"))[:args.images]
    model = build_model(layers, (1, images.shape[1], images.shape[2]))
    expected = model.state_dict()
    want_dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    file_dtypes = {str(t.dtype) for t in tensors.values()}
    problems, missing = [], []
    for name, ref in expected.items():
        if name.endswith("num_batches_tracked"):
            if name in tensors:
                problems.append(f"{name}: not expected in a trctl export")
            continue
        if name not in tensors:
            missing.append(name)
            continue
        t = tensors[name]
        if tuple(t.shape) != tuple(ref.shape):
            problems.append(f"{name}: shape {tuple(t.shape)} in the file, {tuple(ref.shape)} in the model")
    unexpected = sorted(set(tensors) - set(expected))
    problems += [f"{n}: missing from the file" for n in missing]
    problems += [f"{n}: in the file but not a parameter or buffer of the model" for n in unexpected]
    if len(file_dtypes) != 1:
        problems.append(f"mixed dtypes in the file: {sorted(file_dtypes)}")

    result = {"file": args.file, "loader": "safetensors package" if loader == "package" else "json header + numpy",
              "metadata": meta, "tensors": len(tensors), "dtype": sorted(file_dtypes),
              "model_entries": len(expected), "problems": problems, "config": args.config}
    if not problems:
        model.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()}, strict=False)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        model = model.to(dev).eval()
        x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
        m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        x = (x - m) / s
        y = torch.from_numpy(labels.astype(np.int64))
        top1 = top5 = 0
        with torch.no_grad():
            for i in range(0, len(y), 2000):
                logits = model(x[i:i + 2000].to(dev)).float().cpu()
                yy = y[i:i + 2000]
                top1 += int((logits.argmax(1) == yy).sum())
                k = min(5, logits.shape[1])
                top5 += int((logits.topk(k, 1).indices == yy.unsqueeze(1)).any(1).sum())
        result.update({"device": dev, "images": int(len(y)), "top1": top1 / len(y), "top5": top5 / len(y)})
    print(json.dumps(result, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
