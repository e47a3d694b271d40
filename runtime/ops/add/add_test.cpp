// Add op: values and gradient (d(a+b)/da = d(a+b)/db = 1).
#include <catch2/catch.hpp>

#include "runtime/ops/add/add.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

TEST_CASE("add sums elementwise and its gradient is the identity for both inputs", "[ops][add][gradcheck]") {
  auto a = random_vec(10, 1), b = random_vec(10, 2), dy = random_vec(10, 3);
  std::vector<double> out(10);
  add_cpu(a.data(), b.data(), out.data(), 10);
  for (int i = 0; i < 10; ++i) CHECK(out[i] == a[i] + b[i]);
  auto loss = [&] {
    std::vector<double> o(10);
    add_cpu(a.data(), b.data(), o.data(), 10);
    return dot(o, dy);
  };
  CHECK(diff(numeric_grad(loss, a), dy).rel < 1e-8);
  CHECK(diff(numeric_grad(loss, b), dy).rel < 1e-8);
}
