// Loss op (bce_with_logits, mse, weighted cross-entropy): values against textbook float64 formulas written out
// independently here (torch's definitions), gradients against float64 finite differences, bad labels, the
// weighted/smoothed combination and the binary head's accuracy.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "runtime/ops/loss/loss.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

// torch.nn.functional.log_softmax of one row.
std::vector<double> log_softmax(const double* x, int64_t c) {
  double mx = x[0], s = 0;
  for (int64_t j = 1; j < c; ++j) mx = std::max(mx, x[j]);
  for (int64_t j = 0; j < c; ++j) s += std::exp(x[j] - mx);
  std::vector<double> out(c);
  for (int64_t j = 0; j < c; ++j) out[j] = x[j] - mx - std::log(s);
  return out;
}

// ATen's cross_entropy with weight and label_smoothing, reduction mean, written as nll_loss (weighted mean) plus the
// weighted smoothing term over the same denominator.
double torch_weighted_ce(const std::vector<double>& x, const std::vector<int32_t>& y, int64_t c,
                         const std::vector<float>& w, double eps) {
  double nll = 0, smooth = 0, wsum = 0;
  for (size_t n = 0; n < y.size(); ++n) {
    if (y[n] < 0 || y[n] >= c) continue;  // ignore_index-like
    const std::vector<double> lp = log_softmax(&x[n * c], c);
    nll += -w[y[n]] * lp[y[n]];
    wsum += w[y[n]];
    for (int64_t j = 0; j < c; ++j) smooth += -w[j] * lp[j];
  }
  return (1 - eps) * nll / wsum + eps / static_cast<double>(c) * smooth / wsum;
}

// -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))), mean.
double torch_bce(const std::vector<double>& x, const std::vector<double>& t) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double p = 1 / (1 + std::exp(-x[i]));
    s += -(t[i] * std::log(p) + (1 - t[i]) * std::log(1 - p));
  }
  return s / static_cast<double>(x.size());
}

std::vector<double> one_hot(const std::vector<int32_t>& y, int64_t c) {
  std::vector<double> t(y.size() * c, 0.0);
  for (size_t n = 0; n < y.size(); ++n) t[n * c + y[n]] = 1;
  return t;
}

// The loss's gradient against central differences of loss_fwd_cpu.
void check_gradient(const LossDesc& d, std::vector<double> x, const std::vector<int32_t>& y) {
  std::vector<double> g(x.size());
  loss_grad_cpu(d, x.data(), y.data(), g.data(), 1.0);
  auto f = [&] { return loss_fwd_cpu(d, x.data(), y.data()); };
  Diff df = diff(g, numeric_grad(f, x));
  INFO(to_string(d.fn) << " width " << d.width << ": " << df.str());
  CHECK(df.rel < 1e-7);
}

}  // namespace

TEST_CASE("bce_with_logits of a 1-logit head equals torch's BCE of sigmoid, and its gradient", "[ops][loss]") {
  std::vector<double> x = random_vec(7, 1, -6, 6);
  std::vector<int32_t> y = {0, 1, 1, 0, 1, 0, 0};
  LossDesc d{LossFn::BceWithLogits, 7, 1, 0, nullptr};
  std::vector<double> t(y.begin(), y.end());
  CHECK(loss_fwd_cpu(d, x.data(), y.data()) == Approx(torch_bce(x, t)).epsilon(1e-12));
  check_gradient(d, x, y);
  std::vector<double> g(7);
  loss_grad_cpu(d, x.data(), y.data(), g.data(), 4.0);  // sigmoid(x) - t, scaled, over N
  CHECK(g[1] == Approx(4.0 * (1 / (1 + std::exp(-x[1])) - 1) / 7));
}

TEST_CASE("bce_with_logits stays finite for large logits", "[ops][loss]") {
  std::vector<double> x = {80, -80, 30};
  std::vector<int32_t> y = {0, 1, 1};
  LossDesc d{LossFn::BceWithLogits, 3, 1, 0, nullptr};
  CHECK(loss_fwd_cpu(d, x.data(), y.data()) == Approx((80.0 + 80.0 + std::log1p(std::exp(-30.0))) / 3));
}

TEST_CASE("bce_with_logits with one logit per class uses one-hot targets, mean over N*C", "[ops][loss]") {
  const int64_t n = 5, c = 4;
  std::vector<double> x = random_vec(n * c, 2, -3, 3);
  std::vector<int32_t> y = {3, 0, 2, 2, 1};
  LossDesc d{LossFn::BceWithLogits, n, c, 0, nullptr};
  CHECK(loss_fwd_cpu(d, x.data(), y.data()) == Approx(torch_bce(x, one_hot(y, c))).epsilon(1e-12));
  check_gradient(d, x, y);
}

TEST_CASE("mse equals torch's mse_loss against one-hot targets, and its gradient", "[ops][loss]") {
  const int64_t n = 6, c = 3;
  std::vector<double> x = random_vec(n * c, 3, -2, 2);
  std::vector<int32_t> y = {0, 2, 1, 1, 0, 2};
  const std::vector<double> t = one_hot(y, c);
  double ref = 0;
  for (size_t i = 0; i < x.size(); ++i) ref += (x[i] - t[i]) * (x[i] - t[i]);
  LossDesc d{LossFn::Mse, n, c, 0, nullptr};
  CHECK(loss_fwd_cpu(d, x.data(), y.data()) == Approx(ref / (n * c)).epsilon(1e-12));
  check_gradient(d, x, y);
}

