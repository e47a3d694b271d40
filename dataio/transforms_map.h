// The per-pixel arithmetic of transforms_apply, as plain data and inline functions that nvcc can compile for the
// device too (TRCTL_HD), so that a CUDA kernel mirrors the CPU path bit for bit: the inverse maps of the geometric
// steps (pad/crop = integer shift, rotation/scale = affine about the centre, nearest neighbour) and normalize.
//
// Coordinate convention (torchvision F.rotate / F.affine on tensors: _gen_affine_grid, then grid_sample with
// align_corners=False, mode nearest, zeros outside). For an output pixel (x, y) of a W x H image:
//   xo = x + 0.5 - W/2,  yo = y + 0.5 - H/2                      (pixel centre, relative to the image centre)
//   xs = m00*xo + m01*yo,  ys = m10*xo + m11*yo                   (inverse matrix: output -> source)
//   ix = nearbyint(xs + W/2 - 0.5),  iy = nearbyint(ys + H/2 - 0.5)   (round half to even, as grid_sample)
//   outside [0, W) x [0, H) -> fill 0.
// The matrices are those of torchvision's _get_inverse_affine_matrix (center 0, no translation, no shear):
//   rotation by a degrees (counter-clockwise on screen): r = radians(-a): [[cos r, sin r], [-sin r, cos r]]
//   isotropic scale s: [[1/s, 0], [0, 1/s]]
// Everything is computed in double (torchvision uses float32; the two agree except at exact rounding ties).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/spec/spec.h"      // TransformSpec (plain data)
#include "core/util/philox.h"  // TRCTL_HD, PhiloxStream

namespace trctl {

enum class GeoKind : int32_t { Shift = 0, Affine = 1, FlipX = 2 };

// One geometric step, seen backwards: maps a pixel of the step's output image to a pixel of its input image.
struct GeoMap {
  GeoKind kind = GeoKind::Shift;
  int32_t in_h = 0, in_w = 0;        // the step's input image (for Affine also its output image)
  int32_t dy = 0, dx = 0;            // Shift: source = output + (dy, dx); pad: -padding, crop: +offset
  double m00 = 1, m01 = 0, m10 = 0, m11 = 1;  // Affine: the inverse matrix above
};

TRCTL_HD double geo_round_half_even(double v) {
#if defined(__CUDA_ARCH__)
  return ::nearbyint(v);
#else
  return std::nearbyint(v);  // default rounding mode: to nearest, ties to even
#endif
}

TRCTL_HD double geo_cos(double v) {
#if defined(__CUDA_ARCH__)
  return ::cos(v);
#else
  return std::cos(v);
#endif
}

TRCTL_HD double geo_sin(double v) {
#if defined(__CUDA_ARCH__)
  return ::sin(v);
#else
  return std::sin(v);
#endif
}

// Python's math.radians(x) is x * (pi / 180).
TRCTL_HD GeoMap geo_rotation(int32_t h, int32_t w, double angle_deg) {
  double r = -angle_deg * (3.14159265358979323846 / 180.0);
  double c = geo_cos(r), s = geo_sin(r);
  GeoMap g;
  g.kind = GeoKind::Affine;
  g.in_h = h;
  g.in_w = w;
  g.m00 = c;
  g.m01 = s;
  g.m10 = -s;
  g.m11 = c;
  return g;
}

TRCTL_HD GeoMap geo_scale(int32_t h, int32_t w, double scale) {
  GeoMap g;
  g.kind = GeoKind::Affine;
  g.in_h = h;
  g.in_w = w;
  g.m00 = g.m11 = 1.0 / scale;
  g.m01 = g.m10 = 0.0;
  return g;
}

TRCTL_HD GeoMap geo_shift(int32_t in_h, int32_t in_w, int32_t dy, int32_t dx) {
  GeoMap g;
  g.kind = GeoKind::Shift;
  g.in_h = in_h;
  g.in_w = in_w;
  g.dy = dy;
  g.dx = dx;
  return g;
}

// A horizontal flip (torchvision hflip): source x = W - 1 - x. A flip not drawn is a zero shift.
TRCTL_HD GeoMap geo_flip(int32_t h, int32_t w, bool flip) {
  GeoMap g = geo_shift(h, w, 0, 0);
  if (flip) g.kind = GeoKind::FlipX;
  return g;
}

// Output pixel (y, x) of step g -> source pixel (*sy, *sx) of its input; false when it falls outside (fill 0).
TRCTL_HD bool geo_map_pixel(const GeoMap& g, int32_t y, int32_t x, int32_t* sy, int32_t* sx) {
  if (g.kind == GeoKind::FlipX) {
    *sy = y;
    *sx = g.in_w - 1 - x;
    return y >= 0 && y < g.in_h && x >= 0 && x < g.in_w;
  }
  if (g.kind == GeoKind::Shift) {
    int32_t ty = y + g.dy, tx = x + g.dx;
    if (ty < 0 || ty >= g.in_h || tx < 0 || tx >= g.in_w) return false;
    *sy = ty;
    *sx = tx;
    return true;
  }
  double xo = x + 0.5 - 0.5 * g.in_w;
  double yo = y + 0.5 - 0.5 * g.in_h;
  double fx = geo_round_half_even(g.m00 * xo + g.m01 * yo + 0.5 * g.in_w - 0.5);
  double fy = geo_round_half_even(g.m10 * xo + g.m11 * yo + 0.5 * g.in_h - 0.5);
  if (!(fx >= 0.0 && fx < g.in_w && fy >= 0.0 && fy < g.in_h)) return false;  // also rejects NaN
  *sx = static_cast<int32_t>(fx);
  *sy = static_cast<int32_t>(fy);
  return true;
}

// Walks maps[n-1] .. maps[0] (the pipeline's geometric steps in order): final output pixel -> source u8 pixel.
TRCTL_HD bool geo_source_pixel(const GeoMap* maps, int n, int32_t y, int32_t x, int32_t* sy, int32_t* sx) {
  for (int k = n - 1; k >= 0; --k) {
    if (!geo_map_pixel(maps[k], y, x, &y, &x)) return false;
  }
  *sy = y;
  *sx = x;
  return true;
}

// Random parameters of one step for one sample (unused fields zero). erase may be true with a zero-sized box, as
// in torchvision when a side rounds to 0.
struct StepParams {
  int crop_y = 0, crop_x = 0;    // random_crop offsets
  double angle_deg = 0;          // random_rotation
  double scale = 1;              // random_scale
  bool flip = false;             // random_horizontal_flip
  bool erase = false;            // random_erasing
  int erase_y = 0, erase_x = 0, erase_h = 0, erase_w = 0;
};

TRCTL_HD double geo_log(double v) {
#if defined(__CUDA_ARCH__)
  return ::log(v);
#else
  return std::log(v);
#endif
}

TRCTL_HD double geo_exp(double v) {
#if defined(__CUDA_ARCH__)
  return ::exp(v);
#else
  return std::exp(v);
#endif
}

TRCTL_HD double geo_sqrt(double v) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(v);
#else
  return std::sqrt(v);
#endif
}

