#!/usr/bin/env python3
"""Checks trctl's CUDA training step against PyTorch (fp32, on the GPU), from the dump written by
tests/gpu/torch_dump_test.cpp: same initial weights and batch -> loss, every gradient, and the weights after one
AdamW step (torch.optim.AdamW, foreach=False, the two weight-decay groups). Prints the relative error of each and
exits 1 if any is over its tolerance: fp32 GEMMs of different algorithms, 1e-4 for the gradients and 1e-5 for the
loss; the updated weights are compared by the update they received, 5e-3, since Adam's first step divides by |g|
and a gradient within rounding of 0 can flip the sign of its (lr-sized) update."""
import json
import sys

import numpy as np
import torch
import torch.nn as nn


def main(d):
    man = json.load(open(f"{d}/manifest.json"))
    x = torch.from_numpy(np.fromfile(f"{d}/x.bin", dtype=np.float32).reshape(200, 784)).cuda()
    y = torch.from_numpy(np.fromfile(f"{d}/y.bin", dtype=np.int32).astype(np.int64)).cuda()
    w0 = np.fromfile(f"{d}/w0.bin", dtype=np.float32)
    w1 = np.fromfile(f"{d}/w1.bin", dtype=np.float32)
    g_trctl = np.fromfile(f"{d}/grads.bin", dtype=np.float32)
    params = {}
    for p in man["params"]:
        n = int(np.prod(p["shape"]))
        params[p["name"]] = (p, slice(p["offset"], p["offset"] + n))
    torch.backends.cuda.matmul.allow_tf32 = False
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 256),
                          nn.ReLU(), nn.Linear(256, 10)).cuda()
    names = {"0": "fc1", "2": "fc2", "4": "fc3", "6": "fc4"}
    tparams = {}
    with torch.no_grad():
        for tname, t in model.named_parameters():
            layer, kind = tname.split(".")
            key = f"{names[layer]}.{kind}"
            p, sl = params[key]
            t.copy_(torch.from_numpy(w0[sl].reshape(p["shape"])))
            tparams[key] = t
    loss = nn.CrossEntropyLoss(label_smoothing=man["label_smoothing"])(model(x), y)
    loss.backward()
    ok = True

    def report(what, a, b, tol):
        nonlocal ok
        rel = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
        flag = "ok" if rel <= tol else "FAIL"
        ok &= rel <= tol
        print(f"  [{flag}] {what}: rel err {rel:.3e} (tol {tol:g}), max abs {float(np.max(np.abs(a - b))):.3e}")

    report("loss", np.array([man["loss"]]), np.array([loss.item()]), 1e-5)
    for key, t in tparams.items():
        p, sl = params[key]
        report(f"grad {key}", g_trctl[sl].reshape(p["shape"]), t.grad.cpu().numpy(), 1e-4)
    decay = [t for k, t in tparams.items() if params[k][0]["decay"]]
    no_decay = [t for k, t in tparams.items() if not params[k][0]["decay"]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": man["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=man["lr"], betas=(0.9, 0.999), eps=1e-8,
                            foreach=False)
    opt.step()
    for key, t in tparams.items():
        p, sl = params[key]
        upd_t = w1[sl] - w0[sl]
        upd_p = t.detach().cpu().numpy().reshape(-1) - w0[sl]
        report(f"AdamW update {key}", upd_t, upd_p, 5e-3)
    print("torch check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/trctl_dump"))
