// The located YAML tree: building it from yaml-cpp events with the loader's structural rules, error collection,
// and applying "key.path=value" overrides to it.
#include "core/spec/yaml_tree.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace trctl::spec_detail {

const YamlNode* YamlNode::find(const std::string& key) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

YamlNode* YamlNode::find(const std::string& key) {
  return const_cast<YamlNode*>(static_cast<const YamlNode*>(this)->find(key));
}

const YamlLoc* YamlNode::key_loc(const std::string& key) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &key_locs[i];
  return nullptr;
}

int Diagnostics::add_source(std::string name) {
  sources_.push_back(std::move(name));
  return static_cast<int>(sources_.size()) - 1;
}

std::string Diagnostics::where(const YamlLoc& loc) const {
  return source_name(loc.source) + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.col);
}

void Diagnostics::error(ErrCode code, const YamlLoc& loc, std::string message) {
  errors_.push_back(Entry{loc, Error{code, where(loc), std::move(message)}});
}

void Diagnostics::error_unlocated(ErrCode code, int source, std::string message) {
  errors_.push_back(Entry{YamlLoc{source, 0, 0}, Error{code, source_name(source), std::move(message)}});
}

std::vector<Error> Diagnostics::take() {
  std::stable_sort(errors_.begin(), errors_.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.loc.source, a.loc.line, a.loc.col) < std::tie(b.loc.source, b.loc.line, b.loc.col);
  });
  std::vector<Error> out;
  for (Entry& e : errors_) out.push_back(std::move(e.error));
  errors_.clear();
  return out;
}

std::string yaml_describe(const YamlNode& node) {
  switch (node.kind) {
    case YamlNode::Kind::Null: return "null";
    case YamlNode::Kind::Seq: return "a list";
    case YamlNode::Kind::Map: return "a map";
    case YamlNode::Kind::Bad: return "an invalid value";
    case YamlNode::Kind::Scalar: break;
  }
  std::string t = node.text.size() > 60 ? node.text.substr(0, 57) + "..." : node.text;
  return node.plain ? "'" + t + "'" : "the quoted string '" + t + "'";
}

namespace {

std::string depth_message() {
  return "YAML nesting deeper than " + std::to_string(kMaxYamlDepth) + " levels is not supported";
}

// Builds a YamlNode tree from parser events. Rejected containers are added as one Bad node at once and their
// events skipped, so map keys and values stay paired.
class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(Diagnostics& diag, int source, int col_offset) : diag_(diag), source_(source), col_offset_(col_offset) {}

