#!/usr/bin/env python3
"""Writes tests/data/golden/pil_golden.bin: PIL / torchvision outputs that tests/data/pil_golden_test.cpp
compares trctl's image transforms against (resize_region_u8, JpegCodec decode, center_crop_box,
resize_shorter_side, adjust_*_u8, image_pipeline_apply).

Deterministic: the inputs come from numpy's legacy RandomState with fixed seeds and PIL's JPEG encoder, so a
rerun with the same Pillow / libjpeg-turbo writes the same bytes. Needs numpy, Pillow and torchvision:
  python3 tools/gen_pil_golden.py [--out tests/data/golden/pil_golden.bin]

File format (all integers little-endian; written to a temp file, fsynced, renamed):
  magic    8 bytes   b"TRPILGLD"
  version  u32       1
  meta_len u32, meta  UTF-8 "key=value\\n" lines: pillow, torchvision, torch, numpy, libjpeg_turbo, generator
  count    u32       number of records
  count records, each:
    kind_len u8,  kind  ASCII (below)
    name_len u16, name  ASCII, unique, for messages
    nparams  u32, params f64 x nparams (meaning by kind)
    in_len   u32, input bytes
    out_len  u32, output bytes
  crc32    u32       zlib CRC-32 of every byte before it
Records are numbered from 0 in file order; "src" is the number of an earlier "image" or "jpeg" record, so that
the inputs are stored once. Images are u8 HWC, row-major, no padding.
  image                 params (h, w, c), c 1 (PIL "L") or 3 ("RGB"); input = the pixels; no output
  jpeg                  params (h, w, c, subsampling, progressive), subsampling as PIL's (0 4:4:4, 1 4:2:2,
                        2 4:2:0, -1 gray), quality 90; input = the file; no output
  resize                params (src, x0, y0, x1, y1, dh, dw): Image.resize((dw, dh), BILINEAR, box=(x0..y1));
                        the box values are float32-exact; output (dh, dw, c) u8
  jpeg_decode           params (src, c, h, w): Image.open(f).convert("RGB" | "L"); output (h, w, c) u8
  jpeg_decode_draft     params (src, denom, h, w): im.draft("RGB", (W // denom, H // denom)) then load, i.e.
                        libjpeg's 1/denom DCT scaling; output (h, w, 3) u8
  adjust_brightness,    params (src, factor): torchvision.transforms.functional.adjust_* on the PIL image
  adjust_contrast,      (hue: factor is the hue shift); output the same shape as src
  adjust_saturation,
  adjust_hue
  center_crop_box       params (h, w, size, top, left), no bytes: where torchvision's F.center_crop takes its
                        output from (negative: zero padding), found from a coordinate-coded image
  resize_shorter_side   params (h, w, size, out_h, out_w), no bytes: the size of transforms.Resize(size)'s output
  pipeline              params (src, c, resize, crop, mean x c, std x c): Compose([Resize(resize),
                        CenterCrop(crop), ToTensor(), Normalize(mean, std)]) on Image.open(f).convert(RGB | L);
                        output (crop, crop, c) float32, HWC (transposed from torchvision's CHW)
"""
import argparse
import io
import os
import struct
import sys
import zlib

import numpy as np
import PIL
import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image, features

MAGIC = b"TRPILGLD"
VERSION = 1


class Writer:
    def __init__(self):
        self.records = []  # bytes of each record
        self.names = set()

    def add(self, kind, name, params=(), inp=b"", out=b""):
        assert name not in self.names, name
        self.names.add(name)
        k, n = kind.encode("ascii"), name.encode("ascii")
        rec = struct.pack("<B", len(k)) + k + struct.pack("<H", len(n)) + n
        rec += struct.pack("<I", len(params)) + struct.pack("<%dd" % len(params), *[float(p) for p in params])
        rec += struct.pack("<I", len(inp)) + inp + struct.pack("<I", len(out)) + out
        self.records.append(rec)
        return len(self.records) - 1

    def bytes(self, meta):
        m = meta.encode("utf-8")
        body = MAGIC + struct.pack("<II", VERSION, len(m)) + m + struct.pack("<I", len(self.records))
        body += b"".join(self.records)
        return body + struct.pack("<I", zlib.crc32(body) & 0xFFFFFFFF)


def pixels(im):
    return np.asarray(im, dtype=np.uint8).tobytes()  # (h, w) for L, (h, w, 3) for RGB: HWC row-major


# ---- inputs ----

