// StreamLoader over DTS files: every sample once per epoch, an order that depends on (seed, epoch) only, bitwise
// batches whatever the thread counts, streamed and in-RAM modes, drop_last, and corrupt blocks named in errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "data_test_util.h"
#include "dataio/dts_writer.h"
#include "dataio/pack_sources.h"
#include "dataio/stream_loader.h"

using namespace trctl;
using trctl::test::TempDir;

namespace {

constexpr int kSide = 12;

// A DTS file of n raw (12, 12, 1) samples (pixel (0,0) of sample i is 31 i mod 256), labels i % 5; small blocks.
std::string pack_raw(const TempDir& d, int64_t n, const std::string& name = "s.dts") {
  auto ds = std::make_shared<ImageDataset>();
  ds->n = n;
  ds->h = ds->w = kSide;
  ds->c = 1;
  ds->num_classes = 5;
  ds->source = "raw";
  for (int64_t i = 0; i < n; ++i) {
    for (int y = 0; y < kSide; ++y)
      for (int x = 0; x < kSide; ++x) ds->pixels.push_back(test::test_pixel(i, y, x));
    ds->labels.push_back(static_cast<int32_t>(i % 5));
  }
  PackOptions o;
  o.block_size = 4096;  // 28 samples of 144 bytes per block
  o.threads = 2;
  const std::string p = d.file(name);
  REQUIRE(dts_pack(pack_source_raw(ds, "idx", {"a", "b", "c", "d", "e"}), o, p).ok());
  return p;
}

ImagePipeline identity_pipeline() {
  TransformSpec crop, norm;
  crop.kind = TransformKind::CenterCrop;
  crop.size = kSide;
  norm.kind = TransformKind::Normalize;
  Result<ImagePipeline> p = image_pipeline_build({crop, norm}, {0.0}, {1.0}, 1, "test");
  REQUIRE(p.ok());
  return p.value();
}

// The sample index held in an output image (x = pixel / 255).
int64_t sample_of(const float* img) {
  const int v = static_cast<int>(std::lround(img[0] * 255));
  for (int i = 0; i < 256; ++i)
    if ((i * 31) % 256 == v) return i;
  return -1;
}

struct Epoch {
  std::vector<int64_t> samples;
  std::vector<int32_t> labels;
  std::vector<float> pixels;
};

Epoch run_epoch(std::shared_ptr<StreamSource> src, StreamLoaderOptions o, uint32_t epoch) {
  Result<std::unique_ptr<StreamLoader>> l = StreamLoader::create(src, identity_pipeline(), o);
  REQUIRE(l.ok());
  l.value()->start_epoch(epoch);
  Epoch e;
  StreamBatch b;
  for (;;) {
    Result<bool> more = l.value()->next(&b);
    REQUIRE(more.ok());
    if (!more.value()) break;
    const float* x = static_cast<const float*>(b.x);
    for (int k = 0; k < b.size; ++k) {
      e.samples.push_back(sample_of(x + k * kSide * kSide));
      e.labels.push_back(b.y[k]);
    }
    e.pixels.insert(e.pixels.end(), x, x + b.size * kSide * kSide);
  }
  return e;
}

StreamLoaderOptions opts(int workers, int io, int batch = 16) {
  StreamLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = true;
  o.seed = 7;
  o.workers = workers;
  o.io_threads = io;
  o.window_blocks = 2;
  o.prefetch_groups = 1;
  return o;
}

}  // namespace

TEST_CASE("a streamed epoch yields every sample once, with its label, in the plan's order", "[stream]") {
  TempDir d;
  auto src = stream_source_dts(pack_raw(d, 200), 0, false, 2);
  REQUIRE(src.ok());
  Epoch e = run_epoch(src.value(), opts(3, 2), 1);
  REQUIRE(e.samples.size() == 200);
  CHECK(std::set<int64_t>(e.samples.begin(), e.samples.end()).size() == 200);
  for (size_t k = 0; k < e.samples.size(); ++k) CHECK(e.labels[k] == e.samples[k] % 5);
  CHECK(e.samples == stream_epoch_plan(*src.value(), true, 7, 1, 2).order);
}

TEST_CASE("streamed batches are bitwise the same for any worker and IO thread counts", "[stream]") {
  TempDir d;
  auto src = stream_source_dts(pack_raw(d, 150), 0, false, 1);
  REQUIRE(src.ok());
  Epoch a = run_epoch(src.value(), opts(1, 1), 3);
  Epoch b = run_epoch(src.value(), opts(4, 3), 3);
  CHECK(a.samples == b.samples);
  CHECK(std::memcmp(a.pixels.data(), b.pixels.data(), a.pixels.size() * 4) == 0);
  Epoch c = run_epoch(src.value(), opts(2, 2), 4);
  CHECK(c.samples != a.samples);  // another epoch, another order
}