// torchvision RandomErasing.forward/get_params on an h x w image; draws in torchvision's order: the coin, then up
// to 10 attempts of (area, log-aspect), then (top, left) for the first box that fits.
TRCTL_HD void transforms_draw_erasing(const TransformSpec& s, int h, int w, PhiloxStream& rng, StepParams& out) {
  if (!(static_cast<double>(rng.uniform()) < s.p)) return;
  const double area = double(h) * double(w);
  const double log_lo = geo_log(s.ratio_min), log_hi = geo_log(s.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area = area * rng.uniform_range(s.erase_scale_min, s.erase_scale_max);
    const double aspect = geo_exp(rng.uniform_range(log_lo, log_hi));
    // Python's round(): half to even.
    const int eh = static_cast<int>(geo_round_half_even(geo_sqrt(erase_area * aspect)));
    const int ew = static_cast<int>(geo_round_half_even(geo_sqrt(erase_area / aspect)));
    if (!(eh < h && ew < w)) continue;
    out.erase = true;
    out.erase_y = static_cast<int>(rng.below(static_cast<uint32_t>(h - eh + 1)));
    out.erase_x = static_cast<int>(rng.below(static_cast<uint32_t>(w - ew + 1)));
    out.erase_h = eh;
    out.erase_w = ew;
    return;
  }
}

// The random parameters of one step, in pipeline order from the sample's stream; *h, *w: the image size before
// the step, updated to the size after it. The CPU's transforms_draw and the GPU augmentation kernel both call it.
TRCTL_HD StepParams transforms_draw_step(const TransformSpec& s, int* h, int* w, PhiloxStream& rng) {
  StepParams out;
  switch (s.kind) {
    case TransformKind::Pad:
      *h += 2 * s.padding;
      *w += 2 * s.padding;
      break;
    case TransformKind::RandomCrop:  // torchvision RandomCrop.get_params: top (i) first, then left (j)
      out.crop_y = static_cast<int>(rng.below(static_cast<uint32_t>(*h - s.size + 1)));
      out.crop_x = static_cast<int>(rng.below(static_cast<uint32_t>(*w - s.size + 1)));
      *h = *w = s.size;
      break;
    case TransformKind::RandomRotation:
      out.angle_deg = rng.uniform_range(-s.degrees, s.degrees);
      break;
    case TransformKind::RandomScale:
      out.scale = rng.uniform_range(s.scale_min, s.scale_max);
      break;
    case TransformKind::Normalize:
      break;
    case TransformKind::RandomErasing:
      transforms_draw_erasing(s, *h, *w, rng, out);
      break;
    case TransformKind::RandomHorizontalFlip:  // torchvision: torch.rand(1) < p
      out.flip = static_cast<double>(rng.uniform()) < s.p;
      break;
    case TransformKind::RandomResizedCrop:  // variable-size kinds (dataio/image_ops.h): transforms_build rejects
    case TransformKind::ColorJitter:
    case TransformKind::Resize:
    case TransformKind::CenterCrop:
      break;
  }
  return out;
}

// torchvision ToTensor + Normalize, in float: (u8 / 255 - mean) / std.
TRCTL_HD float normalize_u8(uint8_t v, float mean, float std_dev) {
  return (static_cast<float>(v) / 255.0f - mean) / std_dev;
}

}  // namespace trctl