  bool have_root() const { return have_root_; }
  bool too_deep() const { return too_deep_; }
  YamlNode& root() { return root_; }
  YamlLoc loc(const YAML::Mark& m) const {
    if (m.is_null()) return YamlLoc{source_, 1, 1 + col_offset_};
    return YamlLoc{source_, m.line + 1, m.column + 1 + (m.line == 0 ? col_offset_ : 0)};
  }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnAnchor(const YAML::Mark&, const std::string& name) override { anchor_name_ = name; }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (skip_ > 0) return;
    YamlNode n;
    n.loc = loc(mark);
    if (anchor != 0) reject_anchor(n);
    add(std::move(n));
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    if (skip_ > 0) return;
    YamlNode n;
    n.loc = loc(mark);
    n.kind = YamlNode::Kind::Bad;
    diag_.error(ErrCode::NotSupported, n.loc, "YAML aliases are not supported (found an alias '*...')");
    add(std::move(n));
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    if (skip_ > 0) return;
    YamlNode n;
    n.kind = YamlNode::Kind::Scalar;
    n.loc = loc(mark);
    n.text = value;
    n.plain = tag == "?";
    if (anchor != 0) reject_anchor(n);
    else if (tag != "?" && tag != "!") reject_tag(n, tag);
    add(std::move(n));
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    start(YamlNode::Kind::Seq, mark, tag, anchor);
  }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    start(YamlNode::Kind::Map, mark, tag, anchor);
  }
  void OnSequenceEnd() override { end(); }
  void OnMapEnd() override { end(); }

 private:
  struct Frame {
    YamlNode node;
    bool have_key = false;  // Map: a key was read and waits for its value
    bool key_bad = false;   // Map: that key was rejected; its value is dropped
    std::string key;
    YamlLoc key_loc;
    // Map: key -> its index in node.keys, so that duplicate detection stays linear in the number of keys (a
    // linear search per key made a 1 MiB map of 100,000 keys take minutes).
    std::unordered_map<std::string, size_t> key_index;
  };

  void reject_anchor(YamlNode& n) {
    n.kind = YamlNode::Kind::Bad;
    diag_.error(ErrCode::NotSupported, n.loc,
                "YAML aliases are not supported (found an anchor '&" + anchor_name_ + "')");
  }
  void reject_tag(YamlNode& n, const std::string& tag) {
    n.kind = YamlNode::Kind::Bad;
    diag_.error(ErrCode::NotSupported, n.loc, "YAML tags are not supported (found '" + tag + "')");
  }

  void start(YamlNode::Kind kind, const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor) {
    if (skip_ > 0) {
      ++skip_;
      return;
    }
    YamlNode n;
    n.kind = kind;
    n.loc = loc(mark);
    if (anchor != 0) reject_anchor(n);
    else if (tag != "?") reject_tag(n, tag);
    else if (stack_.size() + 1 > static_cast<size_t>(kMaxYamlDepth)) {
      n.kind = YamlNode::Kind::Bad;
      diag_.error(ErrCode::NotSupported, n.loc, depth_message());
      too_deep_ = true;
    }
    if (n.kind == YamlNode::Kind::Bad) {
      add(std::move(n));
      skip_ = 1;
      return;
    }
    stack_.push_back(Frame{std::move(n), false, false, {}, {}, {}});
  }

  void end() {
    if (skip_ > 0) {
      --skip_;
      return;
    }
    if (stack_.empty()) return;
    YamlNode n = std::move(stack_.back().node);
    stack_.pop_back();
    add(std::move(n));
  }

  void add(YamlNode n) {
    if (stack_.empty()) {
      root_ = std::move(n);
      have_root_ = true;
      return;
    }
    Frame& f = stack_.back();
    if (f.node.kind == YamlNode::Kind::Seq) {
      f.node.items.push_back(std::move(n));
      return;
    }
    if (!f.have_key) {
      f.have_key = true;
      f.key_bad = n.kind != YamlNode::Kind::Scalar;
      f.key = n.text;
      f.key_loc = n.loc;
      if (n.kind == YamlNode::Kind::Null || n.kind == YamlNode::Kind::Seq || n.kind == YamlNode::Kind::Map)
        diag_.error(ErrCode::Syntax, n.loc, "map keys must be names, got " + yaml_describe(n));
      return;
    }
    f.have_key = false;
    if (f.key_bad) return;
    auto [it, fresh] = f.key_index.emplace(f.key, f.node.keys.size());
    if (!fresh) {
      const YamlLoc& first = f.node.key_locs[it->second];
      diag_.error(ErrCode::Syntax, f.key_loc, "duplicate key '" + f.key + "' (first given at " + diag_.where(first) + ")");
      return;
    }
    if (n.kind == YamlNode::Kind::Null) n.loc = f.key_loc;  // an empty value has no place of its own
    f.node.keys.push_back(f.key);
    f.node.key_locs.push_back(f.key_loc);
    f.node.items.push_back(std::move(n));
  }

  Diagnostics& diag_;
  int source_, col_offset_;
  std::vector<Frame> stack_;
  YamlNode root_;
  bool have_root_ = false;
  int skip_ = 0;  // > 0: inside a rejected container, that many levels deep
  bool too_deep_ = false;
  std::string anchor_name_;
};

// Swallows the events of documents after the first (which are an error).
class NullHandler : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

YamlParseOutcome yaml_tree_parse(const std::string& text, int source, int col_offset, Diagnostics& diag,
                                 YamlNode& out) {
  std::istringstream in(text);
  TreeBuilder builder(diag, source, col_offset);
  try {
    YAML::Parser parser(in);
    if (!parser.HandleNextDocument(builder)) return YamlParseOutcome::Empty;
    NullHandler rest;
    if (parser.HandleNextDocument(rest))
      diag.error(ErrCode::NotSupported, YamlLoc{source, 1, 1 + col_offset},
                 "the file holds more than one YAML document ('---'); a spec is one document");
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own limit, far past ours (reported as it was passed)
    if (!builder.too_deep()) diag.error(ErrCode::NotSupported, builder.loc(e.mark), depth_message());
    return YamlParseOutcome::Failed;
  } catch (const YAML::Exception& e) {
    diag.error(ErrCode::Syntax, builder.loc(e.mark), "YAML syntax error: " + e.msg);
    return YamlParseOutcome::Failed;
  }
  if (!builder.have_root()) return YamlParseOutcome::Empty;
  out = std::move(builder.root());
  return YamlParseOutcome::Document;
}

