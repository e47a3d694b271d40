// Batch norm CPU reference: forward vs a direct float64 loop, PyTorch's running-stat rule on hand-computed values,
// eval mode, backward vs float64 finite differences, and thread-count independence; a folded conv bias (prebias)
// against batch norm of x + b, and finite differences w.r.t. that bias.
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

// ---- a folded conv bias (pass_fold_conv_bias): BN with prebias b on x equals BN on x + b ----

TEST_CASE("batchnorm with a folded conv bias equals batch norm of x + b: output, statistics, eval, backward",
          "[ops][batchnorm][prebias]") {
  const int64_t rows = 4 * 3 * 3, c = 6;
  const double eps = 1e-5, momentum = 0.1;
  auto x = random_vec(rows * c, 41, -1, 2), b = random_vec(c, 42, -3, 3), gamma = random_vec(c, 43, 0.5, 1.5);
  auto beta = random_vec(c, 44), dy = random_vec(rows * c, 45);
  const auto rm0 = random_vec(c, 46), rv0 = random_vec(c, 47, 0.5, 2.0);
  std::vector<double> xb(rows * c);  // x + b
  for (int64_t i = 0; i < rows * c; ++i) xb[i] = x[i] + b[i % c];
  auto rel_ok = [](const std::vector<double>& got, const std::vector<double>& ref, const char* what) {
    const Diff d = diff(got, ref);
    INFO(what << ": " << d.str());
    CHECK(d.rel < 1e-12);
  };

  // Train: the output and invstd are those of x + b; the saved mean is that of x (= mean(x + b) - b); the running
  // statistics are those of x + b.
  std::vector<double> ya(rows * c), ma(c), sa(c), rma = rm0, rva = rv0;
  std::vector<double> yb(rows * c), mb(c), sb(c), rmb = rm0, rvb = rv0;
  batchnorm_fwd_train_cpu<double>(xb.data(), gamma.data(), beta.data(), ya.data(), ma.data(), sa.data(), rma.data(),
                                  rva.data(), rows, c, eps, momentum, nullptr);
  batchnorm_fwd_train_cpu<double>(x.data(), gamma.data(), beta.data(), yb.data(), mb.data(), sb.data(), rmb.data(),
                                  rvb.data(), rows, c, eps, momentum, nullptr, b.data());
  rel_ok(yb, ya, "y");
  rel_ok(sb, sa, "save_invstd");
  std::vector<double> mb_plus_b(c);
  for (int64_t j = 0; j < c; ++j) mb_plus_b[j] = mb[j] + b[j];
  rel_ok(mb_plus_b, ma, "save_mean + b");
  rel_ok(rmb, rma, "running_mean");
  rel_ok(rvb, rva, "running_var");

  // The backward reads x with the saved statistics of x: the same dx, dgamma, dbeta as on x + b with its own.
  std::vector<double> dxa(rows * c), dga(c), dba(c), dxb(rows * c), dgb(c), dbb(c);
  batchnorm_grad_cpu<double>(dy.data(), xb.data(), gamma.data(), ma.data(), sa.data(), dxa.data(), dga.data(),
                             dba.data(), rows, c, nullptr);
  batchnorm_grad_cpu<double>(dy.data(), x.data(), gamma.data(), mb.data(), sb.data(), dxb.data(), dgb.data(),
                             dbb.data(), rows, c, nullptr);
  rel_ok(dxb, dxa, "dx");
  rel_ok(dgb, dga, "dgamma");
  rel_ok(dbb, dba, "dbeta");

  // Eval: running_mean - b in place of running_mean.
  std::vector<double> ea(rows * c), eb(rows * c);
  batchnorm_fwd_eval_cpu<double>(xb.data(), gamma.data(), beta.data(), rm0.data(), rv0.data(), ea.data(), rows, c,
                                 eps, nullptr);
  batchnorm_fwd_eval_cpu<double>(x.data(), gamma.data(), beta.data(), rm0.data(), rv0.data(), eb.data(), rows, c,
                                 eps, nullptr, b.data());
  rel_ok(eb, ea, "eval y");

  // The float instantiation with prebias agrees with the double one to float precision.
  std::vector<float> xf(x.begin(), x.end()), bf(b.begin(), b.end()), gf(gamma.begin(), gamma.end());
  std::vector<float> tf(beta.begin(), beta.end()), rmf(rm0.begin(), rm0.end()), rvf(rv0.begin(), rv0.end());
  std::vector<float> yf(rows * c), mf(c), sf(c), ef(rows * c);
  batchnorm_fwd_eval_cpu<float>(xf.data(), gf.data(), tf.data(), rmf.data(), rvf.data(), ef.data(), rows, c, eps,
                                nullptr, bf.data());
  batchnorm_fwd_train_cpu<float>(xf.data(), gf.data(), tf.data(), yf.data(), mf.data(), sf.data(), rmf.data(),
                                 rvf.data(), rows, c, eps, momentum, nullptr, bf.data());
  const Diff dyf = diff(yf, ya), def = diff(ef, ea), drm = diff(rmf, rma);
  INFO("float y " << dyf.str() << "; eval " << def.str() << "; running_mean " << drm.str());
  CHECK(dyf.rel < 1e-6);
  CHECK(def.rel < 1e-6);
  CHECK(drm.rel < 1e-6);
}

