// The train section's run-control keys (validation cadence, early stopping, checkpoint frequency and retention, EMA):
// parsed, range-checked and round-tripped.
#include <catch2/catch.hpp>

#include "core/ckpt/checkpoint.h"
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

TEST_CASE("train.checkpoint_every_steps parses, round-trips and is written back only when set") {
  Result<Spec> none = parse(kMinimal);
  REQUIRE(none.ok());
  CHECK(none->train.checkpoint_every_steps == 0);
  CHECK(spec_to_yaml(none.value()).find("checkpoint_every_steps") == std::string::npos);
  Result<Spec> r = parse(std::string("train: {checkpoint_every: 2, checkpoint_every_steps: 500}\n") + kMinimal);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  CHECK(r->train.checkpoint_every == 2);
  CHECK(r->train.checkpoint_every_steps == 500);
  const std::string yaml = spec_to_yaml(r.value());
  CHECK_THAT(yaml, Catch::Contains("  checkpoint_every: 2\n  checkpoint_every_steps: 500\n"));
  Result<Spec> back = parse(yaml);
  REQUIRE(back.ok());
  CHECK(back->train.checkpoint_every_steps == 500);
  CHECK(spec_to_yaml(back.value()) == yaml);
  Result<Spec> over = parse(kMinimal, {"train.checkpoint_every_steps=7"});
  REQUIRE(over.ok());
  CHECK(over->train.checkpoint_every_steps == 7);
}

TEST_CASE("train.checkpoint_every_steps rejects negative and non-integer values with their location") {
  Result<Spec> neg = parse(std::string("train: {checkpoint_every_steps: -1}\n") + kMinimal);
  CHECK(has_error(neg, "test.yaml:1:33:"));
  CHECK(has_error(neg, "out of range"));
  CHECK(has_error(parse(std::string("train: {checkpoint_every_steps: 2.5}\n") + kMinimal), "checkpoint_every_steps"));
  CHECK(has_error(parse(kMinimal, {"train.checkpoint_every_step=10"}), "did you mean 'checkpoint_every_steps'"));
}

TEST_CASE("how often checkpoints are written is not part of the checkpoint's spec hash") {
  Result<Spec> a = parse(kMinimal);
  Result<Spec> b = parse(std::string("train: {checkpoint_every: 3, checkpoint_every_steps: 100, keep_last: 2}\n") +
                         kMinimal);
  REQUIRE((a.ok() && b.ok()));
  CHECK(ckpt_spec_hash(a.value()) == ckpt_spec_hash(b.value()));
}
