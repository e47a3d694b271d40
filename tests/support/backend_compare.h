// Test helper for compiler-pass tests that run one spec compiled two ways on the CPU backend and compare the
// results bitwise: a program's index by name, bit equality of doubles, and a byte comparison of one memory region
// of two backends (Catch2 assertions).
#pragma once
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "core/compiler.h"
#include "runtime/backend.h"

namespace trctl::testing {

inline int program_index(const Compiled& c, const std::string& name) {
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == name) return static_cast<int>(i);
  FAIL("no program " << name);
  return -1;
}

inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The region r of backends a and b holds the same bytes.
inline void check_same_region(Backend& a, Backend& b, Region r, const std::string& what) {
  const std::vector<std::byte> ra = a.read_region(r), rb = b.read_region(r);
  INFO(what << " (" << to_string(r) << ")");
  REQUIRE(ra.size() == rb.size());
  CHECK(std::memcmp(ra.data(), rb.data(), ra.size()) == 0);
}

}  // namespace trctl::testing
