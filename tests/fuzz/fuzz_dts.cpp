// libFuzzer target: the DTS reader (dataio/dts_reader.*, docs/dts.md). Input: one flag byte, then a DTS file,
// served from a memfd. Flag bit 0 set: before reading, the harness re-seals the file's checksums (header, meta,
// index, and every block that the header and index place inside the file), so mutations get past the XXH3 checks
// to the structural checks behind them. Asserts: DtsFile::open returns a file or an error; on an opened file,
// every slot lies inside its block's used bytes, dts_info, read_block of every block and dts_verify (every sample
// decoded or size-checked) return values or errors, never crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dataio/dts_format.h"
#include "dataio/dts_reader.h"
#include "tests/fuzz/fuzz_util.h"

using namespace trctl;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_dts: %s\n", what);
  std::abort();
}

uint64_t get64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(b[at + i]) << (8 * i);
  return v;
}
uint32_t get32(const std::vector<uint8_t>& b, size_t at) { return uint32_t(get64(b, at) & 0xffffffffu); }
void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = uint8_t(v >> (8 * i));
}
// [off, off + n) inside b (overflow-safe).
bool inside(const std::vector<uint8_t>& b, uint64_t off, uint64_t n) { return off <= b.size() && n <= b.size() - off; }

// Recomputes the checksums at the offsets docs/dts.md gives, where the fields point inside the file.
void reseal(std::vector<uint8_t>& b) {
  if (b.size() < kDtsHeaderBytes) return;
  const uint64_t block_size = get64(b, 24), block_count = get64(b, 32), data_offset = get64(b, 40);
  const uint64_t meta_offset = get64(b, 48), meta_bytes = get64(b, 56);
  const uint64_t index_offset = get64(b, 72), index_bytes = get64(b, 80);
  const uint32_t level_count = get32(b, 96);
  if (inside(b, index_offset, index_bytes) && level_count <= kDtsMaxLevels) {
    const uint64_t blocks_at = index_offset + uint64_t(level_count) * kDtsLevelRecord;
    for (uint64_t k = 0; k < block_count && block_size > 0; ++k) {
      const uint64_t rec = blocks_at + k * kDtsBlockRecord;
      if (!inside(b, rec, kDtsBlockRecord) || rec + kDtsBlockRecord > index_offset + index_bytes) break;
      if (k > (b.size() / block_size) + 1) break;
      const uint64_t at = data_offset + k * block_size;
      if (inside(b, at, block_size)) put64(b, rec + 16, dts_hash(b.data() + at, block_size));
    }
    put64(b, 88, dts_hash(b.data() + index_offset, index_bytes));
  }
  if (inside(b, meta_offset, meta_bytes)) put64(b, 64, dts_hash(b.data() + meta_offset, meta_bytes));
  put64(b, kDtsHeaderBytes - 8, dts_hash(b.data(), kDtsHeaderBytes - 8));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile mem("fuzz_dts");
  if (size < 1) return 0;
  std::vector<uint8_t> file(data + 1, data + size);
  if (data[0] & 1) reseal(file);

  Result<std::shared_ptr<DtsFile>> opened = DtsFile::open(mem.set(file.data(), file.size()));
  if (!opened.ok()) {
    if (opened.errors().empty() || opened.errors()[0].message.empty()) fail("an error without a message");
    return 0;
  }
  const DtsFile& f = *opened.value();
  const DtsHeader& h = f.header();
  if (f.levels().size() != h.level_count || f.blocks().size() != h.block_count) fail("index sizes disagree");
  for (uint32_t l = 0; l < h.level_count; ++l)
    for (uint64_t s = 0; s < h.sample_count; ++s) {
      const DtsSlot& slot = f.slot(l, int64_t(s));
      if (slot.block >= f.blocks().size()) fail("slot in a block that does not exist");
      if (uint64_t(slot.offset) + slot.size > f.blocks()[slot.block].used_bytes) fail("slot outside its block");
      if (slot.label < 0 || uint32_t(slot.label) >= h.class_count) fail("label out of range");
    }
  (void)dts_info(f);
  std::vector<uint8_t> buf;
  for (uint32_t k = 0; k < f.blocks().size(); ++k)
    if (f.read_block(k, &buf).ok() && buf.size() != h.block_size) fail("read_block returned a short block");
  (void)dts_verify(f, true, 1, {});
  return 0;
}
