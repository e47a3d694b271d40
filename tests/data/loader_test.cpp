// Tests of the batch loader: the epoch permutation, batch sizes, coverage, independence from the worker count,
// agreement with transforms_draw/apply per sample, and clean restarts and shutdown mid-epoch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "core/util/philox.h"
#include "data_test_util.h"
#include "dataio/loader.h"

using namespace trctl;

namespace {

TransformSpec spec(TransformKind k) {
  TransformSpec s;
  s.kind = k;
  return s;
}

// pad 2, crop 12, rotation 15, scale 0.9-1.1, normalize, erasing p 0.5: every kind of random draw.
TransformPipeline augment_pipeline(int h, int w, int c) {
  std::vector<TransformSpec> steps(6);
  steps[0] = spec(TransformKind::Pad);
  steps[0].padding = 2;
  steps[1] = spec(TransformKind::RandomCrop);
  steps[1].size = std::min(h, w);
  steps[2] = spec(TransformKind::RandomRotation);
  steps[2].degrees = 15;
  steps[3] = spec(TransformKind::RandomScale);
  steps[3].scale_min = 0.9;
  steps[3].scale_max = 1.1;
  steps[4] = spec(TransformKind::Normalize);
  steps[5] = spec(TransformKind::RandomErasing);
  auto r = transforms_build(steps, {0.3}, {0.35}, h, w, c, "loader_test");
  REQUIRE(r.ok());
  return r.value();
}

LoaderOptions options(int batch, bool shuffle, bool drop_last, int workers) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = 2024;
  o.workers = workers;
  return o;
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
  int index = 0;
};

std::vector<Batch> run_epoch(Loader* l, uint32_t epoch, size_t floats_per_sample) {
  l->start_epoch(epoch);
  std::vector<Batch> out;
  BatchView v;
  while (l->next(&v)) {
    Batch b;
    b.x.assign(v.x, v.x + size_t(v.size) * floats_per_sample);
    b.y.assign(v.y, v.y + v.size);
    b.index = v.index;
    out.push_back(std::move(b));
  }
  return out;
}

bool bitwise_equal(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].x.size() != b[i].x.size() || a[i].y != b[i].y || a[i].index != b[i].index) return false;
    if (std::memcmp(a[i].x.data(), b[i].x.data(), a[i].x.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

bool is_permutation_of_range(const std::vector<int64_t>& v) {
  std::vector<int64_t> s = v;
  std::sort(s.begin(), s.end());
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != int64_t(i)) return false;
  return true;
}

}  // namespace

// ---- loader_epoch_order ----

TEST_CASE("loader_epoch_order is a permutation of 0 .. n-1") {
  for (int64_t n : {1, 2, 7, 1000}) CHECK(is_permutation_of_range(loader_epoch_order(n, true, 5, 1)));
  CHECK(loader_epoch_order(0, true, 5, 1).empty());
}

TEST_CASE("loader_epoch_order is the identity without shuffle") {
  std::vector<int64_t> id(50);
  std::iota(id.begin(), id.end(), 0);
  CHECK(loader_epoch_order(50, false, 5, 3) == id);
}

TEST_CASE("loader_epoch_order is the same for the same (seed, epoch) and differs across epochs and seeds") {
  auto a = loader_epoch_order(1000, true, 5, 1);
  CHECK(a == loader_epoch_order(1000, true, 5, 1));
  CHECK(a != loader_epoch_order(1000, true, 5, 2));
  CHECK(a != loader_epoch_order(1000, true, 6, 1));
}

TEST_CASE("loader_epoch_order is Fisher-Yates from the top, driven by Philox(seed, Shuffle, epoch, 0)") {
  std::vector<int64_t> expect = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  PhiloxStream r(77, static_cast<uint32_t>(RngPurpose::Shuffle), 3, 0);
  for (int64_t i = 9; i >= 1; --i) std::swap(expect[size_t(i)], expect[r.below(uint32_t(i + 1))]);
  CHECK(loader_epoch_order(10, true, 77, 3) == expect);
}

// ---- Loader ----

TEST_CASE("Loader gives bitwise identical batches with 1 and 4 workers") {
  ImageDataset ds = test::synthetic_dataset(103, 12, 12);
  TransformPipeline p = augment_pipeline(12, 12, 1);
  Loader one(ds, p, options(16, true, false, 1));
  Loader four(ds, p, options(16, true, false, 4));
  size_t per = size_t(p.out_h * p.out_w * p.c);
  for (uint32_t epoch : {1u, 2u}) CHECK(bitwise_equal(run_epoch(&one, epoch, per), run_epoch(&four, epoch, per)));
}

TEST_CASE("Loader ends the epoch with a partial batch when drop_last is false") {
  ImageDataset ds = test::synthetic_dataset(103, 8, 8);
  Loader l(ds, augment_pipeline(8, 8, 1), options(16, true, false, 2));
  CHECK(l.batches_per_epoch() == 7);
  auto batches = run_epoch(&l, 1, 64);
  REQUIRE(batches.size() == 7);
  for (size_t i = 0; i < 6; ++i) CHECK(batches[i].y.size() == 16);
  CHECK(batches[6].y.size() == 7);
  for (size_t i = 0; i < batches.size(); ++i) CHECK(batches[i].index == int(i));
}

TEST_CASE("Loader drops the partial batch when drop_last is true") {
  ImageDataset ds = test::synthetic_dataset(103, 8, 8);
  Loader l(ds, augment_pipeline(8, 8, 1), options(16, true, true, 2));
  CHECK(l.batches_per_epoch() == 6);
  auto batches = run_epoch(&l, 1, 64);
  REQUIRE(batches.size() == 6);
  for (const Batch& b : batches) CHECK(b.y.size() == 16);
}

