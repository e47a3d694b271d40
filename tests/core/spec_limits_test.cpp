// The spec loader's resource limits on hostile YAML: alias bombs, 10,000-deep nesting (flow and block style),
// 2 MiB scalars and maps of 100,000 keys are rejected (or reported) with located errors, each well under a second
// and without exhausting the stack or memory. (The loader's fuzz target is tests/fuzz/fuzz_spec.cpp.)
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "core/spec/spec.h"
#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

const std::string kModel(kMinimal);
constexpr double kBoundSeconds = 0.5;  // each input below parses in milliseconds; this only catches blow-ups

// spec_parse, with its wall time in *seconds.
Result<Spec> timed_parse(const std::string& yaml, double* seconds, const std::vector<std::string>& overrides = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<Spec> r = parse(yaml, overrides);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * size_t(n));
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

TEST_CASE("a billion-laughs alias bomb is rejected at its anchors without being expanded") {
  // lol9 would expand to 10^9 'lol's; every level is a block-map key whose value is an anchored list.
  std::string bomb = "lol1: &lol1 [" + repeat("lol, ", 9) + "lol]\n";
  for (int level = 2; level <= 9; ++level) {
    const std::string prev = "*lol" + std::to_string(level - 1);
    bomb += "lol" + std::to_string(level) + ": &lol" + std::to_string(level) + " [" + repeat(prev + ", ", 9) + prev +
            "]\n";
  }
  double s = 0;
  Result<Spec> r = timed_parse(bomb + "bomb: *lol9\n" + kModel, &s);
  REQUIRE_FALSE(r.ok());
  CHECK(has_error(r, "test.yaml:1:7: YAML aliases are not supported (found an anchor '&lol1')"));
  CHECK(has_error(r, "test.yaml:9:7: YAML aliases are not supported (found an anchor '&lol9')"));
  CHECK(has_error(r, "test.yaml:10:7: YAML aliases are not supported (found an alias '*...')"));
  CHECK(s < kBoundSeconds);
}

TEST_CASE("an alias bomb through merge keys is rejected") {
  std::string bomb = "a: &a {x: 1, y: 2}\n";
  for (char c = 'b'; c <= 'k'; ++c) {
    const std::string prev(1, char(c - 1));
    bomb += std::string(1, c) + ": &" + c + " {<<: *" + prev + ", " + c + "1: *" + prev + ", " + c + "2: *" + prev +
            "}\n";
  }
  double s = 0;
  Result<Spec> r = timed_parse(bomb + kModel, &s);
  REQUIRE_FALSE(r.ok());
  CHECK(has_error(r, "test.yaml:1:4: YAML aliases are not supported"));
  CHECK(s < kBoundSeconds);
}

TEST_CASE("10,000-deep flow lists are rejected at level 33 with their location") {
  double s = 0;
  Result<Spec> r = timed_parse("model: " + std::string(10000, '[') + std::string(10000, ']') + "\n", &s);
  REQUIRE_FALSE(r.ok());
  // The top-level map is level 1, so the 32nd '[' (column 8 + 31) is level 33.
  CHECK(count_errors(r, "test.yaml:1:39: YAML nesting deeper than 32 levels is not supported") == 1);
  CHECK(s < kBoundSeconds);
}

TEST_CASE("10,000-deep flow maps are rejected at level 33 with their location") {
  double s = 0;
  Result<Spec> r = timed_parse("model: " + repeat("{a: ", 10000) + "x" + std::string(10000, '}') + "\n", &s);
  REQUIRE_FALSE(r.ok());
  CHECK(count_errors(r, "test.yaml:1:" + std::to_string(8 + 31 * 4) + ": YAML nesting deeper than 32 levels") == 1);
  CHECK(s < kBoundSeconds);
}

TEST_CASE("10,000-deep alternating flow lists and maps are rejected") {
  double s = 0;
  Result<Spec> r = timed_parse("model: " + repeat("[{a: ", 5000) + "x" + repeat("}]", 5000) + "\n", &s);
  REQUIRE_FALSE(r.ok());
  CHECK(count_errors(r, "YAML nesting deeper than 32 levels is not supported") == 1);
  CHECK(s < kBoundSeconds);
}

TEST_CASE("10,000-deep block lists ('- - - ...') are rejected at level 33 with their location") {
  double s = 0;
  Result<Spec> r = timed_parse("model:\n" + repeat("- ", 10000) + "x\n", &s);
  REQUIRE_FALSE(r.ok());
  CHECK(count_errors(r, "test.yaml:2:" + std::to_string(1 + 31 * 2) + ": YAML nesting deeper than 32 levels") == 1);
  CHECK(s < kBoundSeconds);
}

