#!/usr/bin/env python3
"""PyTorch side of the data-pipeline throughput benchmark: torchvision ImageFolder + DataLoader over a JPEG folder.

The standard ImageNet training input pipeline, as PyTorch users run it: ImageFolder (PIL open + convert('RGB')),
RandomResizedCrop(--size), RandomHorizontalFlip, ToTensor, Normalize(ImageNet mean/std), then fp16, all in the
DataLoader workers (the fp16 cast too, so that the host does not pay for it per batch: fair to PyTorch);
DataLoader(num_workers, pin_memory (when CUDA exists), persistent_workers, prefetch_factor 4, drop_last).
Samples come from one RandomSampler over (warmup + batches) * batch indices, i.e. shuffled permutations of the
folder back to back in one iterator, so that a folder smaller than the run does not add epoch-boundary stalls.
Timing: wall clock over --batches batches after --warmup batches, batches landing in host memory (--to-gpu: also
copied to the GPU with non_blocking=True, synchronized before the clock stops).
--decode-only: the same loader with only PIL open + convert('RGB') per sample (the per-sample transform returns
the image size, so that nothing else is done), plus a single-process ms-per-image figure: the decode share of
the full pipeline. Writes one JSON object to --json, prints one human line, then the JSON.
  python3 benchmarks/pytorch_data.py --folder DIR/train --workers 16 --batch 256 --batches 200 --warmup 20 \\
      --size 224 --json OUT.json
"""
import argparse
import json
import os
import sys
import time

import PIL
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, RandomSampler
from torchvision import datasets, transforms

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
PREFETCH_FACTOR = 4
SINGLE_CORE_IMAGES = 300  # images decoded in the main process for --decode-only's ms-per-image figure


def log(msg):
    print(msg, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--folder", required=True, help="ImageFolder root: one subfolder of JPEGs per class")
    p.add_argument("--workers", type=int, default=16, help="DataLoader worker processes")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=200, help="timed batches")
    p.add_argument("--warmup", type=int, default=20, help="untimed batches first (worker start-up, page cache)")
    p.add_argument("--size", type=int, default=224, help="RandomResizedCrop output side")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--to-gpu", action="store_true", help="copy each batch to the GPU (non_blocking) as well")
    p.add_argument("--decode-only", action="store_true", help="time PIL open + convert('RGB') only")
    p.add_argument("--json", default="", help="write the result object here")
    args = p.parse_args()
    if args.workers < 0 or args.batch < 1 or args.batches < 1 or args.warmup < 0 or args.size < 1:
        p.error("--workers >= 0, --batch, --batches and --size >= 1, --warmup >= 0")
    return args


# Per-sample transforms run in the worker processes, so they must be picklable: top-level functions, no lambdas.
def to_half(t):
    return t.to(torch.float16)


def image_size(img):
    """--decode-only's whole transform: (w, h) of the decoded image, so that the batch collates cheaply."""
    return torch.tensor(img.size, dtype=torch.int32)


def make_transform(args):
    if args.decode_only:
        return image_size
    return transforms.Compose([
        transforms.RandomResizedCrop(args.size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
        to_half,
    ])


def make_loader(args, dataset):
    generator = torch.Generator()
    generator.manual_seed(args.seed)
    sampler = RandomSampler(dataset, num_samples=(args.warmup + args.batches) * args.batch, generator=generator)
    extra = {"persistent_workers": True, "prefetch_factor": PREFETCH_FACTOR} if args.workers > 0 else {}
    return DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=args.workers,
                      pin_memory=torch.cuda.is_available(), drop_last=True, **extra)