TEST_CASE("batchnorm with a folded conv bias matches float64 finite differences w.r.t. the bias",
          "[ops][batchnorm][prebias][gradcheck]") {
  const int64_t rows = 3 * 2 * 2, c = 5;
  const double eps = 1e-5, momentum = 0.25;
  auto x = random_vec(rows * c, 51, -1, 2), b = random_vec(c, 52, -2, 2), gamma = random_vec(c, 53, 0.5, 1.5);
  auto beta = random_vec(c, 54), w = random_vec(rows * c, 55), u = random_vec(c, 56);
  const auto rm0 = random_vec(c, 57), rv0 = random_vec(c, 58, 0.5, 2.0);
  // Eval: y = (x + b - rm) * gamma / sqrt(rv + eps) + beta, so d sum(w * y) / d b_j = sum_r w[r][j] * scale_j.
  auto eval_loss = [&] {
    std::vector<double> y(rows * c);
    batchnorm_fwd_eval_cpu<double>(x.data(), gamma.data(), beta.data(), rm0.data(), rv0.data(), y.data(), rows, c,
                                   eps, nullptr, b.data());
    return dot(y, w);
  };
  std::vector<double> want(c, 0.0);
  for (int64_t i = 0; i < rows * c; ++i) want[i % c] += w[i] * gamma[i % c] / std::sqrt(rv0[i % c] + eps);
  const Diff de = diff(numeric_grad(eval_loss, b), want);
  INFO("eval: " << de.str());
  CHECK(de.rel < 1e-7);

  // Train: the output does not depend on b (the analytic bias gradient, the column sums of dx, is 0 too), and the
  // running mean moves by momentum * b.
  std::vector<double> rm, rv;
  auto train = [&](std::vector<double>& y) {
    std::vector<double> m(c), s(c);
    rm = rm0, rv = rv0;
    y.resize(rows * c);
    batchnorm_fwd_train_cpu<double>(x.data(), gamma.data(), beta.data(), y.data(), m.data(), s.data(), rm.data(),
                                    rv.data(), rows, c, eps, momentum, nullptr, b.data());
    return std::make_pair(m, s);
  };
  auto train_loss = [&] {
    std::vector<double> y;
    train(y);
    return dot(y, w);
  };
  auto running_loss = [&] {
    std::vector<double> y;
    train(y);
    return dot(rm, u);
  };
  const std::vector<double> num_y = numeric_grad(train_loss, b), num_rm = numeric_grad(running_loss, b);
  std::vector<double> y, dx(rows * c), dg(c), db(c), col_dx(c, 0.0), want_rm(c);
  const auto [m, s] = train(y);
  batchnorm_grad_cpu<double>(w.data(), x.data(), gamma.data(), m.data(), s.data(), dx.data(), dg.data(), db.data(),
                             rows, c, nullptr);
  for (int64_t i = 0; i < rows * c; ++i) col_dx[i % c] += dx[i];
  for (int64_t j = 0; j < c; ++j) want_rm[j] = momentum * u[j];
  const Diff dt = diff(num_y, col_dx), dr = diff(num_rm, want_rm);
  INFO("train output: " << dt.str() << "; running mean: " << dr.str());
  CHECK(dt.max_abs < 1e-8);
  CHECK(dr.rel < 1e-7);
}
