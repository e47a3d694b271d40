// The compiled graph (autodiff + memory plan + CPU backend) against float64 finite differences: every parameter
// gradient of a small MLP with dropout, computed by the train program, equals the numerical derivative of its loss.
#include <catch2/catch.hpp>

#include <cstring>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "tests/support/gradcheck.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;
using namespace trctl::testing;

TEST_CASE("train-program gradients of an MLP with dropout equal float64 finite differences", "[e2e][gradcheck]") {
  Spec spec = mlp_spec(8, 3, true);
  spec.loss.label_smoothing = 0.1;
  CompileOptions opt;
  opt.compute = DType::F64;
  opt.optimizer = false;
  Result<Compiled> cr = compile_spec(spec, small_data(6, 3), opt);
  REQUIRE(cr.ok());
  const Compiled& c = cr.value();
  auto be = make_cpu_backend(c, 77, 2);
  std::vector<std::byte> wbytes = params_init(c, 5);
  std::vector<double> w(wbytes.size() / 8);
  std::memcpy(w.data(), wbytes.data(), wbytes.size());
  // Biases start at zero; give them values so their gradient paths are exercised fully.
  for (const auto& p : c.graph.params)
    if (!p.decay)
      for (int64_t i = 0; i < c.graph.values[p.value].shape.numel(); ++i)
        w[c.plan.values[p.value].offset / 8 + i] = 0.1 * std::sin(1.0 + i);

  const int prog = 0;
  REQUIRE(c.graph.programs[prog].name == "train");
  auto xd = random_vec(3 * 16, 9);
  std::vector<float> x(xd.begin(), xd.end());
  std::vector<int32_t> y = {2, 0, 1};
  REQUIRE(be->load_batch(prog, 0, x.data(), y.data(), 3).ok());

  auto loss = [&] {
    std::vector<std::byte> b(w.size() * 8);
    std::memcpy(b.data(), w.data(), b.size());
    REQUIRE(be->write_region(Region::Weights, b).ok());
    be->set_step(0);  // same dropout mask every run
    REQUIRE(be->run(prog, 0).ok());
    return be->last_loss(prog);
  };
  loss();
  std::vector<std::byte> gb = be->read_region(Region::Grads);
  std::vector<double> grad(gb.size() / 8);
  std::memcpy(grad.data(), gb.data(), gb.size());
  std::vector<double> num = numeric_grad(loss, w);
  for (const auto& p : c.graph.params) {
    const int64_t off = c.plan.values[p.value].offset / 8, n = c.graph.values[p.value].shape.numel();
    std::vector<double> a(grad.begin() + off, grad.begin() + off + n), e(num.begin() + off, num.begin() + off + n);
    Diff d = diff(a, e);
    INFO(p.name << ": " << d.str());
    CHECK(d.rel < 1e-7);
  }
}
