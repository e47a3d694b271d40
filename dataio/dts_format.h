// The DTS packed-dataset format, version 1: on-disk records, their little-endian (de)serialisation, and the
// checksum. docs/dts.md is the normative description; this header is its code.
//
//   [Header 256 B][zero pad to data_offset][block 0][block 1]...[block B-1][meta text][index]
//
// Blocks are block_size bytes each (16 MiB by default; the used bytes, then zeros). Samples are packed per level
// first-fit-decreasing by encoded size; each sample lies wholly inside one block. Every block, the meta text, the
// index and the header carry an XXH3-64 checksum.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace trctl {

constexpr char kDtsMagic[8] = {'T', 'R', 'C', 'T', 'L', 'D', 'T', 'S'};
constexpr uint32_t kDtsVersion = 1;
constexpr uint32_t kDtsHeaderBytes = 256;
constexpr uint64_t kDtsDataOffset = 4096;
constexpr uint64_t kDtsDefaultBlockSize = uint64_t(16) << 20;
constexpr uint64_t kDtsMinBlockSize = 4096;
constexpr uint64_t kDtsMaxBlockSize = uint64_t(1) << 30;
constexpr uint32_t kDtsMaxLevels = 8;
constexpr uint32_t kDtsMaxDim = 16384;  // image side; larger is an absurd dimension

enum class DtsEncoding : uint8_t { RawU8 = 0, Jpeg = 1 };  // RawU8: (h, w, c) u8 HWC

struct DtsHeader {
  uint32_t version = kDtsVersion;
  uint64_t sample_count = 0;
  uint64_t block_size = kDtsDefaultBlockSize;
  uint64_t block_count = 0;
  uint64_t data_offset = kDtsDataOffset;
  uint64_t meta_offset = 0, meta_bytes = 0, meta_hash = 0;
  uint64_t index_offset = 0, index_bytes = 0, index_hash = 0;
  uint32_t level_count = 0;
  uint32_t class_count = 0;
};

// A level: the samples at full size (short_side 0: the source's bytes) or re-encoded with the short side resized to
// short_side at JPEG quality `quality`. Its blocks are [first_block, first_block + block_count).
struct DtsLevel {
  uint32_t short_side = 0;
  uint32_t quality = 0;
  DtsEncoding encoding = DtsEncoding::RawU8;
  uint32_t first_block = 0;
  uint32_t block_count = 0;
};

struct DtsBlock {
  uint32_t level = 0;
  uint32_t used_bytes = 0;
  uint32_t sample_count = 0;
  uint64_t hash = 0;  // XXH3-64 of all block_size bytes (padding included)
};

// One sample at one level. height/width: of the stored image; orig_*: of the source image.
struct DtsSlot {
  uint32_t block = 0;
  uint32_t offset = 0;  // within the block
  uint32_t size = 0;
  int32_t label = 0;
  uint16_t height = 0, width = 0;
  uint16_t orig_height = 0, orig_width = 0;
  uint8_t channels = 0;
  DtsEncoding encoding = DtsEncoding::RawU8;
};

constexpr size_t kDtsLevelRecord = 24, kDtsBlockRecord = 24, kDtsSlotRecord = 32;

uint64_t dts_hash(const void* data, size_t n);

// ---- little-endian byte helpers (the format never depends on the host's byte order) ----
struct ByteWriter {
  std::vector<uint8_t> b;
  void u8(uint8_t v) { b.push_back(v); }
  void u16(uint16_t v) { for (int i = 0; i < 2; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void u32(uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void u64(uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void bytes(const void* p, size_t n) { b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); }
  void zeros(size_t n) { b.insert(b.end(), n, 0); }
};

// Reads past the end return zeros and set `overrun`, so parsers check once at the end.
struct ByteReader {
  const uint8_t* p;
  size_t n, pos = 0;
  bool overrun = false;
  ByteReader(const uint8_t* data, size_t size) : p(data), n(size) {}
  uint64_t take(int bytes) {
    if (pos + bytes > n) { overrun = true; pos = n; return 0; }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[pos + i]) << (8 * i);
    pos += bytes;
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(take(1)); }
  uint16_t u16() { return static_cast<uint16_t>(take(2)); }
  uint32_t u32() { return static_cast<uint32_t>(take(4)); }
  uint64_t u64() { return take(8); }
  void skip(size_t k) { if (pos + k > n) { overrun = true; pos = n; } else pos += k; }
};

// Header: magic, fields, zero padding, and its own checksum in the last 8 of its 256 bytes.
std::vector<uint8_t> dts_header_bytes(const DtsHeader& h);
void dts_write_level(ByteWriter& w, const DtsLevel& l);
void dts_write_block(ByteWriter& w, const DtsBlock& b);
void dts_write_slot(ByteWriter& w, const DtsSlot& s);
DtsLevel dts_read_level(ByteReader& r);
DtsBlock dts_read_block(ByteReader& r);
DtsSlot dts_read_slot(ByteReader& r);

// The meta text: "key: value" lines (creation parameters, levels, class names as "class N: name"), sorted keys
// first, classes last. Values never contain newlines (the writer replaces them with spaces).
struct DtsMeta {
  std::vector<std::pair<std::string, std::string>> params;  // in order
  std::vector<std::string> classes;                         // label -> name
};
std::string dts_meta_text(const DtsMeta& m);
// Errors as a message (empty = ok): malformed line, class lines out of order.
std::string dts_meta_parse(const std::string& text, DtsMeta* out);

}  // namespace trctl
