// A small strict JSON reader (RFC 8259: objects, arrays, strings with escapes, numbers, true/false/null) for
// benchmark result files and metrics.jsonl; errors carry the byte offset; and json_number for the bench results'
// writer (strings: json_quote of core/ckpt/json_subset.h). No JSON library is a dependency (the checkpoint code's
// core/ckpt/json_subset.h reads only the integer subset of safetensors headers).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/ckpt/json_subset.h"  // json_quote
#include "core/util/error.h"

namespace trctl {

enum class JsonKind { Null, Bool, Number, String, Array, Object };

// One JSON value as plain data; object members keep their order (duplicate keys are a parse error).
struct JsonNode {
  JsonKind kind = JsonKind::Null;
  bool boolean = false;
  double number = 0;
  std::string string;                                       // UTF-8, escapes resolved
  std::vector<JsonNode> array;
  std::vector<std::pair<std::string, JsonNode>> object;

  bool is_null() const { return kind == JsonKind::Null; }
  bool is_number() const { return kind == JsonKind::Number; }
  bool is_string() const { return kind == JsonKind::String; }
  bool is_array() const { return kind == JsonKind::Array; }
  bool is_object() const { return kind == JsonKind::Object; }
  const JsonNode* find(const std::string& key) const;  // nullptr when absent or not an object
};

// Parses one JSON document (surrounding whitespace allowed, nothing else). An error's `where` is
// "NAME:offset N (line L, column C)", N the 0-based byte offset of the offending character. A document that is
// one line of a larger file (JSON Lines) passes where that line starts, so that the location is the file's.
Result<JsonNode> json_read(const std::string& text, const std::string& name, size_t base_offset = 0,
                           size_t base_line = 1);

// Reads and parses a whole file; a missing or unreadable file is an Io error naming it.
Result<JsonNode> json_read_file(const std::string& path);

// `v` as a JSON number: integers below 2^53 in full, others with 10 significant digits; NaN and infinities
// (which strict JSON cannot hold) as null.
std::string json_number(double v);

}  // namespace trctl
