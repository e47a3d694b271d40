// A strict parser for the JSON subset of safetensors headers: objects, arrays, strings (with escapes) and
// integers. Anything else (floats, true/false/null, trailing commas, duplicate keys, control characters) is an
// error that names the byte offset, so a corrupt header is rejected instead of half-read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl {

struct JsonValue {
  enum class Kind : uint8_t { Object, Array, String, Int };
  Kind kind = Kind::Object;
  int64_t offset = 0;             // byte offset of the value's first character (base_offset + position)
  int64_t integer = 0;            // Int
  std::string text;               // String
  std::vector<std::string> keys;  // Object: member names, in order (parallel to items)
  std::vector<JsonValue> items;   // Object: member values; Array: elements
  const JsonValue* find(const std::string& key) const;
};

// Parses `text` as one JSON value followed only by whitespace. Errors are located as "<where>:offset N" with
// N = base_offset + the position in `text` (so callers can report file offsets).
Result<JsonValue> json_parse(const std::string& text, const std::string& where, int64_t base_offset = 0);

// `s` as a JSON string literal (quotes and escapes included).
std::string json_quote(const std::string& s);

}  // namespace trctl
