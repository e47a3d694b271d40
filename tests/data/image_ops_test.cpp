// The variable-size image ops and pipeline: fp16 rounding, PIL's bilinear resampling (expected values derived by
// hand from PIL's formulas), torchvision's crop/resize geometry and draws, PIL color ops, pipeline validation,
// and image_pipeline_apply on raw and JPEG input (flip, padding, erasing, fp16 vs fp32, DCT-scaled decode).
#include <algorithm>
#include <limits>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dataio/image_ops.h"
#include "dataio/transforms.h"

using namespace trctl;

namespace {

TransformSpec step(TransformKind k, int size = 0) {
  TransformSpec t;
  t.kind = k;
  t.size = size;
  return t;
}
TransformSpec flip(double p) {
  TransformSpec t = step(TransformKind::RandomHorizontalFlip);
  t.p = p;
  return t;
}
TransformSpec normalize() { return step(TransformKind::Normalize); }

ImagePipeline build(const std::vector<TransformSpec>& steps, int c = 3, double mean = 0.0, double std = 1.0) {
  Result<ImagePipeline> r = image_pipeline_build(steps, {mean}, {std}, c, "test.yaml");
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

// A textured u8 image: a diagonal wave plus per-channel offsets (no symmetry, so flips and shifts show).
std::vector<uint8_t> texture(int w, int h, int c) {
  std::vector<uint8_t> px(size_t(w) * size_t(h) * size_t(c));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        double v = 128 + 90 * std::sin(0.35 * x + 0.2 * y + ch) + 0.1 * x - 0.05 * y;
        px[(size_t(y) * size_t(w) + size_t(x)) * size_t(c) + size_t(ch)] = uint8_t(std::lround(v));
      }
    }
  }
  return px;
}

std::vector<float> run_raw(const ImagePipeline& p, const std::vector<uint8_t>& px, int h, int w, int c,
                           uint32_t index = 0) {
  ImageScratch s;
  std::vector<float> out(size_t(p.out_h) * size_t(p.out_w) * size_t(p.c));
  Status st = image_pipeline_apply(p, s, px.data(), px.size(), false, h, w, c, 7, 1, index, OutDType::F32,
                                   out.data(), "raw");
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
  return out;
}

std::vector<float> mirrored(const std::vector<float>& v, int h, int w, int c) {
  std::vector<float> m(v.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch)
        m[(size_t(y) * w + x) * c + ch] = v[(size_t(y) * w + (w - 1 - x)) * c + ch];
  return m;
}

