// Softmax cross-entropy with label smoothing: values vs direct formulas, gradient vs float64 finite differences,
// accuracy, and out-of-range labels.
#include <catch2/catch.hpp>

#include "runtime/ops/softmax_ce/softmax_ce.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

TEST_CASE("cross-entropy without smoothing is the mean negative log-likelihood", "[ops][softmax_ce]") {
  std::vector<double> logits = {1, 2, 3, 0, 0, 0};
  std::vector<int32_t> labels = {2, 0};
  const double l0 = -std::log(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
  const double l1 = std::log(3.0);
  CHECK(softmax_ce_fwd_cpu(logits.data(), labels.data(), 2, 3, 0.0) == Approx((l0 + l1) / 2).epsilon(1e-14));
}

TEST_CASE("label smoothing mixes in the mean over classes as PyTorch does", "[ops][softmax_ce]") {
  std::vector<double> logits = {0.5, -1, 2};
  std::vector<int32_t> labels = {1};
  const double lse = std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0));
  const double nll = lse + 1;
  const double mean_all = ((lse - 0.5) + (lse + 1) + (lse - 2)) / 3;
  const double eps = 0.1;
  CHECK(softmax_ce_fwd_cpu(logits.data(), labels.data(), 1, 3, eps) ==
        Approx((1 - eps) * nll + eps * mean_all).epsilon(1e-14));
}

TEST_CASE("cross-entropy gradient matches float64 finite differences", "[ops][softmax_ce][gradcheck]") {
  const int64_t n = 5, c = 7;
  auto logits = random_vec(n * c, 3, -3, 3);
  std::vector<int32_t> labels = {0, 6, 3, 3, 1};
  for (double eps : {0.0, 0.1}) {
    auto loss = [&] { return softmax_ce_fwd_cpu(logits.data(), labels.data(), n, c, eps); };
    std::vector<double> d(n * c);
    softmax_ce_grad_cpu(logits.data(), labels.data(), d.data(), n, c, eps, 1.0);
    Diff e = diff(d, numeric_grad(loss, logits));
    INFO("eps " << eps << ": " << e.str());
    CHECK(e.rel < 1e-8);
  }
}

TEST_CASE("the gradient is multiplied by the loss scale", "[ops][softmax_ce]") {
  std::vector<float> logits = {1, 2, 3, 4}, d1(4), d8(4);
  std::vector<int32_t> labels = {1, 0};
  softmax_ce_grad_cpu(logits.data(), labels.data(), d1.data(), 2, 2, 0.1, 1.0);
  softmax_ce_grad_cpu(logits.data(), labels.data(), d8.data(), 2, 2, 0.1, 8.0);
  for (int i = 0; i < 4; ++i) CHECK(d8[i] == Approx(8 * d1[i]));
}

TEST_CASE("top-1 accuracy counts rows whose first maximum is the label", "[ops][softmax_ce]") {
  std::vector<float> logits = {1, 3, 2, 5, 5, 0, 0, 0, 1};
  std::vector<int32_t> labels = {1, 1, 2};
  CHECK(accuracy_top1_cpu(logits.data(), labels.data(), 3, 3) == 2);  // row 1 ties: first max (0) wins
}

TEST_CASE("labels outside 0..C-1 are counted and contribute nothing", "[ops][softmax_ce]") {
  std::vector<float> logits = {1, 2, 3, 4};
  std::vector<int32_t> labels = {5, -1};
  int64_t bad = 0;
  CHECK(softmax_ce_fwd_cpu(logits.data(), labels.data(), 2, 2, 0.0, &bad) == 0.0);
  CHECK(bad == 2);
  std::vector<float> d(4, 1.0f);
  softmax_ce_grad_cpu(logits.data(), labels.data(), d.data(), 2, 2, 0.0, 1.0);
  CHECK(d == std::vector<float>(4, 0.0f));
}

TEST_CASE("top-5 counts a row when its label is among the 5 largest logits", "[ops][softmax_ce][top5]") {
  // 7 classes. Row 0: label 3 is the 4th largest; row 1: label 0 the 6th; row 2: label 6 the 5th.
  std::vector<float> logits = {7, 6, 5, 4, 3, 2, 1,  //
                               1, 7, 6, 5, 4, 3, 2,  //
                               7, 6, 5, 4, 1, 2, 3};
  std::vector<int32_t> labels = {3, 0, 6};
  CHECK(accuracy_topk_cpu(logits.data(), labels.data(), 3, 7, 5) == 2);
  CHECK(accuracy_topk_cpu(logits.data(), labels.data(), 3, 7, 1) == 0);
  CHECK(accuracy_topk_cpu(logits.data(), labels.data(), 3, 7, 7) == 3);
}

TEST_CASE("top-5 ties count for the label: correct when fewer than 5 logits are strictly greater",
          "[ops][softmax_ce][top5]") {
  // Six equal logits: torch.topk would pick 5 of them in an implementation-defined order; trctl counts the label.
  std::vector<float> logits = {1, 1, 1, 1, 1, 1, 0, 2, 2, 2, 2, 2, 1, 0};
  std::vector<int32_t> labels = {5, 5};  // row 1: five logits (2) strictly above the label's 1: not top-5
  CHECK(accuracy_topk_cpu(logits.data(), labels.data(), 2, 7, 5) == 1);
  // k = 1 with ties: any maximal label counts (accuracy_top1_cpu instead takes the first maximum).
  std::vector<float> tie = {3, 3, 1};
  std::vector<int32_t> second = {1};
  CHECK(accuracy_topk_cpu(tie.data(), second.data(), 1, 3, 1) == 1);
  CHECK(accuracy_top1_cpu(tie.data(), second.data(), 1, 3) == 0);
}

TEST_CASE("top-5 with fewer than 5 classes is torch.topk(k=C): every valid label counts", "[ops][softmax_ce][top5]") {
  std::vector<double> logits = {9, 0, -3, 1, 4, 2, 0, 0};  // 2 rows of 4 classes
  std::vector<int32_t> labels = {2, 1};
  CHECK(accuracy_topk_cpu(logits.data(), labels.data(), 2, 4, 5) == 2);
  std::vector<int32_t> bad = {4, -1};  // labels outside [0, C) are never correct
  CHECK(accuracy_topk_cpu(logits.data(), bad.data(), 2, 4, 5) == 0);
}

TEST_CASE("top-5 is never below top-1 on random logits", "[ops][softmax_ce][top5]") {
  std::vector<float> logits(64 * 10);
  std::vector<int32_t> labels(64);
  uint32_t x = 12345;
  for (auto& v : logits) v = static_cast<float>((x = x * 1664525u + 1013904223u) >> 20) / 4096.0f;
  for (auto& y : labels) y = static_cast<int32_t>((x = x * 1664525u + 1013904223u) >> 28) % 10;
  const int64_t t1 = accuracy_top1_cpu(logits.data(), labels.data(), 64, 10);
  const int64_t t5 = accuracy_topk_cpu(logits.data(), labels.data(), 64, 10, 5);
  CHECK(t5 >= t1);
  CHECK(t5 <= 64);
}