TEST_CASE("weighted cross-entropy equals torch's weighted mean, with and without label smoothing",
          "[ops][loss]") {
  const int64_t n = 8, c = 5;
  std::vector<double> x = random_vec(n * c, 4, -4, 4);
  std::vector<int32_t> y = {0, 4, 2, 2, 1, 3, 0, 4};
  const std::vector<float> w = {1.0f, 2.5f, 0.5f, 0.0f, 1.25f};  // a zero weight too
  for (double eps : {0.0, 0.1, 0.3}) {
    INFO("label_smoothing " << eps);
    LossDesc d{LossFn::WeightedCrossEntropy, n, c, eps, w.data()};
    CHECK(loss_fwd_cpu(d, x.data(), y.data()) == Approx(torch_weighted_ce(x, y, c, w, eps)).epsilon(1e-12));
    check_gradient(d, x, y);
  }
}

TEST_CASE("weighted cross-entropy with equal weights is the plain cross-entropy", "[ops][loss]") {
  const int64_t n = 4, c = 3;
  std::vector<double> x = random_vec(n * c, 5);
  std::vector<int32_t> y = {0, 1, 2, 1};
  const std::vector<float> w(c, 3.0f);
  LossDesc d{LossFn::WeightedCrossEntropy, n, c, 0.2, w.data()};
  double plain = 0;
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<double> lp = log_softmax(&x[r * c], c);
    double s = 0;
    for (double v : lp) s -= v;
    plain += 0.8 * -lp[y[r]] + 0.2 * s / c;
  }
  CHECK(loss_fwd_cpu(d, x.data(), y.data()) == Approx(plain / n).epsilon(1e-12));
}

TEST_CASE("rows with unusable labels add nothing and are counted", "[ops][loss]") {
  const int64_t n = 4, c = 3;
  std::vector<double> x = random_vec(n * c, 6);
  const std::vector<float> w = {1, 2, 3};
  for (LossFn fn : {LossFn::Mse, LossFn::BceWithLogits, LossFn::WeightedCrossEntropy}) {
    INFO(to_string(fn));
    LossDesc d{fn, n, c, 0.1, w.data()};
    std::vector<int32_t> good = {1, 0, 2, 1}, bad = {1, -1, 2, 3};
    int64_t nbad = 0;
    const double lb = loss_fwd_cpu(d, x.data(), bad.data(), &nbad);
    CHECK(nbad == 2);
    std::vector<double> g(n * c);
    loss_grad_cpu(d, x.data(), bad.data(), g.data(), 1.0);
    for (int64_t j = 0; j < c; ++j) CHECK((g[c + j] == 0 && g[3 * c + j] == 0));
    // The usable rows' part: the same as a batch of those rows only, up to the denominator.
    std::vector<double> x2 = {x[0], x[1], x[2], x[6], x[7], x[8]};
    std::vector<int32_t> y2 = {1, 2};
    LossDesc d2 = d;
    d2.rows = 2;
    const double l2 = loss_fwd_cpu(d2, x2.data(), y2.data());
    if (fn == LossFn::WeightedCrossEntropy) CHECK(lb == Approx(l2));  // bad rows leave the weight sum too
    else CHECK(lb == Approx(l2 * 2 / 4));                               // still divided by N*C
    CHECK(loss_fwd_cpu(d, x.data(), good.data()) > 0);
  }
  // A 1-logit head takes labels 0 and 1 only.
  LossDesc d1{LossFn::BceWithLogits, 3, 1, 0, nullptr};
  std::vector<double> x1 = {0.5, -0.5, 1};
  std::vector<int32_t> y1 = {1, 2, -1};
  int64_t nbad = 0;
  loss_fwd_cpu(d1, x1.data(), y1.data(), &nbad);
  CHECK(nbad == 2);
}

TEST_CASE("a weighted batch whose target weights sum to 0 has loss 0 and gradient 0", "[ops][loss]") {
  std::vector<double> x = random_vec(6, 7);
  const std::vector<float> w = {0, 1, 1};
  std::vector<int32_t> y = {0, 0};
  LossDesc d{LossFn::WeightedCrossEntropy, 2, 3, 0.1, w.data()};
  CHECK(loss_fwd_cpu(d, x.data(), y.data()) == 0);
  std::vector<double> g(6, 1.0);
  loss_grad_cpu(d, x.data(), y.data(), g.data(), 1.0);
  for (double v : g) CHECK(v == 0);
}

TEST_CASE("the binary head predicts 1 iff its logit is positive", "[ops][loss]") {
  std::vector<float> x = {2.0f, -1.0f, 0.0f, 0.5f, -3.0f, 1.0f};
  std::vector<int32_t> y = {1, 0, 0, 0, 1, 5};  // correct, correct, correct (0 -> predicts 0), wrong, wrong, bad
  CHECK(binary_accuracy_cpu(x.data(), y.data(), 6) == 3);
}
