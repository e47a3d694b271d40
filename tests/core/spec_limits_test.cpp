// The spec loader's resource limits on hostile YAML: alias bombs, 10,000-deep nesting (flow and block style),
// 2 MiB scalars (the 1 MiB limit, located at the byte that crosses it) and maps of 100,000 keys are rejected (or
// reported) with located errors, each well under a second and without exhausting the stack or memory. (The
// loader's fuzz target is tests/fuzz/fuzz_spec.cpp.)
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
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

TEST_CASE("a 2 MiB scalar in the spec is refused by the size limit before parsing, at the byte past the limit") {
  double s = 0;
  const std::string yaml = "run: {name: " + std::string(size_t(2) << 20, 'x') + "}\n" + kModel;
  Result<Spec> r = timed_parse(yaml, &s);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].code == ErrCode::Invalid);
  // Byte 1,048,577 (offset 1 MiB) is on line 1, column 1,048,577.
  CHECK(r.errors()[0].str() == "test.yaml:1:1048577: spec is " + std::to_string(yaml.size()) +
                                   " bytes; the limit is 1 MiB (1048576 bytes), crossed here at byte 1048577");
  CHECK(s < kBoundSeconds);
}

TEST_CASE("a spec of many lines over the size limit is located at the line and column of the byte at 1 MiB") {
  // Lines 1-5 (the model, then "data:") are 84 bytes; from line 6 on, 32-byte comment lines. Offset 1,048,576 is
  // 1,048,492 bytes into those: 32,765 whole lines and 12 bytes, so line 6 + 32,765 = 32,771, column 13.
  std::string lines = kModel + "data:\n";
  REQUIRE(lines.size() == 84);
  while (lines.size() < (size_t(3) << 20)) lines += "  # " + std::string(27, 'c') + "\n";
  double s = 0;
  Result<Spec> r = timed_parse(lines, &s);
  REQUIRE(r.errors().size() == 1);
  INFO(r.errors()[0].str());
  CHECK(has_error(r, "test.yaml:32771:13: spec is " + std::to_string(lines.size()) + " bytes"));
  CHECK(s < kBoundSeconds);
  // Exactly 1 MiB is accepted by the size check (the YAML is only comments after data:, which must be a map).
  lines.resize(size_t(1) << 20);
  lines.back() = '\n';
  Result<Spec> at_limit = parse(lines);
  CHECK(count_errors(at_limit, "the limit is 1 MiB") == 0);
}

TEST_CASE("a spec file over the size limit is refused without being read whole, located at the byte at 1 MiB") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("trctl_big_spec_" + std::to_string(::getpid()) + ".yaml")).string();
  {
    std::ofstream f(path, std::ios::binary);
    f << kModel;
    f << "# " << std::string((size_t(1) << 20) + 100 - kModel.size(), 'z') << "\n";  // line 5 crosses the limit
  }
  Result<Spec> r = spec_load(path);
  std::filesystem::remove(path);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  CHECK(r.errors()[0].code == ErrCode::Invalid);
  const size_t col = (size_t(1) << 20) - kModel.size() + 1;
  CHECK(r.errors()[0].str() == path + ":5:" + std::to_string(col) +
                                   ": spec file is too large: the limit is 1 MiB (1048576 bytes), crossed here at "
                                   "byte 1048577");
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
