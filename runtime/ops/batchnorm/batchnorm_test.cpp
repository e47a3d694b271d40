// Batch norm CPU reference: forward vs a direct float64 loop, PyTorch's running-stat rule on hand-computed values,
// eval mode, backward vs float64 finite differences, and thread-count independence.
#include <catch2/catch.hpp>

#include <cmath>

#include "runtime/ops/batchnorm/batchnorm.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

// Direct training-mode forward: y (rows,c) from x (rows,c) with the batch mean and biased variance.
std::vector<double> naive_train_fwd(const std::vector<double>& x, const std::vector<double>& gamma,
                                    const std::vector<double>& beta, int64_t rows, int64_t c, double eps) {
  std::vector<double> y(rows * c);
  for (int64_t j = 0; j < c; ++j) {
    double mean = 0, var = 0;
    for (int64_t r = 0; r < rows; ++r) mean += x[r * c + j] / rows;
    for (int64_t r = 0; r < rows; ++r) var += (x[r * c + j] - mean) * (x[r * c + j] - mean) / rows;
    for (int64_t r = 0; r < rows; ++r) y[r * c + j] = (x[r * c + j] - mean) / std::sqrt(var + eps) * gamma[j] + beta[j];
  }
  return y;
}

}  // namespace

TEST_CASE("batchnorm training forward normalises each channel with the batch mean and biased variance",
          "[ops][batchnorm]") {
  const int64_t rows = 2 * 3 * 5, c = 7;  // N=2, H=3, W=5, C=7
  const double eps = 1e-5;
  auto x = random_vec(rows * c, 1, -2, 3), gamma = random_vec(c, 2, 0.5, 1.5), beta = random_vec(c, 3);
  std::vector<double> y(rows * c), mean(c), invstd(c);
  batchnorm_fwd_train_cpu<double>(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(), nullptr,
                                  nullptr, rows, c, eps, 0.1, nullptr);
  Diff d = diff(y, naive_train_fwd(x, gamma, beta, rows, c, eps));
  INFO(d.str());
  CHECK(d.rel < 1e-13);
  for (int64_t j = 0; j < c; ++j) {
    double m = 0, v = 0;
    for (int64_t r = 0; r < rows; ++r) m += x[r * c + j] / rows;
    for (int64_t r = 0; r < rows; ++r) v += (x[r * c + j] - m) * (x[r * c + j] - m) / rows;
    CHECK(mean[j] == Approx(m).epsilon(1e-13));
    CHECK(invstd[j] == Approx(1.0 / std::sqrt(v + eps)).epsilon(1e-13));
  }
  // The float instantiation accumulates in double: it agrees with the double result to float precision.
  std::vector<float> xf(x.begin(), x.end()), gf(gamma.begin(), gamma.end()), bf(beta.begin(), beta.end());
  std::vector<float> yf(rows * c), mf(c), sf(c);
  batchnorm_fwd_train_cpu<float>(xf.data(), gf.data(), bf.data(), yf.data(), mf.data(), sf.data(), nullptr, nullptr,
                                 rows, c, eps, 0.1, nullptr);
  Diff df = diff(yf, y);
  INFO(df.str());
  CHECK(df.rel < 1e-6);
}

TEST_CASE("batchnorm running statistics follow PyTorch's momentum rule with the unbiased variance",
          "[ops][batchnorm]") {
  // Channel 0 = {1,2,3,4}: mean 2.5, biased var 1.25, unbiased 5/3. Channel 1 = {-1,-1,3,3}: mean 1, var 4, 16/3.
  const std::vector<double> x = {1, -1, 2, -1, 3, 3, 4, 3}, gamma = {1, 1}, beta = {0, 0};
  std::vector<double> y(8), mean(2), invstd(2), rm = {0.5, 0.0}, rv = {2.0, 1.0};
  batchnorm_fwd_train_cpu<double>(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(),
                                  rm.data(), rv.data(), 4, 2, 1e-5, 0.1, nullptr);
  CHECK(mean[0] == Approx(2.5).epsilon(1e-15));
  CHECK(mean[1] == Approx(1.0).epsilon(1e-15));
  CHECK(invstd[0] == Approx(1.0 / std::sqrt(1.25 + 1e-5)).epsilon(1e-15));
  CHECK(invstd[1] == Approx(1.0 / std::sqrt(4.0 + 1e-5)).epsilon(1e-15));
  CHECK(rm[0] == Approx(0.9 * 0.5 + 0.1 * 2.5).epsilon(1e-15));
  CHECK(rm[1] == Approx(0.1).epsilon(1e-15));
  CHECK(rv[0] == Approx(0.9 * 2.0 + 0.1 * 5.0 / 3.0).epsilon(1e-15));
  CHECK(rv[1] == Approx(0.9 * 1.0 + 0.1 * 16.0 / 3.0).epsilon(1e-15));
  // nullptr running stats: skipped, the rest is unchanged.
  std::vector<double> y2(8), mean2(2), invstd2(2);
  batchnorm_fwd_train_cpu<double>(x.data(), gamma.data(), beta.data(), y2.data(), mean2.data(), invstd2.data(),
                                  nullptr, nullptr, 4, 2, 1e-5, 0.1, nullptr);
  CHECK(y2 == y);
  CHECK(mean2 == mean);
}