TEST_CASE("block maps nested 1,000 deep by indentation are rejected at level 33 with their location") {
  std::string deep = "model:\n";
  for (int i = 1; i <= 1000; ++i) deep += std::string(size_t(i), ' ') + "a:\n";  // ~500 KB, under the 1 MiB limit
  double s = 0;
  Result<Spec> r = timed_parse(deep, &s);
  REQUIRE_FALSE(r.ok());
  INFO(r.errors()[0].str());
  // The top-level map is level 1 and model's value (line 2) level 2, so the map that starts on line 33 is level 33.
  CHECK(count_errors(r, "test.yaml:33:33: YAML nesting deeper than 32 levels") == 1);
  CHECK(s < kBoundSeconds);
}

TEST_CASE("a 2 MiB scalar in the spec is refused by the size limit before parsing") {
  double s = 0;
  Result<Spec> r = timed_parse("run: {name: " + std::string(size_t(2) << 20, 'x') + "}\n" + kModel, &s);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].code == ErrCode::Invalid);
  CHECK(has_error(r, "test.yaml: spec is "));
  CHECK(has_error(r, "the limit is 1 MiB"));
  CHECK(s < kBoundSeconds);
}

TEST_CASE("a 2 MiB scalar in an override is refused by the same limit, located in the override") {
  double s = 0;
  Result<Spec> r = timed_parse(kModel, &s, {"run.name=" + std::string(size_t(2) << 20, 'x')});
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  CHECK(has_error(r, "<override 1>:1:1: override is "));
  CHECK(has_error(r, "the limit is 1 MiB"));
  CHECK(s < kBoundSeconds);
}

TEST_CASE("a scalar of 512 KiB, under the size limit, is parsed in bounded time") {
  double s = 0;
  Result<Spec> r = timed_parse("run: {name: " + std::string(size_t(512) << 10, 'x') + "}\n" + kModel, &s);
  CHECK(count_errors(r, "YAML") == 0);  // whatever run.name allows, the YAML itself is fine
  CHECK(s < kBoundSeconds);
}

TEST_CASE("a map of 30,000 unknown keys is reported key by key in linear time") {
  // Duplicate detection searched the keys read so far for each key: minutes for a 1 MiB map.
  std::string many;
  int n = 0;
  while (n < 30000) many += "k" + std::to_string(n++) + ": 0\n";
  double s = 0;
  Result<Spec> r = timed_parse(many, &s);
  REQUIRE_FALSE(r.ok());
  CHECK(count_errors(r, "unknown key 'k") == size_t(n));
  CHECK(has_error(r, "test.yaml:1:1: unknown key 'k0' at the top level"));
  CHECK(s < kBoundSeconds);
}

TEST_CASE("40,000 duplicates of one key are each reported against the first in bounded time") {
  double s = 0;
  Result<Spec> r = timed_parse(kModel + "data:\n" + repeat("  workers: 1\n", 40000), &s);
  REQUIRE_FALSE(r.ok());
  CHECK(count_errors(r, "duplicate key 'workers' (first given at test.yaml:6:3)") == 39999);
  CHECK(has_error(r, "test.yaml:7:3: duplicate key 'workers'"));
  CHECK(s < kBoundSeconds);
}

TEST_CASE("a list of 20,000 layers is read in linear time") {
  // The layer-input check rebuilt the list of earlier names for every layer: 30 s for 50,000 layers.
  double s = 0;
  Result<Spec> r = timed_parse("model:\n  layers:\n" + repeat("    - {type: relu}\n", 20000), &s);
  CHECK(r.ok());
  CHECK(s < kBoundSeconds);
}

TEST_CASE("10,000 layers naming unknown inputs are all reported in bounded time, the first 16 with suggestions") {
  std::string layers = "model:\n  layers:\n    - {type: flatten, name: f}\n";
  for (int i = 0; i < 10000; ++i) layers += "    - {type: add, inputs: [g, fx" + std::to_string(i) + "]}\n";
  double s = 0;
  Result<Spec> r = timed_parse(layers, &s);
  REQUIRE_FALSE(r.ok());
  CHECK(count_errors(r, "unknown input 'g'") == 10000);
  CHECK(count_errors(r, "unknown input 'g' for layer 'add1' (did you mean 'f'?)") == 1);
  CHECK(count_errors(r, "(did you mean") == 16);
  CHECK(s < kBoundSeconds);
}

TEST_CASE("an unknown name of 1,000,000 characters is reported in bounded time") {
  // (Keys are at most 1024 characters in YAML; a long value goes through the same suggestion search.)
  double s = 0;
  Result<Spec> r = timed_parse(kModel + "optimizer: {type: " + std::string(1000000, 'k') + "}\n", &s);
  REQUIRE_FALSE(r.ok());
  INFO(r.errors()[0].str().substr(0, 200));
  CHECK(count_errors(r, "test.yaml:5:19: ") == 1);
  CHECK(s < kBoundSeconds);
}
