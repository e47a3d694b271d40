// Batch loader: the sample order is a pure function of (seed, epoch); each sample's augmentation is keyed by
// (seed, epoch, sample index); worker threads split each batch by sample and the next batch is prepared in the
// background (double buffering), so the stream of batches never depends on the number of workers.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "dataio/dataset.h"
#include "dataio/transforms.h"

namespace trctl {

struct LoaderOptions {
  int batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
  int workers = 1;
};

// A ready batch: valid until the next call of Loader::next().
struct BatchView {
  const float* x = nullptr;    // (size, out_h, out_w, c) f32
  const int32_t* y = nullptr;  // (size,)
  int size = 0;
  int index = 0;               // batch index within the epoch
};

// The epoch permutation of [0, n) (identity when !shuffle): Fisher-Yates driven by Philox(seed, Shuffle, epoch).
std::vector<int64_t> loader_epoch_order(int64_t n, bool shuffle, uint64_t seed, uint32_t epoch);

// Checks that a Loader can be built: the dataset's arrays match its dims, the pipeline was built for its image
// size and channels, batch_size >= 1, workers in [1, 256]. The Loader constructor throws std::invalid_argument
// with this message on such a programming error, so call this first where the inputs come from a user.
Status loader_validate(const ImageDataset& data, const TransformPipeline& pipeline, const LoaderOptions& opt);

// `data` is referenced, not copied: it must outlive the Loader. next() before any start_epoch returns false.
// If preparing a batch fails inside the background threads (e.g. std::bad_alloc), the exception is caught there
// and rethrown to the caller by next(), which keeps rethrowing it until the next start_epoch.
class Loader {
 public:
  Loader(const ImageDataset& data, const TransformPipeline& pipeline, const LoaderOptions& opt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t batches_per_epoch() const;
  void start_epoch(uint32_t epoch);  // epoch is 1-based in the trainer; any value is a valid key
  bool next(BatchView* out);         // false at the end of the epoch

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trctl
