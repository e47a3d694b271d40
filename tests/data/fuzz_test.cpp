// Bounded mutation fuzzing of the DTS reader and the JPEG decoder (CI runs the default iteration counts; set
// TRCTL_FUZZ_ITERS to run longer). Every mutated input must end in a value or an error: no crash, no hang, no
// out-of-range read (run under ASan/UBSan to check the last). Mutations are drawn from a fixed seed, so a failure
// reproduces; the failing iteration is printed.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>

#include "data_test_util.h"
#include "dataio/dts_reader.h"
#include "dataio/image_ops.h"
#include "dataio/jpeg.h"
#include "dataio/pack_sources.h"

using namespace trctl;
using trctl::test::TempDir;

namespace {

int iterations(int dflt) {
  const char* e = std::getenv("TRCTL_FUZZ_ITERS");
  return e ? std::max(1, std::atoi(e)) : dflt;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// One random mutation: flip bits, overwrite bytes with extreme values, truncate, or duplicate a range.
void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng, size_t lo = 0) {
  if (b.size() <= lo) return;
  std::uniform_int_distribution<size_t> pos(lo, b.size() - 1);
  switch (rng() % 4) {
    case 0:
      for (int k = 0, n = 1 + int(rng() % 8); k < n; ++k) b[pos(rng)] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1: {
      static const uint8_t extremes[] = {0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE};
      for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) b[pos(rng)] = extremes[rng() % 6];
      break;
    }
    case 2:
      b.resize(pos(rng));
      break;
    default: {
      const size_t a = pos(rng), len = std::min<size_t>(b.size() - a, 1 + rng() % 64);
      b.insert(b.begin() + long(pos(rng)), b.begin() + long(a), b.begin() + long(a + len));
      break;
    }
  }
}

// A valid JPEG (smooth colour image) for seed k.
std::vector<uint8_t> sample_jpeg(JpegCodec& codec, int k, int w, int h, int c) {
  std::vector<uint8_t> px(size_t(w) * h * c);
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(128 + 100 * std::sin(0.07 * double(i % 997) + k));
  return codec.encode(px.data(), w, h, c, 80, "fuzz").value();
}

}  // namespace

TEST_CASE("fuzz: mutated DTS files open, read and verify to a value or an error", "[fuzz][dts]") {
  TempDir d;
  JpegCodec codec;
  // Sources: a raw file and a JPEG folder with a reduced level.
  auto ds = std::make_shared<ImageDataset>();
  ds->n = 30;
  ds->h = ds->w = 8;
  ds->c = 1;
  ds->num_classes = 3;
  ds->source = "fuzz";
  for (int64_t i = 0; i < ds->n * 64; ++i) ds->pixels.push_back(uint8_t(i * 7));
  for (int64_t i = 0; i < ds->n; ++i) ds->labels.push_back(int32_t(i % 3));
  PackOptions o;
  o.block_size = 4096;
  REQUIRE(dts_pack(pack_source_raw(ds, "idx", {"a", "b", "c"}), o, d.file("raw.dts")).ok());
  for (int cls = 0; cls < 2; ++cls) {
    std::filesystem::create_directories(d.file("f/c" + std::to_string(cls)));
    for (int i = 0; i < 4; ++i)
      test::write_file(d.file("f/c" + std::to_string(cls) + "/" + std::to_string(i) + ".jpg"),
                       sample_jpeg(codec, cls * 4 + i, 30 + i, 20 + cls, 3));
  }
  o.reduced = {PackLevelSpec{12, 80}};
  REQUIRE(dts_pack(pack_source_folder(d.file("f")).value(), o, d.file("jpg.dts")).ok());

  std::mt19937_64 rng(12345);
  const int n = iterations(400);
  int opened = 0;
  for (const std::string name : {"raw.dts", "jpg.dts"}) {
    const std::vector<uint8_t> good = slurp(d.file(name));
    for (int it = 0; it < n; ++it) {
      INFO(name << " iteration " << it);
      std::vector<uint8_t> b = good;
      const int kind = int(rng() % 3);
      if (kind == 0) {
        mutate(b, rng);
      } else {
        // Mutate the header fields, meta or index and re-seal the checksums, so that the structural checks behind
        // them are what must catch it.
        DtsHeader h = DtsFile::open(d.file(name)).value()->header();
        const size_t lo = kind == 1 ? 16 : size_t(h.meta_offset);
        if (kind == 1) {
          for (int k = 0; k < 2; ++k) b[16 + rng() % 88] ^= uint8_t(1u << (rng() % 8));
        } else {
          for (int k = 0; k < 3; ++k) b[lo + rng() % (b.size() - lo)] ^= uint8_t(1u << (rng() % 8));
          h.meta_hash = dts_hash(b.data() + h.meta_offset, h.meta_bytes);
          h.index_hash = dts_hash(b.data() + h.index_offset, h.index_bytes);
          const auto hb = dts_header_bytes(h);
          std::copy(hb.begin(), hb.end(), b.begin());
        }
        if (kind == 1) {  // re-hash the header itself
          const uint64_t hh = dts_hash(b.data(), kDtsHeaderBytes - 8);
          for (int k = 0; k < 8; ++k) b[kDtsHeaderBytes - 8 + k] = uint8_t(hh >> (8 * k));
        }
      }
      const std::string p = d.file("m.dts");
      test::write_file(p, b);
      Result<std::shared_ptr<DtsFile>> f = DtsFile::open(p);
      if (!f.ok()) {
        CHECK_FALSE(f.error_text().empty());
        continue;
      }
      ++opened;
      Status v = dts_verify(*f.value(), true, 1, {});
      if (b == good) CHECK(v.ok());
    }
  }
  CHECK(opened > 0);  // some mutations (e.g. inside block padding) leave a readable file
}

