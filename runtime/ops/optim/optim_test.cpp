// Optimizer updates vs values computed by hand from PyTorch's update rules (torch.optim, single-tensor path).
#include <catch2/catch.hpp>

#include "runtime/ops/optim/optim.h"

using namespace trctl;

static OptimizerSpec opt_spec(OptimizerKind k, double wd) {
  OptimizerSpec s;
  s.kind = k;
  s.lr = 0.1;
  s.weight_decay = wd;
  return s;
}

TEST_CASE("adamw step 1: decoupled decay, bias-corrected moments", "[ops][optim]") {
  float p = 1.0f, g = 0.5f, m = 0, v = 0;
  OptimScalars s = optim_scalars(opt_spec(OptimizerKind::AdamW, 0.01), 0.1, 1);
  optim_step_cpu(s, true, &p, &g, &m, &v, 1, nullptr);
  // p = 1*(1 - 0.1*0.01) = 0.999; m = 0.05; v = 0.00025; step_size = 0.1/0.1 = 1; denom = 0.5 + 1e-8
  CHECK(m == Approx(0.05).epsilon(1e-6));
  CHECK(v == Approx(0.00025).epsilon(1e-6));
  CHECK(p == Approx(0.999 - 0.05 / (0.5 + 1e-8)).epsilon(1e-6));
}

TEST_CASE("adamw without decay on the no-decay range", "[ops][optim]") {
  float p = 1.0f, g = 0.5f, m = 0, v = 0;
  OptimScalars s = optim_scalars(opt_spec(OptimizerKind::AdamW, 0.01), 0.1, 1);
  optim_step_cpu(s, false, &p, &g, &m, &v, 1, nullptr);
  CHECK(p == Approx(1.0 - 0.05 / (0.5 + 1e-8)).epsilon(1e-6));
}

TEST_CASE("adamw step 2 uses the step count in the bias corrections", "[ops][optim]") {
  float p = 1.0f, m = 0, v = 0;
  OptimizerSpec spec = opt_spec(OptimizerKind::AdamW, 0.0);
  float g1 = 0.5f, g2 = -0.25f;
  optim_step_cpu(optim_scalars(spec, 0.1, 1), true, &p, &g1, &m, &v, 1, nullptr);
  const double p1 = p;
  optim_step_cpu(optim_scalars(spec, 0.1, 2), true, &p, &g2, &m, &v, 1, nullptr);
  const double m2 = 0.9 * 0.05 + 0.1 * -0.25, v2 = 0.999 * 0.00025 + 0.001 * 0.0625;
  const double bc1 = 1 - 0.81, bc2 = 1 - 0.999 * 0.999;
  CHECK(m == Approx(m2).epsilon(1e-6));
  CHECK(v == Approx(v2).epsilon(1e-6));
  CHECK(p == Approx(p1 - (0.1 / bc1) * m2 / (std::sqrt(v2) / std::sqrt(bc2) + 1e-8)).epsilon(1e-6));
}

TEST_CASE("adam adds L2 weight decay to the gradient", "[ops][optim]") {
  float p = 1.0f, g = 0.5f, m = 0, v = 0;
  optim_step_cpu(optim_scalars(opt_spec(OptimizerKind::Adam, 0.1), 0.1, 1), true, &p, &g, &m, &v, 1, nullptr);
  // g' = 0.6; m = 0.06; v = 0.00036; step_size 1; denom = 0.6 + 1e-8
  CHECK(m == Approx(0.06).epsilon(1e-6));
  CHECK(p == Approx(1.0 - 0.06 / (0.6 + 1e-8)).epsilon(1e-6));
}

TEST_CASE("sgd with nesterov momentum over two steps", "[ops][optim]") {
  OptimizerSpec spec = opt_spec(OptimizerKind::Sgd, 0.1);
  spec.momentum = 0.9;
  spec.nesterov = true;
  float p = 1.0f, g = 0.5f, buf = 123.0f;  // the first step overwrites the buffer
  optim_step_cpu(optim_scalars(spec, 0.1, 1), true, &p, &g, &buf, nullptr, 1, nullptr);
  CHECK(buf == Approx(0.6));
  CHECK(p == Approx(0.886));
  optim_step_cpu(optim_scalars(spec, 0.1, 2), true, &p, &g, &buf, nullptr, 1, nullptr);
  CHECK(buf == Approx(1.1286));
  CHECK(p == Approx(0.725566));
}

TEST_CASE("sgd with momentum and dampening, and plain sgd", "[ops][optim]") {
  OptimizerSpec spec = opt_spec(OptimizerKind::Sgd, 0.0);
  spec.momentum = 0.5;
  spec.dampening = 0.5;
  float p = 1.0f, g = 1.0f, buf = 0;
  optim_step_cpu(optim_scalars(spec, 0.1, 1), true, &p, &g, &buf, nullptr, 1, nullptr);
  CHECK(p == Approx(0.9));  // first step: buf = g (no dampening on the first step, as PyTorch)
  optim_step_cpu(optim_scalars(spec, 0.1, 2), true, &p, &g, &buf, nullptr, 1, nullptr);
  CHECK(buf == Approx(0.5 * 1 + 0.5 * 1));
  CHECK(p == Approx(0.8));
  OptimizerSpec plain = opt_spec(OptimizerKind::Sgd, 0.0);
  float q = 1.0f;
  optim_step_cpu(optim_scalars(plain, 0.1, 1), true, &q, &g, nullptr, nullptr, 1, nullptr);
  CHECK(q == Approx(0.9));
}

TEST_CASE("the optimizer result does not depend on the thread count", "[ops][optim]") {
  const int64_t n = 100003;
  std::vector<float> p1(n), g(n), m1(n, 0), v1(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    p1[i] = std::sin(0.1 * i);
    g[i] = std::cos(0.37 * i);
  }
  std::vector<float> p4 = p1, m4 = m1, v4 = v1;
  ThreadPool a(1), b(4);
  OptimScalars s = optim_scalars(opt_spec(OptimizerKind::AdamW, 0.05), 0.01, 3);
  optim_step_cpu(s, true, p1.data(), g.data(), m1.data(), v1.data(), n, &a);
  optim_step_cpu(s, true, p4.data(), g.data(), m4.data(), v4.data(), n, &b);
  CHECK(p1 == p4);
  CHECK(m1 == m4);
}
