// The train section's run-control keys (validation cadence, early stopping, checkpoint retention, EMA): parsed,
// range-checked and round-tripped.
#include <catch2/catch.hpp>

#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

TEST_CASE("train's run-control keys parse and round-trip") {
  Result<Spec> r = parse(std::string("train: {validate_every: 3, early_stopping_patience: 4, early_stopping_metric: "
                                     "val_loss, early_stopping_min_delta: 0.01, keep_last: 2, keep_best: true, "
                                     "ema_decay: 0.999, eval_ema: false}\n") +
                         kMinimal);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  Result<Spec> back = parse(spec_to_yaml(r.value()));
  REQUIRE(back.ok());
  for (const TrainSpec* t : {&r->train, &back->train}) {
    CHECK(t->validate_every == 3);
    CHECK(t->early_stopping_patience == 4);
    CHECK(t->early_stopping_on_loss);
    CHECK(t->early_stopping_min_delta == 0.01);
    CHECK(t->keep_last == 2);
    CHECK(t->keep_best);
    CHECK(t->ema_decay == 0.999);
    CHECK_FALSE(t->eval_ema);
  }
}

TEST_CASE("train's run-control keys reject bad values with their location") {
  CHECK(has_error(parse(std::string("train: {validate_every: 0}\n") + kMinimal), "out of range"));
  CHECK(has_error(parse(std::string("train: {early_stopping_metric: val_los}\n") + kMinimal),
                  "did you mean 'val_loss'"));
  CHECK(has_error(parse(std::string("train: {ema_decay: 1.0}\n") + kMinimal), "out of range"));
  CHECK(has_error(parse(std::string("train: {keep_last: -1}\n") + kMinimal), "out of range"));
}