TEST_CASE("the order is grouped by blocks when streaming and fully shuffled in RAM", "[stream]") {
  TempDir d;
  const std::string p = pack_raw(d, 120);
  auto stream = stream_source_dts(p, 0, false, 2);
  auto ram = stream_source_dts(p, 0, true, 2);
  REQUIRE((stream.ok() && ram.ok()));
  const EpochPlan ps = stream_epoch_plan(*stream.value(), true, 7, 1, 2);
  // Each group's samples are contiguous in the order and come from the group's blocks only.
  for (size_t pos = 0; pos < ps.order.size(); ++pos) {
    const uint32_t blk = stream.value()->dts->slot(0, ps.order[pos]).block;
    const auto& g = ps.groups[ps.group_of[pos]];
    CHECK(std::find(g.begin(), g.end(), blk) != g.end());
  }
  Epoch r = run_epoch(ram.value(), opts(2, 1), 1);
  CHECK(r.samples == stream_epoch_plan(*ram.value(), true, 7, 1, 2).order);
  CHECK(std::set<int64_t>(r.samples.begin(), r.samples.end()).size() == 120);
}

TEST_CASE("drop_last leaves out the partial batch; unshuffled reads blocks in file order", "[stream]") {
  TempDir d;
  auto src = stream_source_dts(pack_raw(d, 50), 0, false, 1);
  REQUIRE(src.ok());
  StreamLoaderOptions o = opts(2, 1, 16);
  o.drop_last = true;
  Epoch e = run_epoch(src.value(), o, 1);
  CHECK(e.samples.size() == 48);
  o.drop_last = false;
  o.shuffle = false;
  Epoch f = run_epoch(src.value(), o, 1);
  CHECK(f.samples.size() == 50);
  CHECK(f.samples == stream_epoch_plan(*src.value(), false, 7, 1, 2).order);
}

TEST_CASE("fp16 output is the f32 output rounded to half precision", "[stream]") {
  TempDir d;
  auto src = stream_source_dts(pack_raw(d, 40), 0, true, 1);
  REQUIRE(src.ok());
  StreamLoaderOptions o = opts(2, 1, 8);
  o.shuffle = false;
  Result<std::unique_ptr<StreamLoader>> l32 = StreamLoader::create(src.value(), identity_pipeline(), o);
  o.dtype = OutDType::F16;
  Result<std::unique_ptr<StreamLoader>> l16 = StreamLoader::create(src.value(), identity_pipeline(), o);
  REQUIRE((l32.ok() && l16.ok()));
  CHECK(l16.value()->sample_bytes() * 2 == l32.value()->sample_bytes());
  l32.value()->start_epoch(1);
  l16.value()->start_epoch(1);
  StreamBatch a, b;
  REQUIRE(l32.value()->next(&a).value());
  REQUIRE(l16.value()->next(&b).value());
  const float* x = static_cast<const float*>(a.x);
  const uint16_t* h = static_cast<const uint16_t*>(b.x);
  for (int k = 0; k < 8 * kSide * kSide; ++k) REQUIRE(h[k] == float_to_half_bits(x[k]));
}

TEST_CASE("a corrupt block met while streaming is an error naming the file and block", "[stream]") {
  TempDir d;
  const std::string p = pack_raw(d, 100);
  auto src = stream_source_dts(p, 0, false, 1);  // the index is read now, the blocks later
  REQUIRE(src.ok());
  std::vector<uint8_t> bytes;
  {
    std::ifstream f(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  bytes[kDtsDataOffset + 2 * 4096 + 10] ^= 1;  // block 2
  test::write_file(p, bytes);
  Result<std::unique_ptr<StreamLoader>> l = StreamLoader::create(src.value(), identity_pipeline(), opts(2, 2));
  REQUIRE(l.ok());
  l.value()->start_epoch(1);
  StreamBatch b;
  std::string err;
  for (int k = 0; k < 10 && err.empty(); ++k) {
    Result<bool> more = l.value()->next(&b);
    if (!more.ok()) err = more.error_text();
    else if (!more.value()) break;
  }
  CHECK_THAT(err, Catch::Contains("s.dts:block 2") && Catch::Contains("checksum mismatch"));
  // In-RAM mode reads every block up front and refuses the file at once.
  CHECK_THAT(stream_source_dts(p, 0, true, 2).error_text(), Catch::Contains("block 2"));
}

TEST_CASE("a missing level is refused naming the file", "[stream]") {
  TempDir d;
  const std::string p = pack_raw(d, 10);
  CHECK_THAT(stream_source_dts(p, 160, false, 1).error_text(), Catch::Contains("no level with short side 160"));
}
