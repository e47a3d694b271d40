// The building blocks of the variable-size image pipeline (see image_ops.h): fp16 conversion, PIL's bilinear
// resampling in fixed point, torchvision's crop/resize geometry and parameter draws, and PIL's color ops.
// dataio/image_pipeline.cpp assembles them into validated per-sample pipelines.
#include "dataio/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace trctl {

// ---- fp16 ----

uint16_t float_to_half_bits(float f) {
  uint32_t x = 0;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {  // inf, or NaN kept quiet with its top payload bits
    return static_cast<uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u | ((ax >> 13) & 0x3FFu) : 0u));
  }
  const int e = int(ax >> 23) - 127 + 15;  // the half's biased exponent
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
  uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;  // 24 significant bits
  const int shift = e >= 1 ? 13 : 14 - e;        // bits dropped: 13 for normals, more for subnormals
  if (shift > 24) return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
  uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
  if (e >= 1) half = (uint32_t(e) << 10) | (half & 0x3FFu);
  if (rest > mid || (rest == mid && (half & 1u))) ++half;  // a carry rolls into the exponent (up to inf) exactly
  return static_cast<uint16_t>(sign | half);
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x = 0;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even (overflow rounds to inf, as it should)
  return static_cast<uint16_t>(x >> 16);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  float mag;
  if (e == 0) {
    mag = std::ldexp(float(m), -24);
  } else if (e == 31) {
    uint32_t bits = 0x7F800000u | (m << 13);
    std::memcpy(&mag, &bits, sizeof(mag));
  } else {
    mag = std::ldexp(float(m | 0x400u), int(e) - 25);
  }
  uint32_t bits = 0;
  std::memcpy(&bits, &mag, sizeof(bits));
  bits |= sign;
  std::memcpy(&mag, &bits, sizeof(mag));
  return mag;
}

// ---- PIL bilinear resampling ----

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's PRECISION_BITS: 8 bits of result, 2 of headroom

