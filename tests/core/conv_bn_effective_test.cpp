// effective_conv_bn_stats / effective_conv_bn_backward / wgconv_bn_backward_pairs / conv_bn_backward_pairs
// (core/spec/spec.h): what train.conv_bn_stats and train.conv_bn_backward run as, the defaults (auto) included,
// for every train.deterministic and precision.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/spec/spec.h"
#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

// kMinimal with `overrides`; fails the test case on a spec error.
TrainSpec train_of(const std::vector<std::string>& overrides) {
  Result<Spec> r = parse(kMinimal, overrides);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value().train;
}

}  // namespace

TEST_CASE("by default (train.deterministic: true) both conv -> batch norm fusions run separate",
          "[spec][conv_bn_stats]") {
  for (const char* precision : {"fp32", "tf32", "fp16", "bf16"}) {
    INFO(precision);
    const TrainSpec t = train_of({std::string("train.precision=") + precision});
    CHECK(t.conv_bn_stats == ConvBnStats::Auto);
    CHECK(t.conv_bn_backward == ConvBnBackward::Auto);
    CHECK(effective_conv_bn_stats(t) == ConvBnStats::Separate);
    CHECK(effective_conv_bn_backward(t) == ConvBnBackward::Separate);
  }
}

TEST_CASE("train.deterministic: false under fp16 runs conv_bn_stats auto and conv_bn_backward fused by default",
          "[spec][conv_bn_stats]") {
  const TrainSpec t = train_of({"train.deterministic=false", "train.precision=fp16"});
  CHECK(effective_conv_bn_stats(t) == ConvBnStats::Auto);  // the pixel rule applies
  CHECK(effective_conv_bn_backward(t) == ConvBnBackward::Fused);
}

TEST_CASE("train.deterministic: false under bf16 runs conv_bn_stats auto and the batch-norm backward separate "
          "(cuDNN's fused dgrad graph takes f16)",
          "[spec][conv_bn_stats]") {
  const TrainSpec t = train_of({"train.deterministic=false", "train.precision=bf16"});
  CHECK(effective_conv_bn_stats(t) == ConvBnStats::Auto);
  CHECK(effective_conv_bn_backward(t) == ConvBnBackward::Separate);
}

TEST_CASE("train.deterministic: false under fp32 or tf32 is no error and runs both separate", "[spec][conv_bn_stats]") {
  for (const char* precision : {"fp32", "tf32"}) {
    INFO(precision);
    const TrainSpec t = train_of({"train.deterministic=false", std::string("train.precision=") + precision});
    CHECK(effective_conv_bn_stats(t) == ConvBnStats::Separate);
    CHECK(effective_conv_bn_backward(t) == ConvBnBackward::Separate);
  }
}

TEST_CASE("an explicit separate stays separate, an explicit fused runs fused, where fusing is allowed",
          "[spec][conv_bn_stats]") {
  const std::vector<std::string> allowed = {"train.deterministic=false", "train.precision=fp16"};
  std::vector<std::string> sep = allowed, fused = allowed;
  sep.insert(sep.end(), {"train.conv_bn_stats=separate", "train.conv_bn_backward=separate"});
  fused.insert(fused.end(), {"train.conv_bn_stats=fused", "train.conv_bn_backward=fused"});
  const TrainSpec s = train_of(sep), f = train_of(fused);
  CHECK(effective_conv_bn_stats(s) == ConvBnStats::Separate);
  CHECK(effective_conv_bn_backward(s) == ConvBnBackward::Separate);
  CHECK(effective_conv_bn_stats(f) == ConvBnStats::Fused);
  CHECK(effective_conv_bn_backward(f) == ConvBnBackward::Fused);
}

TEST_CASE("train.conv_bn_backward=auto parses as an override of a file's separate", "[spec][conv_bn_stats]") {
  Result<Spec> r = parse(std::string("train:\n  conv_bn_backward: separate\n") + kMinimal,
                         {"train.conv_bn_backward=auto"});
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  CHECK(r.value().train.conv_bn_backward == ConvBnBackward::Auto);
  CHECK(std::string(to_string(ConvBnBackward::Auto)) == "auto");
}

TEST_CASE("an explicit fused without train.deterministic: false is still a spec error", "[spec][conv_bn_stats]") {
  Result<Spec> stats = parse(kMinimal, {"train.precision=fp16", "train.conv_bn_stats=fused"});
  REQUIRE_FALSE(stats.ok());
  CHECK(stats.errors()[0].code == ErrCode::Invalid);
  CHECK(has_error(stats, "'train.conv_bn_stats: fused' needs 'train.deterministic: false'"));
  Result<Spec> bwd = parse(kMinimal, {"train.precision=fp16", "train.conv_bn_backward=fused"});
  REQUIRE_FALSE(bwd.ok());
  CHECK(bwd.errors()[0].code == ErrCode::Invalid);
  CHECK(has_error(bwd, "'train.conv_bn_backward: fused' needs 'train.deterministic: false'"));
}

