// Internal to core/spec: a small located YAML tree built from yaml-cpp parser events (plain and quoted scalars kept
// apart; anchors, aliases, tags, deep nesting and duplicate keys rejected), the error collector, and overrides.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace trctl::spec_detail {

constexpr int kMaxYamlDepth = 32;  // maps/lists nested deeper than this are rejected
constexpr size_t kMaxOverrideBytes = size_t{1} << 20;  // an override longer than this is rejected unparsed

// Where a node stood: source 0 is the spec file, source N is override N; line/col are 1-based.
struct YamlLoc {
  int source = 0;
  int line = 1, col = 1;
};

struct YamlNode {
  enum class Kind { Null, Scalar, Seq, Map, Bad };  // Bad: rejected (alias, too deep, ...), already reported
  Kind kind = Kind::Null;
  std::string text;               // Scalar
  bool plain = true;              // Scalar: unquoted, so `3` may be a number while `"3"` is only a string
  YamlLoc loc;
  std::vector<YamlNode> items;    // Seq: the items; Map: the values, items[i] belonging to keys[i]
  std::vector<std::string> keys;  // Map
  std::vector<YamlLoc> key_locs;  // Map

  const YamlNode* find(const std::string& key) const;
  YamlNode* find(const std::string& key);
  const YamlLoc* key_loc(const std::string& key) const;
};

// Collects errors; turns YamlLocs into "file:line:col" with the names of the sources.
class Diagnostics {
 public:
  explicit Diagnostics(std::string file_name) : sources_{std::move(file_name)} {}
  int add_source(std::string name);  // returns its index for YamlLoc::source
  const std::string& source_name(int source) const { return sources_.at(static_cast<size_t>(source)); }
  std::string where(const YamlLoc& loc) const;
  void error(ErrCode code, const YamlLoc& loc, std::string message);
  void error_unlocated(ErrCode code, int source, std::string message);  // where = the source name only
  bool empty() const { return errors_.empty(); }
  size_t count() const { return errors_.size(); }
  // The errors in file order: unlocated ones first, then by source (file, override 1, ...), line, column.
  std::vector<Error> take();

 private:
  struct Entry {
    YamlLoc loc;  // line 0: unlocated
    Error error;
  };
  std::vector<std::string> sources_;
  std::vector<Entry> errors_;
};

enum class YamlParseOutcome { Document, Empty, Failed };  // Failed: a syntax error (reported); the tree is unusable

// Parses YAML text holding at most one document into `out`. Locations get `source`; columns on the first line
// are shifted by `col_offset` (an override's value starts after "key="). Errors go to `diag`.
YamlParseOutcome yaml_tree_parse(const std::string& text, int source, int col_offset, Diagnostics& diag,
                                 YamlNode& out);

// Applies one override "a.b.c=value" (value parsed as YAML) to the map `root`, creating maps on the way; a numeric
// path segment indexes a list ("model.layers.3.p=0.2"). `source` is the override's source index.
void yaml_tree_apply_override(YamlNode& root, const std::string& override_text, int source, Diagnostics& diag);

// "a list", "a map", "null", "'abc'" or "the quoted string 'abc'": for "expected ..., got X" messages.
std::string yaml_describe(const YamlNode& node);

}  // namespace trctl::spec_detail
