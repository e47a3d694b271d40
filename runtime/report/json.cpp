// json_read: a recursive-descent reader of strict JSON into JsonNode (byte-offset errors); json_number.
#include "runtime/report/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace trctl {

const JsonNode* JsonNode::find(const std::string& key) const {
  if (kind != JsonKind::Object) return nullptr;
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

namespace {

constexpr int kMaxDepth = 256;  // nesting beyond this is refused rather than risking the stack

struct Failure {
  size_t offset;
  std::string message;
};

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  // The whole document: one value between optional whitespace.
  JsonNode document() {
    JsonNode v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& message) const { throw Failure{pos_, message}; }
  [[noreturn]] void fail_at(size_t at, const std::string& message) const { throw Failure{at, message}; }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  bool literal(const char* word) {
    const size_t n = std::strlen(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  JsonNode value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 256 levels");
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end of input, expected a value");
    JsonNode v;
    const char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      v.kind = JsonKind::String;
      v.string = string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    const bool is_true = literal("true");
    if (is_true || literal("false")) {
      v.kind = JsonKind::Bool;
      v.boolean = is_true;
      return v;
    }
    if (literal("null")) return v;
    fail(std::string("unexpected character '") + c + "', expected a value");
  }

  JsonNode object(int depth) {
    JsonNode v;
    v.kind = JsonKind::Object;
    ++pos_;  // '{'
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, v;
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key in the object");
      const size_t key_at = pos_;
      std::string key = string();
      if (v.find(key)) fail_at(key_at, "duplicate key \"" + key + "\"");
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') fail("expected ':' after the object key");
      ++pos_;
      v.object.emplace_back(std::move(key), value(depth + 1));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, v;
      fail("expected ',' or '}' in the object");
    }
  }

  JsonNode array(int depth) {
    JsonNode v;
    v.kind = JsonKind::Array;
    ++pos_;  // '['
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, v;
    for (;;) {
      v.array.push_back(value(depth + 1));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, v;
      fail("expected ',' or ']' in the array");
    }
  }

  // The JSON number grammar checked here; strtod (C locale) converts the validated text.
  JsonNode number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') fail("a number may not have leading zeros");
    } else if (digits() == 0) {
      fail("expected a digit");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("expected a digit after the decimal point");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    JsonNode v;
    v.kind = JsonKind::Number;
    const std::string text = s_.substr(start, pos_ - start);
    errno = 0;
    v.number = std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE && (v.number > 1 || v.number < -1)) fail_at(start, "number out of range: " + text);
    return v;
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("expected 4 hex digits after \\u");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char h = s_[pos_];
      u <<= 4;
      if (h >= '0' && h <= '9') u |= h - '0';
      else if (h >= 'a' && h <= 'f') u |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') u |= h - 'A' + 10;
      else fail("expected a hex digit in the \\u escape");
    }
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // \uXXXX, with a high surrogate required to be followed by its low surrogate.
  unsigned unicode_escape() {
    const size_t at = pos_ - 2;
    unsigned cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(at, "unpaired low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.compare(pos_, 2, "\\u") != 0) fail_at(at, "unpaired high surrogate in a \\u escape");
      pos_ += 2;
      const unsigned lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail_at(at, "a high surrogate must be followed by a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return cp;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') return ++pos_, out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string (must be escaped)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (++pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, unicode_escape()); break;
        default: fail_at(pos_ - 2, std::string("invalid escape '\\") + e + "'");
      }
    }
  }
};

std::string location(const std::string& text, const std::string& name, size_t offset, size_t base_offset,
                     size_t base_line) {
  size_t line = base_line, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') ++line, col = 1;
    else ++col;
  }
  return name + ":offset " + std::to_string(base_offset + offset) + " (line " + std::to_string(line) + ", column " +
         std::to_string(col) + ")";
}

}  // namespace

Result<JsonNode> json_read(const std::string& text, const std::string& name, size_t base_offset,
                           size_t base_line) {
  try {
    return Parser(text).document();
  } catch (const Failure& f) {
    return Error{ErrCode::Syntax, location(text, name, f.offset, base_offset, base_line),
                 "malformed JSON: " + f.message};
  }
}

Result<JsonNode> json_read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error{ErrCode::Io, path, std::string("cannot read: ") + std::strerror(errno)};
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Error{ErrCode::Io, path, "read error"};
  return json_read(ss.str(), path);
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

}  // namespace trctl