inline double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// PIL's precompute_coeffs + normalize_coeffs_8bpc for one axis: per output pixel its first source pixel and tap
// count in bounds, and ksize fixed-point weights in kk. Returns ksize.
int precompute_coeffs(int in_size, float in0, float in1, int out_size, ResizeScratch& s, std::vector<int32_t>& bounds,
                      std::vector<int32_t>& kk) {
  const double scale = double(in1 - in0) / out_size;  // the subtraction in float, as PIL's (double)(in1 - in0)
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // BILINEAR's support is 1
  const int ksize = int(std::ceil(support)) * 2 + 1;
  bounds.resize(size_t(out_size) * 2);
  kk.resize(size_t(out_size) * size_t(ksize));
  s.weights.resize(size_t(ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    xmin = std::min(std::max(xmin, 0), in_size);
    int xmax = std::min(int(center + support + 0.5), in_size) - xmin;
    xmax = std::max(0, std::min(xmax, ksize));
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      s.weights[size_t(x)] = bilinear_filter((x + xmin - center + 0.5) * ss);
      ww += s.weights[size_t(x)];
    }
    int32_t* k = &kk[size_t(xx) * size_t(ksize)];
    for (int x = 0; x < ksize; ++x) {
      double v = x < xmax ? (ww != 0.0 ? s.weights[size_t(x)] / ww : s.weights[size_t(x)]) : 0.0;
      k[x] = int32_t(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    bounds[size_t(xx) * 2] = xmin;
    bounds[size_t(xx) * 2 + 1] = xmax;
  }
  return ksize;
}

// Rows [y_first, y_first + rows) of src resampled along x into out, (rows, dw, c) contiguous.
void resample_horizontal(const ImageView& src, int y_first, int rows, const int32_t* bounds, const int32_t* kk,
                         int ksize, int dw, uint8_t* out) {
  const int c = src.c;
  const int32_t half = 1 << (kPrecisionBits - 1);
  for (int r = 0; r < rows; ++r) {
    const uint8_t* in = src.data + size_t(y_first + r) * src.stride;
    uint8_t* o = out + size_t(r) * size_t(dw) * size_t(c);
    for (int xx = 0; xx < dw; ++xx) {
      const int32_t* k = kk + size_t(xx) * size_t(ksize);
      const uint8_t* p = in + size_t(bounds[2 * xx]) * size_t(c);
      const int n = bounds[2 * xx + 1];
      if (c == 3) {
        int32_t s0 = half, s1 = half, s2 = half;
        for (int t = 0; t < n; ++t) {
          s0 += p[3 * t] * k[t];
          s1 += p[3 * t + 1] * k[t];
          s2 += p[3 * t + 2] * k[t];
        }
        o[3 * xx] = clip8(s0);
        o[3 * xx + 1] = clip8(s1);
        o[3 * xx + 2] = clip8(s2);
      } else {
        for (int ch = 0; ch < c; ++ch) {
          int32_t s0 = half;
          for (int t = 0; t < n; ++t) s0 += p[t * c + ch] * k[t];
          o[xx * c + ch] = clip8(s0);
        }
      }
    }
  }
}

// Resamples along y: out row yy = sum over taps of in rows; the inner loop runs along a whole row (vectorizes).
void resample_vertical(const uint8_t* in, size_t in_stride, const int32_t* bounds, const int32_t* kk, int ksize,
                       int dh, int row_len, uint8_t* out, std::vector<int32_t>& acc_buf) {
  acc_buf.resize(size_t(row_len));
  int32_t* acc = acc_buf.data();
  for (int yy = 0; yy < dh; ++yy) {
    const int32_t* k = kk + size_t(yy) * size_t(ksize);
    for (int i = 0; i < row_len; ++i) acc[i] = 1 << (kPrecisionBits - 1);
    for (int t = 0; t < bounds[2 * yy + 1]; ++t) {
      const uint8_t* row = in + size_t(bounds[2 * yy] + t) * in_stride;
      const int32_t kt = k[t];
      for (int i = 0; i < row_len; ++i) acc[i] += int32_t(row[i]) * kt;
    }
    uint8_t* o = out + size_t(yy) * size_t(row_len);
    for (int i = 0; i < row_len; ++i) o[i] = clip8(acc[i]);
  }
}

}  // namespace

void resize_region_u8(const ImageView& src, float x0, float y0, float x1, float y1, uint8_t* dst, int dh, int dw,
                      ResizeScratch& s) {
  if (!src.data || src.h < 1 || src.w < 1 || dh < 1 || dw < 1) return;
  const int c = src.c;
  // PIL's test compares x1 with the output width: a pass runs unless the axis is the identity.
  const bool need_h = dw != src.w || x0 != 0 || x1 != float(dw);
  const bool need_v = dh != src.h || y0 != 0 || y1 != float(dh);
  const int ksize_v = precompute_coeffs(src.h, y0, y1, dh, s, s.by, s.ky);
  const int y_first = s.by[0];
  const int y_last = s.by[size_t(dh - 1) * 2] + s.by[size_t(dh - 1) * 2 + 1];
  if (need_h) {
    const int ksize_h = precompute_coeffs(src.w, x0, x1, dw, s, s.bx, s.kx);
    const int rows = std::max(0, y_last - y_first);
    if (!need_v) {  // the y axis is the identity: rows == dh
      resample_horizontal(src, y_first, rows, s.bx.data(), s.kx.data(), ksize_h, dw, dst);
      return;
    }
    for (int i = 0; i < dh; ++i) s.by[size_t(i) * 2] -= y_first;
    s.rows.resize(size_t(rows) * size_t(dw) * size_t(c));
    resample_horizontal(src, y_first, rows, s.bx.data(), s.kx.data(), ksize_h, dw, s.rows.data());
    resample_vertical(s.rows.data(), size_t(dw) * size_t(c), s.by.data(), s.ky.data(), ksize_v, dh, dw * c, dst,
                      s.acc);
  } else if (need_v) {
    resample_vertical(src.data, src.stride, s.by.data(), s.ky.data(), ksize_v, dh, dw * c, dst, s.acc);
  } else {
    const size_t row = size_t(dw) * size_t(c);
    for (int y = 0; y < dh; ++y) std::memcpy(dst + size_t(y) * row, src.data + size_t(y) * src.stride, row);
  }
}

// ---- geometry ----

CropBox random_resized_crop_params(const TransformSpec& s, int h, int w, PhiloxStream& rng) {
  const double area = double(h) * double(w);
  const double log_lo = std::log(s.crop_ratio_min), log_hi = std::log(s.crop_ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform_range(s.crop_scale_min, s.crop_scale_max);
    const double aspect = std::exp(rng.uniform_range(log_lo, log_hi));
    const double cw = geo_round_half_even(std::sqrt(target * aspect));  // compared as doubles: no int overflow
    const double ch = geo_round_half_even(std::sqrt(target / aspect));
    if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
      CropBox b;
      b.h = int(ch);
      b.w = int(cw);
      b.top = int(rng.below(uint32_t(h - b.h + 1)));
      b.left = int(rng.below(uint32_t(w - b.w + 1)));
      return b;
    }
  }
  // torchvision's fallback: the whole image, cut to the nearest allowed aspect ratio, centred.
  const double in_ratio = double(w) / double(h);
  const double rmin = std::min(s.crop_ratio_min, s.crop_ratio_max), rmax = std::max(s.crop_ratio_min, s.crop_ratio_max);
  CropBox b;
  b.w = w;
  b.h = h;
  if (in_ratio < rmin) {
    b.h = std::max(1, std::min(h, int(geo_round_half_even(w / rmin))));
  } else if (in_ratio > rmax) {
    b.w = std::max(1, std::min(w, int(geo_round_half_even(h * rmax))));
  }
  b.top = (h - b.h) / 2;
  b.left = (w - b.w) / 2;
  return b;
}

