// Internal to core/spec: typed, range-checked reads of YAML map fields with located errors, key checks with
// "did you mean" suggestions, and enum name tables built from to_string.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/spec/spec.h"
#include "core/spec/yaml_tree.h"

namespace trctl::spec_detail {

// Optimal-string-alignment edit distance (a swap of neighbours counts 1).
int edit_distance(const std::string& a, const std::string& b);
// The closest candidate when its distance is <= max(2, len(word)/3), else "" (ties: closer length, then order).
std::string closest_name(const std::string& word, const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
std::string join_names(const std::vector<std::string>& names);  // "a, b, c"
// Shortest decimal that parses back to exactly v (std::to_chars), with ".0" put before an exponent so that YAML 1.1
// readers see a float too ("1.0e-08").
std::string format_double(double v);

// Reports every key of `map` not in `valid` ("unknown key 'x' in <where>"). `section` is the dotted path of the
// map, "" for the top level.
void check_keys(Diagnostics& d, const YamlNode& map, const std::string& section,
                const std::vector<std::string>& valid);
// Reports each of `keys` present in `map`: valid in the section, but not for `chosen` (e.g. "optimizer.type
// 'adamw'"); `used_by` says what they are for (e.g. "sgd").
void reject_keys(Diagnostics& d, const YamlNode& map, const std::string& section,
                 const std::vector<std::string>& keys, const std::string& chosen, const std::string& used_by);

std::string join_path(const std::string& section, const std::string& key);  // "data" + "batch_size"
std::string index_path(const std::string& list, size_t index);           // "model.layers[3]"

struct IntRange {
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
};
inline IntRange int_at_least(int64_t lo) { return IntRange{lo, std::numeric_limits<int>::max()}; }

struct DoubleRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;  // open: the bound itself is excluded
};
inline DoubleRange any_double() { return DoubleRange{}; }
inline DoubleRange at_least(double lo) { return DoubleRange{lo, DoubleRange{}.hi, false, false}; }
inline DoubleRange above(double lo) { return DoubleRange{lo, DoubleRange{}.hi, true, false}; }
inline DoubleRange half_open(double lo, double hi) { return DoubleRange{lo, hi, false, true}; }  // [lo, hi)
inline DoubleRange closed(double lo, double hi) { return DoubleRange{lo, hi, false, false}; }   // [lo, hi]
inline DoubleRange open_closed(double lo, double hi) { return DoubleRange{lo, hi, true, false}; }  // (lo, hi]

// Conversions of one node; each reports a located error and returns false on a wrong type or range.
bool node_int(Diagnostics& d, const YamlNode& n, const std::string& path, IntRange r, int64_t& out);
bool node_uint64(Diagnostics& d, const YamlNode& n, const std::string& path, uint64_t& out);
bool node_double(Diagnostics& d, const YamlNode& n, const std::string& path, DoubleRange r, double& out);
bool node_bool(Diagnostics& d, const YamlNode& n, const std::string& path, bool& out);
bool node_string(Diagnostics& d, const YamlNode& n, const std::string& path, std::string& out);
bool node_is(Diagnostics& d, const YamlNode& n, YamlNode::Kind kind, const std::string& path);  // map or list
// Reports "value V for 'path' is out of range; expected <what>" at n.
void range_error(Diagnostics& d, const YamlNode& n, const std::string& path, const std::string& what);
std::string describe_range(DoubleRange r);

// Field reads: when `key` is absent, `out` keeps its value (the default) and true is returned.
bool get_int(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, IntRange r, int& out);
bool get_int64(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, IntRange r,
               int64_t& out);
bool get_double(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, DoubleRange r,
                double& out);
bool get_bool(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, bool& out);
bool get_string(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, std::string& out);
bool get_double_list(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key,
                     DoubleRange r, std::vector<double>& out);
// Name patterns (NamePattern): one non-empty string or a list of them; each keeps its location for the compiler.
bool get_patterns(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key,
                  std::vector<NamePattern>& out);
// A two-item list [a, b] with r for each item and a <= b.
bool get_double_pair(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key,
                     DoubleRange r, bool ordered, double& a, double& b);

// Enum by name: "unknown value 'adamx' for 'optimizer.type' (did you mean 'adamw'?); expected one of: ...".
bool enum_by_name(Diagnostics& d, const YamlNode& n, const std::string& path, const std::vector<std::string>& names,
                  size_t& index);

template <class E>
std::vector<std::string> enum_names(const std::vector<E>& values) {
  std::vector<std::string> names;
  for (E v : values) names.emplace_back(to_string(v));
  return names;
}

// Reads map[key] as one of `values` (named by to_string); absent: `out` unchanged and true.
template <class E>
bool get_enum(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key,
              const std::vector<E>& values, E& out) {
  const YamlNode* n = map.find(key);
  if (!n) return true;
  size_t index = 0;
  if (!enum_by_name(d, *n, join_path(section, key), enum_names(values), index)) return false;
  out = values[index];
  return true;
}

}  // namespace trctl::spec_detail
