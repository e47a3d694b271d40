// JpegCodec: encode/decode round trips, DCT-scaled decode sizes, PIL-equivalent channel conversions, buffer
// reuse, and Format errors (never a crash) for garbage, truncated, zero-size and absurd-size input.
#include <turbojpeg.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "dataio/jpeg.h"

using namespace trctl;

namespace {

// A smooth RGB (or gray) test image: gradients plus a gentle wave, so that JPEG keeps it well.
std::vector<uint8_t> smooth_image(int w, int h, int c) {
  std::vector<uint8_t> px(size_t(w) * size_t(h) * size_t(c));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        double v = 40 + 150.0 * (ch == 0 ? x : ch == 1 ? y : x + y) / (ch == 2 ? w + h : ch == 0 ? w : h) +
                   20 * std::sin(x * 0.1 + ch) * std::cos(y * 0.07);
        px[(size_t(y) * size_t(w) + size_t(x)) * size_t(c) + size_t(ch)] = uint8_t(std::lround(v));
      }
    }
  }
  return px;
}

double psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return se == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 / (se / double(a.size())));
}

std::vector<uint8_t> encode_or_fail(JpegCodec& codec, const std::vector<uint8_t>& px, int w, int h, int c, int q) {
  Result<std::vector<uint8_t>> r = codec.encode(px.data(), w, h, c, q, "test");
  REQUIRE(r.ok());
  return r.value();
}

// Offset of the SOF0 marker's height field (FF C0, length(2), precision(1), height(2), width(2)).
size_t sof_height_offset(const std::vector<uint8_t>& jpg) {
  for (size_t i = 2; i + 9 < jpg.size(); ++i) {
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) return i + 5;
  }
  FAIL("no SOF0 marker");
  return 0;
}

template <class T>
bool is_format_error(const Result<T>& s, const std::string& where) {
  return !s.ok() && s.errors()[0].code == ErrCode::Format && s.errors()[0].where == where;
}

}  // namespace

TEST_CASE("an RGB image survives encode and decode at quality 95", "[jpeg]") {
  JpegCodec codec;
  const int w = 96, h = 64;
  std::vector<uint8_t> px = smooth_image(w, h, 3);
  std::vector<uint8_t> jpg = encode_or_fail(codec, px, w, h, 3, 95);
  DecodedImage out;
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 3, 0, 0, &out, "a.jpg").ok());
  CHECK(out.w == w);
  CHECK(out.h == h);
  CHECK(out.c == 3);
  CHECK(out.scale == 1.0);
  REQUIRE(out.pixels.size() == px.size());
  CHECK(psnr(px, out.pixels) > 35.0);
}

TEST_CASE("a gray image round-trips and probes as one channel", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> px = smooth_image(40, 30, 1);
  std::vector<uint8_t> jpg = encode_or_fail(codec, px, 40, 30, 1, 95);
  Result<JpegInfo> info = codec.probe(jpg.data(), jpg.size(), "g.jpg");
  REQUIRE(info.ok());
  CHECK(info->width == 40);
  CHECK(info->height == 30);
  CHECK(info->channels == 1);
  DecodedImage out;
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 1, 0, 0, &out, "g.jpg").ok());
  CHECK(psnr(px, out.pixels) > 35.0);
}

TEST_CASE("encoding is deterministic", "[jpeg]") {
  JpegCodec a, b;
  std::vector<uint8_t> px = smooth_image(33, 17, 3);
  CHECK(encode_or_fail(a, px, 33, 17, 3, 80) == encode_or_fail(b, px, 33, 17, 3, 80));
}

TEST_CASE("encode rejects bad arguments with an error", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> px = smooth_image(8, 8, 3);
  CHECK_FALSE(codec.encode(px.data(), 8, 8, 3, 0, "x").ok());
  CHECK_FALSE(codec.encode(px.data(), 8, 8, 3, 101, "x").ok());
  CHECK_FALSE(codec.encode(px.data(), 8, 8, 2, 90, "x").ok());
  CHECK_FALSE(codec.encode(nullptr, 8, 8, 3, 90, "x").ok());
  CHECK_FALSE(codec.encode(px.data(), 0, 8, 3, 90, "x").ok());
}