def textured(w, h, c, seed):
    """Smooth shading, a sinusoid texture, hard-edged blocks, saturated corners and noise: every hue, clipping."""
    rs = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = []
    for ch in range(c):
        v = 128 + 70 * np.sin(0.31 * x * (1 + 0.2 * ch) + 0.17 * y + 1.3 * ch) + 40 * np.cos(0.09 * x - 0.23 * y * ch)
        v += rs.normal(0, 25, size=(h, w))
        v[(x // 7 + y // 5 + ch) % 3 == 0] += 60 * (rs.rand() - 0.5)
        chans.append(v)
    a = np.clip(np.stack(chans, axis=-1), 0, 255).round().astype(np.uint8)
    if w >= 4 and h >= 4:  # saturated and gray pixels, where clipping and hue edge cases live
        a[0, 0, :] = 255
        a[0, w - 1, :] = 0
        a[h - 1, 0, :] = 128
        if c == 3:
            a[h - 1, w - 1, :] = (255, 0, 0)
            a[h // 2, 0, :] = (0, 255, 0)
            a[h // 2, w - 1, :] = (0, 0, 255)
    return a if c == 3 else a[:, :, 0]


def photo_like(w, h, c, seed):
    """Smoother than textured(): what JPEG is for (mild noise, a few edges)."""
    rs = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = []
    for ch in range(c):
        disc = (x - w / 3) ** 2 + (y - h / 2) ** 2 < (h / 3) ** 2
        v = 100 + 80 * np.sin(0.11 * x + 0.07 * y * (ch + 1) + ch) + 50 * disc
        v += 30 * (x > (0.6 + 0.1 * ch) * w) + rs.normal(0, 6, size=(h, w))
        chans.append(v)
    a = np.clip(np.stack(chans, axis=-1), 0, 255).round().astype(np.uint8)
    return a if c == 3 else a[:, :, 0]


def add_images(wr):
    rgb5x3 = np.array([[[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]],
                       [[128, 128, 128], [255, 255, 0], [0, 255, 255], [255, 0, 255], [1, 2, 3]],
                       [[200, 100, 50], [10, 250, 128], [77, 77, 78], [254, 1, 127], [33, 199, 200]]], np.uint8)
    arrays = {
        "rgb37x29": textured(37, 29, 3, 1),
        "rgb64x48": textured(64, 48, 3, 2),
        "rgb5x3": rgb5x3,
        "rgb1x1": np.array([[[201, 37, 119]]], np.uint8),
        "gray37x29": textured(37, 29, 1, 3),
        "gray64x48": textured(64, 48, 1, 4),
        "gray1x1": np.array([[173]], np.uint8),
    }
    ids, ims = {}, {}
    for name, a in arrays.items():
        im = Image.fromarray(a, "RGB" if a.ndim == 3 else "L")
        c = 3 if a.ndim == 3 else 1
        ids[name] = wr.add("image", "image/" + name, (im.height, im.width, c), pixels(im))
        ims[name] = im
    return ids, ims


def add_jpegs(wr):
    specs = [  # name, w, h, c, subsampling, progressive
        ("q90_420_64x48", 64, 48, 3, 2, False),
        ("q90_444_45x37", 45, 37, 3, 0, False),
        ("q90_422_40x30", 40, 30, 3, 1, False),
        ("q90_420_prog_53x41", 53, 41, 3, 2, True),
        ("q90_gray_33x21", 33, 21, 1, -1, False),
    ]
    ids, files = {}, {}
    for i, (name, w, h, c, sub, prog) in enumerate(specs):
        im = Image.fromarray(photo_like(w, h, c, 10 + i), "RGB" if c == 3 else "L")
        buf = io.BytesIO()
        kw = {"quality": 90, "progressive": prog}
        if c == 3:
            kw["subsampling"] = sub
        im.save(buf, "JPEG", **kw)
        data = buf.getvalue()
        ids[name] = wr.add("jpeg", "jpeg/" + name, (h, w, c, sub, int(prog)), data)
        files[name] = data
    return ids, files


# ---- cases ----

def f32(v):
    return float(np.float32(v))


def add_resize(wr, ids, ims):
    cases = [  # image, box (None: whole image), (dw, dh)
        ("rgb37x29", None, (37, 29)),                 # identity
        ("rgb37x29", None, (18, 14)),                 # ~2x down
        ("rgb37x29", None, (60, 45)),                 # upscale
        ("rgb37x29", None, (5, 4)),                   # ~8x down
        ("rgb37x29", None, (1, 1)),                   # to one pixel
        ("rgb37x29", None, (37, 7)),                  # vertical pass only
        ("rgb37x29", None, (9, 29)),                  # horizontal pass only
        ("rgb37x29", (3.3, 2.7, 30.1, 25.9), (20, 17)),   # non-integer box, downscale
        ("rgb37x29", (0.5, 0.25, 6.75, 4.5), (31, 23)),   # non-integer box, upscale ~5x
        ("rgb37x29", (30.5, 20.25, 37, 29), (13, 17)),    # box touching the right and bottom borders
        ("rgb37x29", (0, 0, 12.6, 29), (12, 29)),         # left border, fractional right edge
        ("rgb37x29", (10, 5, 11, 6), (1, 1)),             # a 1-pixel box
        ("rgb37x29", (10.2, 5.7, 10.9, 6.1), (3, 2)),     # a sub-pixel box, upscaled
        ("rgb37x29", (0, 0, 37, 29), (37, 1)),            # one output row
        ("rgb37x29", (2, 3, 35, 28), (1, 25)),            # one output column
        ("rgb64x48", None, (8, 6)),                   # exactly 8x down
        ("rgb64x48", None, (7, 5)),                   # ~9x down
        ("rgb64x48", None, (2, 1)),                   # 32x / 48x down
        ("rgb64x48", None, (75, 55)),                 # non-integer upscale
        ("rgb64x48", (16, 12, 48, 36), (4, 3)),       # 8x down of a centre box
        ("rgb64x48", (0.125, 47.5, 64, 48), (64, 1)), # bottom half-row stretched
        ("rgb64x48", (5.6, 1.2, 63.9, 47.7), (24, 24)),   # RandomResizedCrop-like
        ("rgb5x3", None, (37, 29)),                   # tiny source, big upscale
        ("rgb5x3", (1, 1, 4, 2), (2, 3)),
        ("rgb1x1", None, (3, 2)),                     # 1x1 source
        ("rgb1x1", (0.25, 0.5, 0.75, 1), (1, 1)),
        ("gray37x29", None, (19, 11)),
        ("gray37x29", (4.4, 3.3, 36.6, 28.8), (70, 9)),   # up in x, down in y
        ("gray64x48", None, (8, 6)),
        ("gray64x48", (0, 0, 64, 48), (5, 31)),
        ("gray1x1", None, (4, 4)),
    ]
    for name, box, (dw, dh) in cases:
        im = ims[name]
        box = (0, 0, im.width, im.height) if box is None else tuple(f32(v) for v in box)
        out = im.resize((dw, dh), Image.BILINEAR, box=box)
        assert out.size == (dw, dh)
        label = "resize/%s/box(%g,%g,%g,%g)->%dx%d" % ((name,) + box + (dw, dh))
        wr.add("resize", label, (ids[name],) + box + (dh, dw), out=pixels(out))
    return len(cases)


def add_jpeg_decodes(wr, jids, files):
    n = 0
    for name, data in files.items():
        for mode in ("RGB", "L"):
            im = Image.open(io.BytesIO(data)).convert(mode)
            c = 3 if mode == "RGB" else 1
            wr.add("jpeg_decode", "jpeg_decode/%s/%s" % (name, mode), (jids[name], c, im.height, im.width),
                   out=pixels(im))
            n += 1
    for name, denom in (("q90_420_64x48", 2), ("q90_420_64x48", 8), ("q90_444_45x37", 4),
                        ("q90_422_40x30", 2), ("q90_420_prog_53x41", 2), ("q90_420_prog_53x41", 4)):
        im = Image.open(io.BytesIO(files[name]))
        im.draft("RGB", (im.width // denom, im.height // denom))
        im.load()
        assert im.mode == "RGB" and im.decoderconfig[0] == denom, (name, denom, im.decoderconfig)
        wr.add("jpeg_decode_draft", "jpeg_decode_draft/%s/1:%d" % (name, denom),
               (jids[name], denom, im.height, im.width), out=pixels(im))
        n += 1
    return n


def add_color(wr, ids, ims):
    ops = {
        "adjust_brightness": (F.adjust_brightness, [0.0, 0.37, 0.5, 1.0, 1.29, 2.5]),
        "adjust_contrast": (F.adjust_contrast, [0.0, 0.42, 1.0, 1.55, 3.0]),
        "adjust_saturation": (F.adjust_saturation, [0.0, 0.61, 1.0, 1.7, 4.0]),
        "adjust_hue": (F.adjust_hue, [-0.5, -0.23, -0.1, 0.0, 0.004, 0.1, 0.37, 0.5]),
    }
    n = 0
    for kind, (fn, factors) in ops.items():
        for i, factor in enumerate(factors):
            # every factor on the 37x29 texture and the 5x3 palette; the last one on the 64x48 texture too
            names = ["rgb37x29", "rgb5x3"] + (["rgb64x48"] if i == len(factors) - 1 else [])
            for name in names:
                out = fn(ims[name], factor)
                wr.add(kind, "%s/%s/%r" % (kind, name, factor), (ids[name], factor), out=pixels(out))
                n += 1
    return n


def add_geometry(wr):
    n = 0
    for h, w, size in [(10, 7, 4), (6, 9, 4), (3, 5, 4), (2, 1, 5), (7, 7, 7), (8, 8, 3), (9, 4, 6), (5, 12, 12),
                       (13, 10, 11), (1, 1, 1), (100, 37, 24), (37, 100, 24), (11, 11, 2), (12, 11, 2),
                       (20, 3, 8), (4, 30, 9), (224, 225, 224), (1, 9, 3)]:
        # R = y + 1, G = x + 1 of the source pixel (0 where padded): any such pixel of the output places the box.
        y, x = np.mgrid[0:h, 0:w]
        a = np.stack([y + 1, x + 1, np.zeros_like(y)], axis=-1).astype(np.uint8)
        assert h < 255 and w < 255
        out = np.asarray(F.center_crop(Image.fromarray(a, "RGB"), [size]))
        assert out.shape == (size, size, 3)
        oy, ox = [int(v[0]) for v in np.nonzero(out[:, :, 0])]
        top, left = int(out[oy, ox, 0]) - 1 - oy, int(out[oy, ox, 1]) - 1 - ox
        wr.add("center_crop_box", "center_crop_box/%dx%d/%d" % (h, w, size), (h, w, size, top, left))
        n += 1
    for h, w, size in [(60, 100, 30), (60, 101, 30), (101, 60, 30), (375, 500, 256), (500, 375, 256),
                       (333, 500, 224), (481, 640, 224), (29, 37, 29), (37, 29, 40), (7, 3, 10), (1, 9, 4),
                       (99, 100, 98), (100, 100, 1), (3, 1000, 7)]:
        out = T.Resize(size)(Image.new("L", (w, h)))
        wr.add("resize_shorter_side", "resize_shorter_side/%dx%d/%d" % (h, w, size),
               (h, w, size, out.height, out.width))
        n += 1
    return n


def add_pipelines(wr, jids, files):
    imagenet = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    cases = [  # jpeg, channels, resize, crop, mean, std
        ("q90_420_64x48", 3, 32, 24, *imagenet),       # downscale, then a crop inside
        ("q90_420_64x48", 3, 20, 24, *imagenet),       # the crop pads the 20-pixel side with zeros
        ("q90_420_64x48", 3, 48, 24, *imagenet),       # the shorter side is already 48: no resize
        ("q90_444_45x37", 3, 60, 32, *imagenet),       # upscale
        ("q90_420_prog_53x41", 3, 16, 15, *imagenet),  # progressive, ~2.6x down
        ("q90_422_40x30", 3, 9, 9, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
        ("q90_gray_33x21", 1, 15, 13, [0.5], [0.25]),
        ("q90_420_64x48", 1, 30, 28, [0.449], [0.226]),  # a colour JPEG read as L
    ]
    for name, c, rs, cs, mean, std in cases:
        tf = T.Compose([T.Resize(rs), T.CenterCrop(cs), T.ToTensor(), T.Normalize(mean, std)])
        im = Image.open(io.BytesIO(files[name])).convert("RGB" if c == 3 else "L")
        t = tf(im)  # (c, crop, crop) float32
        assert t.dtype == torch.float32 and tuple(t.shape) == (c, cs, cs)
        out = np.ascontiguousarray(t.numpy().transpose(1, 2, 0)).astype("<f4").tobytes()
        wr.add("pipeline", "pipeline/%s/c%d/resize%d/crop%d" % (name, c, rs, cs),
               [jids[name], c, rs, cs] + list(mean) + list(std), out=out)
    return len(cases)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "golden", "pil_golden.bin"))
    args = ap.parse_args()
    wr = Writer()
    ids, ims = add_images(wr)
    jids, files = add_jpegs(wr)
    counts = {
        "resize": add_resize(wr, ids, ims),
        "jpeg": add_jpeg_decodes(wr, jids, files),
        "color": add_color(wr, ids, ims),
        "geometry": add_geometry(wr),
        "pipeline": add_pipelines(wr, jids, files),
    }
    meta = "".join("%s=%s\n" % kv for kv in [
        ("pillow", PIL.__version__),
        ("torchvision", torchvision.__version__),
        ("torch", torch.__version__),
        ("numpy", np.__version__),
        ("libjpeg_turbo", features.version("libjpeg_turbo")),
        ("generator", "tools/gen_pil_golden.py"),
    ])
    data = wr.bytes(meta)
    out = os.path.normpath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out)
    print("%s: %d records, %d bytes (%s)" % (out, len(wr.records), len(data),
                                            ", ".join("%s %d" % kv for kv in counts.items())))
    print(meta, end="")


if __name__ == "__main__":
    sys.exit(main())
