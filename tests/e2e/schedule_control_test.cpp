// train.validate_every (validation after every N-th and the last epoch; skipped epochs carry no val numbers) and
// early stopping on a validated metric, on the CPU backend; neither changes the training itself.
#include <catch2/catch.hpp>


#include "runtime/train/trainer.h"
#include "tests/support/train_util.h"

using namespace trctl;

namespace {

TrainResult train(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"train.device=cpu", "data.train_subset=600", "data.val_batch_size=2000",
                                       "run.progress=off"});
  return testing::train_config("mlp_fmnist.yaml", overrides);
}

}  // namespace

TEST_CASE("validate_every validates every N-th and the last epoch and leaves training unchanged", "[e2e][train]") {
  TrainResult all = train({"train.epochs=5"});
  TrainResult some = train({"train.epochs=5", "train.validate_every=2"});
  REQUIRE(some.epochs.size() == 5);
  const bool expected[] = {false, true, false, true, true};
  for (int i = 0; i < 5; ++i) {
    INFO("epoch " << i + 1);
    CHECK(some.epochs[i].validated == expected[i]);
    if (expected[i]) CHECK(some.epochs[i].val_loss == all.epochs[i].val_loss);
  }
  CHECK(some.final_weights == all.final_weights);
}

TEST_CASE("early stopping ends the run after `patience` validations without improvement", "[e2e][train]") {
  // A min_delta no epoch can beat: the first validation sets the reference, the next `patience` fail it.
  TrainResult r = train({"train.epochs=10", "train.early_stopping_patience=2", "train.early_stopping_min_delta=1.0"});
  CHECK(r.early_stopped);
  CHECK(r.epochs.size() == 3);
  TrainResult l = train({"train.epochs=10", "train.early_stopping_patience=1", "train.early_stopping_metric=val_loss",
                         "train.early_stopping_min_delta=100"});
  CHECK(l.early_stopped);
  CHECK(l.epochs.size() == 2);
  TrainResult none = train({"train.epochs=3", "train.early_stopping_patience=5"});
  CHECK_FALSE(none.early_stopped);
  CHECK(none.epochs.size() == 3);
}
