#!/usr/bin/env python3
"""Writes the CNN recipes configs/{vgg16bn,resnet18,resnet50,cnn_fmnist}.yaml (stdlib only).

The three ImageNet-shaped models are torchvision's vgg16_bn, resnet18 and resnet50 (Bottleneck v1.5: stride on
the 3x3 conv), layer for layer, with layer names = torchvision's module names with '.' -> '_', so that weights and
per-layer timings line up with benchmarks/pytorch_cnn.py. Regenerate with:  python3 tools/gen_cnn_configs.py
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REGEN = "python3 tools/gen_cnn_configs.py"


# ---- layer emitters: each returns one YAML flow map (a dict kept in key order) ----

def conv(name, out_channels, kernel_size, stride=1, padding=0, bias=False, inputs=None):
    layer = {"type": "conv2d", "name": name}
    if inputs:
        layer["inputs"] = inputs
    layer.update({"out_channels": out_channels, "kernel_size": kernel_size, "stride": stride, "padding": padding,
                  "bias": bias})
    return layer


def bn(name):
    return {"type": "batch_norm", "name": name, "eps": 1.0e-5, "momentum": 0.1}


def relu(name):
    return {"type": "relu", "name": name}


def max_pool(name, kernel_size, stride, padding=0):
    return {"type": "max_pool", "name": name, "kernel_size": kernel_size, "stride": stride, "padding": padding}


def linear(name, out_features):
    return {"type": "linear", "name": name, "out_features": out_features, "bias": True}


def dropout(name, p):
    return {"type": "dropout", "name": name, "p": p}


def add(name, a, b):
    return {"type": "add", "name": name, "inputs": [a, b]}


# ---- architectures ----

VGG16_STAGES = [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]


def vgg16bn_layers():
    """torchvision vgg16_bn: features[i] indices as module names (conv, bn, relu; max_pool after each stage)."""
    layers, i = [], 0
    for stage in VGG16_STAGES:
        for ch in stage:
            layers += [conv(f"features_{i}", ch, 3, 1, 1, bias=True), bn(f"features_{i + 1}"),
                       relu(f"features_{i + 2}")]
            i += 3
        layers.append(max_pool(f"features_{i}", 2, 2))
        i += 1
    # avgpool = AdaptiveAvgPool2d((7, 7)) is the identity on the 7x7 map of a 224x224 input: omitted.
    layers += [{"type": "flatten", "name": "flatten"},
               linear("classifier_0", 4096), relu("classifier_1"), dropout("classifier_2", 0.5),
               linear("classifier_3", 4096), relu("classifier_4"), dropout("classifier_5", 0.5),
               linear("classifier_6", 1000)]
    return layers


def downsample(p, block_in, out_channels, stride):
    return [conv(f"{p}_downsample_0", out_channels, 1, stride, 0, inputs=[block_in]), bn(f"{p}_downsample_1")]


def basic_block(p, block_in, in_channels, planes, stride):
    """torchvision BasicBlock: conv3x3(stride) bn relu conv3x3 bn, + shortcut, relu."""
    layers = [conv(f"{p}_conv1", planes, 3, stride, 1), bn(f"{p}_bn1"), relu(f"{p}_relu1"),
              conv(f"{p}_conv2", planes, 3, 1, 1), bn(f"{p}_bn2")]
    shortcut = block_in
    if stride != 1 or in_channels != planes:
        layers += downsample(p, block_in, planes, stride)
        shortcut = f"{p}_downsample_1"
    layers += [add(f"{p}_add", f"{p}_bn2", shortcut), relu(f"{p}_relu")]
    return layers, planes


def bottleneck(p, block_in, in_channels, planes, stride):
    """torchvision Bottleneck (v1.5): conv1x1 bn relu conv3x3(stride) bn relu conv1x1(4*planes) bn, + shortcut."""
    out = planes * 4
    layers = [conv(f"{p}_conv1", planes, 1), bn(f"{p}_bn1"), relu(f"{p}_relu1"),
              conv(f"{p}_conv2", planes, 3, stride, 1), bn(f"{p}_bn2"), relu(f"{p}_relu2"),
              conv(f"{p}_conv3", out, 1), bn(f"{p}_bn3")]
    shortcut = block_in
    if stride != 1 or in_channels != out:
        layers += downsample(p, block_in, out, stride)
        shortcut = f"{p}_downsample_1"
    layers += [add(f"{p}_add", f"{p}_bn3", shortcut), relu(f"{p}_relu")]
    return layers, out


def resnet_layers(block, blocks_per_stage):
    # torchvision uses one ReLU module per block for both of its uses; names here are one per use.
    layers = [conv("conv1", 64, 7, 2, 3), bn("bn1"), relu("relu"), max_pool("maxpool", 3, 2, 1)]
    prev, channels = "maxpool", 64
    for s, (planes, count) in enumerate(zip([64, 128, 256, 512], blocks_per_stage), start=1):
        for b in range(count):
            stride = 2 if (s > 1 and b == 0) else 1
            p = f"layer{s}_{b}"
            block_layers, channels = block(p, prev, channels, planes, stride)
            layers += block_layers
            prev = f"{p}_relu"
    layers += [{"type": "global_avg_pool", "name": "avgpool"}, linear("fc", 1000)]
    return layers


def cnn_fmnist_layers():
    layers = []
    for i, ch in enumerate([32, 32, 64, 64], start=1):
        layers += [conv(f"conv{i}", ch, 3, 1, 1), bn(f"bn{i}"), relu(f"relu{i}")]
        if i % 2 == 0:
            layers.append(max_pool(f"pool{i // 2}", 2, 2))
    layers += [{"type": "flatten", "name": "flatten"},   # (N, 7, 7, 64) -> (N, 3136)
               linear("fc1", 256), relu("relu_fc1"), dropout("dropout", 0.3), linear("fc2", 10)]
    return layers


# ---- YAML writing ----

def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if v != 0 and abs(v) < 1e-3:  # 1.0e-5, not Python's 1e-05 (which YAML 1.1 readers take as a string)
            mantissa, exponent = f"{v:e}".split("e")
            mantissa = mantissa.rstrip("0")
            return f"{mantissa}0e{int(exponent)}" if mantissa.endswith(".") else f"{mantissa}e{int(exponent)}"
        text = repr(v)
        return text if ("e" in text or "." in text) else text + ".0"
    if isinstance(v, list):
        return "[" + ", ".join(scalar(x) for x in v) + "]"
    return str(v)


def flow_map(d):
    return "{" + ", ".join(f"{k}: {scalar(v)}" for k, v in d.items()) + "}"


def layers_yaml(layers, comments=None):
    comments = comments or {}
    lines = []
    for layer in layers:
        line = "    - " + flow_map(layer)
        note = comments.get(layer.get("name"))
        lines.append(f"{line:<100}  # {note}" if note else line)
    return "\n".join(lines)


def header(title, extra=()):
    lines = [f"# GENERATED by tools/gen_cnn_configs.py; do not edit by hand. Regenerate with: {REGEN}", f"# {title}"]
    lines += [f"# {x}" for x in extra]
    return "\n".join(lines) + "\n"


IMAGENET_TAIL = """\
loss:
  type: cross_entropy
  label_smoothing: 0.1