TEST_CASE("fuzz: mutated JPEGs probe, decode and transform to a value or an error", "[fuzz][jpeg]") {
  JpegCodec codec;
  const std::vector<std::vector<uint8_t>> seeds = {sample_jpeg(codec, 1, 48, 32, 3), sample_jpeg(codec, 2, 17, 61, 1),
                                                   sample_jpeg(codec, 3, 64, 64, 3)};
  TransformSpec rrc, norm;
  rrc.kind = TransformKind::RandomResizedCrop;
  rrc.size = 16;
  norm.kind = TransformKind::Normalize;
  Result<ImagePipeline> pipe = image_pipeline_build({rrc, norm}, {0.5, 0.5, 0.5}, {0.2, 0.2, 0.2}, 3, "fuzz");
  REQUIRE(pipe.ok());
  ImageScratch scratch;
  std::vector<float> out(16 * 16 * 3);
  DecodedImage img;
  std::mt19937_64 rng(777);
  const int n = iterations(1500);
  int decoded = 0;
  for (int it = 0; it < n; ++it) {
    INFO("iteration " << it);
    std::vector<uint8_t> b = seeds[size_t(it) % seeds.size()];
    const bool intact = it % 10 == 0;  // controls: the unmutated seeds must decode
    for (int k = 0, m = 1 + int(rng() % 3); k < m && !intact; ++k) mutate(b, rng, 2);  // past the SOI marker
    Result<JpegInfo> info = codec.probe(b.data(), b.size(), "fuzz");
    Status st = codec.decode(b.data(), b.size(), 3, int(rng() % 20), int(rng() % 20), &img, "fuzz");
    INFO((st.ok() ? std::string() : st.error_text()));
    if (intact) REQUIRE(st.ok());
    if (st.ok()) {
      ++decoded;
      CHECK(img.pixels.size() == size_t(img.w) * img.h * img.c);
    }
    Status ap = image_pipeline_apply(pipe.value(), scratch, b.data(), b.size(), true, 0, 0, 0, 1, 1, uint32_t(it),
                                     OutDType::F32, out.data(), "fuzz");
    if (ap.ok()) {
      for (float v : out) REQUIRE(std::isfinite(v));
    }
    (void)info;
  }
  CHECK(decoded >= n / 10);
}
