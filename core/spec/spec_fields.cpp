// Typed field reads for the spec loader: strict scalar syntax (integers, finite decimals, true/false), ranges,
// unknown-key and unknown-enum reports with edit-distance suggestions.
#include "core/spec/spec_fields.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace trctl::spec_detail {

// Optimal string alignment distance (Damerau: adjacent transpositions count 1), on one flat table.
int edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size(), w = m + 1;
  std::vector<int> dp((n + 1) * w, 0);
  for (size_t i = 0; i <= n; ++i) dp[i * w] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) dp[j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      int& d = dp[i * w + j];
      d = std::min({dp[(i - 1) * w + j] + 1, dp[i * w + j - 1] + 1, dp[(i - 1) * w + j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d = std::min(d, dp[(i - 2) * w + j - 2] + 1);
    }
  }
  return dp[n * w + m];
}

std::string closest_name(const std::string& word, const std::vector<std::string>& candidates) {
  const int limit = std::max<int>(2, static_cast<int>(word.size()) / 3);
  std::string best;
  int best_dist = limit + 1;
  long best_len_diff = 0;
  for (const std::string& c : candidates) {
    long len_diff = std::labs(static_cast<long>(c.size()) - static_cast<long>(word.size()));
    if (len_diff > limit) continue;  // the distance is at least the length difference: never within the limit
    int dist = edit_distance(word, c);
    if (dist < best_dist || (dist == best_dist && !best.empty() && len_diff < best_len_diff)) {
      best = c;
      best_dist = dist;
      best_len_diff = len_diff;
    }
  }
  return best_dist <= limit ? best : std::string();
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best = closest_name(word, candidates);
  return best.empty() ? std::string() : " (did you mean '" + best + "'?)";
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

std::string format_double(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  size_t e = s.find('e');
  if (e != std::string::npos && s.find('.') == std::string::npos) s.insert(e, ".0");
  return s;
}

std::string join_path(const std::string& section, const std::string& key) {
  return section.empty() ? key : section + "." + key;
}

std::string index_path(const std::string& list, size_t index) { return list + "[" + std::to_string(index) + "]"; }

void check_keys(Diagnostics& d, const YamlNode& map, const std::string& section,
                const std::vector<std::string>& valid) {
  for (size_t i = 0; i < map.keys.size(); ++i) {
    const std::string& key = map.keys[i];
    if (std::find(valid.begin(), valid.end(), key) != valid.end()) continue;
    std::string in = section.empty() ? "at the top level" : "in '" + section + "'";
    d.error(ErrCode::UnknownKey, map.key_locs[i],
            "unknown key '" + key + "' " + in + did_you_mean(key, valid) + "; expected one of: " + join_names(valid));
  }
}

void reject_keys(Diagnostics& d, const YamlNode& map, const std::string& section,
                 const std::vector<std::string>& keys, const std::string& chosen, const std::string& used_by) {
  for (const std::string& key : keys) {
    if (const YamlLoc* loc = map.key_loc(key))
      d.error(ErrCode::Invalid, *loc,
              "key '" + join_path(section, key) + "' does not apply to " + chosen + " (it is for " + used_by + ")");
  }
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// [-+]?[0-9]+
bool integer_syntax(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (!is_digit(s[i])) return false;
  return true;
}

// [-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?  (no inf, nan, hex)
bool decimal_syntax(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && is_digit(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && is_digit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

const char* skip_plus(const std::string& s) { return s.c_str() + ((!s.empty() && s[0] == '+') ? 1 : 0); }

bool expect_kind(Diagnostics& d, const YamlNode& n, const std::string& path, const char* what, bool ok) {
  if (n.kind == YamlNode::Kind::Bad) return false;  // already reported
  if (!ok) d.error(ErrCode::WrongType, n.loc, std::string("expected ") + what + " for '" + path + "', got " +
                                                 yaml_describe(n));
  return ok;
}

std::string describe_int(IntRange r, bool too_big) {
  bool open_top = r.hi == std::numeric_limits<int64_t>::max() || r.hi == std::numeric_limits<int>::max();
  if (open_top && !too_big) return ">= " + std::to_string(r.lo);
  return "an integer in [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
}

}  // namespace

void range_error(Diagnostics& d, const YamlNode& n, const std::string& path, const std::string& what) {
  d.error(ErrCode::OutOfRange, n.loc,
          "value '" + n.text + "' for '" + path + "' is out of range; expected " + what);
}

std::string describe_range(DoubleRange r) {
  bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi);
  if (has_lo && has_hi)
    return std::string("in ") + (r.lo_open ? "(" : "[") + format_double(r.lo) + ", " + format_double(r.hi) +
           (r.hi_open ? ")" : "]");
  if (has_lo) return (r.lo_open ? "> " : ">= ") + format_double(r.lo);
  if (has_hi) return (r.hi_open ? "< " : "<= ") + format_double(r.hi);
  return "a finite number";
}

bool node_int(Diagnostics& d, const YamlNode& n, const std::string& path, IntRange r, int64_t& out) {
  bool syntax = n.kind == YamlNode::Kind::Scalar && n.plain && integer_syntax(n.text);
  if (!expect_kind(d, n, path, "an integer", syntax)) return false;
  int64_t v = 0;
  const char* first = skip_plus(n.text);
  auto res = std::from_chars(first, n.text.c_str() + n.text.size(), v);
  if (res.ec == std::errc::result_out_of_range || v > r.hi) {
    range_error(d, n, path, describe_int(r, true));
    return false;
  }
  if (v < r.lo) {
    range_error(d, n, path, describe_int(r, false));
    return false;
  }
  out = v;
  return true;
}

bool node_uint64(Diagnostics& d, const YamlNode& n, const std::string& path, uint64_t& out) {
  bool syntax = n.kind == YamlNode::Kind::Scalar && n.plain && integer_syntax(n.text);
  if (!expect_kind(d, n, path, "an integer", syntax)) return false;
  uint64_t v = 0;
  auto res = std::from_chars(skip_plus(n.text), n.text.c_str() + n.text.size(), v);
  if (n.text[0] == '-' || res.ec != std::errc()) {
    range_error(d, n, path, "an integer in [0, 18446744073709551615]");
    return false;
  }
  out = v;
  return true;
}

bool node_double(Diagnostics& d, const YamlNode& n, const std::string& path, DoubleRange r, double& out) {
  bool syntax = n.kind == YamlNode::Kind::Scalar && n.plain && decimal_syntax(n.text);
  if (!expect_kind(d, n, path, "a number", syntax)) return false;
  double v = 0;
  auto res = std::from_chars(skip_plus(n.text), n.text.c_str() + n.text.size(), v);
  if (res.ec != std::errc() || !std::isfinite(v)) {
    range_error(d, n, path, "a finite double");
    return false;
  }
  bool below = r.lo_open ? !(v > r.lo) : !(v >= r.lo);
  bool over = r.hi_open ? !(v < r.hi) : !(v <= r.hi);
  if (below || over) {
    range_error(d, n, path, describe_range(r));
    return false;
  }
  out = v;
  return true;
}

bool node_bool(Diagnostics& d, const YamlNode& n, const std::string& path, bool& out) {
  bool syntax = n.kind == YamlNode::Kind::Scalar && n.plain && (n.text == "true" || n.text == "false");
  if (!expect_kind(d, n, path, "true or false", syntax)) return false;
  out = n.text == "true";
  return true;
}

bool node_string(Diagnostics& d, const YamlNode& n, const std::string& path, std::string& out) {
  if (!expect_kind(d, n, path, "a string", n.kind == YamlNode::Kind::Scalar)) return false;
  out = n.text;
  return true;
}

bool node_is(Diagnostics& d, const YamlNode& n, YamlNode::Kind kind, const std::string& path) {
  return expect_kind(d, n, path, kind == YamlNode::Kind::Map ? "a map" : "a list", n.kind == kind);
}

bool get_int(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, IntRange r,
             int& out) {
  const YamlNode* n = map.find(key);
  if (!n) return true;
  r.lo = std::max<int64_t>(r.lo, std::numeric_limits<int>::min());
  r.hi = std::min<int64_t>(r.hi, std::numeric_limits<int>::max());
  int64_t v = 0;
  if (!node_int(d, *n, join_path(section, key), r, v)) return false;
  out = static_cast<int>(v);
  return true;
}

bool get_int64(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, IntRange r,
               int64_t& out) {
  const YamlNode* n = map.find(key);
  return !n || node_int(d, *n, join_path(section, key), r, out);
}

bool get_double(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, DoubleRange r,
                double& out) {
  const YamlNode* n = map.find(key);
  return !n || node_double(d, *n, join_path(section, key), r, out);
}

bool get_bool(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key, bool& out) {
  const YamlNode* n = map.find(key);
  return !n || node_bool(d, *n, join_path(section, key), out);
}

bool get_string(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key,
                std::string& out) {
  const YamlNode* n = map.find(key);
  return !n || node_string(d, *n, join_path(section, key), out);
}

bool get_patterns(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key,
                  std::vector<NamePattern>& out) {
  const YamlNode* n = map.find(key);
  if (!n) return true;
  const std::string path = join_path(section, key);
  std::vector<const YamlNode*> items;
  if (n->kind == YamlNode::Kind::Scalar) {
    items.push_back(n);
  } else {
    if (!node_is(d, *n, YamlNode::Kind::Seq, path)) return false;
    for (const YamlNode& item : n->items) items.push_back(&item);
  }
  std::vector<NamePattern> patterns;
  bool ok = true;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item_path = n->kind == YamlNode::Kind::Seq ? index_path(path, i) : path;
    NamePattern p;
    if (!node_string(d, *items[i], item_path, p.glob)) {
      ok = false;
      continue;
    }
    if (p.glob.empty()) {
      d.error(ErrCode::Invalid, items[i]->loc, "'" + item_path + "' is empty; expected a parameter or layer name pattern");
      ok = false;
      continue;
    }
    p.where = d.where(items[i]->loc);
    patterns.push_back(std::move(p));
  }
  if (ok) out = std::move(patterns);
  return ok;
}

bool get_double_list(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key,
                     DoubleRange r, std::vector<double>& out) {
  const YamlNode* n = map.find(key);
  if (!n) return true;
  const std::string path = join_path(section, key);
  if (!node_is(d, *n, YamlNode::Kind::Seq, path)) return false;
  std::vector<double> values(n->items.size());
  bool ok = true;
  for (size_t i = 0; i < n->items.size(); ++i) ok &= node_double(d, n->items[i], index_path(path, i), r, values[i]);
  if (ok) out = std::move(values);
  return ok;
}

bool get_double_pair(Diagnostics& d, const YamlNode& map, const std::string& section, const char* key,
                     DoubleRange r, bool ordered, double& a, double& b) {
  const YamlNode* n = map.find(key);
  if (!n) return true;
  const std::string path = join_path(section, key);
  if (!node_is(d, *n, YamlNode::Kind::Seq, path)) return false;
  if (n->items.size() != 2) {
    const size_t count = n->items.size();
    d.error(ErrCode::WrongType, n->loc,
            "expected a list of two numbers for '" + path + "', got " + std::to_string(count) +
                (count == 1 ? " item" : " items"));
    return false;
  }
  double x = 0, y = 0;
  bool ok = node_double(d, n->items[0], index_path(path, 0), r, x);
  ok &= node_double(d, n->items[1], index_path(path, 1), r, y);
  if (ok && ordered && x > y) {
    d.error(ErrCode::OutOfRange, n->loc,
            "'" + path + "' = [" + n->items[0].text + ", " + n->items[1].text + "] must have first <= second");
    return false;
  }
  if (ok) a = x, b = y;
  return ok;
}

bool enum_by_name(Diagnostics& d, const YamlNode& n, const std::string& path, const std::vector<std::string>& names,
                  size_t& index) {
  if (!expect_kind(d, n, path, "a name", n.kind == YamlNode::Kind::Scalar)) return false;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == n.text) {
      index = i;
      return true;
    }
  }
  d.error(ErrCode::UnknownEnum, n.loc,
          "unknown value '" + n.text + "' for '" + path + "'" + did_you_mean(n.text, names) +
              "; expected one of: " + join_names(names));
  return false;
}

}  // namespace trctl::spec_detail