bool has_error(const Result<ImagePipeline>& r, ErrCode code, const std::string& needle) {
  if (r.ok()) return false;
  for (const Error& e : r.errors()) {
    if (e.code == code && e.where == "test.yaml" && e.message.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

// ---- fp16 ----

TEST_CASE("float_to_half_bits handles zeros, normals, overflow, NaN and ties", "[image_ops]") {
  CHECK(float_to_half_bits(0.0f) == 0x0000);
  CHECK(float_to_half_bits(-0.0f) == 0x8000);
  CHECK(float_to_half_bits(1.0f) == 0x3C00);
  CHECK(float_to_half_bits(-2.0f) == 0xC000);
  CHECK(float_to_half_bits(0.1f) == 0x2E66);
  CHECK(float_to_half_bits(65504.0f) == 0x7BFF);
  CHECK(float_to_half_bits(65519.0f) == 0x7BFF);   // below the midpoint to 65536
  CHECK(float_to_half_bits(65520.0f) == 0x7C00);   // the midpoint ties to even: infinity
  CHECK(float_to_half_bits(1e6f) == 0x7C00);
  CHECK(float_to_half_bits(-1e6f) == 0xFC00);
  CHECK(float_to_half_bits(INFINITY) == 0x7C00);
  CHECK(float_to_half_bits(-INFINITY) == 0xFC00);
  const uint16_t nan = float_to_half_bits(NAN), neg_nan = float_to_half_bits(-NAN);
  CHECK((nan & 0x7C00) == 0x7C00);
  CHECK((nan & 0x03FF) != 0);
  CHECK((nan & 0x8000) == 0);
  CHECK((neg_nan & 0x8000) != 0);
  CHECK((neg_nan & 0x03FF) != 0);
  CHECK(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie: to the even 1.0
  CHECK(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie: up to the even neighbour
}

TEST_CASE("float_to_half_bits rounds subnormals to nearest even", "[image_ops]") {
  CHECK(float_to_half_bits(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(float_to_half_bits(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000);  // half of it: ties to even 0
  CHECK(float_to_half_bits(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(float_to_half_bits(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 units: ties to even 2
  CHECK(float_to_half_bits(std::ldexp(1.0f, -26)) == 0x0000);
  CHECK(float_to_half_bits(-std::ldexp(1.0f, -24)) == 0x8001);
  CHECK(float_to_half_bits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);  // 1023.5 units: up
  CHECK(float_to_half_bits(1e-30f) == 0x0000);
}

TEST_CASE("every half survives a round trip and every midpoint rounds to the even neighbour", "[image_ops]") {
  CHECK(half_bits_to_float(0x3555) == 0.333251953125f);
  CHECK(half_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_bits_to_float(0x7BFF) == 65504.0f);
  int bad = 0;
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float f = half_bits_to_float(uint16_t(h));
    bad += float_to_half_bits(f) != h;
    bad += float_to_half_bits(-f) != (h | 0x8000);
    if (h + 1 < 0x7C00) {
      const float mid = 0.5f * (f + half_bits_to_float(uint16_t(h + 1)));  // exact in float
      bad += float_to_half_bits(mid) != ((h & 1) ? h + 1 : h);
      bad += float_to_half_bits(std::nextafter(mid, 0.0f)) != h;
      bad += float_to_half_bits(std::nextafter(mid, 1e9f)) != h + 1;
    }
  }
  CHECK(bad == 0);
}

// ---- PIL bilinear resampling ----

TEST_CASE("resize to the same size with the whole box is the identity", "[image_ops]") {
  std::vector<uint8_t> px = texture(7, 5, 3), out(px.size());
  ResizeScratch s;
  resize_region_u8(ImageView{px.data(), 5, 7, 3, 21}, 0, 0, 7, 5, out.data(), 5, 7, s);
  CHECK(out == px);
}

TEST_CASE("a 2x downscale matches PIL's antialiased triangle filter", "[image_ops]") {
  // Scale 2: support 2. Output 0: centre 1, taps 0..2 with weights (0.75, 0.75, 0.25)/1.75 = (3/7, 3/7, 1/7);
  // output 1: centre 3, taps 1..3 with (1/7, 3/7, 3/7). In 22-bit fixed point 3/7 -> 1797559, 1/7 -> 599186:
  // (10, 20, 30) -> (71902350 + 2^21) >> 22 = 17; (20, 30, 40) -> (137812850 + 2^21) >> 22 = 33.
  const std::vector<uint8_t> row = {10, 20, 30, 40};
  std::vector<uint8_t> out(2);
  ResizeScratch s;
  resize_region_u8(ImageView{row.data(), 1, 4, 1, 4}, 0, 0, 4, 1, out.data(), 1, 2, s);
  CHECK(out == std::vector<uint8_t>{17, 33});
  // The same along y (a column), through the vertical pass.
  resize_region_u8(ImageView{row.data(), 4, 1, 1, 1}, 0, 0, 1, 4, out.data(), 2, 1, s);
  CHECK(out == std::vector<uint8_t>{17, 33});
}

TEST_CASE("an upscale interpolates with edge taps clipped", "[image_ops]") {
  // Scale 0.5: centres 0.25, 0.75, 1.25, 1.75; the outer ones have a single tap (clipped, renormalized to 1),
  // the inner ones weights (0.75, 0.25) and (0.25, 0.75).
  const std::vector<uint8_t> row = {0, 100};
  std::vector<uint8_t> out(4);
  ResizeScratch s;
  resize_region_u8(ImageView{row.data(), 1, 2, 1, 2}, 0, 0, 2, 1, out.data(), 1, 4, s);
  CHECK(out == std::vector<uint8_t>{0, 25, 75, 100});
  std::vector<uint8_t> out2(16);
  resize_region_u8(ImageView{row.data(), 1, 2, 1, 2}, 0, 0, 2, 1, out2.data(), 4, 4, s);  // rows repeat
  for (int y = 0; y < 4; ++y) CHECK(std::vector<uint8_t>(out2.begin() + 4 * y, out2.begin() + 4 * y + 4) == out);
}

TEST_CASE("a fractional box shifts the sampling grid", "[image_ops]") {
  // Box x in [0.5, 2.5] to 2 pixels: centres 1 and 2, each with two taps of 0.5 (2^21 in fixed point):
  // (10 + 20) * 2^21 + 2^21 = 15.5 * 2^22 -> 15, and likewise 25.
  const std::vector<uint8_t> row = {10, 20, 30, 40};
  std::vector<uint8_t> out(2);
  ResizeScratch s;
  resize_region_u8(ImageView{row.data(), 1, 4, 1, 4}, 0.5f, 0, 2.5f, 1, out.data(), 1, 2, s);
  CHECK(out == std::vector<uint8_t>{15, 25});
}

TEST_CASE("a strided view reads only its own pixels", "[image_ops]") {
  // The 2x2 block at (1, 1) of a 4x4 image, upscaled: the surrounding pixels (255) must not leak in.
  std::vector<uint8_t> img(16, 255);
  img[5] = img[6] = img[9] = img[10] = 50;
  std::vector<uint8_t> out(9);
  ResizeScratch s;
  resize_region_u8(ImageView{img.data() + 5, 2, 2, 1, 4}, 0, 0, 2, 2, out.data(), 3, 3, s);
  for (uint8_t v : out) CHECK(int(v) == 50);
}

// ---- geometry and draws ----

TEST_CASE("random_resized_crop params are deterministic and inside the image", "[image_ops]") {
  TransformSpec rrc = step(TransformKind::RandomResizedCrop, 224);
  for (uint32_t i = 0; i < 2000; ++i) {
    PhiloxStream a(11, uint32_t(RngPurpose::Transform), 3, i), b(11, uint32_t(RngPurpose::Transform), 3, i);
    CropBox x = random_resized_crop_params(rrc, 375, 500, a), y = random_resized_crop_params(rrc, 375, 500, b);
    REQUIRE((x.top == y.top && x.left == y.left && x.h == y.h && x.w == y.w));
    REQUIRE(x.h >= 1);
    REQUIRE(x.w >= 1);
    REQUIRE(x.top >= 0);
    REQUIRE(x.left >= 0);
    REQUIRE(x.top + x.h <= 375);
    REQUIRE(x.left + x.w <= 500);
    const double ratio = double(x.w) / x.h;  // within the range up to rounding of w and h
    REQUIRE(ratio > 0.75 * (1 - 2.0 / x.h) - 1e-9);
    REQUIRE(ratio < 4.0 / 3.0 * (1 + 2.0 / x.w) + 1e-9);
  }
  PhiloxStream a(11, uint32_t(RngPurpose::Transform), 3, 0), b(11, uint32_t(RngPurpose::Transform), 3, 1);
  CropBox x = random_resized_crop_params(rrc, 375, 500, a), y = random_resized_crop_params(rrc, 375, 500, b);
  CHECK_FALSE((x.top == y.top && x.left == y.left && x.h == y.h && x.w == y.w));
}

TEST_CASE("random_resized_crop falls back to a centred crop with the ratio clamped", "[image_ops]") {
  TransformSpec rrc = step(TransformKind::RandomResizedCrop, 32);
  rrc.crop_scale_min = 2;  // never fits: all 10 attempts fail
  rrc.crop_scale_max = 3;
  PhiloxStream r1(1, 2, 0, 0);
  CropBox wide = random_resized_crop_params(rrc, 50, 100, r1);  // ratio 2 > 4/3: h = 50, w = round(66.67) = 67
  CHECK((wide.top == 0 && wide.left == 16 && wide.h == 50 && wide.w == 67));
  PhiloxStream r2(1, 2, 0, 0);
  CropBox tall = random_resized_crop_params(rrc, 100, 30, r2);  // ratio 0.3 < 3/4: w = 30, h = round(40) = 40
  CHECK((tall.top == 30 && tall.left == 0 && tall.h == 40 && tall.w == 30));
  PhiloxStream r3(1, 2, 0, 0);
  CropBox square = random_resized_crop_params(rrc, 40, 40, r3);  // ratio 1 in range: the whole image
  CHECK((square.top == 0 && square.left == 0 && square.h == 40 && square.w == 40));
}

TEST_CASE("center_crop_box rounds half to even and pads smaller sides", "[image_ops]") {
  CropBox a = center_crop_box(10, 7, 4);  // top round(3.0) = 3, left round(1.5) = 2
  CHECK((a.top == 3 && a.left == 2 && a.h == 4 && a.w == 4));
  CropBox b = center_crop_box(6, 9, 4);  // top round(1.0) = 1, left round(2.5) = 2
  CHECK((b.top == 1 && b.left == 2));
  CropBox c = center_crop_box(3, 5, 4);  // height padded by (4-3)//2 = 0 on top; left round(0.5) = 0
  CHECK((c.top == 0 && c.left == 0));
  CropBox d = center_crop_box(2, 1, 5);  // padded by 3//2 = 1 and 4//2 = 2 before
  CHECK((d.top == -1 && d.left == -2));
}

TEST_CASE("resize_shorter_side truncates the longer side as torchvision", "[image_ops]") {
  int h = 0, w = 0;
  resize_shorter_side(60, 100, 30, &h, &w);
  CHECK((h == 30 && w == 50));
  resize_shorter_side(60, 101, 30, &h, &w);  // 50.5 -> 50
  CHECK((h == 30 && w == 50));
  resize_shorter_side(101, 60, 30, &h, &w);
  CHECK((h == 50 && w == 30));
  resize_shorter_side(375, 500, 256, &h, &w);  // 256 * 500 / 375 = 341.33
  CHECK((h == 256 && w == 341));
}

TEST_CASE("image_pipeline_draw follows the documented draw order", "[image_ops]") {
  TransformSpec rrc = step(TransformKind::RandomResizedCrop, 16);
  TransformSpec jitter = step(TransformKind::ColorJitter);
  jitter.brightness = 0.4;
  jitter.hue = 0.1;  // contrast and saturation 0: not drawn
  TransformSpec erase = step(TransformKind::RandomErasing);
  erase.p = 0.7;
  ImagePipeline p = build({rrc, flip(0.5), jitter, normalize(), erase});
  for (uint32_t idx = 0; idx < 50; ++idx) {
    std::vector<ImageStepParams> got;
    image_pipeline_draw(p, 40, 60, 5, 2, idx, &got);
    PhiloxStream rng(5, uint32_t(RngPurpose::Transform), 2, idx);
    CropBox crop = random_resized_crop_params(rrc, 40, 60, rng);
    const bool flipped = double(rng.uniform()) < 0.5;
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.below(uint32_t(i + 1))]);
    const double b = rng.uniform_range(0.6, 1.4), h = rng.uniform_range(-0.1, 0.1);
    StepParams e;
    transforms_draw_erasing(erase, 16, 16, rng, e);
    CHECK((got[0].crop.top == crop.top && got[0].crop.left == crop.left && got[0].crop.h == crop.h));
    CHECK(got[1].flip == flipped);
    CHECK(std::equal(order, order + 4, got[2].jitter.order));
    CHECK((got[2].jitter.on[0] && !got[2].jitter.on[1] && !got[2].jitter.on[2] && got[2].jitter.on[3]));
    CHECK(got[2].jitter.factor[0] == b);
    CHECK(got[2].jitter.factor[3] == h);
    CHECK((got[4].erase.erase == e.erase && got[4].erase.erase_y == e.erase_y && got[4].erase.erase_w == e.erase_w));
  }
}

// ---- PIL color ops ----

TEST_CASE("brightness blends with black: 0 is black, 1 is identity, truncation and clipping", "[image_ops]") {
  std::vector<uint8_t> px = {255, 100, 200};
  adjust_brightness_u8(px.data(), 1, 1, 3, 1.0);
  CHECK(px == std::vector<uint8_t>{255, 100, 200});
  adjust_brightness_u8(px.data(), 1, 1, 3, 0.5);  // 127.5 -> 127, 50, 100
  CHECK(px == std::vector<uint8_t>{127, 50, 100});
  adjust_brightness_u8(px.data(), 1, 1, 3, 2.2);  // 279.4 -> 255, 110, 220
  CHECK(px == std::vector<uint8_t>{255, 110, 220});
  adjust_brightness_u8(px.data(), 1, 1, 3, 0.0);
  CHECK(px == std::vector<uint8_t>{0, 0, 0});
}

TEST_CASE("contrast blends with the rounded mean of the L image", "[image_ops]") {
  // L of black and white: 0 and 255; mean 127.5 -> int(128.0) = 128.
  std::vector<uint8_t> px = {0, 0, 0, 255, 255, 255};
  std::vector<uint8_t> half = px;
  adjust_contrast_u8(half.data(), 1, 2, 6, 0.5);  // 128 - 64 = 64; 128 + 63.5 = 191.5 -> 191
  CHECK(half == std::vector<uint8_t>{64, 64, 64, 191, 191, 191});
  adjust_contrast_u8(px.data(), 1, 2, 6, 0.0);
  CHECK(px == std::vector<uint8_t>{128, 128, 128, 128, 128, 128});
}

TEST_CASE("saturation 0 gives PIL's convert('L') in every channel", "[image_ops]") {
  // Red: (255 * 19595 + 0x8000) >> 16 = 76; (10, 200, 30): (195950 + 7694000 + 224130 + 32768) >> 16 = 124.
  std::vector<uint8_t> px = {255, 0, 0, 10, 200, 30};
  adjust_saturation_u8(px.data(), 1, 2, 6, 0.0);
  CHECK(px == std::vector<uint8_t>{76, 76, 76, 124, 124, 124});
}

TEST_CASE("hue shifts the HSV hue byte with wraparound", "[image_ops]") {
  // Red is H 0, S 255, V 255. +0.5 adds trunc(127.5) = 127: H 127 -> i = 2, f = 0.98824, t = round(252.0):
  // (0, 255, 252). -0.5 adds -127 = 129 (mod 256): i = 3, f = 0.03529, q = round(246.0): (0, 246, 255).
  std::vector<uint8_t> px = {255, 0, 0};
  adjust_hue_u8(px.data(), 1, 1, 3, 0.0);
  CHECK(px == std::vector<uint8_t>{255, 0, 0});
  adjust_hue_u8(px.data(), 1, 1, 3, 0.5);
  CHECK(px == std::vector<uint8_t>{0, 255, 252});
  px = {255, 0, 0};
  adjust_hue_u8(px.data(), 1, 1, 3, -0.5);
  CHECK(px == std::vector<uint8_t>{0, 246, 255});
  px = {90, 90, 90};  // gray has no hue
  adjust_hue_u8(px.data(), 1, 1, 3, 0.3);
  CHECK(px == std::vector<uint8_t>{90, 90, 90});
}

namespace {

// Literal transcriptions of PIL's rgb2hsv_row and hsv2rgb (Convert.c), C library calls and all: the reference
// for adjust_hue_u8, whose tables and inline rounding must not change a single result.
void pil_rgb2hsv(const uint8_t* in, uint8_t* out) {
  float h, s, rc, gc, bc, cr;
  uint8_t r = in[0], g = in[1], b = in[2];
  uint8_t maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
  uint8_t uh = 0, us = 0;
  if (minc != maxc) {
    cr = (float)(maxc - minc);
    s = cr / (float)maxc;
    rc = ((float)(maxc - r)) / cr;
    gc = ((float)(maxc - g)) / cr;
    bc = ((float)(maxc - b)) / cr;
    if (r == maxc) {
      h = bc - gc;
    } else if (g == maxc) {
      h = 2.0 + rc - bc;
    } else {
      h = 4.0 + gc - rc;
    }
    h = std::fmod((h / 6.0 + 1.0), 1.0);
    uh = (uint8_t)std::min(255, std::max(0, (int)(h * 255.0)));
    us = (uint8_t)std::min(255, std::max(0, (int)(s * 255.0)));
  }
  out[0] = uh;
  out[1] = us;
  out[2] = maxc;
}

void pil_hsv2rgb(const uint8_t* in, uint8_t* out) {
  uint8_t h = in[0], s = in[1], v = in[2];
  if (s == 0) {
    out[0] = out[1] = out[2] = v;
    return;
  }
  int i = std::floor((float)h * 6.0 / 255.0);
  float f = (float)h * 6.0 / 255.0 - (float)i;
  float fs = ((float)s) / 255.0;
  auto clip = [](double x) { return (uint8_t)std::min(255, std::max(0, (int)std::round(x))); };
  uint8_t p = clip((float)v * (1.0 - fs)), q = clip((float)v * (1.0 - fs * f));
  uint8_t t = clip((float)v * (1.0 - fs * (1.0 - f)));
  const uint8_t table[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
  std::memcpy(out, table[i % 6], 3);
}

}  // namespace

TEST_CASE("hue matches a literal transcription of PIL's HSV conversions", "[image_ops]") {
  std::vector<uint8_t> px, expect;
  for (int r = 0; r < 256; r += 3)
    for (int g = 1; g < 256; g += 3)
      for (int b = 2; b < 256; b += 3) px.insert(px.end(), {uint8_t(r), uint8_t(g), uint8_t(b)});
  const int n = int(px.size() / 3);
  for (double shift : {-0.5, -0.23, 0.0, 0.004, 0.1, 0.37, 0.5}) {
    const int delta = int(std::trunc(shift * 255.0));
    expect = px;
    for (int i = 0; i < n; ++i) {
      uint8_t hsv[3];
      pil_rgb2hsv(&px[3 * size_t(i)], hsv);
      hsv[0] = uint8_t(hsv[0] + delta);
      pil_hsv2rgb(hsv, &expect[3 * size_t(i)]);
    }
    std::vector<uint8_t> got = px;
    adjust_hue_u8(got.data(), 1, n, got.size(), shift);
    INFO("shift " << shift);
    CHECK(got == expect);
  }
}

TEST_CASE("color jitter with all components 0 is the identity", "[image_ops]") {
  std::vector<uint8_t> px = texture(9, 6, 3);
  ImagePipeline plain = build({step(TransformKind::CenterCrop, 5), normalize()});
  ImagePipeline jit = build({step(TransformKind::CenterCrop, 5), step(TransformKind::ColorJitter), normalize()});
  CHECK(run_raw(plain, px, 6, 9, 3) == run_raw(jit, px, 6, 9, 3));
}

// ---- pipeline validation ----

TEST_CASE("fixed-size transforms are NotSupported for variable-size images", "[image_ops]") {
  TransformSpec pad = step(TransformKind::Pad);
  pad.padding = 2;
  Result<ImagePipeline> r =
      image_pipeline_build({pad, step(TransformKind::CenterCrop, 8), normalize()}, {0.5}, {0.5}, 3, "test.yaml");
  CHECK(has_error(r, ErrCode::NotSupported, "transform 1 (pad): is not supported for variable-size image datasets"));
}

TEST_CASE("the fixed-size pipeline rejects the variable-size kinds as NotSupported", "[image_ops]") {
  Result<TransformPipeline> r = transforms_build({step(TransformKind::RandomResizedCrop, 8), normalize()}, {0.5},
                                                 {0.5}, 28, 28, 1, "mnist.yaml");
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors()[0].code == ErrCode::NotSupported);
  CHECK(r.errors()[0].where == "mnist.yaml");
  CHECK(r.errors()[0].message.find("transform 1 (random_resized_crop): is for variable-size image datasets") == 0);
}

TEST_CASE("pipeline validation reports every problem at once", "[image_ops]") {
  TransformSpec jitter = step(TransformKind::ColorJitter);
  jitter.hue = 0.7;
  Result<ImagePipeline> r = image_pipeline_build(
      {step(TransformKind::RandomErasing), step(TransformKind::Resize, 32), jitter}, {0.5, 0.5}, {0.5}, 1,
      "test.yaml");
  CHECK(has_error(r, ErrCode::Missing, "a normalize step is required"));
  CHECK(has_error(r, ErrCode::Invalid, "the output size would depend on each image's size"));
  CHECK(has_error(r, ErrCode::OutOfRange, "transform 3 (color_jitter): hue must be in [0, 0.5]"));
  CHECK(has_error(r, ErrCode::OutOfRange, "transform 3 (color_jitter): needs 3-channel"));
  CHECK(has_error(r, ErrCode::Invalid, "normalize: mean needs 1 or 1 values"));
  Result<ImagePipeline> order = image_pipeline_build(
      {step(TransformKind::RandomErasing), normalize(), step(TransformKind::CenterCrop, 8)}, {0}, {1}, 3, "test.yaml");
  CHECK(has_error(order, ErrCode::Invalid, "transform 1 (random_erasing): must come after normalize"));
  CHECK(has_error(order, ErrCode::Invalid, "transform 3 (center_crop): must come before normalize"));
}

TEST_CASE("the output size follows crop then resize", "[image_ops]") {
  ImagePipeline p = build({step(TransformKind::Resize, 64), step(TransformKind::CenterCrop, 48),
                           step(TransformKind::Resize, 24), normalize(), flip(0.5)});
  CHECK((p.out_h == 24 && p.out_w == 24 && p.tail_from == 3));
}

// ---- image_pipeline_apply ----

TEST_CASE("normalize writes (v / 255 - mean) / std", "[image_ops]") {
  ImagePipeline p = build({step(TransformKind::CenterCrop, 1), normalize()}, 3, 0.5, 0.25);
  std::vector<float> out = run_raw(p, {255, 0, 51}, 1, 1, 3);
  CHECK(out[0] == 2.0f);
  CHECK(out[1] == -2.0f);
  CHECK(out[2] == (51.0f / 255.0f - 0.5f) / 0.25f);
}

TEST_CASE("a flip with p = 1 mirrors the output of p = 0", "[image_ops]") {
  std::vector<uint8_t> px = texture(11, 8, 3);
  ImagePipeline off = build({step(TransformKind::CenterCrop, 6), flip(0.0), normalize()});
  ImagePipeline on = build({step(TransformKind::CenterCrop, 6), flip(1.0), normalize()});
  CHECK(run_raw(on, px, 8, 11, 3) == mirrored(run_raw(off, px, 8, 11, 3), 6, 6, 3));
}

TEST_CASE("a flip before a crop flips the source image", "[image_ops]") {
  const int w = 10, h = 7;
  std::vector<uint8_t> px = texture(w, h, 3), flipped(px.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < 3; ++ch) flipped[(y * w + x) * 3 + ch] = px[(y * w + (w - 1 - x)) * 3 + ch];
  ImagePipeline p = build({flip(1.0), step(TransformKind::CenterCrop, 5), normalize()});
  ImagePipeline q = build({step(TransformKind::CenterCrop, 5), normalize()});
  CHECK(run_raw(p, px, h, w, 3) == run_raw(q, flipped, h, w, 3));
}

TEST_CASE("center crop larger than the image pads with zeros as torchvision", "[image_ops]") {
  // 3 x 5 image, crop 4: rows padded 0 above and 1 below; columns cropped from round(0.5) = 0.
  std::vector<uint8_t> px(15);
  for (int i = 0; i < 15; ++i) px[size_t(i)] = uint8_t(10 + i);
  ImagePipeline p = build({step(TransformKind::CenterCrop, 4), normalize()}, 1, 0.0, 1.0);
  std::vector<float> out = run_raw(p, px, 3, 5, 1);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) CHECK(out[size_t(y * 4 + x)] == (y < 3 ? float(10 + y * 5 + x) / 255.0f : 0.0f));
  }
}

TEST_CASE("an erasing box is mirrored by a later flip", "[image_ops]") {
  TransformSpec erase = step(TransformKind::RandomErasing);
  erase.p = 1.0;
  erase.erase_scale_min = 0.1;
  erase.erase_scale_max = 0.2;
  erase.value = -3.0;
  std::vector<uint8_t> px = texture(12, 12, 3);
  ImagePipeline off = build({step(TransformKind::CenterCrop, 10), normalize(), erase, flip(0.0)});
  ImagePipeline on = build({step(TransformKind::CenterCrop, 10), normalize(), erase, flip(1.0)});
  std::vector<float> a = run_raw(off, px, 12, 12, 3, 4), b = run_raw(on, px, 12, 12, 3, 4);
  CHECK(b == mirrored(a, 10, 10, 3));
  CHECK(std::count(a.begin(), a.end(), -3.0f) >= 3 * 8);
}

TEST_CASE("fp16 output is the fp32 output rounded to half", "[image_ops]") {
  TransformSpec rrc = step(TransformKind::RandomResizedCrop, 20);
  TransformSpec jitter = step(TransformKind::ColorJitter);
  jitter.brightness = jitter.contrast = jitter.saturation = 0.4;
  jitter.hue = 0.1;
  TransformSpec erase = step(TransformKind::RandomErasing);
  ImagePipeline p = build({rrc, jitter, flip(0.5), normalize(), erase}, 3, 0.45, 0.225);
  std::vector<uint8_t> px = texture(37, 29, 3);
  ImageScratch s;
  for (uint32_t idx = 0; idx < 20; ++idx) {
    std::vector<float> f32(20 * 20 * 3);
    std::vector<uint16_t> f16(f32.size());
    REQUIRE(image_pipeline_apply(p, s, px.data(), px.size(), false, 29, 37, 3, 9, 0, idx, OutDType::F32,
                                 f32.data(), "x").ok());
    REQUIRE(image_pipeline_apply(p, s, px.data(), px.size(), false, 29, 37, 3, 9, 0, idx, OutDType::F16,
                                 f16.data(), "x").ok());
    for (size_t i = 0; i < f32.size(); ++i) REQUIRE(f16[i] == float_to_half_bits(f32[i]));
  }
}

TEST_CASE("a gray raw image in a 3-channel pipeline equals its replicated RGB", "[image_ops]") {
  std::vector<uint8_t> gray = texture(9, 7, 1), rgb(gray.size() * 3);
  for (size_t i = 0; i < gray.size(); ++i) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = gray[i];
  ImagePipeline p = build({step(TransformKind::RandomResizedCrop, 6), normalize()});
  CHECK(run_raw(p, gray, 7, 9, 1, 3) == run_raw(p, rgb, 7, 9, 3, 3));
}

TEST_CASE("raw input of the wrong size is a Format error naming the sample", "[image_ops]") {
  ImagePipeline p = build({step(TransformKind::CenterCrop, 4), normalize()});
  std::vector<uint8_t> px(10 * 10 * 3 - 1);
  std::vector<float> out(4 * 4 * 3);
  ImageScratch s;
  Status st = image_pipeline_apply(p, s, px.data(), px.size(), false, 10, 10, 3, 0, 0, 0, OutDType::F32,
                                   out.data(), "shard0:17");
  REQUIRE_FALSE(st.ok());
  CHECK(st.errors()[0].code == ErrCode::Format);
  CHECK(st.errors()[0].where == "shard0:17");
}

TEST_CASE("a JPEG sample decodes at a DCT scale close to the full-size result", "[image_ops]") {
  const int w = 320, h = 240;
  std::vector<uint8_t> px = texture(w, h, 3);
  JpegCodec codec;
  Result<std::vector<uint8_t>> jpg = codec.encode(px.data(), w, h, 3, 95, "t");
  REQUIRE(jpg.ok());
  DecodedImage full;
  REQUIRE(codec.decode(jpg->data(), jpg->size(), 3, 0, 0, &full, "t").ok());
  ImagePipeline p = build({step(TransformKind::RandomResizedCrop, 48), flip(0.5), normalize()});
  ImageScratch s;
  std::vector<float> a(48 * 48 * 3), b(a.size()), c(a.size());
  int scaled = 0;
  double total = 0;
  for (uint32_t idx = 0; idx < 30; ++idx) {
    REQUIRE(image_pipeline_apply(p, s, jpg->data(), jpg->size(), true, 0, 0, 0, 3, 1, idx, OutDType::F32, a.data(),
                                 "t").ok());
    scaled += s.decoded.scale < 1.0;
    REQUIRE(image_pipeline_apply(p, s, jpg->data(), jpg->size(), true, 0, 0, 0, 3, 1, idx, OutDType::F32, c.data(),
                                 "t").ok());
    CHECK(a == c);  // deterministic
    REQUIRE(image_pipeline_apply(p, s, full.pixels.data(), full.pixels.size(), false, h, w, 3, 3, 1, idx,
                                 OutDType::F32, b.data(), "t").ok());
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff += std::fabs(a[i] - b[i]);
    // DCT scaling filters differently from PIL's triangle (most where little downscaling is left), but a box
    // misplaced by one decoded pixel would cost tens of grey levels on this texture.
    INFO("sample " << idx << " scale " << s.decoded.scale);
    CHECK(diff / double(a.size()) * 255.0 < 8.0);
    total += diff / double(a.size()) * 255.0;
  }
  CHECK(total / 30 < 4.0);
  CHECK(scaled > 10);
}

TEST_CASE("a corrupt JPEG sample is a Format error naming it", "[image_ops]") {
  std::vector<uint8_t> px = texture(64, 64, 3);
  JpegCodec codec;
  Result<std::vector<uint8_t>> jpg = codec.encode(px.data(), 64, 64, 3, 90, "t");
  REQUIRE(jpg.ok());
  ImagePipeline p = build({step(TransformKind::RandomResizedCrop, 16), normalize()});
  ImageScratch s;
  std::vector<float> out(16 * 16 * 3);
  Status st = image_pipeline_apply(p, s, jpg->data(), jpg->size() / 2, true, 0, 0, 0, 1, 0, 0, OutDType::F32,
                                   out.data(), "img_00042.jpg");
  REQUIRE_FALSE(st.ok());
  CHECK(st.errors()[0].code == ErrCode::Format);
  CHECK(st.errors()[0].where == "img_00042.jpg");
}

TEST_CASE("a steady state reuses the scratch buffers", "[image_ops]") {
  std::vector<uint8_t> px = texture(90, 70, 3);
  JpegCodec codec;
  Result<std::vector<uint8_t>> jpg = codec.encode(px.data(), 90, 70, 3, 90, "t");
  REQUIRE(jpg.ok());
  ImagePipeline p = build({step(TransformKind::Resize, 40), step(TransformKind::CenterCrop, 32), normalize()});
  ImageScratch s;
  std::vector<uint16_t> out(32 * 32 * 3);
  REQUIRE(image_pipeline_apply(p, s, jpg->data(), jpg->size(), true, 0, 0, 0, 1, 0, 0, OutDType::F16, out.data(),
                               "t").ok());
  const uint8_t* decoded = s.decoded.pixels.data();
  const uint8_t* buf0 = s.buf[0].data();
  for (uint32_t i = 1; i < 5; ++i) {
    REQUIRE(image_pipeline_apply(p, s, jpg->data(), jpg->size(), true, 0, 0, 0, 1, 0, i, OutDType::F16, out.data(),
                                 "t").ok());
    CHECK(s.decoded.pixels.data() == decoded);
    CHECK(s.buf[0].data() == buf0);
  }
}

TEST_CASE("float_to_bf16_bits keeps the top 16 bits rounded to nearest even; NaN stays NaN", "[image_ops]") {
  auto bits = [](float f) { uint32_t x; std::memcpy(&x, &f, 4); return x; };
  auto from = [](uint32_t x) { float f; std::memcpy(&f, &x, 4); return f; };
  CHECK(float_to_bf16_bits(1.0f) == 0x3F80);
  CHECK(float_to_bf16_bits(-2.0f) == 0xC000);
  CHECK(float_to_bf16_bits(from(0x3F808000u)) == 0x3F80);  // tie, even stays
  CHECK(float_to_bf16_bits(from(0x3F818000u)) == 0x3F82);  // tie, odd rounds up
  CHECK(float_to_bf16_bits(from(0x3F808001u)) == 0x3F81);  // above the tie
  CHECK(float_to_bf16_bits(from(0x7F7FFFFFu)) == 0x7F80);  // the largest float rounds to inf
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  const uint16_t nan = float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  CHECK(((nan & 0x7F80) == 0x7F80 && (nan & 0x7F) != 0));
  CHECK(float_to_bf16_bits(from(0x7F800001u)) != 0x7F80);  // a signalling NaN with a low payload stays NaN
  (void)bits;
}
