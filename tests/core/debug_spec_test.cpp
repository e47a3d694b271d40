// The spec's `debug` section (testing aids): validated like every other key, written back only when set, and
// fail_checkpoint_write left out of the checkpoint's spec hash.
#include <catch2/catch.hpp>

#include "core/ckpt/checkpoint.h"
#include "core/spec/spec.h"

using namespace trctl;

namespace {

const char* kBase = "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 10}\n";

std::string errors_of(const std::string& extra) {
  Result<Spec> s = spec_parse(std::string(kBase) + extra, "d.yaml");
  return s.ok() ? std::string() : s.error_text();
}

}  // namespace

TEST_CASE("debug hooks parse and are written back only when set", "[spec][debug]") {
  Result<Spec> none = spec_parse(kBase, "d.yaml");
  REQUIRE(none.ok());
  CHECK(spec_to_yaml(none.value()).find("debug") == std::string::npos);
  Result<Spec> s =
      spec_parse(std::string(kBase) + "debug: {inject_nonfinite_grad_steps: [3, 7], fail_checkpoint_write: 2}\n",
                 "d.yaml");
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  CHECK(s->debug.inject_nonfinite_grad_steps == std::vector<int64_t>{3, 7});
  CHECK(s->debug.fail_checkpoint_write == 2);
  const std::string yaml = spec_to_yaml(s.value());
  CHECK_THAT(yaml, Catch::Contains("debug:\n  inject_nonfinite_grad_steps: [3, 7]\n  fail_checkpoint_write: 2\n"));
  Result<Spec> back = spec_parse(yaml, "resolved.yaml");
  REQUIRE(back.ok());
  CHECK(spec_to_yaml(back.value()) == yaml);
}

TEST_CASE("debug hooks with bad values are errors with their location", "[spec][debug]") {
  CHECK_THAT(errors_of("debug: {inject_nonfinite_grad_steps: [7, 3]}\n"), Catch::Contains("strictly increasing"));
  CHECK_THAT(errors_of("debug: {inject_nonfinite_grad_steps: [0]}\n"),
             Catch::Contains("d.yaml:5:") && Catch::Contains("inject_nonfinite_grad_steps[0]"));
  CHECK_THAT(errors_of("debug: {inject_nonfinite_grad_steps: 3}\n"), Catch::Contains("inject_nonfinite_grad_steps"));
  CHECK_THAT(errors_of("debug: {fail_checkpoint_write: -1}\n"), Catch::Contains("fail_checkpoint_write"));
  CHECK_THAT(errors_of("debug: {fail_checkpoint_writes: 1}\n"),
             Catch::Contains("unknown key") && Catch::Contains("did you mean 'fail_checkpoint_write'"));
}

TEST_CASE("the checkpoint write hook does not change the spec hash, the gradient hook does", "[spec][debug]") {
  Result<Spec> a = spec_parse(kBase, "d.yaml");
  Result<Spec> b = spec_parse(std::string(kBase) + "debug: {fail_checkpoint_write: 3}\n", "d.yaml");
  Result<Spec> c = spec_parse(std::string(kBase) + "debug: {inject_nonfinite_grad_steps: [2]}\n", "d.yaml");
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(ckpt_spec_hash(a.value()) == ckpt_spec_hash(b.value()));
  CHECK(ckpt_spec_hash(a.value()) != ckpt_spec_hash(c.value()));
}