def measure(args, loader):
    """Warm-up batches, then --batches timed ones; per-batch wait times (the time next() blocks) for the tail."""
    dev = torch.device("cuda") if args.to_gpu else None
    it = iter(loader)
    t_start = time.perf_counter()
    first_batch_s = None
    for i in range(args.warmup):
        x, y = next(it)
        if dev is not None:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        if i == 0:
            first_batch_s = time.perf_counter() - t_start
    if dev is not None:
        torch.cuda.synchronize()
    waits = []
    t0 = time.perf_counter()
    for _ in range(args.batches):
        tw = time.perf_counter()
        x, y = next(it)
        waits.append(time.perf_counter() - tw)
        if dev is not None:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
    if dev is not None:
        torch.cuda.synchronize()
    wall_s = time.perf_counter() - t0
    waits.sort()
    return {
        "img_per_s": args.batch * args.batches / wall_s,
        "ms_per_batch": 1e3 * wall_s / args.batches,
        "wait_ms_p50": 1e3 * waits[len(waits) // 2],
        "wait_ms_p90": 1e3 * waits[int(len(waits) * 0.9)],
        "wall_s": wall_s,
        "timed_batches": args.batches,
        "warmup_batches": args.warmup,
        "first_batch_s": first_batch_s,
        "batch_shape": list(x.shape),
        "batch_dtype": str(x.dtype).replace("torch.", ""),
    }


def single_core_decode_ms(dataset, count):
    """Mean ms for PIL open + convert('RGB') of the first `count` files, in this process (one core)."""
    paths = [p for p, _ in dataset.samples[:count]]
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb") as f:
            Image.open(f).convert("RGB")
    return 1e3 * (time.perf_counter() - t0) / max(1, len(paths))


def pil_info():
    info = {"pil": PIL.__version__, "pillow_simd": "post" in PIL.__version__}  # Pillow-SIMD versions end .postN
    try:
        from importlib import metadata
        metadata.distribution("Pillow-SIMD")
        info["pillow_simd"] = True
    except Exception:  # noqa: BLE001 -- not installed under that name (or no metadata): keep the version's word
        pass
    from PIL import features
    for key, query in (("libjpeg_turbo", lambda: bool(features.check_feature("libjpeg_turbo"))),
                       ("libjpeg_version", lambda: features.version("jpg"))):
        try:
            info[key] = query()
        except Exception:  # noqa: BLE001 -- older Pillow: no such feature query
            info[key] = None
    return info


def env_info():
    info = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    info.update(pil_info())
    return info


def recipe(args, pin_memory):
    if args.decode_only:
        per_sample = "PIL open + convert('RGB') (ImageFolder's loader) only; transform returns the image size"
    else:
        per_sample = (f"PIL open + convert('RGB'), RandomResizedCrop({args.size}) (bilinear, PIL), "
                      "RandomHorizontalFlip, ToTensor, Normalize(ImageNet mean/std), to float16 in the worker")
    return {
        "dataset": "torchvision.datasets.ImageFolder",
        "per_sample": per_sample,
        "sampler": "RandomSampler(num_samples=(warmup + batches) * batch): permutations back to back, one iterator",
        "dataloader": {"num_workers": args.workers, "pin_memory": pin_memory,
                       "persistent_workers": args.workers > 0,
                       "prefetch_factor": PREFETCH_FACTOR if args.workers > 0 else None, "drop_last": True},
        "destination": "GPU (non_blocking copy, synchronized)" if args.to_gpu else "host memory",
        "timing": "wall clock over the timed batches, after the warm-up batches",
    }


def write_json(path, out):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def human_line(out):
    r, e = out["results"], out["env"]
    what = "decode only" if out["mode"] == "decode_only" else f"{out['size']}px fp16"
    extra = f", single core {r['single_core_ms_per_image']:.2f} ms/image" if "single_core_ms_per_image" in r else ""
    return (f"pytorch data ({what}, {out['workers']} workers, batch {out['batch']}, {out['images']} images): "
            f"{r['img_per_s']:.1f} img/s, {r['ms_per_batch']:.1f} ms/batch{extra}; PIL {e['pil']}"
            f"{' (SIMD)' if e['pillow_simd'] else ''}, torch {e['torch']}, torchvision {e['torchvision']}, "
            f"{e['cpus_usable']} CPUs")


def main():
    args = parse_args()
    if args.to_gpu and not torch.cuda.is_available():
        log("error: --to-gpu needs a CUDA device")
        return 2
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    dataset = datasets.ImageFolder(args.folder, transform=make_transform(args))
    index_s = time.perf_counter() - t0
    loader = make_loader(args, dataset)
    log(f"{len(dataset)} images in {len(dataset.classes)} classes ({index_s:.1f} s to index); "
        f"{args.warmup} warm-up + {args.batches} timed batches of {args.batch}, {args.workers} workers ...")
    results = measure(args, loader)
    if args.decode_only:
        results["single_core_ms_per_image"] = single_core_decode_ms(dataset, SINGLE_CORE_IMAGES)
    out = {"tool": "pytorch", "bench": "data", "mode": "decode_only" if args.decode_only else "full",
           "folder": args.folder, "images": len(dataset), "classes": len(dataset.classes), "index_s": index_s,
           "batch": args.batch, "workers": args.workers, "size": args.size, "to_gpu": args.to_gpu,
           "results": results, "recipe": recipe(args, loader.pin_memory), "env": env_info()}
    if args.json:
        write_json(args.json, out)
    log(human_line(out))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
