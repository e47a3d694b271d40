// LARS (timm's Lars), global-norm gradient clipping (torch.nn.utils.clip_grad_norm_) and the weights' EMA
// (AveragedModel's lerp) vs values computed by hand from those rules.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "runtime/ops/optim/optim.h"

using namespace trctl;

namespace {

OptimScalars lars_scalars(double lr, double wd, double momentum, int64_t step, bool clip = false) {
  OptimizerSpec o;
  o.kind = OptimizerKind::Lars;
  o.weight_decay = wd;
  o.momentum = momentum;
  o.trust_coefficient = 0.001;
  o.trust_clip = clip;
  return optim_scalars(o, lr, step);
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("lars scales an adapted tensor's step by the trust ratio, with momentum over two steps", "[ops][optim][lars]") {
  std::vector<float> p = {0.5f, -1.0f, 2.0f}, buf(3, 0.0f);
  const std::vector<float> g1 = {0.1f, 0.2f, -0.3f}, g2 = {-0.05f, 0.4f, 0.1f};
  const double lr = 0.1, wd = 1e-4, mom = 0.9, eps = 1e-8;
  std::vector<double> pd(p.begin(), p.end()), bd(3);
  for (int step = 1; step <= 2; ++step) {
    const std::vector<float>& g = step == 1 ? g1 : g2;
    // reference: timm Lars
    const std::vector<double> gd(g.begin(), g.end());
    const double r = 0.001 * norm(pd) / (norm(gd) + norm(pd) * wd + eps);
    for (int i = 0; i < 3; ++i) {
      const double d = (gd[i] + wd * pd[i]) * r;
      bd[i] = step == 1 ? d : mom * bd[i] + d;
      pd[i] -= lr * bd[i];
    }
    lars_step_cpu(lars_scalars(lr, wd, mom, step), true, p.data(), g.data(), buf.data(), 3);
  }
  for (int i = 0; i < 3; ++i) {
    CHECK(p[i] == Approx(pd[i]).epsilon(1e-6));
    CHECK(buf[i] == Approx(bd[i]).epsilon(1e-5));
  }
}

TEST_CASE("lars takes plain sgd steps on tensors without weight decay (biases, norm parameters)", "[ops][optim][lars]") {
  std::vector<float> a = {0.5f, -1.0f}, b = a, buf_a(2, 0.0f), buf_b(2, 0.0f);
  const std::vector<float> g = {0.1f, 0.2f};
  OptimizerSpec sgd;
  sgd.kind = OptimizerKind::Sgd;
  sgd.weight_decay = 1e-4;
  sgd.momentum = 0.9;
  lars_step_cpu(lars_scalars(0.1, 1e-4, 0.9, 1), false, a.data(), g.data(), buf_a.data(), 2);
  optim_step_cpu(optim_scalars(sgd, 0.1, 1), false, b.data(), g.data(), buf_b.data(), nullptr, 2, nullptr);
  CHECK(a == b);
  CHECK(buf_a == buf_b);
}

TEST_CASE("lars trust clipping caps the ratio at lr (LARC) and zero norms give ratio 1", "[ops][optim][lars]") {
  std::vector<float> p = {3.0f, 4.0f};  // |p| = 5
  const std::vector<float> g = {0.0f, 1e-6f};
  // ratio = 0.001 * 5 / (1e-6 + 5e-4 + 1e-8) ~ 9.98 > lr: clipped to min(ratio / lr, 1) = 1
  lars_step_cpu(lars_scalars(0.5, 1e-4, 0.0, 1, true), true, p.data(), g.data(), nullptr, 2);
  CHECK(p[0] == Approx(3.0 - 0.5 * (0.0 + 1e-4 * 3.0)).epsilon(1e-6));
  std::vector<float> z = {0.0f, 0.0f};  // |p| = 0: ratio 1
  lars_step_cpu(lars_scalars(0.5, 1e-4, 0.0, 1), true, z.data(), g.data(), nullptr, 2);
  CHECK(z[1] == Approx(-0.5 * 1e-6).epsilon(1e-6));
}

TEST_CASE("gradient clipping scales to max_norm / (norm + 1e-6) and never up", "[ops][optim][clip]") {
  const std::vector<float> g = {3.0f, 0.0f, 4.0f, 0.0f};  // norm 5 (zeros: the region's padding)
  const double n = grad_global_norm_cpu(g.data(), 4);
  CHECK(n == Approx(5.0));
  CHECK(grad_clip_factor(n, 1.0) == Approx(1.0 / (5.0 + 1e-6)).epsilon(1e-7));
  CHECK(grad_clip_factor(n, 10.0) == 1.0f);
  CHECK(grad_clip_factor(0.0, 1.0) == 1.0f);
}

TEST_CASE("the EMA copies the weights on the first update and lerps toward them with weight 1 - decay after",
          "[ops][optim][ema]") {
  const std::vector<float> w1 = {1.0f, -2.0f, 0.5f}, w2 = {3.0f, 0.0f, 0.5f};
  std::vector<float> ema = {7.0f, 7.0f, 7.0f};  // stale: the first update overwrites it
  ema_update_cpu(0.75, true, w1.data(), ema.data(), 3);
  CHECK(ema == w1);
  ema_update_cpu(0.75, false, w2.data(), ema.data(), 3);
  CHECK(ema == std::vector<float>{1.5f, -1.5f, 0.5f});  // w1 + 0.25 (w2 - w1), exact in float
}
