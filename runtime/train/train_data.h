// The data of a run and how batches reach the backend. Fixed-size splits (IDX, CIFAR, synthetic) live in memory
// with per-pixel pipelines that a device-resident backend mirrors on the GPU; streamed splits (DTS files, image
// folders) are decoded on the host by a StreamLoader whose (pinned) buffers the backend copies from.
#pragma once
#include <cstdint>
#include <memory>

#include "core/graph/build.h"
#include "core/spec/spec.h"
#include "dataio/dataset.h"
#include "dataio/loader.h"
#include "dataio/stream_loader.h"
#include "dataio/transforms.h"

namespace trctl {

class Backend;

struct Data {
  bool streamed = false;
  ImageDataset train, val;             // fixed-size splits
  TransformPipeline train_tf, val_tf;
  std::shared_ptr<StreamSource> train_src, val_src;  // streamed splits
  ImagePipeline train_pipe, val_pipe;
  int64_t train_n = 0, val_n = 0;
  int out_h = 0, out_w = 0, c = 0, num_classes = 0;  // out_h, out_w: the train_transforms' output size
  int val_h = 0, val_w = 0;                          // the val_transforms' (may differ: docs/data.md)
};

// Loads (or opens, for streamed datasets) both splits and builds their transform pipelines. Errors name the spec
// or the data file.
Result<Data> data_prepare(const Spec& spec);
DataShape shape_of(const Data& d);

struct HostBatch {
  const void* x = nullptr;    // (size, H, W, C) in the backend's host_input_dtype(); (H, W): HostFeed::sample_h/w
  const int32_t* y = nullptr;  // (size,)
  int size = 0;
};

// A split's batches on the host: the fixed-size Loader (f32 only) or a StreamLoader writing the backend's input
// dtype into buffers from Backend::host_alloc. The backend must outlive the feed.
class HostFeed {
 public:
  static Result<std::unique_ptr<HostFeed>> make(const Spec& spec, const Data& d, bool train, Backend& be);
  virtual ~HostFeed() = default;
  virtual int64_t batches_per_epoch() const = 0;
  virtual void start_epoch(uint32_t epoch) = 0;
  virtual Result<bool> next(HostBatch* out) = 0;  // false at the end of the epoch
  // The (H, W) of every sample it yields: its split's transform output size.
  int sample_h() const { return sample_h_; }
  int sample_w() const { return sample_w_; }

 protected:
  int sample_h_ = 0, sample_w_ = 0;
};

}  // namespace trctl
