// Strict recursive-descent parser for the safetensors header JSON subset, and string quoting for the writer.
#include "core/ckpt/json_subset.h"

#include <cstdio>

namespace trctl {

const JsonValue* JsonValue::find(const std::string& key) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

namespace {

constexpr int kMaxDepth = 16;  // safetensors headers nest 3 deep; this bounds recursion on hostile input

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void put_utf8(std::string& o, uint32_t cp) {
  if (cp < 0x80) {
    o += static_cast<char>(cp);
  } else if (cp < 0x800) {
    o += static_cast<char>(0xC0 | (cp >> 6));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    o += static_cast<char>(0xE0 | (cp >> 12));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    o += static_cast<char>(0xF0 | (cp >> 18));
    o += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

struct Parser {
  const std::string& s;
  const std::string& where;
  int64_t base = 0;
  size_t pos = 0;
  std::vector<Error> err;

  bool fail(size_t at, const std::string& msg) {
    if (err.empty())
      err.push_back({ErrCode::Format, where + ":offset " + std::to_string(base + static_cast<int64_t>(at)),
                     "invalid JSON header: " + msg});
    return false;
  }
  void skip_ws() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r')) ++pos;
  }
  bool expect(char c) {
    skip_ws();
    if (pos >= s.size()) return fail(pos, std::string("expected '") + c + "', found the end of the header");
    if (s[pos] != c) return fail(pos, std::string("expected '") + c + "', found '" + s[pos] + "'");
    ++pos;
    return true;
  }
  bool hex4(uint32_t& out) {
    if (pos + 4 > s.size()) return fail(pos, "truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      int d = hex_digit(s[pos]);
      if (d < 0) return fail(pos, "bad hex digit in \\u escape");
      out = out * 16 + static_cast<uint32_t>(d);
      ++pos;
    }
    return true;
  }
  bool unicode_escape(std::string& out) {
    size_t at = pos - 2;
    uint32_t cp = 0;
    if (!hex4(cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(at, "unpaired low surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      uint32_t lo = 0;
      if (pos + 2 > s.size() || s[pos] != '\\' || s[pos + 1] != 'u') return fail(at, "unpaired high surrogate");
      pos += 2;
      if (!hex4(lo)) return false;
      if (lo < 0xDC00 || lo > 0xDFFF) return fail(at, "bad low surrogate in \\u escape");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    put_utf8(out, cp);
    return true;
  }
  bool escape(std::string& out) {
    char e = s[pos++];
    switch (e) {
      case '"': out += '"'; return true;
      case '\\': out += '\\'; return true;
      case '/': out += '/'; return true;
      case 'b': out += '\b'; return true;
      case 'f': out += '\f'; return true;
      case 'n': out += '\n'; return true;
      case 'r': out += '\r'; return true;
      case 't': out += '\t'; return true;
      case 'u': return unicode_escape(out);
      default: return fail(pos - 2, std::string("bad escape '\\") + e + "'");
    }
  }
  bool string(std::string& out) {
    skip_ws();
    if (pos >= s.size() || s[pos] != '"') return fail(pos, "expected a string");
    size_t start = pos++;
    while (true) {
      if (pos >= s.size()) return fail(start, "unterminated string");
      unsigned char c = static_cast<unsigned char>(s[pos++]);
      if (c == '"') return true;
      if (c < 0x20) return fail(pos - 1, "control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos >= s.size()) return fail(start, "unterminated string");
      if (!escape(out)) return false;
    }
  }
  bool integer(int64_t& out) {
    size_t start = pos;
    bool neg = s[pos] == '-';
    if (neg) ++pos;
    if (pos >= s.size() || s[pos] < '0' || s[pos] > '9') return fail(start, "expected a digit");
    if (s[pos] == '0' && pos + 1 < s.size() && s[pos + 1] >= '0' && s[pos + 1] <= '9')
      return fail(start, "leading zero in integer");
    uint64_t v = 0;
    const uint64_t limit = neg ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX);
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      uint64_t d = static_cast<uint64_t>(s[pos++] - '0');
      if (v > (limit - d) / 10) return fail(start, "integer out of range");
      v = v * 10 + d;
    }
    if (pos < s.size() && (s[pos] == '.' || s[pos] == 'e' || s[pos] == 'E'))
      return fail(start, "only integers are allowed (no fractions or exponents)");
    out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
    return true;
  }
  // After an element: ',' continues (true, more = true), `close` ends (true, more = false).
  bool next_or_close(char close, bool& more) {
    skip_ws();
    if (pos < s.size() && s[pos] == ',') {
      ++pos;
      more = true;
      return true;
    }
    more = false;
    return expect(close);
  }
  bool object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::Object;
    ++pos;
    skip_ws();
    if (pos < s.size() && s[pos] == '}') return ++pos, true;
    for (bool more = true; more;) {
      skip_ws();
      size_t key_at = pos;
      std::string key;
      if (!string(key)) return false;
      if (v.find(key)) return fail(key_at, "duplicate key \"" + key + "\"");
      if (!expect(':')) return false;
      JsonValue item;
      if (!value(item, depth + 1)) return false;
      v.keys.push_back(std::move(key));
      v.items.push_back(std::move(item));
      if (!next_or_close('}', more)) return false;
    }
    return true;
  }
  bool array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::Array;
    ++pos;
    skip_ws();
    if (pos < s.size() && s[pos] == ']') return ++pos, true;
    for (bool more = true; more;) {
      JsonValue item;
      if (!value(item, depth + 1)) return false;
      v.items.push_back(std::move(item));
      if (!next_or_close(']', more)) return false;
    }
    return true;
  }
  bool value(JsonValue& v, int depth) {
    skip_ws();
    if (depth > kMaxDepth) return fail(pos, "nested too deeply");
    if (pos >= s.size()) return fail(pos, "expected a value, found the end of the header");
    v.offset = base + static_cast<int64_t>(pos);
    char c = s[pos];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v.kind = JsonValue::Kind::String;
      return string(v.text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::Kind::Int;
      return integer(v.integer);
    }
    return fail(pos, std::string("unexpected character '") + c + "' (only objects, arrays, strings, integers)");
  }
};

}  // namespace

Result<JsonValue> json_parse(const std::string& text, const std::string& where, int64_t base_offset) {
  Parser p{text, where, base_offset, 0, {}};
  JsonValue v;
  if (!p.value(v, 0)) return p.err;
  p.skip_ws();
  if (p.pos != text.size()) {
    p.fail(p.pos, "unexpected data after the JSON value");
    return p.err;
  }
  return v;
}

std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      case '\b': o += "\\b"; break;
      case '\f': o += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += ch;
        }
    }
  }
  return o + "\"";
}

}  // namespace trctl
