#!/usr/bin/env python3
"""Writes an ImageNet-like folder of synthetic JPEGs for data-pipeline throughput benchmarks.

Layout: OUT_DIR/train/cNNNN/NNNNNNN.jpg (and OUT_DIR/val/... with --val), image i in class i % classes.
The images compress and decode like photos: smooth 1/f shading and colour, a pixel-level texture whose strength
varies by region and by image (smooth "sky" next to busy "foliage"), a few sharp-edged textured shapes and mild
sensor noise. Measured with PIL 9.4, --size 500x375, quality 90 (4:2:0): a mean of about 110-120 KB per file,
80% between 80 and 150 KB (at exactly 500x375, uniform noise gives ~170 KB and flat colour a few KB). Sizes
vary around --size (each side by up to +-size-jitter, aspect kept in [3/4, 4/3], a quarter portrait), as
ImageNet's do. Everything follows from --seed: the plan from Python's random seeded per image, the pixels from
numpy's default_rng([seed, split, index]), so that any worker count writes the same bytes.

Needs numpy and PIL to write images; --help and --dry-run work without them (--dry-run prints the plan and,
where numpy and PIL exist, encodes --samples images in memory to estimate the file sizes).
  python3 tools/gen_jpeg_folder.py OUT_DIR --images 20000 --classes 1000 --size 500x375 --quality 90 \\
      --workers 16 --seed 0 [--val 2000]
"""
import argparse
import io
import math
import multiprocessing
import os
import random
import sys
import time

try:  # optional, so that --help and --dry-run work without them
    import numpy as np
except ImportError:
    np = None
try:
    from PIL import Image
except ImportError:
    Image = None

SPLITS = {"train": 0, "val": 1}  # the split's number in every per-image seed
PORTRAIT_FRACTION = 0.25