TEST_CASE("a minimum size picks the smallest DCT scale that keeps it", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> px = smooth_image(100, 60, 3);
  std::vector<uint8_t> jpg = encode_or_fail(codec, px, 100, 60, 3, 90);
  DecodedImage out;
  // Factors 1/8 (13x8), 1/4 (25x15), 3/8 (38x23): the first that is >= 30x20 is 3/8.
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 3, 30, 20, &out, "s.jpg").ok());
  CHECK(out.w == 38);
  CHECK(out.h == 23);
  CHECK(out.scale == 0.375);
  CHECK(out.pixels.size() == size_t(38 * 23 * 3));
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 3, 1, 1, &out, "s.jpg").ok());
  CHECK(out.w == 13);
  CHECK(out.h == 8);
  CHECK(out.scale == 0.125);
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 3, 101, 0, &out, "s.jpg").ok());  // larger than the image: 1/1
  CHECK(out.w == 100);
  CHECK(out.scale == 1.0);
}

TEST_CASE("the scale for a region keeps the region at least the minimum size", "[jpeg]") {
  // A 64x48 crop of a 400x300 image must stay >= 32x32: 1/2 (32x24) fails on height, 5/8 (40x30) too, 3/4 fits.
  JpegScale s = jpeg_scale_for_region(400, 300, 64, 48, 32, 32);
  CHECK(s.num * 4 == s.denom * 3);
  CHECK(jpeg_scale_for_region(400, 300, 400, 300, 50, 50).value() == 0.25);  // 1/8 leaves 37.5 rows < 50
  CHECK(jpeg_scale_for_region(400, 300, 20, 20, 32, 32).value() == 1.0);  // needs upscaling: full size
  CHECK(jpeg_scale_for_region(400, 300, 64, 48, 0, 0).value() == 1.0);
  // Tiny image: 7/8 and 1/1 both decode 3 pixels wide; tjDecompress2 would apply 1/1, so that is reported.
  CHECK(jpeg_scale_for_region(3, 3, 3, 3, 2, 2).value() == 1.0);
}

TEST_CASE("decode_scaled takes TurboJPEG's factors only", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> jpg = encode_or_fail(codec, smooth_image(100, 60, 3), 100, 60, 3, 90);
  DecodedImage out;
  REQUIRE(codec.decode_scaled(jpg.data(), jpg.size(), 3, JpegScale{2, 4}, &out, "f").ok());  // = 1/2
  CHECK((out.w == 50 && out.h == 30 && out.scale == 0.5));
  Status st = codec.decode_scaled(jpg.data(), jpg.size(), 3, JpegScale{2, 3}, &out, "f");
  REQUIRE_FALSE(st.ok());
  CHECK(st.errors()[0].code == ErrCode::Invalid);
  CHECK_FALSE(codec.decode_scaled(jpg.data(), jpg.size(), 3, JpegScale{2, 1}, &out, "f").ok());
}

TEST_CASE("decode reuses the output buffer", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> big = encode_or_fail(codec, smooth_image(64, 64, 3), 64, 64, 3, 90);
  std::vector<uint8_t> small = encode_or_fail(codec, smooth_image(16, 16, 3), 16, 16, 3, 90);
  DecodedImage out;
  REQUIRE(codec.decode(big.data(), big.size(), 3, 0, 0, &out, "b").ok());
  const uint8_t* data = out.pixels.data();
  REQUIRE(codec.decode(small.data(), small.size(), 3, 0, 0, &out, "s").ok());
  REQUIRE(codec.decode(big.data(), big.size(), 3, 0, 0, &out, "b").ok());
  CHECK(out.pixels.data() == data);
}

