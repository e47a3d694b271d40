// Loading variable-size image datasets (DTS files, image folders) into fixed-size batches: the epoch's sample order
// (a function of seed and epoch only), block-wise sequential DTS reads on IO threads with a bounded prefetch, decode
// + transform workers, and a ring of output buffers (A/B/C...) the caller may allocate as pinned memory.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "dataio/dts_reader.h"
#include "dataio/dts_writer.h"
#include "dataio/image_ops.h"

namespace trctl {

// The encoded samples of one split.
//   DtsStream: one level of a DTS file, read block by block during each epoch (memory: a few groups of blocks);
//   DtsMemory: the same level read once (every block checksummed) and kept in RAM;
//   Folder:    an image folder, each JPEG file read when its sample is due (random small reads: the slow path).
struct StreamSource {
  enum class Kind { DtsStream, DtsMemory, Folder };
  Kind kind = Kind::DtsStream;
  std::string where;  // the file or folder, for messages
  int64_t n = 0;
  std::vector<int32_t> labels;       // (n,)
  std::vector<std::string> classes;  // label -> name
  std::shared_ptr<DtsFile> dts;
  uint32_t level = 0;
  std::vector<std::vector<uint8_t>> ram;  // DtsMemory: block (level-relative) -> its bytes
  PackSource folder;
};

// level_short_side: which DTS level (0 = full size; else the level packed with that short side, which must exist).
Result<std::shared_ptr<StreamSource>> stream_source_dts(const std::string& path, uint32_t level_short_side,
                                                        bool in_memory, int io_threads);
Result<std::shared_ptr<StreamSource>> stream_source_folder(const std::string& dir);

// The sample order of one epoch. Folder and DtsMemory: a Fisher-Yates permutation (loader_epoch_order). DtsStream:
// the level's blocks permuted by Philox(seed, Shuffle, epoch, 1), cut into groups of window_blocks consecutive
// blocks, and the samples of each group permuted by Philox(seed, Shuffle, epoch, 2 + group); unshuffled: blocks in
// file order and samples in their stored order. group_of[p] is position p's group (DtsStream only).
struct EpochPlan {
  std::vector<int64_t> order;                // (n,) sample index at each position
  std::vector<uint32_t> group_of;            // (n,) DtsStream only
  std::vector<std::vector<uint32_t>> groups; // DtsStream: the blocks (absolute indices) of each group
};
EpochPlan stream_epoch_plan(const StreamSource& s, bool shuffle, uint64_t seed, uint32_t epoch, int window_blocks);

struct StreamLoaderOptions {
  int batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
  int workers = 1;          // decode + transform threads
  int io_threads = 2;       // DtsStream block readers (static assignment: block j of the epoch -> thread j % io)
  int ring = 3;             // output buffers; a worker may run ring-1 batches ahead of the caller
  int window_blocks = 4;    // DtsStream shuffle window
  int prefetch_groups = 2;  // DtsStream: groups read ahead of the oldest group still being decoded
  OutDType dtype = OutDType::F32;
  // Output buffer allocation (e.g. cudaHostAlloc for pinned memory); default: aligned host memory.
  std::function<void*(size_t)> alloc;
  std::function<void(void*)> release;
};

// A ready batch, valid until the next call of next().
struct StreamBatch {
  const void* x = nullptr;    // (size, out_h, out_w, c) in the loader's dtype
  const int32_t* y = nullptr;  // (size,)
  int size = 0;
  int64_t index = 0;           // within the epoch
};

// Counters since construction (seconds are summed over threads).
struct StreamStats {
  int64_t samples = 0;
  uint64_t bytes_read = 0;
  double read_s = 0, decode_s = 0, wait_s = 0;  // wait_s: the caller waiting in next()
};

class StreamLoader {
 public:
  static Result<std::unique_ptr<StreamLoader>> create(std::shared_ptr<const StreamSource> src, ImagePipeline pipe,
                                                      StreamLoaderOptions opt);
  ~StreamLoader();
  int64_t batches_per_epoch() const;
  size_t sample_bytes() const;  // of one output sample
  int batch_size() const;
  void start_epoch(uint32_t epoch);
  // false at the end of the epoch; an error (a corrupt block, a bad JPEG) names the file and block or sample.
  Result<bool> next(StreamBatch* out);
  StreamStats stats() const;

  struct Impl;

 private:
  explicit StreamLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trctl