# lr: the recipe's peak 0.36 at global batch 2048, scaled linearly to batch 256: 0.36 * 256 / 2048 = 0.045.
optimizer:
  type: sgd
  lr: 0.045
  momentum: 0.9
  nesterov: true
  weight_decay: 1.0e-4            # L2 on the gradient (PyTorch SGD)
  decay_bias_and_norm: false      # none on biases and batch-norm scale/shift

scheduler:
  type: cosine
  warmup_epochs: 10               # linear warm-up to lr over epochs 1..10
  eta_min: 0

train:
  epochs: 100
  precision: fp16                 # mixed precision with loss scaling; fp32 master weights
  device: auto

run:
  out_dir: runs
  log_interval: 10
"""


DTS_DATA = """\
seed: 0

data:
  dataset: dts                    # packed files: trctl pack-dts IMAGENET/train -o train.dts --level 160:90
  root: /data/imagenet            # where train.dts and val.dts lie (override: data.root=DIR)
  train_path: train.dts
  val_path: val.dts
  dts_level: 160                  # the level packed with short side 160 (0 = full size)
  in_memory: false                # stream blocks from disk every epoch (true: the level held in RAM)
  io_threads: 4
  batch_size: 256
  val_batch_size: 256
  workers: 16                     # decode + transform threads; results never depend on it
  drop_last: true
  normalization: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}   # ImageNet statistics
  train_transforms:
    - random_resized_crop: {size: 224, scale: [0.08, 1.0], ratio: [0.75, 1.3333333333333333]}
    - random_horizontal_flip: {p: 0.5}
    - normalize                   # fused with the flip and the cast to the AMP dtype, written to pinned memory
  val_transforms:
    - resize: {size: 256}
    - center_crop: {size: 224}
    - normalize

model:
  layers:
"""


def imagenet_dts_config(title, layers):
    extra = ["ImageNet-style training read from DTS files (docs/dts.md): RandomResizedCrop + flip on the host, as",
             "torchvision's recipe; the step itself is the synthetic recipe's (configs/resnet50.yaml)."]
    return header(title, extra) + DTS_DATA + layers_yaml(layers) + "\n  init: kaiming_uniform_fan_in\n\n" + IMAGENET_TAIL


# The recipes' train-section lines after `device: auto` (trctl-only settings; PyTorch's side has no counterpart).
WGCONV_BWD = """\
  conv_wgconv: bwd                # trctl's ring kernels (CUDA, AMP): 64-input-channel 3x3 weight gradients (run
                                  # 67: {wgrad}) and the 64-channel data gradients with the next
                                  # batch norm's backward reductions in their epilogue (RESULTS.md run {run}: a further
                                  # {bwd}; both on an H100)
