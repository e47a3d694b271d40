// The optimizer section's LARS and gradient-clipping keys: parsed, checked per type, and round-tripped.
#include <catch2/catch.hpp>

#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

TEST_CASE("lars parses with sgd's keys, eps, trust_coefficient and trust_clip") {
  Result<Spec> r = parse(std::string("optimizer: {type: lars, lr: 0.2, momentum: 0.9, nesterov: true, eps: 1.0e-9, "
                                     "weight_decay: 5.0e-5, trust_coefficient: 0.002, trust_clip: true}\n") +
                         kMinimal);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  const OptimizerSpec& o = r->optimizer;
  CHECK(o.kind == OptimizerKind::Lars);
  CHECK(o.momentum == 0.9);
  CHECK(o.nesterov);
  CHECK(o.eps == 1e-9);
  CHECK(o.trust_coefficient == 0.002);
  CHECK(o.trust_clip);
  Result<Spec> back = parse(spec_to_yaml(r.value()));
  REQUIRE(back.ok());
  CHECK(back->optimizer.trust_coefficient == 0.002);
  CHECK(back->optimizer.trust_clip);
  CHECK(back->optimizer.eps == 1e-9);
}

TEST_CASE("lars's keys are errors for the other optimizers, and betas for lars") {
  CHECK(has_error(parse(std::string("optimizer: {type: sgd, trust_coefficient: 0.01}\n") + kMinimal),
                  "does not apply to optimizer.type 'sgd' (it is for lars)"));
  CHECK(has_error(parse(std::string("optimizer: {type: adamw, trust_clip: true}\n") + kMinimal),
                  "(it is for lars)"));
  CHECK(has_error(parse(std::string("optimizer: {type: lars, betas: [0.9, 0.99]}\n") + kMinimal),
                  "does not apply to optimizer.type 'lars'"));
  CHECK(has_error(parse(std::string("optimizer: {type: lars, trust_coefficient: 0}\n") + kMinimal),
                  "out of range"));
}

TEST_CASE("clip_grad_norm applies to every optimizer, is >= 0 and round-trips") {
  Result<Spec> r = parse(std::string("optimizer: {type: adamw, clip_grad_norm: 1.5}\n") + kMinimal);
  REQUIRE(r.ok());
  CHECK(r->optimizer.clip_grad_norm == 1.5);
  Result<Spec> back = parse(spec_to_yaml(r.value()));
  REQUIRE(back.ok());
  CHECK(back->optimizer.clip_grad_norm == 1.5);
  CHECK(has_error(parse(std::string("optimizer: {clip_grad_norm: -1}\n") + kMinimal), "out of range"));
}
