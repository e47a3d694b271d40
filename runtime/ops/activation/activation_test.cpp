// Activation op (relu6, leaky_relu, elu, silu, hardswish, sigmoid, tanh): PyTorch's values and gradients at the
// boundaries, and the backward against float64 finite differences for every kind away from its kinks.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "runtime/ops/activation/activation.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

const ActKind kAll[] = {ActKind::Relu6, ActKind::LeakyRelu, ActKind::Elu,  ActKind::Silu,
                        ActKind::Hardswish, ActKind::Sigmoid, ActKind::Tanh};

double fwd(ActKind k, double x, double a) {
  double y = 0;
  activation_fwd_cpu(k, a, &x, &y, 1);
  return y;
}

// dx for dy = 1, from the saved value the op's backward reads.
double grad(ActKind k, double x, double a) {
  const double saved = act_grad_uses_output(k) ? fwd(k, x, a) : x, dy = 1;
  double dx = 0;
  activation_grad_cpu(k, a, &dy, &saved, &dx, 1);
  return dx;
}

}  // namespace

TEST_CASE("activation forwards equal PyTorch's formulas at sample points", "[ops][activation]") {
  CHECK(fwd(ActKind::Relu6, -1, 0) == 0);
  CHECK(fwd(ActKind::Relu6, 3.5, 0) == 3.5);
  CHECK(fwd(ActKind::Relu6, 7, 0) == 6);
  CHECK(fwd(ActKind::LeakyRelu, -2, 0.01) == Approx(-0.02));
  CHECK(fwd(ActKind::LeakyRelu, 2, 0.01) == 2);
  CHECK(fwd(ActKind::Elu, -1, 1.0) == Approx(std::exp(-1.0) - 1));
  CHECK(fwd(ActKind::Elu, -1, 0.5) == Approx(0.5 * (std::exp(-1.0) - 1)));
  CHECK(fwd(ActKind::Elu, 0, 1.0) == 0);
  CHECK(fwd(ActKind::Silu, 1, 0) == Approx(1 / (1 + std::exp(-1.0))));
  CHECK(fwd(ActKind::Silu, 0, 0) == 0);
  CHECK(fwd(ActKind::Hardswish, -3, 0) == 0);
  CHECK(fwd(ActKind::Hardswish, 3, 0) == 3);
  CHECK(fwd(ActKind::Hardswish, 1, 0) == Approx(1.0 * 4 / 6));
  CHECK(fwd(ActKind::Hardswish, -4, 0) == 0);
  CHECK(fwd(ActKind::Sigmoid, 0, 0) == 0.5);
  CHECK(fwd(ActKind::Tanh, 0.5, 0) == Approx(std::tanh(0.5)));
}

TEST_CASE("activation gradients follow PyTorch's conventions at the kinks", "[ops][activation]") {
  // hardtanh_backward: 0 at both ends of relu6's linear piece.
  CHECK(grad(ActKind::Relu6, 0, 0) == 0);
  CHECK(grad(ActKind::Relu6, 6, 0) == 0);
  CHECK(grad(ActKind::Relu6, 5.999, 0) == 1);
  CHECK(grad(ActKind::Relu6, 1e-7, 0) == 1);
  // leaky_relu_backward: x > 0 ? dy : slope dy, so the slope at 0.
  CHECK(grad(ActKind::LeakyRelu, 0, 0.2) == Approx(0.2));
  CHECK(grad(ActKind::LeakyRelu, 1e-9, 0.2) == 1);
  // elu_backward from the input: x <= 0 ? alpha exp(x) : 1, so alpha at 0.
  CHECK(grad(ActKind::Elu, 0, 0.7) == Approx(0.7));
  CHECK(grad(ActKind::Elu, 1e-9, 0.7) == 1);
  // hardswish_backward (torch 2.11): x <= -3 ? 0 : x < 3 ? x/3 + 0.5 : 1, so 0 at -3 and 1 at 3.
  CHECK(grad(ActKind::Hardswish, -3, 0) == 0);
  CHECK(grad(ActKind::Hardswish, 3, 0) == 1);
  CHECK(grad(ActKind::Hardswish, -2.9999, 0) == Approx(-0.5).margin(1e-4));
  CHECK(grad(ActKind::Hardswish, 2.9999, 0) == Approx(1.5).margin(1e-4));
  CHECK(grad(ActKind::Hardswish, -3.0001, 0) == 0);
  CHECK(grad(ActKind::Hardswish, 3.0001, 0) == 1);
  CHECK(grad(ActKind::Silu, 0, 0) == Approx(0.5));
  CHECK(grad(ActKind::Sigmoid, 0, 0) == Approx(0.25));
  CHECK(grad(ActKind::Tanh, 0, 0) == Approx(1.0));
}

