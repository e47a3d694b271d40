// ReLU op: values and float64 finite-difference gradient (inputs kept away from the kink at 0).
#include <catch2/catch.hpp>

#include "runtime/ops/relu/relu.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

TEST_CASE("relu zeroes negatives and keeps positives", "[ops][relu]") {
  std::vector<float> x = {-2, -0.0f, 0, 0.5f, 3}, y(5);
  relu_fwd_cpu(x.data(), y.data(), 5);
  CHECK(y == std::vector<float>{0, 0, 0, 0.5f, 3});
}

TEST_CASE("relu backward matches float64 finite differences", "[ops][relu][gradcheck]") {
  auto x = random_vec(40, 5);
  for (auto& v : x)
    if (std::abs(v) < 0.05) v += 0.1;  // away from the kink
  auto dy = random_vec(40, 6);
  auto loss = [&] {
    std::vector<double> y(x.size());
    relu_fwd_cpu(x.data(), y.data(), static_cast<int64_t>(x.size()));
    return dot(y, dy);
  };
  std::vector<double> y(x.size()), dx(x.size());
  relu_fwd_cpu(x.data(), y.data(), 40);
  relu_grad_cpu(dy.data(), y.data(), dx.data(), 40);
  Diff d = diff(dx, numeric_grad(loss, x));
  INFO(d.str());
  CHECK(d.rel < 1e-8);
}
