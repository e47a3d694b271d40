// safetensors encode/decode: the compact JSON header writer, and the validating reader over json_subset.
#include "core/ckpt/safetensors.h"

#include <algorithm>
#include <cstring>

#include "core/ckpt/json_subset.h"

namespace trctl {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; host must be too");

namespace {

const char* const kMetadataKey = "__metadata__";

Error fmt_error(const std::string& where, int64_t offset, const std::string& msg) {
  return {ErrCode::Format, where + ":offset " + std::to_string(offset), msg};
}

// numel * size with overflow detection; -1 on overflow or a negative dimension.
int64_t checked_bytes(const std::vector<int64_t>& shape, DType t) {
  int64_t n = dtype_size(t);
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > INT64_MAX / d) return -1;
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string header_json(const std::vector<TensorView>& tensors, const SafetensorsMetadata& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += json_quote(kMetadataKey) + ":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      h += (first ? "" : ",") + json_quote(k) + ":" + json_quote(v);
      first = false;
    }
    h += "}";
  }
  int64_t off = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = tensors[i];
    int64_t end = off + static_cast<int64_t>(t.data.size());
    h += (i || !metadata.empty() ? "," : "") + json_quote(t.name) + ":{\"dtype\":" +
         json_quote(safetensors_dtype_name(t.dtype)) + ",\"shape\":" + shape_text(t.shape) +
         ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(end) + "]}";
    off = end;
  }
  h += "}";
  while (h.size() % 8) h += ' ';
  return h;
}

// A parsed tensor entry before its bytes are copied out.
struct Entry {
  TensorView t;
  int64_t begin = 0, end = 0;
  int64_t at = 0;  // file offset of the entry (for messages)
};

// Validates one header entry `name`: {"dtype": "...", "shape": [...], "data_offsets": [b, e]}.
Result<Entry> parse_entry(const std::string& where, const std::string& name, const JsonValue& v) {
  auto err = [&](int64_t at, const std::string& msg) {
    return fmt_error(where, at, "tensor '" + name + "': " + msg);
  };
  if (v.kind != JsonValue::Kind::Object) return err(v.offset, "entry is not an object");
  for (const std::string& k : v.keys)
    if (k != "dtype" && k != "shape" && k != "data_offsets") return err(v.offset, "unknown field '" + k + "'");
  const JsonValue* dt = v.find("dtype");
  const JsonValue* sh = v.find("shape");
  const JsonValue* of = v.find("data_offsets");
  if (!dt || !sh || !of) return err(v.offset, "needs the fields dtype, shape and data_offsets");
  Entry e;
  e.at = v.offset;
  e.t.name = name;
  if (dt->kind != JsonValue::Kind::String) return err(dt->offset, "dtype is not a string");
  if (!safetensors_dtype_parse(dt->text, e.t.dtype))
    return err(dt->offset, "unknown dtype '" + dt->text + "' (supported: F32, F64, F16, BF16, I32, U8)");
  if (sh->kind != JsonValue::Kind::Array) return err(sh->offset, "shape is not an array");
  for (const JsonValue& d : sh->items) {
    if (d.kind != JsonValue::Kind::Int || d.integer < 0)
      return err(d.offset, "shape entries must be non-negative integers");
    e.t.shape.push_back(d.integer);
  }
  if (of->kind != JsonValue::Kind::Array || of->items.size() != 2 ||
      of->items[0].kind != JsonValue::Kind::Int || of->items[1].kind != JsonValue::Kind::Int)
    return err(of->offset, "data_offsets must be [begin, end] integers");
  e.begin = of->items[0].integer;
  e.end = of->items[1].integer;
  if (e.begin < 0 || e.end < e.begin)
    return err(of->offset, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                               "] are not 0 <= begin <= end");
  int64_t want = checked_bytes(e.t.shape, e.t.dtype);
  if (want < 0) return err(sh->offset, "shape " + shape_text(e.t.shape) + " overflows");
  if (e.end - e.begin != want)
    return err(of->offset, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] hold " +
                               std::to_string(e.end - e.begin) + " bytes but shape " + shape_text(e.t.shape) +
                               " of " + dt->text + " needs " + std::to_string(want));
  return e;
}

Result<SafetensorsMetadata> parse_metadata(const std::string& where, const JsonValue& v) {
  if (v.kind != JsonValue::Kind::Object) return fmt_error(where, v.offset, "__metadata__ is not an object");
  SafetensorsMetadata m;
  for (size_t i = 0; i < v.keys.size(); ++i) {
    if (v.items[i].kind != JsonValue::Kind::String)
      return fmt_error(where, v.items[i].offset, "__metadata__ value of '" + v.keys[i] + "' is not a string");
    m[v.keys[i]] = v.items[i].text;
  }
  return m;
}