TEST_CASE("Loader yields every sample exactly once per epoch, in the epoch order") {
  ImageDataset ds = test::synthetic_dataset(103, 8, 8);  // label = sample index
  Loader l(ds, augment_pipeline(8, 8, 1), options(10, true, false, 3));
  for (uint32_t epoch : {1u, 2u, 3u}) {
    std::vector<int64_t> seen;
    for (const Batch& b : run_epoch(&l, epoch, 64)) seen.insert(seen.end(), b.y.begin(), b.y.end());
    CHECK(seen == loader_epoch_order(103, true, 2024, epoch));
    CHECK(is_permutation_of_range(seen));
  }
}

TEST_CASE("Loader samples equal transforms_apply of transforms_draw keyed by (seed, epoch, dataset index)") {
  ImageDataset ds = test::synthetic_dataset(40, 9, 9, 3);
  TransformPipeline p = augment_pipeline(9, 9, 3);
  Loader l(ds, p, options(8, true, false, 2));
  size_t per = size_t(p.out_h * p.out_w * p.c);
  auto batches = run_epoch(&l, 5, per);
  std::vector<float> expect(per);
  for (const Batch& b : batches) {
    for (size_t i = 0; i < b.y.size(); ++i) {
      int64_t idx = b.y[i];
      transforms_apply(p, transforms_draw(p, 2024, 5, uint32_t(idx)), ds.pixels.data() + size_t(idx) * 9 * 9 * 3,
                       expect.data());
      REQUIRE(std::memcmp(expect.data(), b.x.data() + i * per, per * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("Loader augments differently in different epochs") {
  ImageDataset ds = test::synthetic_dataset(20, 8, 8);
  Loader l(ds, augment_pipeline(8, 8, 1), options(20, false, false, 1));
  auto e1 = run_epoch(&l, 1, 64), e2 = run_epoch(&l, 2, 64);
  REQUIRE(e1.size() == 1);
  CHECK(e1[0].y == e2[0].y);  // no shuffle: same order
  CHECK(e1[0].x != e2[0].x);  // but other crops, angles and boxes
}

TEST_CASE("Loader restarted mid-epoch gives the same batches as a fresh one") {
  ImageDataset ds = test::synthetic_dataset(103, 8, 8);
  TransformPipeline p = augment_pipeline(8, 8, 1);
  Loader fresh(ds, p, options(16, true, false, 2));
  auto expect = run_epoch(&fresh, 4, 64);
  Loader l(ds, p, options(16, true, false, 2));
  l.start_epoch(4);
  BatchView v;
  REQUIRE(l.next(&v));
  REQUIRE(l.next(&v));
  l.start_epoch(9);  // abandon epoch 4 two batches in, then again before reading anything
  l.start_epoch(4);
  CHECK(bitwise_equal(run_epoch(&l, 4, 64), expect));
}

TEST_CASE("Loader destroyed mid-epoch shuts down cleanly") {
  ImageDataset ds = test::synthetic_dataset(500, 16, 16);
  TransformPipeline p = augment_pipeline(16, 16, 1);
  for (int workers : {1, 4}) {
    Loader l(ds, p, options(32, true, false, workers));
    l.start_epoch(1);
    BatchView v;
    REQUIRE(l.next(&v));
    CHECK(v.size == 32);
  }
  Loader unread(ds, p, options(32, true, false, 2));
  unread.start_epoch(1);  // destroyed while the producer is still filling
}

TEST_CASE("Loader::next returns false before the first epoch and after the end of one") {
  ImageDataset ds = test::synthetic_dataset(5, 4, 4);
  Loader l(ds, augment_pipeline(4, 4, 1), options(4, false, false, 1));
  BatchView v;
  CHECK_FALSE(l.next(&v));
  l.start_epoch(1);
  REQUIRE(l.next(&v));
  CHECK(v.size == 4);
  REQUIRE(l.next(&v));
  CHECK(v.size == 1);
  CHECK_FALSE(l.next(&v));
  CHECK_FALSE(l.next(&v));
}

TEST_CASE("Loader with a batch larger than the dataset gives one batch of all samples") {
  ImageDataset ds = test::synthetic_dataset(5, 4, 4);
  Loader l(ds, augment_pipeline(4, 4, 1), options(64, true, false, 4));
  CHECK(l.batches_per_epoch() == 1);
  auto b = run_epoch(&l, 1, 16);
  REQUIRE(b.size() == 1);
  CHECK(b[0].y.size() == 5);
}

TEST_CASE("loader_validate rejects a pipeline built for another image size and bad options") {
  ImageDataset ds = test::synthetic_dataset(5, 4, 4);
  TransformPipeline p = augment_pipeline(5, 5, 1);
  Status st = loader_validate(ds, p, options(4, false, false, 1));
  REQUIRE_FALSE(st.ok());
  CHECK(st.errors()[0].message.find("5x5x1") != std::string::npos);
  CHECK_FALSE(loader_validate(ds, augment_pipeline(4, 4, 1), options(0, false, false, 1)).ok());
  CHECK_FALSE(loader_validate(ds, augment_pipeline(4, 4, 1), options(4, false, false, 0)).ok());
  CHECK(loader_validate(ds, augment_pipeline(4, 4, 1), options(4, false, false, 1)).ok());
  CHECK_THROWS_AS(Loader(ds, p, options(4, false, false, 1)), std::invalid_argument);
}
