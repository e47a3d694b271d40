// Image folders (ImageFolder layout, JPEG files) packed into DTS with a reduced level, read raw by the stream
// loader, and their bad inputs: corrupt and empty JPEGs (fatal, or skipped and counted), classes without images.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "data_test_util.h"
#include "dataio/dts_reader.h"
#include "dataio/jpeg.h"
#include "dataio/pack_sources.h"
#include "dataio/stream_loader.h"

using namespace trctl;
using trctl::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A smooth (h, w, 3) image: JPEG-friendly, different per seed.
std::vector<uint8_t> smooth_image(int h, int w, int seed) {
  std::vector<uint8_t> px(size_t(h) * w * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        px[(size_t(y) * w + x) * 3 + c] =
            static_cast<uint8_t>(127 + 120 * std::sin(0.05 * (x + seed * 7) * (c + 1) + 0.03 * y * (seed % 3 + 1)));
  return px;
}

// root/CLASS/imgK.jpg for classes {ant, bee, cat} with `per` images each, sizes varying around 120 x 90.
std::string make_folder(const TempDir& d, int per) {
  JpegCodec codec;
  const std::string root = d.file("imgs");
  int k = 0;
  for (const char* cls : {"bee", "ant", "cat"}) {  // created out of order: labels follow sorted names
    fs::create_directories(fs::path(root) / cls);
    for (int i = 0; i < per; ++i, ++k) {
      const int w = 100 + 13 * (k % 4), h = 80 + 7 * (k % 5);
      Result<std::vector<uint8_t>> jpg = codec.encode(smooth_image(h, w, k).data(), w, h, 3, 90, "test");
      REQUIRE(jpg.ok());
      test::write_file((fs::path(root) / cls / ("img" + std::to_string(i) + ".jpg")).string(), jpg.value());
    }
  }
  test::write_file((fs::path(root) / "ant" / "notes.txt").string(), {'h', 'i'});
  return root;
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

PackOptions opts(int threads = 2) {
  PackOptions o;
  o.block_size = 64 * 1024;
  o.threads = threads;
  o.reduced = {PackLevelSpec{40, 85}};
  return o;
}

}  // namespace

TEST_CASE("an image folder packs with ImageFolder labels and a reduced level of the right size", "[dts][folder]") {
  TempDir d;
  const std::string root = make_folder(d, 4);
  Result<PackSource> src = pack_source_folder(root);
  REQUIRE(src.ok());
  CHECK(src->classes == std::vector<std::string>{"ant", "bee", "cat"});
  CHECK(src->count == 12);
  Result<PackReport> r = dts_pack(src.value(), opts(), d.file("f.dts"));
  REQUIRE(r.ok());
  Result<std::shared_ptr<DtsFile>> f = DtsFile::open(d.file("f.dts"));
  REQUIRE(f.ok());
  const DtsFile& dts = *f.value();
  REQUIRE(dts.levels().size() == 2);
  CHECK((dts.levels()[1].short_side == 40 && dts.levels()[1].quality == 85));
  for (int64_t i = 0; i < 12; ++i) {
    const DtsSlot& full = dts.slot(0, i);
    const DtsSlot& small = dts.slot(1, i);
    CHECK(full.label == i / 4);  // sorted: ant 0..3, bee 4..7, cat 8..11
    CHECK(std::min(small.height, small.width) == 40);
    CHECK((small.orig_height == full.height && small.orig_width == full.width));
    // torchvision Resize: the long side is int(40 * long / short).
    const int lng = std::max(full.height, full.width), shrt = std::min(full.height, full.width);
    CHECK(std::max(small.height, small.width) == 40 * lng / shrt);
    CHECK(small.size < full.size);
  }
  CHECK(dts.meta().params[5] == std::make_pair(std::string("skipped_non_jpeg"), std::string("1")));
  CHECK(dts_verify(dts, true, 2, {}).ok());
  CHECK_THAT(dts_info(dts), Catch::Contains("level 1: short side 40 q85, jpeg"));
  // Byte-identical again, with another thread count.
  REQUIRE(dts_pack(pack_source_folder(root).value(), opts(1), d.file("g.dts")).ok());
  CHECK(slurp(d.file("f.dts")) == slurp(d.file("g.dts")));
}

TEST_CASE("a corrupt or empty JPEG stops packing with its path, or is skipped and counted", "[dts][folder]") {
  TempDir d;
  const std::string root = make_folder(d, 3);
  const std::string bad = (fs::path(root) / "bee" / "img1.jpg").string();
  std::vector<uint8_t> b = slurp(bad);
  b.resize(b.size() / 2);  // truncated body
  test::write_file(bad, b);
  test::write_file((fs::path(root) / "cat" / "empty.jpg").string(), {});
  Result<PackReport> r = dts_pack(pack_source_folder(root).value(), opts(), d.file("f.dts"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error_text(), Catch::Contains("bee/img1.jpg") && Catch::Contains("cat/empty.jpg"));
  CHECK_FALSE(fs::exists(d.file("f.dts")));
  PackOptions skip = opts();
  skip.skip_bad = true;
  Result<PackReport> s = dts_pack(pack_source_folder(root).value(), skip, d.file("f.dts"));
  REQUIRE(s.ok());
  CHECK(s->samples == 8);  // 9 images and the empty file, less the two bad ones
  CHECK(s->skipped.size() == 2);
}

TEST_CASE("a class folder without JPEGs, or a folder without classes, is refused", "[dts][folder]") {
  TempDir d;
  const std::string root = make_folder(d, 2);
  fs::create_directories(fs::path(root) / "dog");
  CHECK_THAT(pack_source_folder(root).error_text(), Catch::Contains("dog: class folder without JPEG files"));
  fs::create_directories(d.file("none"));
  CHECK_THAT(pack_source_folder(d.file("none")).error_text(), Catch::Contains("no class sub-folders"));
  CHECK_THAT(pack_source_folder(d.file("nothere")).error_text(), Catch::Contains("not a directory"));
}

TEST_CASE("a raw folder and its DTS file give the same batches for the same seed and epoch", "[dts][folder][stream]") {
  TempDir d;
  const std::string root = make_folder(d, 4);
  REQUIRE(dts_pack(pack_source_folder(root).value(), opts(), d.file("f.dts")).ok());
  TransformSpec rrc, flip, norm;
  rrc.kind = TransformKind::RandomResizedCrop;
  rrc.size = 32;
  flip.kind = TransformKind::RandomHorizontalFlip;
  norm.kind = TransformKind::Normalize;
  Result<ImagePipeline> pipe = image_pipeline_build({rrc, flip, norm}, {0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}, 3, "t");
  REQUIRE(pipe.ok());
  StreamLoaderOptions o;
  o.batch_size = 5;
  o.shuffle = true;
  o.seed = 3;
  o.workers = 3;
  o.dtype = OutDType::F16;
  // The same sample index gets the same crop and flip from either source; compare per sample.
  auto per_sample = [&](std::shared_ptr<StreamSource> src) {
    Result<std::unique_ptr<StreamLoader>> l = StreamLoader::create(src, pipe.value(), o);
    REQUIRE(l.ok());
    l.value()->start_epoch(2);
    std::map<int64_t, std::vector<uint16_t>> out;
    const EpochPlan plan = stream_epoch_plan(*src, true, 3, 2, o.window_blocks);
    StreamBatch b;
    int64_t pos = 0;
    while (l.value()->next(&b).value())
      for (int k = 0; k < b.size; ++k, ++pos) {
        const uint16_t* x = static_cast<const uint16_t*>(b.x) + k * 32 * 32 * 3;
        out[plan.order[pos]] = std::vector<uint16_t>(x, x + 32 * 32 * 3);
      }
    return out;
  };
  auto raw = per_sample(stream_source_folder(root).value());
  auto packed = per_sample(stream_source_dts(d.file("f.dts"), 0, false, 2).value());
  REQUIRE(raw.size() == 12);
  CHECK(raw == packed);
}
