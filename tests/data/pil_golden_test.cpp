// Golden tests: trctl's image transforms against the outputs of PIL 9.4 / torchvision 0.14 themselves, recorded by
// tools/gen_pil_golden.py in tests/data/golden/pil_golden.bin (its format is documented at the top of the script).
// u8 results must be equal byte for byte; the float pipeline output within 1e-6 relative.
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "dataio/image_ops.h"
#include "dataio/jpeg.h"

using namespace trctl;

namespace {

constexpr char kGoldenPath[] = TRCTL_SOURCE_DIR "/tests/data/golden/pil_golden.bin";
constexpr uint32_t kGoldenVersion = 1;

struct GoldenRecord {
  std::string kind, name;
  std::vector<double> params;
  std::vector<uint8_t> in, out;
};

struct GoldenFile {
  std::string error;  // empty when the file was read and checked
  uint32_t version = 0;
  std::string meta;   // "key=value\n" lines: the Pillow, torchvision, ... versions that wrote it
  std::vector<GoldenRecord> records;
};

// A bounds-checked little-endian reader over the file's bytes.
struct Reader {
  const std::vector<uint8_t>& b;
  size_t at = 0;
  bool ok = true;
  bool take(void* dst, size_t n) {
    if (!ok || n > b.size() - at) return ok = false;
    if (n) std::memcpy(dst, b.data() + at, n);
    at += n;
    return true;
  }
  template <class T>
  T get() {
    T v{};
    take(&v, sizeof(T));
    return v;
  }
  std::string str(size_t n) {
    std::string s(ok && n <= b.size() - at ? n : 0, '\0');
    if (s.size() != n) ok = false;
    take(s.data(), s.size());
    return s;
  }
  std::vector<uint8_t> bytes(size_t n) {
    std::vector<uint8_t> v(ok && n <= b.size() - at ? n : 0);
    if (v.size() != n) ok = false;
    take(v.data(), v.size());
    return v;
  }
};

// The whole file, checked: magic, version, CRC-32, record framing. Little-endian host assumed (as trctl does).
GoldenFile golden_load() {
  GoldenFile g;
  std::FILE* f = std::fopen(kGoldenPath, "rb");
  if (!f) {
    g.error = std::string("cannot open ") + kGoldenPath + " (regenerate with tools/gen_pil_golden.py)";
    return g;
  }
  std::vector<uint8_t> b;
  uint8_t chunk[65536];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), f)) > 0;) b.insert(b.end(), chunk, chunk + n);
  std::fclose(f);
  if (b.size() < 24 || std::memcmp(b.data(), "TRPILGLD", 8) != 0) {
    g.error = "bad magic";
    return g;
  }
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, b.data() + b.size() - 4, 4);
  const uint32_t crc = uint32_t(crc32(0L, b.data(), uInt(b.size() - 4)));
  if (crc != stored_crc) {
    g.error = "CRC-32 mismatch: the file is damaged";
    return g;
  }
  const std::vector<uint8_t> body(b.begin(), b.end() - 4);
  Reader r{body, 8};
  g.version = r.get<uint32_t>();
  g.meta = r.str(r.get<uint32_t>());
  const uint32_t count = r.get<uint32_t>();
  for (uint32_t i = 0; i < count && r.ok; ++i) {
    GoldenRecord rec;
    rec.kind = r.str(r.get<uint8_t>());
    rec.name = r.str(r.get<uint16_t>());
    const uint32_t nparams = r.get<uint32_t>();
    if (!r.ok || nparams > (body.size() - r.at) / sizeof(double)) break;
    rec.params.resize(nparams);
    r.take(rec.params.data(), rec.params.size() * sizeof(double));
    rec.in = r.bytes(r.get<uint32_t>());
    rec.out = r.bytes(r.get<uint32_t>());
    g.records.push_back(std::move(rec));
  }
  if (!r.ok || r.at != body.size()) g.error = "truncated or malformed record framing";
  return g;
}

// The checked file; a test stops here when it is unusable.
GoldenFile golden_require() {
  GoldenFile g = golden_load();
  INFO(g.error);
  REQUIRE(g.error.empty());
  REQUIRE(g.version == kGoldenVersion);
  return g;
}

// The records of one kind (at least one: an empty kind must not pass vacuously).
std::vector<const GoldenRecord*> golden_cases(const GoldenFile& g, const std::string& kind) {
  std::vector<const GoldenRecord*> v;
  for (const GoldenRecord& r : g.records) {
    if (r.kind == kind) v.push_back(&r);
  }
  INFO("kind " << kind);
  REQUIRE(!v.empty());
  return v;
}