"""


WGRAD_OVERLAP = """\
  conv_wgrad_overlap: 2           # trctl (CUDA): the cuDNN weight gradients on a second stream beside the next nodes
                                  # up to the 2nd data gradient after each (RESULTS.md run 82, H100: +0.5 % img/s,
                                  # ahead of 0 in 6 of 6 rounds; ResNet-50 ran 1.1 % slower with it: not there)
"""


def with_train_extra(tail, extra):
    anchor = "  device: auto\n"
    assert tail.count(anchor) == 1
    return tail.replace(anchor, anchor + extra)


def imagenet_config(title, layers, notes=(), train_extra=""):
    data = """\
seed: 0

data:
  dataset: synthetic              # random uint8 images + labels drawn from the seed, resident on the GPU
  synthetic: {train_size: 2560, val_size: 512, height: 224, width: 224, channels: 3, classes: 1000}
  batch_size: 256
  val_batch_size: 256
  workers: 4
  normalization: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}   # ImageNet statistics
  train_transforms:
    - normalize
  val_transforms:
    - normalize

model:
  layers:
"""
    model_tail = "\n  init: kaiming_uniform_fan_in\n\n"
    extra = ["Throughput recipe: synthetic 224x224x3 data, so never read accuracy from it.",
             "Same recipe on the PyTorch side: benchmarks/pytorch_cnn.py."] + list(notes)
    return header(title, extra) + data + layers_yaml(layers) + model_tail + with_train_extra(IMAGENET_TAIL, train_extra)


def cnn_fmnist_config():
    data = """\
seed: 0

data:
  dataset: fashion_mnist
  root: /usr/share/datasets/fashion-mnist   # train-/t10k-{images-idx3,labels-idx1}-ubyte.gz inside
  batch_size: 128
  val_batch_size: 1000
  workers: 4
  train_subset: 0                           # 0 = all 60000 training images
  normalization: {mean: [0.2860], std: [0.3530]}   # Fashion-MNIST pixel statistics (one channel)
  train_transforms:
    - pad: {padding: 2}                     # 28 -> 32, zero fill
    - random_crop: {size: 28}               # back to 28, random offset
    - normalize
  val_transforms:
    - normalize

model:
  layers:
"""
    tail = """
  init: kaiming_uniform_fan_in

loss:
  type: cross_entropy
  label_smoothing: 0.1

optimizer:
  type: adamw
  lr: 2.0e-3
  betas: [0.9, 0.999]
  eps: 1.0e-8
  weight_decay: 5.0e-4            # decoupled (AdamW)
  decay_bias_and_norm: false      # none on biases and batch-norm scale/shift

scheduler:
  type: cosine
  warmup_epochs: 2
  eta_min: 0

train:
  epochs: 30
  precision: fp16
  device: auto

run:
  out_dir: runs
  log_interval: 50
"""
    comments = {"conv1": "(N, 28, 28, 1) -> (N, 28, 28, 32)", "pool1": "-> (N, 14, 14, 32)",
                "pool2": "-> (N, 7, 7, 64)", "flatten": "-> (N, 3136)", "fc2": "logits, one per class"}
    return (header("Small CNN on Fashion-MNIST (aim: >= 92 % test accuracy in 30 epochs).")
            + data + layers_yaml(cnn_fmnist_layers(), comments) + tail)


def configs():
    return {
        "vgg16bn.yaml": imagenet_config("torchvision vgg16_bn (13 conv3x3 with bias, batch norm), 224x224, 1000 classes.",
                                        vgg16bn_layers(),
                                        ["AdaptiveAvgPool2d((7, 7)) is the identity at 224x224 input and is omitted."],
                                        WGCONV_BWD.format(wgrad="-1.3 % J/step, +0.7 % img/s", run=72,
                                                          bwd="+0.9 % img/s, -0.8 % J/step") + WGRAD_OVERLAP),
        "resnet18.yaml": imagenet_config("torchvision resnet18 (BasicBlock [2, 2, 2, 2]), 224x224, 1000 classes.",
                                         resnet_layers(basic_block, [2, 2, 2, 2]),
                                         train_extra=WGCONV_BWD.format(wgrad="-4.2 % J/step, +0.7 % img/s", run=73,
                                                                       bwd="+0.5 % img/s, -0.2 % J/step")),
        "resnet50.yaml": imagenet_config("torchvision resnet50 (Bottleneck v1.5 [3, 4, 6, 3]), 224x224, 1000 classes.",
                                         resnet_layers(bottleneck, [3, 4, 6, 3])),
        "resnet50_dts.yaml": imagenet_dts_config(
            "torchvision resnet50 (Bottleneck v1.5 [3, 4, 6, 3]) trained from DTS files, 224x224, 1000 classes.",
            resnet_layers(bottleneck, [3, 4, 6, 3])),
        "cnn_fmnist.yaml": cnn_fmnist_config(),
    }


def main():
    out_dir = os.path.join(REPO, "configs")
    for name, text in configs().items():
        path = os.path.join(out_dir, name)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        n_conv = text.count("type: conv2d")
        print(f"wrote configs/{name} ({n_conv} conv2d, {text.count('    - {type:')} layers)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