TEST_CASE("a gray JPEG decodes to RGB with equal channels", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> jpg = encode_or_fail(codec, smooth_image(24, 20, 1), 24, 20, 1, 90);
  DecodedImage gray, rgb;
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 1, 0, 0, &gray, "g").ok());
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 3, 0, 0, &rgb, "g").ok());
  REQUIRE(rgb.c == 3);
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    CHECK(rgb.pixels[3 * i] == gray.pixels[i]);
    CHECK(rgb.pixels[3 * i + 1] == gray.pixels[i]);
    CHECK(rgb.pixels[3 * i + 2] == gray.pixels[i]);
  }
}

TEST_CASE("a color JPEG read as gray is PIL's convert('L') of its RGB decode", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> jpg = encode_or_fail(codec, smooth_image(24, 20, 3), 24, 20, 3, 90);
  DecodedImage gray, rgb;
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 3, 0, 0, &rgb, "c").ok());
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 1, 0, 0, &gray, "c").ok());
  REQUIRE(gray.pixels.size() == size_t(24 * 20));
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    const uint8_t* p = &rgb.pixels[3 * i];
    CHECK(int(gray.pixels[i]) == ((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16));
  }
}

TEST_CASE("a CMYK JPEG decodes to RGB by PIL's inverted-CMYK conversion", "[jpeg]") {
  const int w = 16, h = 8;
  std::vector<uint8_t> cmyk(size_t(w * h * 4));
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = uint8_t((i * 37) % 251);
  tjhandle enc = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  REQUIRE(tjCompress2(enc, cmyk.data(), w, 0, h, TJPF_CMYK, &buf, &len, TJSAMP_444, 95, 0) == 0);
  std::vector<uint8_t> jpg(buf, buf + len);
  tjFree(buf);
  tjDestroy(enc);
  // The stored CMYK values, as libjpeg returns them.
  tjhandle dec = tjInitDecompress();
  std::vector<uint8_t> stored(cmyk.size());
  REQUIRE(tjDecompress2(dec, jpg.data(), jpg.size(), stored.data(), w, 0, h, TJPF_CMYK, 0) == 0);
  tjDestroy(dec);
  JpegCodec codec;
  DecodedImage rgb;
  REQUIRE(codec.decode(jpg.data(), jpg.size(), 3, 0, 0, &rgb, "k").ok());
  REQUIRE(rgb.pixels.size() == size_t(w * h * 3));
  for (size_t i = 0; i < size_t(w * h); ++i) {
    const int nk = stored[4 * i + 3];
    for (int ch = 0; ch < 3; ++ch) {
      int t = (255 - stored[4 * i + size_t(ch)]) * nk + 128;
      CHECK(int(rgb.pixels[3 * i + size_t(ch)]) == nk - (((t >> 8) + t) >> 8));
    }
  }
}

TEST_CASE("garbage and truncated headers are Format errors naming the sample", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> jpg = encode_or_fail(codec, smooth_image(32, 32, 3), 32, 32, 3, 90);
  const std::vector<uint8_t> garbage = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55};
  const std::vector<uint8_t> soi_then_garbage = {0xFF, 0xD8, 0x12, 0x34, 0x56, 0x78, 0x9A};
  CHECK(is_format_error(codec.probe(garbage.data(), garbage.size(), "g.jpg"), "g.jpg"));
  CHECK(is_format_error(codec.probe(soi_then_garbage.data(), soi_then_garbage.size(), "h.jpg"), "h.jpg"));
  CHECK(is_format_error(codec.probe(jpg.data(), 20, "t.jpg"), "t.jpg"));
  CHECK(is_format_error(codec.probe(nullptr, 0, "n.jpg"), "n.jpg"));
  CHECK(is_format_error(codec.probe(jpg.data(), 0, "e.jpg"), "e.jpg"));
  DecodedImage out;
  CHECK(is_format_error(codec.decode(jpg.data(), 20, 3, 0, 0, &out, "t.jpg"), "t.jpg"));
  // The same codec still works afterwards.
  CHECK(codec.decode(jpg.data(), jpg.size(), 3, 0, 0, &out, "ok.jpg").ok());
}