int iparam(const GoldenRecord& r, size_t i) {
  INFO(r.name << ": parameter " << i);
  REQUIRE(i < r.params.size());
  return int(r.params[i]);
}

// The input record (an "image" or "jpeg") that r.params[0] names.
const GoldenRecord& golden_source(const GoldenFile& g, const GoldenRecord& r, const std::string& kind) {
  const int src = iparam(r, 0);
  INFO(r.name << ": source record " << src);
  REQUIRE(src >= 0);
  REQUIRE(size_t(src) < g.records.size());
  REQUIRE(g.records[size_t(src)].kind == kind);
  return g.records[size_t(src)];
}

// An "image" record's (h, w, c), checked against its byte count.
void image_dims(const GoldenRecord& img, int* h, int* w, int* c) {
  *h = iparam(img, 0);
  *w = iparam(img, 1);
  *c = iparam(img, 2);
  INFO(img.name);
  REQUIRE(img.in.size() == size_t(*h) * size_t(*w) * size_t(*c));
}

// Byte-exact comparison; on a mismatch the message names the case, the max abs difference, the count and the
// first differing index as (y, x, ch) with both values.
std::string u8_mismatch(const std::string& name, const std::vector<uint8_t>& expect, const uint8_t* got, int w,
                        int c) {
  size_t count = 0, first = 0;
  int max_abs = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    const int d = std::abs(int(expect[i]) - int(got[i]));
    if (d == 0) continue;
    if (count++ == 0) first = i;
    max_abs = std::max(max_abs, d);
  }
  if (count == 0) return "";
  std::ostringstream os;
  const size_t px = first / size_t(c);
  os << name << ": " << count << " of " << expect.size() << " values differ, max abs diff " << max_abs
     << "; first at index " << first << " (y " << px / size_t(w) << ", x " << px % size_t(w) << ", ch "
     << first % size_t(c) << "): PIL " << int(expect[first]) << ", trctl " << int(got[first]);
  return os.str();
}

#define CHECK_U8_EQUAL(name, expect, got, w, c)                          \
  do {                                                                   \
    const std::string mismatch_ = u8_mismatch(name, expect, got, w, c); \
    INFO(mismatch_);                                                     \
    CHECK(mismatch_.empty());                                            \
  } while (0)

}  // namespace

TEST_CASE("the golden file is intact and records the versions that wrote it", "[golden]") {
  const GoldenFile g = golden_require();
  CHECK(g.meta.find("pillow=") != std::string::npos);
  CHECK(g.meta.find("torchvision=") != std::string::npos);
  const std::vector<std::string> known = {"image", "jpeg", "resize", "jpeg_decode", "jpeg_decode_draft",
                                          "adjust_brightness", "adjust_contrast", "adjust_saturation",
                                          "adjust_hue", "center_crop_box", "resize_shorter_side", "pipeline"};
  for (const GoldenRecord& r : g.records) {
    INFO(r.name);
    CHECK(std::find(known.begin(), known.end(), r.kind) != known.end());
  }
}

TEST_CASE("resize_region_u8 equals PIL's Image.resize(BILINEAR, box) byte for byte", "[golden]") {
  const GoldenFile g = golden_require();
  ResizeScratch scratch;  // shared across cases: stale coefficients must not leak from one to the next
  for (const GoldenRecord* r : golden_cases(g, "resize")) {
    const GoldenRecord& img = golden_source(g, *r, "image");
    int h = 0, w = 0, c = 0;
    image_dims(img, &h, &w, &c);
    const float x0 = float(r->params.at(1)), y0 = float(r->params.at(2)), x1 = float(r->params.at(3)),
                y1 = float(r->params.at(4));
    const int dh = iparam(*r, 5), dw = iparam(*r, 6);
    INFO(r->name);
    REQUIRE(r->out.size() == size_t(dh) * size_t(dw) * size_t(c));
    std::vector<uint8_t> got(r->out.size(), 0xA5);
    resize_region_u8(ImageView{img.in.data(), h, w, c, size_t(w) * size_t(c)}, x0, y0, x1, y1, got.data(), dh, dw,
                     scratch);
    CHECK_U8_EQUAL(r->name, r->out, got.data(), dw, c);
  }
}