namespace {

struct PathSegment {
  std::string name;
  int col = 1;  // 1-based column in the override text
};

// Splits "a.b.c" into segments; false when a segment is empty.
bool split_path(const std::string& key, std::vector<PathSegment>& out) {
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    std::string seg = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (seg.empty()) return false;
    out.push_back(PathSegment{seg, static_cast<int>(start) + 1});
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool parse_index(const std::string& s, size_t& out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  out = static_cast<size_t>(std::stoul(s));
  return true;
}

// The child of `node` named by `seg` (a key of a map or an index of a list); a missing map key is added holding an
// empty map, and a null node becomes a map. Reports and returns nullptr when the path cannot go on.
YamlNode* step_into(YamlNode& node, const PathSegment& seg, const std::string& parent_path, int source,
                    Diagnostics& diag) {
  YamlLoc seg_loc{source, 1, seg.col};
  if (node.kind == YamlNode::Kind::Bad) return nullptr;  // already reported
  if (node.kind == YamlNode::Kind::Null) {
    node.kind = YamlNode::Kind::Map;
    node.loc = seg_loc;
  }
  if (node.kind == YamlNode::Kind::Seq) {
    size_t index = 0;
    if (!parse_index(seg.name, index)) {
      diag.error(ErrCode::WrongType, seg_loc,
                 "'" + parent_path + "' is a list; expected an item index, got '" + seg.name + "'");
      return nullptr;
    }
    if (index >= node.items.size()) {
      diag.error(ErrCode::OutOfRange, seg_loc,
                 "index " + seg.name + " is out of range for '" + parent_path + "' (" +
                     std::to_string(node.items.size()) + " items)");
      return nullptr;
    }
    return &node.items[index];
  }
  if (node.kind != YamlNode::Kind::Map) {
    diag.error(ErrCode::WrongType, seg_loc,
               "cannot set '" + parent_path + "." + seg.name + "': '" + parent_path + "' is " +
                   yaml_describe(node) + ", not a map");
    return nullptr;
  }
  if (YamlNode* child = node.find(seg.name)) return child;
  node.keys.push_back(seg.name);
  node.key_locs.push_back(seg_loc);
  YamlNode fresh;
  fresh.kind = YamlNode::Kind::Map;
  fresh.loc = seg_loc;
  node.items.push_back(std::move(fresh));
  return &node.items.back();
}

}  // namespace

void yaml_tree_apply_override(YamlNode& root, const std::string& override_text, int source, Diagnostics& diag) {
  if (override_text.size() > kMaxOverrideBytes) {  // as a spec file: bounds the parser's work
    diag.error(ErrCode::Invalid, YamlLoc{source, 1, 1},
               "override is " + std::to_string(override_text.size()) + " bytes; the limit is 1 MiB (" +
                   std::to_string(kMaxOverrideBytes) + " bytes)");
    return;
  }
  size_t eq = override_text.find('=');
  std::vector<PathSegment> path;
  if (eq == std::string::npos || eq == 0 || !split_path(override_text.substr(0, eq), path)) {
    diag.error(ErrCode::Syntax, YamlLoc{source, 1, 1}, "expected key.path=value, got '" + override_text + "'");
    return;
  }
  YamlNode value;
  YamlParseOutcome outcome =
      yaml_tree_parse(override_text.substr(eq + 1), source, static_cast<int>(eq) + 1, diag, value);
  if (outcome == YamlParseOutcome::Failed) return;
  if (outcome == YamlParseOutcome::Empty) value.loc = YamlLoc{source, 1, static_cast<int>(eq) + 2};

  YamlNode* node = &root;
  std::string node_path;
  for (size_t i = 0; i + 1 < path.size() && node; ++i) {
    node = step_into(*node, path[i], node_path.empty() ? "(top level)" : node_path, source, diag);
    node_path += (node_path.empty() ? "" : ".") + path[i].name;
  }
  if (!node) return;
  // The last segment: an existing key or list item is replaced, a missing key added.
  const std::string parent = node_path.empty() ? "(top level)" : node_path;
  if (YamlNode* target = step_into(*node, path.back(), parent, source, diag)) *target = std::move(value);
}

}  // namespace trctl::spec_detail