TEST_CASE("zero and absurd header sizes are Format errors", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> jpg = encode_or_fail(codec, smooth_image(32, 32, 3), 32, 32, 3, 90);
  const size_t at = sof_height_offset(jpg);
  REQUIRE(at + 4 < jpg.size());
  std::vector<uint8_t> zero = jpg;
  zero.at(at) = zero.at(at + 1) = 0;  // height 0
  std::vector<uint8_t> wide = jpg;
  wide.at(at + 2) = 0xFF;  // width 0xFF20 = 65312 > kJpegMaxSide
  std::vector<uint8_t> huge = jpg;
  huge.at(at) = 0x40;      // height 16416 > kJpegMaxSide ...
  huge.at(at + 2) = 0x3F;  // ... by width 16160
  DecodedImage out;
  for (const auto* bad : {&zero, &wide, &huge}) {
    CHECK(is_format_error(codec.probe(bad->data(), bad->size(), "z.jpg"), "z.jpg"));
    CHECK(is_format_error(codec.decode(bad->data(), bad->size(), 3, 0, 0, &out, "z.jpg"), "z.jpg"));
  }
}

TEST_CASE("truncated image data is a Format error (libjpeg's premature-end warning)", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> jpg = encode_or_fail(codec, smooth_image(64, 64, 3), 64, 64, 3, 90);
  const size_t cut = jpg.size() * 6 / 10;
  REQUIRE(codec.probe(jpg.data(), cut, "cut.jpg").ok());  // the header is intact
  DecodedImage out;
  Status st = codec.decode(jpg.data(), cut, 3, 0, 0, &out, "cut.jpg");
  REQUIRE(is_format_error(st, "cut.jpg"));
  CHECK(st.errors()[0].message.find("corrupt JPEG data") != std::string::npos);
}

TEST_CASE("corrupted entropy-coded data is an error, never a crash", "[jpeg]") {
  JpegCodec codec;
  std::vector<uint8_t> jpg = encode_or_fail(codec, smooth_image(64, 64, 3), 64, 64, 3, 90);
  DecodedImage out;
  int errors = 0;
  for (size_t i = jpg.size() / 2; i + 2 < jpg.size(); i += 7) {
    std::vector<uint8_t> bad = jpg;
    bad[i] ^= 0x5A;
    Status st = codec.decode(bad.data(), bad.size(), 3, 0, 0, &out, "x.jpg");
    if (!st.ok()) {
      ++errors;
      CHECK(st.errors()[0].code == ErrCode::Format);
    }
  }
  CHECK(errors > 0);
}

TEST_CASE("a moved codec keeps working", "[jpeg]") {
  JpegCodec a;
  std::vector<uint8_t> jpg = encode_or_fail(a, smooth_image(16, 16, 3), 16, 16, 3, 90);
  JpegCodec b(std::move(a));
  DecodedImage out;
  CHECK(b.decode(jpg.data(), jpg.size(), 3, 0, 0, &out, "m").ok());
  JpegCodec c;
  c = std::move(b);
  CHECK(c.decode(jpg.data(), jpg.size(), 3, 0, 0, &out, "m").ok());
}

TEST_CASE("a codec that failed on a corrupt header or body decodes the next good image", "[jpeg]") {
  JpegCodec codec;
  const std::vector<uint8_t> good = encode_or_fail(codec, smooth_image(40, 30, 1), 40, 30, 1, 85);
  DecodedImage img;
  std::vector<uint8_t> bad = good;
  for (size_t i = 20; i < 60 && i < bad.size(); ++i) bad[i] ^= 0x5A;  // the tables
  CHECK_FALSE(codec.probe(bad.data(), bad.size(), "bad").ok());
  CHECK(codec.decode(good.data(), good.size(), 3, 0, 0, &img, "good").ok());
  bad.assign(good.begin(), good.begin() + long(good.size() * 2 / 3));  // truncated body
  CHECK_FALSE(codec.decode(bad.data(), bad.size(), 3, 0, 0, &img, "bad").ok());
  CHECK(codec.probe(good.data(), good.size(), "good").ok());
  CHECK(codec.decode(good.data(), good.size(), 1, 0, 0, &img, "good").ok());
}