TEST_CASE("resize_region_u8 on a view inside a larger image equals PIL on the cropped image", "[golden]") {
  // The same cases with each source embedded at (2, 3) of a frame of 255s, rows padded: only the view is read.
  const GoldenFile g = golden_require();
  ResizeScratch scratch;
  for (const GoldenRecord* r : golden_cases(g, "resize")) {
    const GoldenRecord& img = golden_source(g, *r, "image");
    int h = 0, w = 0, c = 0;
    image_dims(img, &h, &w, &c);
    const int fw = w + 7, fh = h + 4;
    std::vector<uint8_t> frame(size_t(fw) * size_t(fh) * size_t(c), 255);
    const size_t stride = size_t(fw) * size_t(c), origin = 2 * stride + 3 * size_t(c);
    for (int y = 0; y < h; ++y) {
      std::memcpy(&frame[origin + size_t(y) * stride], &img.in[size_t(y) * size_t(w) * size_t(c)], size_t(w * c));
    }
    const int dh = iparam(*r, 5), dw = iparam(*r, 6);
    std::vector<uint8_t> got(r->out.size());
    resize_region_u8(ImageView{frame.data() + origin, h, w, c, stride}, float(r->params.at(1)),
                     float(r->params.at(2)), float(r->params.at(3)), float(r->params.at(4)), got.data(), dh, dw,
                     scratch);
    CHECK_U8_EQUAL(r->name, r->out, got.data(), dw, c);
  }
}

TEST_CASE("JpegCodec::decode equals PIL's Image.open().convert('RGB' or 'L')", "[golden]") {
  const GoldenFile g = golden_require();
  JpegCodec codec;
  DecodedImage d;
  for (const GoldenRecord* r : golden_cases(g, "jpeg_decode")) {
    const GoldenRecord& jpg = golden_source(g, *r, "jpeg");
    const int c = iparam(*r, 1), h = iparam(*r, 2), w = iparam(*r, 3);
    INFO(r->name);
    const Status st = codec.decode(jpg.in.data(), jpg.in.size(), c, 0, 0, &d, r->name);
    INFO((st.ok() ? std::string() : st.error_text()));
    REQUIRE(st.ok());
    REQUIRE((d.h == h && d.w == w && d.c == c && d.scale == 1.0));
    REQUIRE(d.pixels.size() == r->out.size());
    CHECK_U8_EQUAL(r->name, r->out, d.pixels.data(), w, c);
  }
}

TEST_CASE("JpegCodec::decode_scaled at 1/N equals PIL's draft() decode at the same DCT scale", "[golden]") {
  const GoldenFile g = golden_require();
  JpegCodec codec;
  DecodedImage d;
  for (const GoldenRecord* r : golden_cases(g, "jpeg_decode_draft")) {
    const GoldenRecord& jpg = golden_source(g, *r, "jpeg");
    const int denom = iparam(*r, 1), h = iparam(*r, 2), w = iparam(*r, 3);
    INFO(r->name);
    const Status st = codec.decode_scaled(jpg.in.data(), jpg.in.size(), 3, JpegScale{1, denom}, &d, r->name);
    INFO((st.ok() ? std::string() : st.error_text()));
    REQUIRE(st.ok());
    REQUIRE((d.h == h && d.w == w && d.c == 3));
    REQUIRE(d.pixels.size() == r->out.size());
    CHECK_U8_EQUAL(r->name, r->out, d.pixels.data(), w, 3);
  }
}

namespace {

using ColorOp = void (*)(uint8_t*, int, int, size_t, double);

// Every case of one adjust_* kind: the op in place on a copy of the source, compared with torchvision's result.
void check_color_op(const std::string& kind, ColorOp op) {
  const GoldenFile g = golden_require();
  for (const GoldenRecord* r : golden_cases(g, kind)) {
    const GoldenRecord& img = golden_source(g, *r, "image");
    int h = 0, w = 0, c = 0;
    image_dims(img, &h, &w, &c);
    INFO(r->name);
    REQUIRE(c == 3);
    REQUIRE(r->out.size() == img.in.size());
    std::vector<uint8_t> got = img.in;
    op(got.data(), h, w, size_t(w) * 3, r->params.at(1));
    CHECK_U8_EQUAL(r->name, r->out, got.data(), w, 3);
  }
}

}  // namespace

TEST_CASE("adjust_brightness_u8 equals torchvision's F.adjust_brightness on PIL images", "[golden]") {
  check_color_op("adjust_brightness", adjust_brightness_u8);
}

TEST_CASE("adjust_contrast_u8 equals torchvision's F.adjust_contrast on PIL images", "[golden]") {
  check_color_op("adjust_contrast", adjust_contrast_u8);
}

TEST_CASE("adjust_saturation_u8 equals torchvision's F.adjust_saturation on PIL images", "[golden]") {
  check_color_op("adjust_saturation", adjust_saturation_u8);
}

