// Test helper (Catch2): a spec compiled as the trainer compiles it (activations stored in its precision's type,
// amp_storage), failing the test case with the compiler's errors otherwise; a spec of configs/ loaded with overrides;
// how many programs of a graph hold a node of a given kind (the programs a per-program count multiplies by).
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/compiler.h"
#include "runtime/train/trainer.h"

namespace trctl::testing {

inline Compiled compile_amp(const Spec& s, bool fold_conv_bias = true) {
  Result<DataShape> d = data_shape(s);
  INFO((d.ok() ? std::string() : d.error_text()));
  REQUIRE(d.ok());
  CompileOptions opt;
  opt.storage = amp_storage(s);
  opt.fold_conv_bias = fold_conv_bias;
  Result<Compiled> c = compile_spec(s, d.value(), opt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return std::move(c.value());
}

// configs/<file> with `overrides` applied (key.sub=value, as on the command line).
inline Spec config_spec(const std::string& file, const std::vector<std::string>& overrides) {
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/" + file, overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

inline int programs_with(const Graph& g, OpKind op) {
  int k = 0;
  for (const Program& p : g.programs) {
    bool any = false;
    for (const Node& n : p.nodes) any |= n.op == op;
    k += any;
  }
  return k;
}

}  // namespace trctl::testing
