// Linear op: forward vs a direct loop, and each backward piece vs float64 finite differences.
#include <catch2/catch.hpp>

#include "runtime/ops/linear/linear.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

TEST_CASE("linear forward computes X W^T + b, with the ReLU epilogue when asked", "[ops][linear]") {
  const int64_t n = 5, k = 7, m = 3;
  auto x = random_vec(n * k, 1), w = random_vec(m * k, 2), b = random_vec(m, 3);
  for (bool relu : {false, true}) {
    std::vector<double> y(n * m), ref(n * m);
    linear_fwd_cpu<double>(x.data(), w.data(), b.data(), y.data(), n, k, m, relu, nullptr);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = b[j];
        for (int64_t q = 0; q < k; ++q) s += x[i * k + q] * w[j * k + q];
        ref[i * m + j] = relu ? std::max(s, 0.0) : s;
      }
    Diff d = diff(y, ref);
    INFO(d.str());
    CHECK(d.rel < 1e-14);
  }
}

TEST_CASE("linear backward matches float64 finite differences for X, W and b", "[ops][linear][gradcheck]") {
  const int64_t n = 4, k = 6, m = 5;
  auto x = random_vec(n * k, 11), w = random_vec(m * k, 12), b = random_vec(m, 13);
  auto dy = random_vec(n * m, 14);  // L = sum(dy * Y)
  auto loss = [&] {
    std::vector<double> y(n * m);
    linear_fwd_cpu<double>(x.data(), w.data(), b.data(), y.data(), n, k, m, false, nullptr);
    return dot(y, dy);
  };
  std::vector<double> dx(n * k), dw(m * k), db(m);
  linear_grad_input_cpu<double>(dy.data(), w.data(), dx.data(), n, k, m, nullptr);
  linear_grad_weight_cpu<double>(dy.data(), x.data(), dw.data(), n, k, m, nullptr);
  linear_grad_bias_cpu<double>(dy.data(), db.data(), n, m, nullptr);
  Diff ex = diff(dx, numeric_grad(loss, x)), ew = diff(dw, numeric_grad(loss, w)), eb = diff(db, numeric_grad(loss, b));
  INFO("dX " << ex.str() << "; dW " << ew.str() << "; db " << eb.str());
  CHECK(ex.rel < 1e-8);
  CHECK(ew.rel < 1e-8);
  CHECK(eb.rel < 1e-8);
}

TEST_CASE("linear float results agree with double and do not depend on the thread count", "[ops][linear]") {
  const int64_t n = 33, k = 70, m = 41;
  auto xd = random_vec(n * k, 21), wd = random_vec(m * k, 22), bd = random_vec(m, 23);
  std::vector<float> x(xd.begin(), xd.end()), w(wd.begin(), wd.end()), b(bd.begin(), bd.end());
  std::vector<double> yd(n * m);
  linear_fwd_cpu<double>(xd.data(), wd.data(), bd.data(), yd.data(), n, k, m, true, nullptr);
  std::vector<float> y1(n * m), y4(n * m), db1(m), db4(m);
  ThreadPool p1(1), p4(4);
  linear_fwd_cpu<float>(x.data(), w.data(), b.data(), y1.data(), n, k, m, true, &p1);
  linear_fwd_cpu<float>(x.data(), w.data(), b.data(), y4.data(), n, k, m, true, &p4);
  Diff d = diff(y1, yd);
  INFO(d.str());
  CHECK(d.rel < 1e-5);
  CHECK(y1 == y4);
  linear_grad_bias_cpu<float>(y1.data(), db1.data(), n, m, &p1);
  linear_grad_bias_cpu<float>(y1.data(), db4.data(), n, m, &p4);
  CHECK(db1 == db4);
}