TEST_CASE("adjust_hue_u8 equals torchvision's F.adjust_hue on PIL images", "[golden]") {
  check_color_op("adjust_hue", adjust_hue_u8);
}

TEST_CASE("center_crop_box places the crop where torchvision's F.center_crop does, padding included", "[golden]") {
  const GoldenFile g = golden_require();
  for (const GoldenRecord* r : golden_cases(g, "center_crop_box")) {
    const int h = iparam(*r, 0), w = iparam(*r, 1), size = iparam(*r, 2);
    const CropBox b = center_crop_box(h, w, size);
    INFO(r->name << ": torchvision top " << iparam(*r, 3) << " left " << iparam(*r, 4) << "; trctl top " << b.top
                 << " left " << b.left);
    CHECK((b.top == iparam(*r, 3) && b.left == iparam(*r, 4) && b.h == size && b.w == size));
  }
}

TEST_CASE("resize_shorter_side gives torchvision Resize(int)'s output size", "[golden]") {
  const GoldenFile g = golden_require();
  for (const GoldenRecord* r : golden_cases(g, "resize_shorter_side")) {
    int oh = 0, ow = 0;
    resize_shorter_side(iparam(*r, 0), iparam(*r, 1), iparam(*r, 2), &oh, &ow);
    INFO(r->name << ": torchvision " << iparam(*r, 3) << "x" << iparam(*r, 4) << ", trctl " << oh << "x" << ow);
    CHECK((oh == iparam(*r, 3) && ow == iparam(*r, 4)));
  }
}

TEST_CASE("resize, center_crop, normalize on a JPEG equals torchvision's Resize+CenterCrop+ToTensor+Normalize",
          "[golden]") {
  // Both compute (float(v) / 255 - mean) / std in float32 (ToTensor's div(255), then Normalize's sub_ and div_),
  // so the tolerance (1e-6 relative, absolute below 1) only allows for a different but equally valid rounding.
  const GoldenFile g = golden_require();
  double worst_abs = 0;
  size_t inexact = 0, total = 0;
  for (const GoldenRecord* r : golden_cases(g, "pipeline")) {
    const GoldenRecord& jpg = golden_source(g, *r, "jpeg");
    const int c = iparam(*r, 1), resize = iparam(*r, 2), crop = iparam(*r, 3);
    INFO(r->name);
    REQUIRE(r->params.size() == 4 + 2 * size_t(c));
    const std::vector<double> mean(r->params.begin() + 4, r->params.begin() + 4 + c);
    const std::vector<double> std_dev(r->params.begin() + 4 + c, r->params.end());
    TransformSpec rs, cc, norm;
    rs.kind = TransformKind::Resize;
    rs.size = resize;
    cc.kind = TransformKind::CenterCrop;
    cc.size = crop;
    norm.kind = TransformKind::Normalize;
    Result<ImagePipeline> p = image_pipeline_build({rs, cc, norm}, mean, std_dev, c, r->name);
    INFO((p.ok() ? std::string() : p.error_text()));
    REQUIRE(p.ok());
    REQUIRE((p->out_h == crop && p->out_w == crop));
    REQUIRE(r->out.size() == size_t(crop) * size_t(crop) * size_t(c) * sizeof(float));
    std::vector<float> expect(size_t(crop) * size_t(crop) * size_t(c)), got(expect.size());
    std::memcpy(expect.data(), r->out.data(), r->out.size());
    ImageScratch s;
    const Status st = image_pipeline_apply(*p, s, jpg.in.data(), jpg.in.size(), true, 0, 0, 0, 0, 0, 0,
                                           OutDType::F32, got.data(), r->name);
    INFO((st.ok() ? std::string() : st.error_text()));
    REQUIRE(st.ok());
    size_t bad = 0, first = 0;
    double max_abs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = std::fabs(double(got[i]) - double(expect[i]));
      inexact += d != 0;
      max_abs = std::max(max_abs, d);
      if (d > 1e-6 * std::max(1.0, std::fabs(double(expect[i]))) && bad++ == 0) first = i;
    }
    total += got.size();
    worst_abs = std::max(worst_abs, max_abs);
    INFO(r->name << ": " << bad << " values beyond 1e-6 relative, max abs diff " << max_abs << "; first at index "
                 << first << ": torchvision " << expect[first] << ", trctl " << got[first]);
    CHECK(bad == 0);
  }
  if (inexact > 0) {
    WARN("pipeline vs torchvision: " << inexact << " of " << total << " floats not bit-identical, max abs diff "
                                     << worst_abs);
  }
  CHECK(total > 0);
}