CropBox center_crop_box(int h, int w, int size) {
  auto offset = [size](int side) {
    return size > side ? -((size - side) / 2) : int(geo_round_half_even((side - size) / 2.0));
  };
  return CropBox{offset(h), offset(w), size, size};
}

void resize_shorter_side(int h, int w, int size, int* out_h, int* out_w) {
  const int64_t shorter = std::min(h, w), longer = std::max(h, w);
  const int other = int(double(int64_t(size) * longer) / double(shorter));  // Python int(size * long / short)
  *out_h = w <= h ? other : size;
  *out_w = w <= h ? size : other;
}

// ---- PIL color ops ----

namespace {

// PIL's ImagingBlend(degenerate, image, alpha) for one value: float arithmetic; truncation when interpolating,
// clipping when extrapolating.
inline uint8_t pil_blend(int degenerate, int v, float alpha) {
  const float t = float(degenerate) + alpha * float(v - degenerate);
  if (alpha >= 0.0f && alpha <= 1.0f) return static_cast<uint8_t>(t);
  return t <= 0.0f ? 0 : (t >= 255.0f ? 255 : static_cast<uint8_t>(t));
}

inline int luma(const uint8_t* p) { return (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16; }

void apply_lut(uint8_t* img, int h, int w, size_t stride, const uint8_t* lut) {
  for (int y = 0; y < h; ++y) {
    uint8_t* row = img + size_t(y) * stride;
    for (int i = 0; i < w * 3; ++i) row[i] = lut[row[i]];
  }
}

// PIL's rgb2hsv_row, with its float/double mix kept so that results match bit for bit. hue / 6 + 1 lies in
// [5/6, 11/6), where fmod(x, 1) is exactly x or x - 1.
inline void rgb_to_hsv(const uint8_t* in, uint8_t* out) {
  const uint8_t r = in[0], g = in[1], b = in[2];
  const uint8_t maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
  uint8_t uh = 0, us = 0;
  if (minc != maxc) {
    const float cr = float(maxc - minc);
    const float s = cr / float(maxc);
    const float rc = float(maxc - r) / cr, gc = float(maxc - g) / cr, bc = float(maxc - b) / cr;
    float hue;
    if (r == maxc) {
      hue = bc - gc;
    } else if (g == maxc) {
      hue = float(2.0 + rc - bc);
    } else {
      hue = float(4.0 + gc - rc);
    }
    const double x = hue / 6.0 + 1.0;
    hue = float(x >= 1.0 ? x - 1.0 : x);
    uh = uint8_t(std::min(255, std::max(0, int(hue * 255.0))));
    us = uint8_t(std::min(255, std::max(0, int(s * 255.0))));
  }
  out[0] = uh;
  out[1] = us;
  out[2] = maxc;
}

// PIL's hsv2rgb terms that depend on one byte only, tabulated per call: i = floor(h * 6.0 / 255.0), f = the
// remainder (float), fs = s / 255.0 (float).
struct HsvTables {
  int i[256];
  float f[256], fs[256];
  HsvTables() {
    for (int v = 0; v < 256; ++v) {
      const double h6 = float(v) * 6.0 / 255.0;
      i[v] = int(std::floor(h6));
      f[v] = float(h6 - float(i[v]));
      fs[v] = float(float(v) / 255.0);
    }
  }
};

// C's round() for x >= 0 (half away from zero), inline: x - trunc(x) is exact.
inline uint8_t round_clip8(double x) {
  const int64_t t = int64_t(x);
  const int64_t r = t + (x - double(t) >= 0.5 ? 1 : 0);
  return uint8_t(r < 0 ? 0 : (r > 255 ? 255 : r));
}

// PIL's hsv2rgb for one pixel.
inline void hsv_to_rgb(const HsvTables& tab, const uint8_t* in, uint8_t* out) {
  const uint8_t h = in[0], s = in[1], v = in[2];
  if (s == 0) {
    out[0] = out[1] = out[2] = v;
    return;
  }
  const int i = tab.i[h];
  const float f = tab.f[h], fs = tab.fs[s];
  const uint8_t p = round_clip8(float(v) * (1.0 - fs)), q = round_clip8(float(v) * (1.0 - fs * f)),
                t = round_clip8(float(v) * (1.0 - fs * (1.0 - f)));
  uint8_t r = v, g = p, b = q;  // sector 5
  switch (i % 6) {
    case 0: g = t; b = p; break;
    case 1: r = q; g = v; b = p; break;
    case 2: r = p; g = v; b = t; break;
    case 3: r = p; g = q; b = v; break;
    case 4: r = t; g = p; b = v; break;
    default: break;
  }
  out[0] = r;
  out[1] = g;
  out[2] = b;
}

}  // namespace

void adjust_brightness_u8(uint8_t* img, int h, int w, size_t stride, double factor) {
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = pil_blend(0, v, float(factor));
  apply_lut(img, h, w, stride, lut);
}

void adjust_contrast_u8(uint8_t* img, int h, int w, size_t stride, double factor) {
  int64_t sum = 0;
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = img + size_t(y) * stride;
    for (int x = 0; x < w; ++x) sum += luma(row + 3 * x);
  }
  // ImageStat's mean (a double), then ImageEnhance.Contrast's int(mean + 0.5).
  const int mean = int(double(sum) / (double(h) * double(w)) + 0.5);
  uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = pil_blend(mean, v, float(factor));
  apply_lut(img, h, w, stride, lut);
}

