// Packing a dataset into a DTS file (`trctl pack-dts`): a PackSource yields samples, dts_pack encodes the optional
// reduced levels, packs every level's samples into blocks first-fit-decreasing, and writes the file atomically
// (temp file, fsync, rename, fsync of the directory). Same source + same options -> byte-identical file, whatever
// the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/util/error.h"
#include "dataio/dts_format.h"

namespace trctl {

// One source sample: encoded bytes (a JPEG file's bytes, or raw (h, w, c) u8) and its label.
struct PackSample {
  std::vector<uint8_t> bytes;
  DtsEncoding encoding = DtsEncoding::RawU8;
  int h = 0, w = 0, c = 0;  // raw: required; JPEG: filled by dts_pack from the header
  int32_t label = 0;
};

// A dataset to pack: `count` samples, read(i, out) thread-safe; `where(i)` names sample i in messages (a file path,
// or "images.idx:sample 17").
struct PackSource {
  std::string kind;  // idx | cifar10 | cifar100 | image_folder
  std::string path;
  int64_t count = 0;
  std::vector<std::string> classes;  // label -> name
  std::function<Status(int64_t, PackSample*)> read;
  std::function<std::string(int64_t)> where;
  std::vector<std::pair<std::string, std::string>> params;  // source-specific creation parameters for the meta
  std::vector<int32_t> labels;  // every sample's label when known without reading it (image folders), else empty
};

struct PackLevelSpec {
  int short_side = 0;  // the stored image's short side (images already at most this size keep their bytes)
  int quality = 90;    // JPEG quality of the re-encode, 1..100
};

struct PackOptions {
  uint64_t block_size = kDtsDefaultBlockSize;
  std::vector<PackLevelSpec> reduced;  // levels 1.. (JPEG sources only)
  int threads = 0;                     // 0: hardware concurrency
  bool skip_bad = false;               // a sample that fails to read or decode is left out and counted, not fatal
  // progress(stage, done, total) from the calling thread, about twice a second.
  std::function<void(const std::string&, int64_t, int64_t)> progress;
};

struct PackReport {
  int64_t samples = 0;                // packed
  std::vector<Error> skipped;         // with skip_bad: the samples left out and why
  uint64_t file_bytes = 0;
  std::vector<uint64_t> level_bytes;  // encoded sample bytes per level
  uint64_t blocks = 0;
};

// First-fit-decreasing: sizes sorted by decreasing size (ties by index), each put into the first block with room.
// Returns (block, offset) per item. Every size must be <= block_size (checked by the caller).
std::vector<std::pair<uint32_t, uint32_t>> dts_pack_ffd(const std::vector<uint32_t>& sizes, uint64_t block_size,
                                                        uint32_t* blocks_used);

Result<PackReport> dts_pack(const PackSource& src, const PackOptions& opt, const std::string& out_path);

}  // namespace trctl
