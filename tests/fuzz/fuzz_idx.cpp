// libFuzzer target: the IDX (MNIST format) reader, dataio/idx.* and idx_load. Input: u16 little-endian length
// L, then L bytes of the images file, then the labels file (either may be gzip). Both are served from memfds.
// Asserts: idx_load and idx_gunzip return a value or an error, never crash; an accepted dataset is consistent
// (pixels = n * h * w, n labels, num_classes = max label + 1); idx_gunzip never returns more than its cap.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dataio/dataset.h"
#include "dataio/idx.h"
#include "tests/fuzz/fuzz_util.h"

using namespace trctl;

namespace {

constexpr size_t kGunzipCap = size_t(1) << 22;  // bounded memory per input (the loader's own cap is 1 GiB)

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_idx: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile images("fuzz_idx_images"), labels("fuzz_idx_labels");
  if (size < 2) return 0;
  const size_t split = std::min(size - 2, size_t(data[0]) | (size_t(data[1]) << 8));
  const uint8_t* a = data + 2;
  const uint8_t* b = a + split;
  const size_t b_size = size - 2 - split;

  Result<std::vector<uint8_t>> gz = idx_gunzip(std::vector<uint8_t>(a, a + split), "fuzz", kGunzipCap);
  if (gz.ok() && gz->size() > kGunzipCap) fail("idx_gunzip returned more than its cap");

  Result<ImageDataset> ds = idx_load(images.set(a, split), labels.set(b, b_size));
  if (!ds.ok()) {
    if (ds.errors().empty() || ds.errors()[0].message.empty()) fail("an error without a message");
    return 0;
  }
  const ImageDataset& d = ds.value();
  if (d.n < 1 || d.h < 1 || d.w < 1 || d.c != 1) fail("accepted dataset with bad dimensions");
  if (d.pixels.size() != size_t(d.n) * size_t(d.h) * size_t(d.w)) fail("pixel count != n * h * w");
  if (d.labels.size() != size_t(d.n)) fail("label count != n");
  const int32_t max_label = *std::max_element(d.labels.begin(), d.labels.end());
  if (d.num_classes != max_label + 1) fail("num_classes != max label + 1");
  return 0;
}
