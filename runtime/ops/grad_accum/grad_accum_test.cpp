// GradAccumulate, CPU reference: micro-batch adds then a flush leave the sum in the gradients and zero accumulators
// (the same sums as summing the micro-batch gradients in order); the flush's gradient is the identity for both
// inputs (float64 finite differences).
#include <catch2/catch.hpp>

#include "runtime/ops/grad_accum/grad_accum.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

TEST_CASE("grad accumulation: micro-batch adds then a flush give the sum and clear the accumulators",
          "[ops][grad_accum]") {
  const int64_t n = 37;
  const auto g1 = random_vec(n, 1), g2 = random_vec(n, 2), g3 = random_vec(n, 3);
  std::vector<float> acc(n, 0.0f), g(n);
  std::vector<float> f1(g1.begin(), g1.end()), f2(g2.begin(), g2.end()), f3(g3.begin(), g3.end());
  grad_accum_add_cpu(f1.data(), acc.data(), n);  // micro-batch 1
  for (int64_t i = 0; i < n; ++i) CHECK(acc[i] == f1[i]);
  grad_accum_add_cpu(f2.data(), acc.data(), n);  // micro-batch 2
  g = f3;                                          // the flush step's own gradient
  grad_accum_flush_cpu(g.data(), acc.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    CHECK(g[i] == f3[i] + (f1[i] + f2[i]));  // the order the trainer's steps add in, bitwise
    CHECK(acc[i] == 0.0f);
  }
  // A flush with empty accumulators (k = 1 worth of micro-batches, or an epoch's lone last step) changes nothing.
  std::vector<float> same = f3;
  grad_accum_flush_cpu(same.data(), acc.data(), n);
  CHECK(same == f3);
}

TEST_CASE("grad accumulation flush: the gradient of the sum is the identity for both inputs",
          "[ops][grad_accum][gradcheck]") {
  auto g = random_vec(12, 4), acc = random_vec(12, 5), dy = random_vec(12, 6);
  auto loss = [&] {
    std::vector<double> gg = g, aa = acc;
    grad_accum_flush_cpu(gg.data(), aa.data(), 12);
    return dot(gg, dy);
  };
  CHECK(diff(numeric_grad(loss, g), dy).rel < 1e-8);
  CHECK(diff(numeric_grad(loss, acc), dy).rel < 1e-8);
  auto loss_add = [&] {
    std::vector<double> aa = acc;
    grad_accum_add_cpu(g.data(), aa.data(), 12);
    return dot(aa, dy);
  };
  CHECK(diff(numeric_grad(loss_add, g), dy).rel < 1e-8);
}
