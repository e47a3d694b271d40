// The strict JSON reader of trctl report (runtime/report/json.h): what it accepts, what it refuses, and that every
// refusal names the byte offset.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/report/json.h"

using namespace trctl;

namespace {

JsonNode parsed(const std::string& text) {
  Result<JsonNode> r = json_read(text, "t.json");
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

// The error of a document that must be refused.
Error refused(const std::string& text) {
  Result<JsonNode> r = json_read(text, "t.json");
  INFO("accepted: " << text);
  REQUIRE_FALSE(r.ok());
  return r.errors().front();
}

}  // namespace

TEST_CASE("objects, arrays, strings, numbers and literals are read, members in order", "[report][json]") {
  const JsonNode v = parsed(R"( {"b": [1, -2.5e-3, 0, 1E+2], "a": {"t": true, "f": false, "n": null}, "s": "x"} )");
  REQUIRE(v.is_object());
  REQUIRE(v.object.size() == 3);
  CHECK(v.object[0].first == "b");
  CHECK(v.object[1].first == "a");
  const JsonNode* b = v.find("b");
  REQUIRE(b);
  REQUIRE(b->array.size() == 4);
  CHECK(b->array[0].number == 1);
  CHECK(b->array[1].number == Approx(-0.0025));
  CHECK(b->array[2].number == 0);
  CHECK(b->array[3].number == 100);
  CHECK(v.find("a")->find("t")->boolean);
  CHECK(v.find("a")->find("f")->kind == JsonKind::Bool);
  CHECK_FALSE(v.find("a")->find("f")->boolean);
  CHECK(v.find("a")->find("n")->is_null());
  CHECK(v.find("s")->string == "x");
  CHECK(v.find("missing") == nullptr);
  CHECK(parsed("[]").array.empty());
  CHECK(parsed("{}").object.empty());
  CHECK(parsed("\"top\"").string == "top");
}

TEST_CASE("string escapes are resolved, unicode escapes and surrogate pairs into UTF-8", "[report][json]") {
  CHECK(parsed(R"("a\"b\\c\/d\n\t\r\b\f")").string == "a\"b\\c/d\n\t\r\b\f");
  CHECK(parsed(R"("\u00e9")").string == "\xc3\xa9");                // é
  CHECK(parsed(R"("\u20AC")").string == "\xe2\x82\xac");            // €
  CHECK(parsed(R"("\ud83d\ude00")").string == "\xf0\x9f\x98\x80");  // U+1F600
  CHECK(parsed("\"caf\xc3\xa9\"").string == "caf\xc3\xa9");         // raw UTF-8 passes through
}

TEST_CASE("numbers follow the JSON grammar: no leading zeros, bare points, plus signs or NaN", "[report][json]") {
  for (const char* bad : {"01", "1.", ".5", "+1", "-", "1e", "1e+", "NaN", "Infinity", "-Infinity", "0x10"})
    CHECK(refused(bad).message.find("malformed JSON") != std::string::npos);
  CHECK(parsed("-0").number == 0);
  CHECK(parsed("123456789012").number == 123456789012.0);
  CHECK(refused("1e999").message.find("out of range") != std::string::npos);
}

TEST_CASE("a malformed document is refused with its byte offset, line and column", "[report][json]") {
  Error e = refused(R"({"a": 1,})");
  CHECK(e.code == ErrCode::Syntax);
  CHECK(e.where == "t.json:offset 8 (line 1, column 9)");
  CHECK(e.message.find("string key") != std::string::npos);
  e = refused("{\n  \"a\": 1\n  \"b\": 2\n}");
  CHECK(e.where == "t.json:offset 13 (line 3, column 3)");
  CHECK(e.message.find("expected ',' or '}'") != std::string::npos);
  CHECK(refused("[1, 2,]").where == "t.json:offset 6 (line 1, column 7)");
  CHECK(refused("[1 2]").where == "t.json:offset 3 (line 1, column 4)");
}

TEST_CASE("trailing data, duplicate keys, raw control characters and bad escapes are refused", "[report][json]") {
  CHECK(refused("{} x").message.find("after the JSON value") != std::string::npos);
  CHECK(refused("").message.find("end of input") != std::string::npos);
  Error dup = refused(R"({"k": 1, "k": 2})");
  CHECK(dup.message.find("duplicate key \"k\"") != std::string::npos);
  CHECK(dup.where == "t.json:offset 9 (line 1, column 10)");
  CHECK(refused("\"a\tb\"").message.find("control character") != std::string::npos);
  CHECK(refused(R"("abc)").message.find("unterminated") != std::string::npos);
  CHECK(refused(R"("\x")").message.find("invalid escape") != std::string::npos);
  CHECK(refused(R"("\u12G4")").message.find("hex digit") != std::string::npos);
  CHECK(refused(R"("\ud83d")").message.find("surrogate") != std::string::npos);
  CHECK(refused(R"("\ude00")").message.find("surrogate") != std::string::npos);
  CHECK(refused("tru").message.find("expected a value") != std::string::npos);
  CHECK(refused("{'a': 1}").message.find("string key") != std::string::npos);
  CHECK(refused("[1] // comment").message.find("after the JSON value") != std::string::npos);
}

TEST_CASE("nesting deeper than 256 levels is refused instead of exhausting the stack", "[report][json]") {
  CHECK(parsed(std::string(200, '[') + std::string(200, ']')).is_array());
  CHECK(refused(std::string(100000, '[')).message.find("nesting") != std::string::npos);
}

TEST_CASE("a line of a JSON Lines file reports the file's offset and line", "[report][json]") {
  Result<JsonNode> r = json_read("{\"a\": ?}", "m.jsonl", 120, 7);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().front().where == "m.jsonl:offset 126 (line 7, column 7)");
}

TEST_CASE("a missing file is an Io error naming it", "[report][json]") {
  Result<JsonNode> r = json_read_file("/nonexistent/trctl/result.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().front().code == ErrCode::Io);
  CHECK(r.errors().front().where == "/nonexistent/trctl/result.json");
}
