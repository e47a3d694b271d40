// Exponential moving average of the weights (train.ema_decay) on the CPU backend: torch's AveragedModel rule step
// by step, training itself untouched, validation with the averaged weights when eval_ema.
#include <catch2/catch.hpp>

#include <cstring>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/train_util.h"
#include "tests/support/gradcheck.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

std::vector<float> floats(const std::vector<std::byte>& b, int64_t first, int64_t count) {
  std::vector<float> f(static_cast<size_t>(count));
  std::memcpy(f.data(), b.data() + first * 4, static_cast<size_t>(count) * 4);
  return f;
}

TrainResult train(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"train.epochs=2", "train.device=cpu", "data.train_subset=2000",
                                       "scheduler.warmup_epochs=0", "data.train_transforms=[normalize]"});
  return testing::train_config("mlp_fmnist.yaml", overrides);
}

}  // namespace

TEST_CASE("the EMA copies the weights after the first step and lerps toward them after each later one",
          "[e2e][ema]") {
  Spec spec = mlp_spec(8, 3);
  spec.train.ema_decay = 0.75;
  Result<Compiled> cr = compile_spec(spec, small_data(6, 3));
  REQUIRE(cr.ok());
  const Compiled& c = cr.value();
  auto be = make_cpu_backend(c, 1, 1);
  REQUIRE(be->write_region(Region::Weights, params_init(c, 2)).ok());
  be->set_lr(0.01);
  const int64_t total = c.plan.weights_bytes / 4, ema_at = optimizer_state_count(spec.optimizer) * total;
  auto xd = random_vec(3 * 16, 4);
  std::vector<float> x(xd.begin(), xd.end());
  std::vector<int32_t> y = {0, 2, 1};
  REQUIRE(be->load_batch(0, 0, x.data(), y.data(), 3).ok());
  REQUIRE(be->run(0, 0).ok());
  const std::vector<float> w1 = be->read_weights();
  CHECK(floats(be->read_region(Region::OptState), ema_at, total) == w1);
  REQUIRE(be->run(0, 0).ok());
  const std::vector<float> w2 = be->read_weights(), ema2 = floats(be->read_region(Region::OptState), ema_at, total);
  CHECK(w2 != w1);
  for (int64_t i = 0; i < total; ++i) CHECK(ema2[i] == w1[i] + 0.25f * (w2[i] - w1[i]));
  // swap_ema exchanges the two, twice is the identity
  REQUIRE(be->swap_ema().ok());
  CHECK(be->read_weights() == ema2);
  REQUIRE(be->swap_ema().ok());
  CHECK(be->read_weights() == w2);
}

TEST_CASE("the EMA leaves training bitwise unchanged and validation uses it only with eval_ema", "[e2e][ema]") {
  TrainResult plain = train({});
  TrainResult ema_off = train({"train.ema_decay=0.9", "train.eval_ema=false"});
  TrainResult ema_on = train({"train.ema_decay=0.9"});
  CHECK(ema_off.final_weights == plain.final_weights);
  CHECK(ema_on.final_weights == plain.final_weights);
  CHECK(ema_off.epochs.back().val_loss == plain.epochs.back().val_loss);
  CHECK(ema_on.epochs.back().train_loss == plain.epochs.back().train_loss);
  CHECK(ema_on.epochs.back().val_loss != plain.epochs.back().val_loss);
}