// The spec refuses these; a TrainSpec built in code gets the safe answer (no non-deterministic engines).
TEST_CASE("fused where fusing is not allowed resolves to separate in a TrainSpec built in code",
          "[spec][conv_bn_stats]") {
  TrainSpec t;
  t.precision = Precision::Fp16;
  t.conv_bn_stats = ConvBnStats::Fused;
  t.conv_bn_backward = ConvBnBackward::Fused;
  CHECK(effective_conv_bn_stats(t) == ConvBnStats::Separate);  // deterministic: true
  CHECK(effective_conv_bn_backward(t) == ConvBnBackward::Separate);
  t.deterministic = false;
  t.precision = Precision::Fp32;
  CHECK(effective_conv_bn_stats(t) == ConvBnStats::Separate);
  CHECK(effective_conv_bn_backward(t) == ConvBnBackward::Separate);
}

// wgconv_bn_backward_pairs: a data gradient on the ring px kernel takes its batch norm's backward reductions in its
// (deterministic, f16 / bf16) epilogue wherever conv_wgconv routes data gradients, the precision is fp16 or bf16 and
// conv_bn_backward is not separate -- train.deterministic true or false.
TEST_CASE("wgconv_bn_backward_pairs: under fp16 and bf16, either determinism, unless separate or no wgconv dgrad",
          "[spec][conv_bn_stats]") {
  for (const char* det : {"train.deterministic=true", "train.deterministic=false"})
    for (const char* precision : {"train.precision=fp16", "train.precision=bf16"}) {
      INFO(det << " " << precision);
      for (const char* wg : {"dgrad", "both", "bwd", "all"})
        CHECK(wgconv_bn_backward_pairs(train_of({det, precision, std::string("train.conv_wgconv=") + wg})));
      for (const char* wg : {"off", "fwd", "wgrad"})
        CHECK_FALSE(wgconv_bn_backward_pairs(train_of({det, precision, std::string("train.conv_wgconv=") + wg})));
      CHECK_FALSE(wgconv_bn_backward_pairs(train_of({det, precision, "train.conv_wgconv=bwd",
                                                     "train.conv_bn_backward=separate"})));
    }
  for (const char* precision : {"train.precision=fp32", "train.precision=tf32"})
    CHECK_FALSE(wgconv_bn_backward_pairs(train_of({"train.deterministic=false", precision, "train.conv_wgconv=bwd"})));
}

// conv_bn_backward_pairs: graph (d) where effective_conv_bn_backward is fused (non-deterministic fp16), the wgconv
// epilogue alone where only wgconv_bn_backward_pairs holds, else none -- and the names logs and run.json print.
TEST_CASE("conv_bn_backward_pairs: graph (d), the wgconv epilogue alone, or none, and their names",
          "[spec][conv_bn_stats]") {
  using P = ConvBnBackwardPairs;
  CHECK(conv_bn_backward_pairs(train_of({"train.deterministic=false", "train.precision=fp16"})) == P::GraphD);
  CHECK(conv_bn_backward_pairs(train_of({"train.deterministic=false", "train.precision=fp16",
                                         "train.conv_wgconv=bwd"})) == P::GraphD);
  CHECK(conv_bn_backward_pairs(train_of({"train.deterministic=true", "train.precision=fp16",
                                         "train.conv_wgconv=bwd"})) == P::WgconvOnly);
  CHECK(conv_bn_backward_pairs(train_of({"train.deterministic=false", "train.precision=bf16",
                                         "train.conv_wgconv=dgrad"})) == P::WgconvOnly);
  CHECK(conv_bn_backward_pairs(train_of({"train.deterministic=true", "train.precision=fp16"})) == P::None);
  CHECK(conv_bn_backward_pairs(train_of({"train.deterministic=false", "train.precision=fp16", "train.conv_wgconv=bwd",
                                         "train.conv_bn_backward=separate"})) == P::None);
  CHECK(conv_bn_backward_pairs(train_of({"train.deterministic=false", "train.precision=fp32"})) == P::None);
  CHECK(std::string(conv_bn_backward_pairs_name(P::GraphD)) == "fused");
  CHECK(std::string(conv_bn_backward_pairs_name(P::WgconvOnly)) == "wgconv");
  CHECK(std::string(conv_bn_backward_pairs_name(P::None)) == "separate");
}
