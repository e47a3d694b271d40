// Test helper for compiler-pass tests that run one spec compiled two ways on the CPU backend and compare the
// results bitwise: a program's index by name, bit equality of doubles, a byte comparison of one memory region
// of two backends, and one train step of both on the same batch with everything compared (Catch2 assertions).
#pragma once
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <utility>
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

// One step of train program pa on a and pb on b with the same batch x (batch rows) and labels y, then the losses,
// gradients, weights, running statistics and (opt_state) optimizer state compared bitwise.
inline void step_both_and_compare(Backend& a, int pa, Backend& b, int pb, int step, const std::vector<float>& x,
                                  const std::vector<int32_t>& y, int64_t batch, bool opt_state) {
  for (auto [be, prog] : {std::pair<Backend*, int>{&a, pa}, {&b, pb}}) {
    REQUIRE(be->load_batch(prog, 0, x.data(), y.data(), batch).ok());
    be->set_step(step);
    REQUIRE(be->run(prog, 0).ok());
  }
  CHECK(same_bits(a.last_loss(pa), b.last_loss(pb)));
  check_same_region(a, b, Region::Grads, "gradients");
  check_same_region(a, b, Region::Weights, "weights");
  check_same_region(a, b, Region::Buffers, "running statistics");
  if (opt_state) check_same_region(a, b, Region::OptState, "optimizer state");
}

}  // namespace trctl::testing
