// In-memory image datasets and their readers (IDX = MNIST format, gzip or raw).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/spec/spec.h"
#include "core/util/error.h"

namespace trctl {

struct ImageDataset {
  int64_t n = 0;
  int h = 0, w = 0, c = 1;
  int num_classes = 0;           // max label + 1
  std::vector<uint8_t> pixels;   // (N, H, W, C) u8
  std::vector<int32_t> labels;   // (N,) in [0, num_classes)
  std::string source;            // file(s) it came from, for messages
};

// Reads an IDX image file (magic 0x00000803, dims N,H,W) and an IDX label file (0x00000801, dim N); ".gz" files
// are decompressed (detected by the gzip magic, not the name). Magic, dims and sizes are checked against the file
// length; counts must match; labels must be < 256. Errors name the file and byte offset.
Result<ImageDataset> idx_load(const std::string& images_path, const std::string& labels_path);

// The train or validation split named by the spec (root + file names), with train_subset applied to train.
// A name is joined to root unless it is absolute; when the named file is missing but its twin with ".gz" added
// (or removed) exists, the twin is read. train_subset outside [0, n] is ErrCode::OutOfRange; a subset keeps the
// whole file's num_classes. See dataio/idx.h for the byte-level helpers and the 1 GiB inflate cap.
Result<ImageDataset> dataset_load(const DataSpec& data, bool train);

}  // namespace trctl