def parse_size(text):
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size '{text}' is not WIDTHxHEIGHT (e.g. 500x375)")
    if not (8 <= w <= 8192 and 8 <= h <= 8192):
        raise argparse.ArgumentTypeError(f"size '{text}': each side must be in [8, 8192]")
    return w, h


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir", help="folder to write train/ (and val/) into; created if missing")
    p.add_argument("--images", type=int, default=20000, help="train images, spread evenly over the classes")
    p.add_argument("--val", type=int, default=0, help="validation images (0 = no val/ folder)")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--size", type=parse_size, default=(500, 375), help="typical WIDTHxHEIGHT")
    p.add_argument("--size-jitter", type=float, default=0.2, help="each side varies by up to this fraction")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality (PIL's scale, 4:2:0 chroma)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="write nothing: print the plan and estimate sizes")
    p.add_argument("--samples", type=int, default=8, help="images encoded in memory by --dry-run")
    args = p.parse_args(argv)
    if args.images < 0 or args.val < 0 or args.classes < 1 or args.workers < 1:
        p.error("--images and --val must be >= 0, --classes and --workers >= 1")
    if not 0 <= args.size_jitter < 1:
        p.error("--size-jitter must be in [0, 1)")
    if not 1 <= args.quality <= 100:
        p.error("--quality must be in [1, 100]")
    return args


# ---- the plan (stdlib only): one job per image ----

def image_size(rnd, base_w, base_h, jitter):
    """(w, h): the base area scaled by a side factor in [1-jitter, 1+jitter], aspect in [3/4, 4/3]."""
    scale = rnd.uniform(1 - jitter, 1 + jitter)
    aspect = min(max(base_w / base_h * math.exp(rnd.uniform(-0.15, 0.15)), 3 / 4), 4 / 3)
    if rnd.random() < PORTRAIT_FRACTION:
        aspect = 1 / aspect
    area = base_w * base_h * scale * scale
    return max(8, round(math.sqrt(area * aspect))), max(8, round(math.sqrt(area / aspect)))


def plan(args):
    """[(path, seed key, w, h)] for every image: class = index % classes, names numbered within the split."""
    cls_digits = max(4, len(str(args.classes - 1)))
    jobs = []
    for split, count in (("train", args.images), ("val", args.val)):
        img_digits = max(7, len(str(count - 1)))
        for i in range(count):
            rnd = random.Random(f"{args.seed}:{split}:{i}")  # str seeds hash with SHA-512: stable across runs
            w, h = image_size(rnd, args.size[0], args.size[1], args.size_jitter)
            folder = os.path.join(args.out_dir, split, f"c{i % args.classes:0{cls_digits}d}")
            path = os.path.join(folder, f"{i:0{img_digits}d}.jpg")
            jobs.append((path, (args.seed, SPLITS[split], i), w, h))
    return jobs


# ---- the pixels (numpy) ----

# Standard deviations (0..255 scale) of the layers of an image; the detail ones are scaled per image by a random
# "busyness" and per region by a smooth mask, so that smooth (sky-like) and busy (foliage-like) areas alternate.
SHADING_STD = 35.0        # luminance, smooth (cells down to 4 px, amplitude ~ cell)
COLOUR_STD = 25.0         # per channel, smooth (cells down to 8 px)
DETAIL_LUMA_STD = 60.0    # luminance texture, cells 32 px down to 1 px, flat spectrum
DETAIL_CHROMA_STD = 25.0  # per-channel texture, same cells
NOISE_STD = (3.0, 6.0)    # per-pixel sensor noise, per image in this range


def interp_index(n_out, n_in):
    """For linear interpolation of n_in grid points onto n_out pixels (grid ends on pixel ends): the left grid
    index and the weight of the right one, per output pixel."""
    pos = np.linspace(0, n_in - 1, n_out, dtype=np.float32)
    i0 = np.minimum(pos.astype(np.int64), n_in - 2)
    return i0, pos - i0


def upsample(grid, h, w):
    """(c, gh, gw) -> (c, h, w), bilinear, separable."""
    y0, fy = interp_index(h, grid.shape[1])
    x0, fx = interp_index(w, grid.shape[2])
    rows = grid[:, y0, :] * (1 - fy)[:, None] + grid[:, y0 + 1, :] * fy[:, None]  # (c, h, gw)
    return rows[:, :, x0] * (1 - fx) + rows[:, :, x0 + 1] * fx


def fractal(rng, c, h, w, finest, coarsest, beta):
    """(c, h, w) float32 with unit std: random grids of cell side `coarsest`, /2, ... down to `finest` pixels,
    with amplitude cell**beta (beta 0: flat spectrum, 1: smooth shading), summed coarse to fine as a pyramid
    (the sum so far upsampled onto the next grid), so that each level costs one upsampling."""
    acc, cell = None, coarsest
    while cell >= finest:
        grid = np.float32(cell ** beta) * rng.standard_normal(
            (c, math.ceil(h / cell) + 1, math.ceil(w / cell) + 1), dtype=np.float32)
        acc = grid if acc is None else grid + upsample(acc, grid.shape[1], grid.shape[2])
        cell /= 2
    out = acc[:, :h, :w] if acc.shape[1] == h + 1 else upsample(acc, h, w)  # 1-px cells: crop, not resample
    return out / max(float(out.std()), 1e-6)


def add_shapes(rng, img, texture):
    """Paints 3..11 ellipses and rectangles: a flat colour plus texture, with sharp edges."""
    _, h, w = img.shape
    for _ in range(int(rng.integers(3, 12))):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(0.04, 0.3) * h, rng.uniform(0.04, 0.3) * w
        y0, y1 = max(0, int(cy - ry)), min(h, int(cy + ry) + 1)
        x0, x1 = max(0, int(cx - rx)), min(w, int(cx + rx) + 1)
        if y0 >= y1 or x0 >= x1:
            continue
        yy = (np.arange(y0, y1, dtype=np.float32)[:, None] - cy) / ry
        xx = (np.arange(x0, x1, dtype=np.float32)[None, :] - cx) / rx
        mask = (yy * yy + xx * xx <= 1) if rng.random() < 0.5 else (np.abs(yy) <= 1) & (np.abs(xx) <= 1)
        colour = rng.uniform(0, 255, (3, 1, 1)).astype(np.float32)
        fill = colour + np.float32(rng.uniform(15, 50)) * texture[:, y0:y1, x0:x1]
        img[:, y0:y1, x0:x1] = np.where(mask, fill, img[:, y0:y1, x0:x1])


# The fine-scale fields (the costly part: 1-px cells) come from a small bank drawn once per worker from the seed
# alone, each image taking a randomly placed window of one: ~5x faster, and the bank, like everything else, is a
# function of the seed only (never of the worker count). Coarse layers, shapes and noise stay per image.
BANK_SIZE = 8
BANK_SIDE = 768  # >= the largest image side generated (checked)
_bank = {}


def detail_bank(seed):
    if seed not in _bank:
        fields = []
        for k in range(BANK_SIZE):
            rng = np.random.default_rng([seed, 99, k])
            fields.append((fractal(rng, 1, BANK_SIDE, BANK_SIDE, 1, 32, 0.0),
                           fractal(rng, 3, BANK_SIDE, BANK_SIDE, 1, 32, 0.0),
                           fractal(rng, 1, BANK_SIDE, BANK_SIDE, 1, 32, 0.3),
                           rng.standard_normal((3, BANK_SIDE, BANK_SIDE), dtype=np.float32)))
        _bank[seed] = fields
    return _bank[seed]


def make_pixels(key, w, h):
    """(h, w, 3) uint8 for one seed key (seed, split, index)."""
    if max(w, h) > BANK_SIDE:
        raise ValueError(f"image side {max(w, h)} > {BANK_SIDE}: raise BANK_SIDE")
    rng = np.random.default_rng(list(key))
    luma, chroma, texture, noise = detail_bank(key[0])[int(rng.integers(BANK_SIZE))]
    y0, x0 = int(rng.integers(BANK_SIDE - h + 1)), int(rng.integers(BANK_SIDE - w + 1))
    win = (slice(None), slice(y0, y0 + h), slice(x0, x0 + w))
    top = max(h, w) / 2
    img = rng.uniform(70, 180, (3, 1, 1)).astype(np.float32)
    img = img + np.float32(SHADING_STD) * fractal(rng, 1, h, w, 4, top, 1.0)
    img += np.float32(COLOUR_STD) * fractal(rng, 3, h, w, 8, top, 1.0)
    busy = np.float32(rng.uniform(0.6, 1.4)) * np.clip(1 + 0.6 * fractal(rng, 1, h, w, 16, top, 1.0), 0.2, 2)
    img += busy * np.float32(DETAIL_LUMA_STD) * luma[win]
    img += busy * np.float32(DETAIL_CHROMA_STD) * chroma[win]
    add_shapes(rng, img, texture[win])
    img += np.float32(rng.uniform(*NOISE_STD)) * noise[win]
    return np.clip(img + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0)


# ---- writing (numpy + PIL, in the worker processes) ----

def encode(pixels, quality):
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def write_one(job_and_quality):
    """Generates, encodes and writes one image (temp name, then rename); returns its byte count."""
    (path, key, w, h), quality = job_and_quality
    data = encode(make_pixels(key, w, h), quality)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return len(data)


def dry_run(args, jobs):
    sides = [(w, h) for _, _, w, h in jobs]
    print(f"plan: {len(jobs)} images ({args.images} train, {args.val} val) in {args.classes} classes under "
          f"{args.out_dir}")
    if jobs:
        print(f"  widths {min(s[0] for s in sides)}..{max(s[0] for s in sides)}, heights "
              f"{min(s[1] for s in sides)}..{max(s[1] for s in sides)}, portrait "
              f"{sum(w < h for w, h in sides)}; first {jobs[0][0]}, last {jobs[-1][0]}")
    if np is None:
        print("  numpy missing: no sample images generated")
        return 0
    sample = jobs[:args.samples]
    t0 = time.perf_counter()
    pixels = [make_pixels(key, w, h) for _, key, w, h in sample]
    gen_ms = 1e3 * (time.perf_counter() - t0) / max(1, len(sample))
    for (path, _, w, h), px in zip(sample, pixels):
        print(f"  {os.path.relpath(path, args.out_dir)}: {w}x{h}, mean {px.mean():.1f}, std {px.std():.1f}")
    if Image is None:
        print(f"  PIL missing: no JPEG sizes; generation {gen_ms:.0f} ms per image")
    elif sample:
        sizes = [len(encode(px, args.quality)) for px in pixels]
        print(f"  {len(sizes)} samples at quality {args.quality}: mean {sum(sizes) / len(sizes) / 1e3:.1f} KB "
              f"(min {min(sizes) / 1e3:.1f}, max {max(sizes) / 1e3:.1f}); generation {gen_ms:.0f} ms per image")
    return 0


def main(argv=None):
    args = parse_args(argv)
    jobs = plan(args)
    if args.dry_run:
        return dry_run(args, jobs)
    if np is None or Image is None:
        print("error: numpy and PIL are needed to write images (pip install numpy pillow); --dry-run works "
              "without them", file=sys.stderr)
        return 2
    for d in sorted({os.path.dirname(path) for path, _, _, _ in jobs}):
        os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    total, done = 0, 0
    with multiprocessing.Pool(args.workers) as pool:
        for n in pool.imap_unordered(write_one, ((job, args.quality) for job in jobs), chunksize=16):
            total += n
            done += 1
            if done % max(1, len(jobs) // 10) == 0 or done == len(jobs):
                print(f"  {done}/{len(jobs)} images, {time.perf_counter() - t0:.0f} s", flush=True)
    mean_kb = total / max(1, done) / 1e3
    print(f"wrote {done} images ({args.images} train, {args.val} val, {args.classes} classes) to {args.out_dir} "
          f"in {time.perf_counter() - t0:.1f} s: {total} bytes ({total / 2**30:.2f} GiB), mean {mean_kb:.1f} KB "
          f"per file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