TEST_CASE("batchnorm eval forward uses the running statistics", "[ops][batchnorm]") {
  const int64_t rows = 6, c = 3;
  auto x = random_vec(rows * c, 5), gamma = random_vec(c, 6), beta = random_vec(c, 7);
  auto rm = random_vec(c, 8), rv = random_vec(c, 9, 0.5, 2.0);
  std::vector<double> y(rows * c), ref(rows * c);
  batchnorm_fwd_eval_cpu<double>(x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), y.data(), rows, c, 1e-3,
                                 nullptr);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c; ++j)
      ref[r * c + j] = (x[r * c + j] - rm[j]) / std::sqrt(rv[j] + 1e-3) * gamma[j] + beta[j];
  Diff d = diff(y, ref);
  INFO(d.str());
  CHECK(d.rel < 1e-14);
}

TEST_CASE("batchnorm backward matches float64 finite differences for x, gamma and beta",
          "[ops][batchnorm][gradcheck]") {
  const int64_t rows = 3 * 2 * 2, c = 5;  // N=3, H=2, W=2, C=5
  const double eps = 1e-5;
  auto x = random_vec(rows * c, 21, -1, 2), gamma = random_vec(c, 22, 0.5, 1.5), beta = random_vec(c, 23);
  auto r = random_vec(rows * c, 24);  // L = sum(y * r), so dy = r
  auto loss = [&] {
    std::vector<double> y(rows * c), m(c), s(c);
    batchnorm_fwd_train_cpu<double>(x.data(), gamma.data(), beta.data(), y.data(), m.data(), s.data(), nullptr,
                                    nullptr, rows, c, eps, 0.1, nullptr);
    return dot(y, r);
  };
  std::vector<double> y(rows * c), m(c), s(c), dx(rows * c), dgamma(c), dbeta(c);
  batchnorm_fwd_train_cpu<double>(x.data(), gamma.data(), beta.data(), y.data(), m.data(), s.data(), nullptr, nullptr,
                                  rows, c, eps, 0.1, nullptr);
  batchnorm_grad_cpu<double>(r.data(), x.data(), gamma.data(), m.data(), s.data(), dx.data(), dgamma.data(),
                             dbeta.data(), rows, c, nullptr);
  Diff ex = diff(dx, numeric_grad(loss, x)), eg = diff(dgamma, numeric_grad(loss, gamma));
  Diff eb = diff(dbeta, numeric_grad(loss, beta));
  INFO("dx " << ex.str() << "; dgamma " << eg.str() << "; dbeta " << eb.str());
  CHECK(ex.rel < 1e-7);
  CHECK(eg.rel < 1e-7);
  CHECK(eb.rel < 1e-7);
}

TEST_CASE("batchnorm float results are bitwise reproducible and independent of the thread count",
          "[ops][batchnorm]") {
  const int64_t rows = 37, c = 70;
  auto xd = random_vec(rows * c, 31), gd = random_vec(c, 32), bd = random_vec(c, 33), dyd = random_vec(rows * c, 34);
  std::vector<float> x(xd.begin(), xd.end()), g(gd.begin(), gd.end()), b(bd.begin(), bd.end());
  std::vector<float> dy(dyd.begin(), dyd.end());
  struct Out {
    std::vector<float> y, mean, invstd, rm, rv, dx, dg, db;
  };
  auto run = [&](ThreadPool* pool) {
    Out o{std::vector<float>(rows * c), std::vector<float>(c), std::vector<float>(c), std::vector<float>(c, 0.f),
          std::vector<float>(c, 1.f), std::vector<float>(rows * c), std::vector<float>(c), std::vector<float>(c)};
    batchnorm_fwd_train_cpu<float>(x.data(), g.data(), b.data(), o.y.data(), o.mean.data(), o.invstd.data(),
                                   o.rm.data(), o.rv.data(), rows, c, 1e-5, 0.1, pool);
    batchnorm_grad_cpu<float>(dy.data(), x.data(), g.data(), o.mean.data(), o.invstd.data(), o.dx.data(),
                              o.dg.data(), o.db.data(), rows, c, pool);
    return o;
  };
  ThreadPool p1(1), p4(4);
  const Out a = run(nullptr), b1 = run(&p1), b4 = run(&p4), again = run(&p4);
  for (const Out* o : {&b1, &b4, &again}) {
    CHECK(o->y == a.y);
    CHECK(o->mean == a.mean);
    CHECK(o->invstd == a.invstd);
    CHECK(o->rm == a.rm);
    CHECK(o->rv == a.rv);
    CHECK(o->dx == a.dx);
    CHECK(o->dg == a.dg);
    CHECK(o->db == a.db);
  }
}