TEST_CASE("sigmoid and tanh differentiate from the output, the others from the input", "[ops][activation]") {
  for (ActKind k : kAll)
    CHECK(act_grad_uses_output(k) == (k == ActKind::Sigmoid || k == ActKind::Tanh));
  // sigmoid_backward(dy, y) = dy (1 - y) y, given y directly.
  const double dy = 2, y = 0.25;
  double dx = 0;
  activation_grad_cpu(ActKind::Sigmoid, 0.0, &dy, &y, &dx, 1);
  CHECK(dx == Approx(2 * 0.75 * 0.25));
  activation_grad_cpu(ActKind::Tanh, 0.0, &dy, &y, &dx, 1);
  CHECK(dx == Approx(2 * (1 - 0.0625)));
}

TEST_CASE("activations propagate NaN and keep -0 like torch", "[ops][activation]") {
  for (ActKind k : kAll) {
    INFO(to_string(k));
    CHECK(std::isnan(fwd(k, NAN, 0.5)));
  }
  CHECK(std::signbit(fwd(ActKind::Relu6, -0.0, 0)));  // clamp keeps -0
}

TEST_CASE("activation backward matches float64 finite differences for every kind", "[ops][activation][gradcheck]") {
  for (ActKind k : kAll) {
    for (double a : {0.01, 0.3, 1.0, -0.5}) {
      if (!act_has_param(k) && a != 0.01) continue;
      INFO(to_string(k) << " param " << a);
      auto x = random_vec(64, 5, -7, 7);
      for (auto& v : x) {  // away from the kinks at 0, +-3 and 6
        for (double kink : {0.0, 3.0, -3.0, 6.0})
          if (std::abs(v - kink) < 0.05) v += 0.1;
      }
      auto dy = random_vec(64, 6);
      auto loss = [&] {
        std::vector<double> y(x.size());
        activation_fwd_cpu(k, a, x.data(), y.data(), static_cast<int64_t>(x.size()));
        return dot(y, dy);
      };
      std::vector<double> y(x.size()), dx(x.size());
      activation_fwd_cpu(k, a, x.data(), y.data(), 64);
      activation_grad_cpu(k, a, dy.data(), act_grad_uses_output(k) ? y.data() : x.data(), dx.data(), 64);
      Diff d = diff(dx, numeric_grad(loss, x));
      INFO(d.str());
      CHECK(d.rel < 1e-8);
    }
  }
}

TEST_CASE("activation float reference agrees with the double one", "[ops][activation]") {
  auto xd = random_vec(200, 9, -8, 8);
  std::vector<float> xf(xd.begin(), xd.end()), yf(200), gf(200), dyf(200, 1.0f);
  for (ActKind k : kAll) {
    INFO(to_string(k));
    std::vector<double> xr(xf.begin(), xf.end()), yd(200), gd(200), dyd(200, 1.0);
    activation_fwd_cpu(k, 0.1, xf.data(), yf.data(), 200);
    activation_fwd_cpu(k, 0.1, xr.data(), yd.data(), 200);
    activation_grad_cpu(k, 0.1, dyf.data(), act_grad_uses_output(k) ? yf.data() : xf.data(), gf.data(), 200);
    activation_grad_cpu(k, 0.1, dyd.data(), act_grad_uses_output(k) ? yd.data() : xr.data(), gd.data(), 200);
    CHECK(diff(yf, yd).max_abs < 1e-5);
    CHECK(diff(gf, gd).max_abs < 1e-5);
  }
}
