// Training with model.freeze and optimizer.param_groups on the CPU backend (configs/mlp_fmnist.yaml, small
// subsets): frozen parameters keep their initial values bitwise while the rest train; groups that repeat the
// optimizer's own values change nothing bitwise (only the layout order moves); one plain-SGD step moves a group's
// parameters by its lr / the optimizer's lr times the default step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "tests/support/train_util.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

std::vector<std::string> small(std::vector<std::string> o) {
  o.insert(o.begin(), {"train.device=cpu", "data.train_subset=1000", "train.epochs=1", "scheduler={type: constant}",
                       "data.train_transforms=[normalize]", "train.precision=fp32"});
  return o;
}

Spec load(const std::vector<std::string>& overrides) {
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", overrides);
  REQUIRE(s.ok());
  return s.value();
}

// Parameter name -> its values, from weights in the plan layout of `spec`.
std::map<std::string, std::vector<float>> by_name(const Spec& spec, const std::vector<float>& weights) {
  Result<Compiled> c = compile_spec(spec, DataShape{28, 28, 1, 10, 1000, 10000});
  REQUIRE(c.ok());
  std::map<std::string, std::vector<float>> out;
  for (const ParamInfo& p : c->graph.params) {
    const int64_t off = c->plan.values[p.value].offset / 4, n = c->graph.values[p.value].shape.numel();
    out[p.name].assign(weights.begin() + off, weights.begin() + off + n);
  }
  return out;
}

std::map<std::string, std::vector<float>> initial(const Spec& spec) {
  Result<Compiled> c = compile_spec(spec, DataShape{28, 28, 1, 10, 1000, 10000});
  REQUIRE(c.ok());
  const std::vector<std::byte> b = params_init(c.value(), spec.seed);
  std::vector<float> w(b.size() / 4);
  std::memcpy(w.data(), b.data(), b.size());
  return by_name(spec, w);
}

}  // namespace

TEST_CASE("frozen parameters keep their initial values bitwise; the others train", "[e2e][groups]") {
  const std::vector<std::string> o = small({"model.freeze=[fc1, fc3.bias]"});
  const Spec spec = load(o);
  TrainResult r = train_config("mlp_fmnist.yaml", o);
  const auto init = initial(spec), end = by_name(spec, r.final_weights);
  for (const auto& [name, w0] : init) {
    INFO(name);
    const bool frozen = name == "fc1.weight" || name == "fc1.bias" || name == "fc3.bias";
    CHECK((end.at(name) == w0) == frozen);
  }
  CHECK(r.epochs[0].val_top1 > 0.5);
}

TEST_CASE("groups that repeat the optimizer's lr and weight decay change no parameter bitwise", "[e2e][groups]") {
  const std::vector<std::string> plain = small({});
  const std::vector<std::string> grouped =
      small({"optimizer.param_groups=[{params: [fc3, 'fc1.bias'], lr: 0.001, weight_decay: 0.0001}]"});
  TrainResult a = train_config("mlp_fmnist.yaml", plain), b = train_config("mlp_fmnist.yaml", grouped);
  const auto wa = by_name(load(plain), a.final_weights), wb = by_name(load(grouped), b.final_weights);
  REQUIRE(wa.size() == wb.size());
  for (const auto& [name, w] : wa) {
    INFO(name);
    CHECK(wb.at(name) == w);
  }
  CHECK(a.epochs[0].val_loss == b.epochs[0].val_loss);
}

TEST_CASE("one plain SGD step moves a group's parameters by the group's lr", "[e2e][groups]") {
  // One batch of 200 images, constant lr, no momentum or decay: w1 - w0 = -lr * grad for each group's lr.
  const std::vector<std::string> base = {"train.device=cpu", "data.train_subset=200", "train.epochs=1",
                                         "data.train_transforms=[normalize]", "train.precision=fp32",
                                         "scheduler={type: constant}", "optimizer={type: sgd, lr: 0.1}"};
  std::vector<std::string> grouped = base;
  grouped.push_back("optimizer.param_groups=[{params: [fc2], lr: 0.025}]");
  TrainResult a = train_config("mlp_fmnist.yaml", base), b = train_config("mlp_fmnist.yaml", grouped);
  const Spec sa = load(base), sb = load(grouped);
  const auto w0 = initial(sa), wa = by_name(sa, a.final_weights), wb = by_name(sb, b.final_weights);
  for (const auto& [name, init] : w0) {
    INFO(name);
    const double f = name.rfind("fc2.", 0) == 0 ? 0.25 : 1.0;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < init.size(); ++i) {
      const double da = double(wa.at(name)[i]) - init[i], db = double(wb.at(name)[i]) - init[i];
      worst = std::max(worst, std::abs(db - f * da));
      scale = std::max(scale, std::abs(da));
    }
    CHECK(scale > 0);
    CHECK(worst <= 1e-6 * std::max(1.0, scale) + 4e-7 * 1.0);  // a few float ulps of the weights (|w| < 1)
  }
}