// The entries sorted by offset must tile [0, data_bytes) exactly.
Status check_tiling(const std::string& where, std::vector<Entry>& es, int64_t data_start, int64_t data_bytes) {
  std::stable_sort(es.begin(), es.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : es) {
    if (e.begin < pos)
      return fmt_error(where, e.at, "tensor '" + e.t.name + "' data [" + std::to_string(e.begin) + ", " +
                                        std::to_string(e.end) + ") overlaps tensor '" + prev->t.name + "'");
    if (e.begin > pos)
      return fmt_error(where, e.at, "tensor '" + e.t.name + "' data starts at " + std::to_string(e.begin) +
                                        ", leaving a gap after byte " + std::to_string(pos));
    if (e.end > data_bytes)
      return fmt_error(where, e.at, "tensor '" + e.t.name + "' data [" + std::to_string(e.begin) + ", " +
                                        std::to_string(e.end) + ") is beyond the end of the file (" +
                                        std::to_string(data_bytes) + " data bytes from offset " +
                                        std::to_string(data_start) + ")");
    pos = e.end;
    prev = &e;
  }
  if (pos != data_bytes)
    return fmt_error(where, data_start + pos, std::to_string(data_bytes - pos) +
                                                  " bytes after the last tensor belong to no tensor");
  return ok_status();
}

}  // namespace

const TensorView* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
  }
  return "?";
}

bool safetensors_dtype_parse(const std::string& name, DType& out) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::U8})
    if (name == safetensors_dtype_name(t)) {
      out = t;
      return true;
    }
  return false;
}

Result<std::vector<std::byte>> safetensors_encode(const std::vector<TensorView>& tensors,
                                                  const SafetensorsMetadata& metadata) {
  std::vector<Error> errs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = tensors[i];
    std::string where = "tensor '" + t.name + "'";
    if (t.name.empty() || t.name == kMetadataKey) errs.push_back({ErrCode::Invalid, where, "reserved or empty name"});
    for (size_t j = 0; j < i; ++j)
      if (tensors[j].name == t.name) errs.push_back({ErrCode::Invalid, where, "duplicate tensor name"});
    int64_t want = checked_bytes(t.shape, t.dtype);
    if (want < 0 || want != static_cast<int64_t>(t.data.size()))
      errs.push_back({ErrCode::Invalid, where,
                      "holds " + std::to_string(t.data.size()) + " bytes but shape " + shape_text(t.shape) +
                          " of " + safetensors_dtype_name(t.dtype) + " needs " + std::to_string(want)});
  }
  if (!errs.empty()) return errs;
  std::string h = header_json(tensors, metadata);
  std::vector<std::byte> out(8 + h.size());
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
  std::memcpy(out.data() + 8, h.data(), h.size());
  for (const TensorView& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

Result<SafetensorsFile> safetensors_decode(const std::vector<std::byte>& bytes, const std::string& where) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < 8)
    return fmt_error(where, size, "truncated: " + std::to_string(size) + " bytes, the 8-byte header length is missing");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (n > kSafetensorsMaxHeader)
    return fmt_error(where, 0, "header length " + std::to_string(n) + " exceeds the limit of " +
                                   std::to_string(kSafetensorsMaxHeader) + " bytes");
  if (static_cast<int64_t>(n) > size - 8)
    return fmt_error(where, 0, "truncated or corrupt: header length " + std::to_string(n) +
                                   " goes beyond the end of the file (" + std::to_string(size) + " bytes)");
  std::string h(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  if (h.empty() || h[0] != '{') return fmt_error(where, 8, "header does not start with '{'");
  Result<JsonValue> root = json_parse(h, where, 8);
  if (!root.ok()) return root.errors();
  const JsonValue& top = root.value();
  SafetensorsFile f;
  std::vector<Entry> entries;
  for (size_t i = 0; i < top.keys.size(); ++i) {
    if (top.keys[i] == kMetadataKey) {
      Result<SafetensorsMetadata> m = parse_metadata(where, top.items[i]);
      if (!m.ok()) return m.errors();
      f.metadata = std::move(m.value());
      continue;
    }
    Result<Entry> e = parse_entry(where, top.keys[i], top.items[i]);
    if (!e.ok()) return e.errors();
    entries.push_back(std::move(e.value()));
  }
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  Status tiled = check_tiling(where, entries, data_start, size - data_start);
  if (!tiled.ok()) return tiled.errors();
  for (Entry& e : entries) {
    const std::byte* p = bytes.data() + data_start + e.begin;
    e.t.data.assign(p, p + (e.end - e.begin));
    f.tensors.push_back(std::move(e.t));
  }
  return f;
}

Status safetensors_write(const std::string& path, const std::vector<TensorView>& tensors,
                         const SafetensorsMetadata& metadata, const AtomicWriteOptions& opt) {
  Result<std::vector<std::byte>> bytes = safetensors_encode(tensors, metadata);
  if (!bytes.ok()) {
    std::vector<Error> errs = bytes.errors();
    for (Error& e : errs) e.where = path + ": " + e.where;
    return errs;
  }
  return atomic_write_file(path, bytes.value(), opt);
}

Result<SafetensorsFile> safetensors_read(const std::string& path) {
  Result<std::vector<std::byte>> bytes = file_read_bytes(path);
  if (!bytes.ok()) return bytes.errors();
  return safetensors_decode(bytes.value(), path);
}

}  // namespace trctl
