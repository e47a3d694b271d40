// DTS v1 record (de)serialisation and the XXH3-64 checksum (xxHash, header-only inline build: the binary gains no
// shared-library dependency).
#include "dataio/dts_format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace trctl {

uint64_t dts_hash(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::vector<uint8_t> dts_header_bytes(const DtsHeader& h) {
  ByteWriter w;
  w.bytes(kDtsMagic, sizeof(kDtsMagic));
  w.u32(h.version);
  w.u32(kDtsHeaderBytes);
  w.u64(h.sample_count);
  w.u64(h.block_size);
  w.u64(h.block_count);
  w.u64(h.data_offset);
  w.u64(h.meta_offset);
  w.u64(h.meta_bytes);
  w.u64(h.meta_hash);
  w.u64(h.index_offset);
  w.u64(h.index_bytes);
  w.u64(h.index_hash);
  w.u32(h.level_count);
  w.u32(h.class_count);
  w.zeros(kDtsHeaderBytes - 8 - w.b.size());
  w.u64(dts_hash(w.b.data(), w.b.size()));
  return w.b;
}

void dts_write_level(ByteWriter& w, const DtsLevel& l) {
  w.u32(l.short_side);
  w.u32(l.quality);
  w.u32(static_cast<uint32_t>(l.encoding));
  w.u32(l.first_block);
  w.u32(l.block_count);
  w.u32(0);
}

void dts_write_block(ByteWriter& w, const DtsBlock& b) {
  w.u32(b.level);
  w.u32(b.used_bytes);
  w.u32(b.sample_count);
  w.u32(0);
  w.u64(b.hash);
}

void dts_write_slot(ByteWriter& w, const DtsSlot& s) {
  w.u32(s.block);
  w.u32(s.offset);
  w.u32(s.size);
  w.u32(static_cast<uint32_t>(s.label));
  w.u16(s.height);
  w.u16(s.width);
  w.u16(s.orig_height);
  w.u16(s.orig_width);
  w.u8(s.channels);
  w.u8(static_cast<uint8_t>(s.encoding));
  w.zeros(6);
}

DtsLevel dts_read_level(ByteReader& r) {
  DtsLevel l;
  l.short_side = r.u32();
  l.quality = r.u32();
  l.encoding = static_cast<DtsEncoding>(r.u32());
  l.first_block = r.u32();
  l.block_count = r.u32();
  r.skip(4);
  return l;
}

DtsBlock dts_read_block(ByteReader& r) {
  DtsBlock b;
  b.level = r.u32();
  b.used_bytes = r.u32();
  b.sample_count = r.u32();
  r.skip(4);
  b.hash = r.u64();
  return b;
}

DtsSlot dts_read_slot(ByteReader& r) {
  DtsSlot s;
  s.block = r.u32();
  s.offset = r.u32();
  s.size = r.u32();
  s.label = static_cast<int32_t>(r.u32());
  s.height = r.u16();
  s.width = r.u16();
  s.orig_height = r.u16();
  s.orig_width = r.u16();
  s.channels = r.u8();
  s.encoding = static_cast<DtsEncoding>(r.u8());
  r.skip(6);
  return s;
}

namespace {
std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}
}  // namespace

std::string dts_meta_text(const DtsMeta& m) {
  std::string t;
  for (const auto& [k, v] : m.params) t += one_line(k) + ": " + one_line(v) + "\n";
  for (size_t i = 0; i < m.classes.size(); ++i) t += "class " + std::to_string(i) + ": " + one_line(m.classes[i]) + "\n";
  return t;
}

std::string dts_meta_parse(const std::string& text, DtsMeta* out) {
  *out = DtsMeta{};
  size_t pos = 0;
  int line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) return "meta line " + std::to_string(line + 1) + " is not terminated";
    const std::string l = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    const size_t colon = l.find(": ");
    if (colon == std::string::npos || colon == 0) return "meta line " + std::to_string(line) + " is not 'key: value'";
    const std::string key = l.substr(0, colon), value = l.substr(colon + 2);
    if (key.rfind("class ", 0) == 0) {
      if (key != "class " + std::to_string(out->classes.size()))
        return "meta line " + std::to_string(line) + ": expected 'class " + std::to_string(out->classes.size()) + "'";
      out->classes.push_back(value);
    } else {
      if (!out->classes.empty()) return "meta line " + std::to_string(line) + ": a parameter after the class table";
      out->params.emplace_back(key, value);
    }
  }
  return "";
}

}  // namespace trctl
