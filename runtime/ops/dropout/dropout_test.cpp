// Dropout op: keep rate, scaling, determinism per (seed, op, step), and the gradient (same mask).
#include <catch2/catch.hpp>

#include "runtime/ops/dropout/dropout.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

TEST_CASE("dropout keeps about 1-p of the elements and scales them by 1/(1-p)", "[ops][dropout]") {
  const int64_t n = 100000;
  const float p = 0.3f;
  std::vector<float> x(n, 1.0f), y(n);
  dropout_fwd_cpu(x.data(), y.data(), n, p, 42, 7, 1);
  int64_t kept = 0;
  const float scale = 1.0f / (1.0f - p);
  for (float v : y) {
    CHECK((v == 0.0f || v == scale));
    kept += v != 0.0f;
  }
  CHECK(std::abs(static_cast<double>(kept) / n - 0.7) < 0.01);
}

TEST_CASE("the dropout mask depends on seed, op and step and is reproducible", "[ops][dropout]") {
  const int64_t n = 1000;
  std::vector<float> x(n, 1.0f), a(n), b(n), c(n), d(n);
  dropout_fwd_cpu(x.data(), a.data(), n, 0.5f, 1, 2, 3);
  dropout_fwd_cpu(x.data(), b.data(), n, 0.5f, 1, 2, 3);
  dropout_fwd_cpu(x.data(), c.data(), n, 0.5f, 1, 2, 4);
  dropout_fwd_cpu(x.data(), d.data(), n, 0.5f, 1, 5, 3);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a != d);
}

TEST_CASE("dropout backward matches float64 finite differences with the same mask", "[ops][dropout][gradcheck]") {
  auto x = random_vec(64, 9), dy = random_vec(64, 10);
  auto loss = [&] {
    std::vector<double> y(64);
    dropout_fwd_cpu(x.data(), y.data(), 64, 0.4f, 3, 1, 2);
    return dot(y, dy);
  };
  std::vector<double> dx(64);
  dropout_grad_cpu(dy.data(), dx.data(), 64, 0.4f, 3, 1, 2);
  Diff e = diff(dx, numeric_grad(loss, x));
  INFO(e.str());
  CHECK(e.rel < 1e-8);
}
