// Reading DTS files: open (header, meta and index checked against their checksums and against each other),
// checksummed block reads, whole-file verification and the `trctl dts info` text. Errors name the file and the
// block or byte offset; nothing read from the file is trusted before it is checked.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "dataio/dts_format.h"

namespace trctl {

class DtsFile {
 public:
  // Checks: magic, version (other versions: "version N, this trctl reads 1"), header checksum, file length
  // (truncation), meta and index checksums and sizes, every block inside the data area and of its level, every
  // slot inside its block, labels in [0, class_count), dims in [1, kDtsMaxDim], channels 1..4.
  static Result<std::shared_ptr<DtsFile>> open(const std::string& path);
  ~DtsFile();
  DtsFile(const DtsFile&) = delete;
  DtsFile& operator=(const DtsFile&) = delete;

  const std::string& path() const { return path_; }
  const DtsHeader& header() const { return h_; }
  const DtsMeta& meta() const { return meta_; }
  const std::vector<DtsLevel>& levels() const { return levels_; }
  const std::vector<DtsBlock>& blocks() const { return blocks_; }
  const DtsSlot& slot(uint32_t level, int64_t sample) const { return slots_[level * h_.sample_count + sample]; }
  // The samples stored in a block, in their order inside it.
  const std::vector<int64_t>& block_samples(uint32_t block) const { return block_samples_[block]; }
  // A level chosen by its short side (0 = full size); -1 when absent.
  int find_level(uint32_t short_side) const;

  // Reads block b into *buf (resized to block_size) and checks its checksum. Thread-safe (pread).
  Status read_block(uint32_t b, std::vector<uint8_t>* buf) const;

 private:
  DtsFile() = default;
  Status parse(const std::vector<uint8_t>& index);
  std::string path_;
  int fd_ = -1;
  uint64_t file_bytes_ = 0;
  DtsHeader h_;
  DtsMeta meta_;
  std::vector<DtsLevel> levels_;
  std::vector<DtsBlock> blocks_;
  std::vector<DtsSlot> slots_;                      // (level_count, sample_count)
  std::vector<std::vector<int64_t>> block_samples_;  // (block_count, samples in it)
};

// `trctl pack-dts --verify`: every block's checksum, and with decode = true every sample decoded (JPEG) or size-
// checked (raw) at every level. `threads` read blocks in parallel; progress(done, total) is called from one thread.
// All problems are returned (not only the first).
Status dts_verify(const DtsFile& f, bool decode, int threads, const std::function<void(int64_t, int64_t)>& progress);

// `trctl dts info`: header, levels, block fill, classes, creation parameters.
std::string dts_info(const DtsFile& f);

}  // namespace trctl
