#!/usr/bin/env python3
"""Checks trctl's float64 CPU references of the activations (relu6, leaky_relu, elu, silu, hardswish, sigmoid,
tanh: forward and backward, PyTorch's boundary points 0, +-3 and 6 included) and losses (bce_with_logits with a
1-logit head and with one-hot targets, mse against one-hot targets, cross-entropy with class weights, with and
without label smoothing: value and gradient) against PyTorch in float64 on the CPU.

    TRCTL_TORCHDUMP_DIR=/tmp/td build/tests/test_ops "[torchdump]"
    python3 benchmarks/torch_check_ops.py /tmp/td

Prints the max abs error (and where) of every tensor and exits 1 if any exceeds its tolerance: 1e-12 * (1 + |ref|)
elementwise (both sides are float64 evaluations of the same formulas; only libm rounding differs)."""
import json
import sys

import torch
import torch.nn.functional as F


def load(d, name, dtype):
    with open(f"{d}/{name}", "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype).clone()


def main(d):
    man = json.load(open(f"{d}/manifest.json"))
    assert man["format"] == "trctl-torchdump/1", man["format"]
    ok = True
    checked = 0

    def report(what, ours, ref, tol=1e-12):
        nonlocal ok, checked
        ours = ours.reshape(-1).double()
        ref = ref.reshape(-1).double()
        err = (ours - ref).abs()
        bound = tol * (1 + ref.abs())
        bad = (err > bound) | torch.isnan(err)
        i = int(torch.argmax(err / bound).item()) if err.numel() else 0
        flag = "FAIL" if bool(bad.any()) else "ok"
        ok &= flag == "ok"
        checked += 1
        print(f"  [{flag}] {what}: max abs err {float(err.max()):.3e} at {i} (ours {float(ours[i]):.17g}, "
              f"torch {float(ref[i]):.17g}), {int(bad.sum())} over tolerance")

    for e in man["entries"]:
        if e["op"] == "activation":
            k, a = e["kind"], e["param"]
            x = load(d, e["x"], torch.float64).requires_grad_(True)
            dy = load(d, e["dy"], torch.float64)
            fn = {"relu6": lambda t: F.relu6(t), "leaky_relu": lambda t: F.leaky_relu(t, a),
                  "elu": lambda t: F.elu(t, a), "silu": F.silu, "hardswish": F.hardswish,
                  "sigmoid": torch.sigmoid, "tanh": torch.tanh}[k]
            y = fn(x)
            y.backward(dy)
            report(f"{k}({a}) forward", load(d, e["y"], torch.float64), y.detach())
            report(f"{k}({a}) backward", load(d, e["dx"], torch.float64), x.grad)
        else:
            n, w = e["rows"], e["width"]
            x = load(d, e["x"], torch.float64).reshape(n, w).requires_grad_(True)
            y = load(d, e["labels"], torch.int32).long()
            if e["fn"] == "bce_with_logits" and w == 1:
                loss = F.binary_cross_entropy_with_logits(x.reshape(n), y.double())
            elif e["fn"] == "bce_with_logits":
                loss = F.binary_cross_entropy_with_logits(x, F.one_hot(y, w).double())
            elif e["fn"] == "mse":
                loss = F.mse_loss(x, F.one_hot(y, w).double())
            else:
                weight = torch.tensor(e["class_weights"], dtype=torch.float64)
                loss = F.cross_entropy(x, y, weight=weight, label_smoothing=e["label_smoothing"])
            loss.backward()
            report(f"loss {e['name']} value", torch.tensor([e["loss"]], dtype=torch.float64), loss.detach().reshape(1))
            report(f"loss {e['name']} gradient", load(d, e["dx"], torch.float64), x.grad)
    print(f"{checked} tensors checked: {'all within tolerance' if ok else 'FAILURES'} (torch {torch.__version__})")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