void adjust_saturation_u8(uint8_t* img, int h, int w, size_t stride, double factor) {
  const float alpha = float(factor);
  for (int y = 0; y < h; ++y) {
    uint8_t* p = img + size_t(y) * stride;
    for (int x = 0; x < w; ++x, p += 3) {
      const int l = luma(p);
      for (int ch = 0; ch < 3; ++ch) p[ch] = pil_blend(l, p[ch], alpha);
    }
  }
}

void adjust_hue_u8(uint8_t* img, int h, int w, size_t stride, double shift) {
  // torchvision adds np.uint8(shift * 255) to the uint8 H plane: truncation, then modulo 256.
  const uint8_t delta = uint8_t(int(std::trunc(shift * 255.0)) & 0xFF);
  const HsvTables tab;
  for (int y = 0; y < h; ++y) {
    uint8_t* p = img + size_t(y) * stride;
    for (int x = 0; x < w; ++x, p += 3) {
      uint8_t hsv[3];
      rgb_to_hsv(p, hsv);
      hsv[0] = uint8_t(hsv[0] + delta);
      hsv_to_rgb(tab, hsv, p);
    }
  }
}

void color_jitter_apply_u8(const ColorJitterParams& p, uint8_t* img, int h, int w, size_t stride) {
  for (int k : p.order) {
    if (k < 0 || k > 3 || !p.on[k]) continue;
    switch (k) {
      case 0: adjust_brightness_u8(img, h, w, stride, p.factor[0]); break;
      case 1: adjust_contrast_u8(img, h, w, stride, p.factor[1]); break;
      case 2: adjust_saturation_u8(img, h, w, stride, p.factor[2]); break;
      default: adjust_hue_u8(img, h, w, stride, p.factor[3]); break;
    }
  }
}

ColorJitterParams color_jitter_params(const TransformSpec& s, PhiloxStream& rng) {
  ColorJitterParams p;
  for (int i = 3; i > 0; --i) std::swap(p.order[i], p.order[rng.below(uint32_t(i + 1))]);
  const double amount[3] = {s.brightness, s.contrast, s.saturation};
  for (int k = 0; k < 3; ++k) {
    if (!(amount[k] > 0)) continue;
    p.on[k] = true;
    p.factor[k] = rng.uniform_range(std::max(0.0, 1.0 - amount[k]), 1.0 + amount[k]);
  }
  if (s.hue > 0) {
    p.on[3] = true;
    p.factor[3] = rng.uniform_range(-s.hue, s.hue);
  }
  return p;
}

}  // namespace trctl
