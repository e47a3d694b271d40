// spec_parse on invalid input: each class of error, its location "file:line:col", and all errors at once.
#include <catch2/catch.hpp>

#include "core/spec/spec.h"
#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

const std::string kModel(kMinimal);

ErrCode only_code(const Result<Spec>& r) {
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 1);
  return r.errors()[0].code;
}

}  // namespace

TEST_CASE("a misspelt top-level key is an error that suggests the right one") {
  Result<Spec> r = parse("optimzer: {lr: 0.1}\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownKey);
  CHECK(has_error(r, "test.yaml:1:1: unknown key 'optimzer' at the top level (did you mean 'optimizer'?)"));
}

TEST_CASE("a misspelt key inside a section suggests from that section's keys") {
  Result<Spec> r = parse("data:\n  batch_sise: 3\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownKey);
  CHECK(has_error(r, "test.yaml:2:3: unknown key 'batch_sise' in 'data' (did you mean 'batch_size'?)"));
}

TEST_CASE("an unknown key far from every valid key gets no suggestion") {
  Result<Spec> r = parse("data:\n  completely_different: 3\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownKey);
  CHECK_FALSE(has_error(r, "did you mean"));
}

TEST_CASE("a string where an integer is expected is a type error") {
  Result<Spec> r = parse("data:\n  batch_size: abc\n" + kModel);
  CHECK(only_code(r) == ErrCode::WrongType);
  CHECK(has_error(r, "test.yaml:2:15: expected an integer for 'data.batch_size', got 'abc'"));
}

TEST_CASE("a float where an integer is expected is a type error") {
  Result<Spec> r = parse("train:\n  epochs: 2.5\n" + kModel);
  CHECK(only_code(r) == ErrCode::WrongType);
  CHECK(has_error(r, "expected an integer for 'train.epochs', got '2.5'"));
}

TEST_CASE("a quoted number where a number is expected is a type error") {
  Result<Spec> r = parse("optimizer:\n  lr: \"0.1\"\n" + kModel);
  CHECK(only_code(r) == ErrCode::WrongType);
  CHECK(has_error(r, "expected a number for 'optimizer.lr', got the quoted string '0.1'"));
}

TEST_CASE("booleans are only true and false") {
  Result<Spec> r = parse("data:\n  drop_last: yes\n" + kModel);
  CHECK(only_code(r) == ErrCode::WrongType);
  CHECK(has_error(r, "expected true or false for 'data.drop_last', got 'yes'"));
}

TEST_CASE("a list where a map is expected is a type error") {
  Result<Spec> r = parse("train: [1, 2]\n" + kModel);
  CHECK(only_code(r) == ErrCode::WrongType);
  CHECK(has_error(r, "test.yaml:1:8: expected a map for 'train', got a list"));
}

TEST_CASE("infinities and nan are not numbers") {
  Result<Spec> r = parse("optimizer: {lr: .inf}\nloss: {label_smoothing: nan}\n" + kModel);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 2);
  CHECK(has_error(r, "expected a number for 'optimizer.lr', got '.inf'"));
}

TEST_CASE("a value out of range names the key, the value and the range") {
  Result<Spec> r = parse("data:\n  batch_size: 0\n" + kModel);
  CHECK(only_code(r) == ErrCode::OutOfRange);
  CHECK(has_error(r, "test.yaml:2:15: value '0' for 'data.batch_size' is out of range; expected >= 1"));
}

TEST_CASE("half-open ranges exclude their upper end") {
  Result<Spec> r = parse("loss: {label_smoothing: 1}\noptimizer: {betas: [0.9, 1.0]}\n" + kModel);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 2);
  CHECK(has_error(r, "value '1' for 'loss.label_smoothing' is out of range; expected in [0, 1)"));
  CHECK(has_error(r, "value '1.0' for 'optimizer.betas[1]' is out of range; expected in [0, 1)"));
}

TEST_CASE("an integer too large for its field is out of range") {
  Result<Spec> r = parse("train: {epochs: 99999999999999999999}\n" + kModel);
  CHECK(only_code(r) == ErrCode::OutOfRange);
}

TEST_CASE("transform parameters are range-checked") {
  Result<Spec> r = parse(
      "data:\n  train_transforms:\n    - pad: {padding: -1}\n    - random_crop: {size: 0}\n"
      "    - random_rotation: {degrees: -5}\n    - random_scale: {min: 1.2, max: 0.8}\n"
      "    - random_erasing: {p: 1.5, scale: [0, 0.5], ratio: [2, 1]}\n" +
      kModel);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 7);
  CHECK(has_error(r, "test.yaml:3:22: value '-1' for 'data.train_transforms[0].pad.padding'"));
  CHECK(has_error(r, "'data.train_transforms[3].random_scale': min (1.2) must be <= max (0.8)"));
  CHECK(has_error(r, "value '0' for 'data.train_transforms[4].random_erasing.scale[0]' is out of range; "
                     "expected in (0, 1]"));
  CHECK(has_error(r, "'data.train_transforms[4].random_erasing.ratio' = [2, 1] must have first <= second"));
}

TEST_CASE("a transform's required parameter must be given") {
  Result<Spec> r = parse("data:\n  train_transforms: [random_crop]\n" + kModel);
  CHECK(only_code(r) == ErrCode::Missing);
  CHECK(has_error(r, "missing 'data.train_transforms[0].random_crop.size'"));
}

TEST_CASE("an unknown transform parameter is an error") {
  Result<Spec> r = parse("data:\n  train_transforms: [{pad: {paddin: 2}}]\n" + kModel);
  REQUIRE_FALSE(r.ok());
  CHECK(has_error(r, "unknown key 'paddin' in 'data.train_transforms[0].pad' (did you mean 'padding'?)"));
}

TEST_CASE("normalization mean and std must have the same non-empty length and std > 0") {
  Result<Spec> lengths = parse("data:\n  normalization: {mean: [0.1, 0.2], std: [0.3]}\n" + kModel);
  CHECK(only_code(lengths) == ErrCode::Invalid);
  Result<Spec> empty = parse("data:\n  normalization: {mean: [], std: []}\n" + kModel);
  CHECK(only_code(empty) == ErrCode::Invalid);
  Result<Spec> zero = parse("data:\n  normalization: {mean: [0.1], std: [0]}\n" + kModel);
  CHECK(only_code(zero) == ErrCode::OutOfRange);
}

TEST_CASE("an unknown enum value is an error that suggests the closest name and lists all") {
  Result<Spec> r = parse("optimizer:\n  type: adamx\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "test.yaml:2:9: unknown value 'adamx' for 'optimizer.type' (did you mean 'adamw'?); "
                     "expected one of: sgd, adam, adamw, lars"));
}

TEST_CASE("train.conv_im2col takes on, forward or off") {
  Result<Spec> ok = parse("train:\n  conv_im2col: forward\n" + kModel);
  REQUIRE(ok.ok());
  CHECK(ok.value().train.conv_im2col == ConvIm2col::Forward);
  Result<Spec> r = parse("train:\n  conv_im2col: fwd\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "test.yaml:2:16: unknown value 'fwd' for 'train.conv_im2col'"));
  CHECK(has_error(r, "expected one of: on, forward, off"));
}

TEST_CASE("train.conv_s2d takes on, forward or off, default forward") {
  Result<Spec> def = parse(kModel);
  REQUIRE(def.ok());
  CHECK(def.value().train.conv_s2d == ConvS2d::Forward);
  for (auto [text, mode] : {std::pair{"on", ConvS2d::On}, {"forward", ConvS2d::Forward}, {"off", ConvS2d::Off}}) {
    Result<Spec> ok = parse(std::string("train:\n  conv_s2d: ") + text + "\n" + kModel);
    REQUIRE(ok.ok());
    CHECK(ok.value().train.conv_s2d == mode);
  }
  Result<Spec> r = parse("train:\n  conv_s2d: fwd\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "test.yaml:2:13: unknown value 'fwd' for 'train.conv_s2d'"));
  CHECK(has_error(r, "expected one of: on, forward, off"));
}

TEST_CASE("train.conv_fewc takes on, unfolded, forward or off, default on") {
  Result<Spec> def = parse(kModel);
  REQUIRE(def.ok());
  CHECK(def.value().train.conv_fewc == ConvFewc::On);
  for (auto [text, mode] : {std::pair{"on", ConvFewc::On}, {"unfolded", ConvFewc::Unfolded},
                            {"forward", ConvFewc::Forward}, {"off", ConvFewc::Off}}) {
    Result<Spec> ok = parse(std::string("train:\n  conv_fewc: ") + text + "\n" + kModel);
    REQUIRE(ok.ok());
    CHECK(ok.value().train.conv_fewc == mode);
  }
  Result<Spec> r = parse("train:\n  conv_fewc: fwd\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "test.yaml:2:14: unknown value 'fwd' for 'train.conv_fewc'"));
  CHECK(has_error(r, "expected one of: on, unfolded, forward, off"));
}

TEST_CASE("train.conv_wgconv takes off, dgrad, fwd, both, wgrad, bwd or all, default off") {
  Result<Spec> def = parse(kModel);
  REQUIRE(def.ok());
  CHECK(def.value().train.conv_wgconv == ConvWgconv::Off);
  for (auto [text, mode] : {std::pair{"off", ConvWgconv::Off}, {"dgrad", ConvWgconv::Dgrad}, {"fwd", ConvWgconv::Fwd},
                            {"both", ConvWgconv::Both}, {"wgrad", ConvWgconv::Wgrad}, {"bwd", ConvWgconv::Bwd},
                            {"all", ConvWgconv::All}}) {
    Result<Spec> ok = parse(std::string("train:\n  conv_wgconv: ") + text + "\n" + kModel);
    REQUIRE(ok.ok());
    CHECK(ok.value().train.conv_wgconv == mode);
  }
  Result<Spec> r = parse("train:\n  conv_wgconv: on\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "test.yaml:2:16: unknown value 'on' for 'train.conv_wgconv'"));
  CHECK(has_error(r, "expected one of: off, dgrad, fwd, both, wgrad, bwd, all"));
}

TEST_CASE("train.conv_bn_stats takes separate, fused or auto, default auto; fused needs deterministic: false and "
          "fp16 or bf16") {
  Result<Spec> def = parse(kModel);
  REQUIRE(def.ok());
  CHECK(def.value().train.conv_bn_stats == ConvBnStats::Auto);
  for (auto [text, mode] : {std::pair{"separate", ConvBnStats::Separate}, {"fused", ConvBnStats::Fused},
                            {"auto", ConvBnStats::Auto}}) {
    Result<Spec> ok = parse(std::string("train:\n  precision: fp16\n  deterministic: false\n  conv_bn_stats: ") +
                            text + "\n" + kModel);
    INFO(text << ": " << (ok.ok() ? std::string() : ok.error_text()));
    REQUIRE(ok.ok());
    CHECK(ok.value().train.conv_bn_stats == mode);
  }
  Result<Spec> det = parse("train:\n  precision: bf16\n  conv_bn_stats: fused\n" + kModel);  // deterministic: true
  CHECK(only_code(det) == ErrCode::Invalid);
  CHECK(has_error(det, "test.yaml:3:18: 'train.conv_bn_stats: fused' needs 'train.deterministic: false'"));
  Result<Spec> f32 = parse("train:\n  deterministic: false\n  conv_bn_stats: fused\n" + kModel);  // fp32
  CHECK(only_code(f32) == ErrCode::NotSupported);
  CHECK(has_error(f32, "test.yaml:3:18: 'train.conv_bn_stats: fused' needs train.precision fp16 or bf16"));
  CHECK(parse("train:\n  deterministic: true\n  conv_bn_stats: separate\n" + kModel).ok());
  Result<Spec> r = parse("train:\n  deterministic: false\n  conv_bn_stats: on\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "test.yaml:3:18: unknown value 'on' for 'train.conv_bn_stats'"));
  CHECK(has_error(r, "expected one of: separate, fused, auto"));
}

TEST_CASE("train.conv_bn_stats: auto is no error where it cannot fuse (deterministic, or fp32 / tf32): it runs "
          "separate") {
  for (const char* train : {"train:\n  precision: bf16\n  conv_bn_stats: auto\n",            // deterministic: true
                            "train:\n  deterministic: false\n  conv_bn_stats: auto\n",        // fp32
                            "train:\n  deterministic: false\n  precision: tf32\n  conv_bn_stats: auto\n"}) {
    Result<Spec> r = parse(train + kModel);
    INFO(train << (r.ok() ? std::string() : r.error_text()));
    REQUIRE(r.ok());
    CHECK(r.value().train.conv_bn_stats == ConvBnStats::Auto);
    CHECK(effective_conv_bn_stats(r.value().train) == ConvBnStats::Separate);
  }
}

TEST_CASE("train.conv_bn_apply takes separate or prologue; prologue needs conv_bn_stats fused or auto") {
  Result<Spec> def = parse(kModel);
  REQUIRE(def.ok());
  CHECK(def.value().train.conv_bn_apply == ConvBnApply::Separate);
  Result<Spec> ok = parse(
      "train:\n  precision: fp16\n  deterministic: false\n  conv_bn_stats: auto\n  conv_bn_apply: prologue\n" +
      kModel);
  INFO((ok.ok() ? std::string() : ok.error_text()));
  REQUIRE(ok.ok());
  CHECK(ok.value().train.conv_bn_apply == ConvBnApply::Prologue);
  Result<Spec> by_default = parse("train:\n  precision: fp16\n  deterministic: false\n  conv_bn_apply: prologue\n" +
                                  kModel);  // conv_bn_stats: auto, the default
  INFO((by_default.ok() ? std::string() : by_default.error_text()));
  CHECK(by_default.ok());
  Result<Spec> sep = parse(
      "train:\n  precision: fp16\n  deterministic: false\n  conv_bn_stats: separate\n  conv_bn_apply: prologue\n" +
      kModel);
  CHECK(only_code(sep) == ErrCode::Invalid);
  CHECK(has_error(sep, "test.yaml:5:18: 'train.conv_bn_apply: prologue' needs 'train.conv_bn_stats: fused' or 'auto'"));
  Result<Spec> bf16 = parse(
      "train:\n  precision: bf16\n  deterministic: false\n  conv_bn_stats: auto\n  conv_bn_apply: prologue\n" +
      kModel);
  CHECK(only_code(bf16) == ErrCode::NotSupported);
  CHECK(has_error(bf16, "test.yaml:5:18: 'train.conv_bn_apply: prologue' needs train.precision fp16"));
  Result<Spec> r = parse("train:\n  conv_bn_apply: fused\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "unknown value 'fused' for 'train.conv_bn_apply'"));
}

TEST_CASE("train.conv_bn_apply: prologue is an error when conv_bn_stats: auto resolves to separate "
          "(deterministic: true)") {
  Result<Spec> expl = parse("train:\n  precision: fp16\n  conv_bn_stats: auto\n  conv_bn_apply: prologue\n" + kModel);
  CHECK(only_code(expl) == ErrCode::Invalid);
  CHECK(has_error(expl, "test.yaml:4:18: 'train.conv_bn_apply: prologue' needs the batch-norm statistics fused, but "
                        "'train.conv_bn_stats: auto' resolves to separate with 'train.deterministic: true'"));
  Result<Spec> def = parse("train:\n  precision: fp16\n  conv_bn_apply: prologue\n" + kModel);
  CHECK(only_code(def) == ErrCode::Invalid);
  CHECK(has_error(def, "'train.conv_bn_stats: auto' (the default) resolves to separate with "
                       "'train.deterministic: true'"));
  // fp32: the precision error, and auto resolving to separate (named by the precision).
  Result<Spec> f32 = parse("train:\n  deterministic: false\n  conv_bn_apply: prologue\n" + kModel);
  REQUIRE_FALSE(f32.ok());
  CHECK(has_error(f32, "'train.conv_bn_apply: prologue' needs train.precision fp16"));
  CHECK(has_error(f32, "resolves to separate with train.precision fp32"));
}

TEST_CASE("train.conv_bn_backward takes separate, fused or auto, default auto; fused needs deterministic: false "
          "and fp16") {
  Result<Spec> def = parse(kModel);
  REQUIRE(def.ok());
  CHECK(def.value().train.conv_bn_backward == ConvBnBackward::Auto);
  for (auto [text, mode] : {std::pair{"separate", ConvBnBackward::Separate}, {"fused", ConvBnBackward::Fused},
                            {"auto", ConvBnBackward::Auto}}) {
    Result<Spec> ok = parse(std::string("train:\n  deterministic: false\n  precision: fp16\n  conv_bn_backward: ") +
                            text + "\n" + kModel);
    INFO(text << ": " << (ok.ok() ? std::string() : ok.error_text()));
    REQUIRE(ok.ok());
    CHECK(ok.value().train.conv_bn_backward == mode);
  }
  Result<Spec> det = parse("train:\n  precision: fp16\n  conv_bn_backward: fused\n" + kModel);
  CHECK(only_code(det) == ErrCode::Invalid);
  CHECK(has_error(det, "test.yaml:3:21: 'train.conv_bn_backward: fused' needs 'train.deterministic: false'"));
  Result<Spec> bf16 = parse("train:\n  deterministic: false\n  precision: bf16\n  conv_bn_backward: fused\n" + kModel);
  CHECK(only_code(bf16) == ErrCode::NotSupported);
  CHECK(has_error(bf16, "needs train.precision fp16"));
  Result<Spec> r = parse("train:\n  conv_bn_backward: prologue\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "unknown value 'prologue' for 'train.conv_bn_backward'"));
  CHECK(has_error(r, "expected one of: separate, fused, auto"));
}

TEST_CASE("train.conv_bn_backward: auto is no error where it cannot fuse (deterministic, or not fp16): it runs "
          "separate") {
  for (const char* train : {"train:\n  precision: fp16\n  conv_bn_backward: auto\n",          // deterministic: true
                            "train:\n  deterministic: false\n  precision: bf16\n  conv_bn_backward: auto\n",
                            "train:\n  deterministic: false\n  conv_bn_backward: auto\n"}) {  // fp32
    Result<Spec> r = parse(train + kModel);
    INFO(train << (r.ok() ? std::string() : r.error_text()));
    REQUIRE(r.ok());
    CHECK(r.value().train.conv_bn_backward == ConvBnBackward::Auto);
    CHECK(effective_conv_bn_backward(r.value().train) == ConvBnBackward::Separate);
  }
}

TEST_CASE("a misspelt train.conv_fewc key suggests conv_fewc") {
  Result<Spec> r = parse("train:\n  conv_fewcc: off\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownKey);
  CHECK(has_error(r, "test.yaml:2:3: unknown key 'conv_fewcc' in 'train' (did you mean 'conv_fewc'?)"));
}

TEST_CASE("an unknown transform kind suggests the closest kind") {
  Result<Spec> r = parse("data:\n  train_transforms: [{random_crp: {size: 3}}]\n" + kModel);
  CHECK(only_code(r) == ErrCode::UnknownEnum);
  CHECK(has_error(r, "unknown value 'random_crp' for 'data.train_transforms[0]' (did you mean 'random_crop'?)"));
}

TEST_CASE("a spec without a model is an error") {
  Result<Spec> r = parse("seed: 1\n");
  CHECK(only_code(r) == ErrCode::Missing);
  CHECK(has_error(r, "test.yaml:1:1: missing 'model'"));
}

TEST_CASE("a model without layers, or with an empty list, is an error") {
  CHECK(only_code(parse("model: {}\n")) == ErrCode::Missing);
  CHECK(only_code(parse("model:\n")) == ErrCode::Missing);
  CHECK(only_code(parse("model: {layers: []}\n")) == ErrCode::Invalid);
}

TEST_CASE("an empty file is an error") {
  for (const char* text : {"", "# only a comment\n", "~\n", "null\n"}) {
    Result<Spec> r = parse(text);
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.errors().size() == 1);
    CHECK(r.errors()[0].str() == "test.yaml: empty spec (expected a map with at least 'model')");
  }
}

TEST_CASE("a top level that is not a map is an error") {
  Result<Spec> r = parse("- model\n");
  CHECK(only_code(r) == ErrCode::WrongType);
  CHECK(has_error(r, "test.yaml:1:1: expected a map"));
}

TEST_CASE("a YAML syntax error is reported with its line and column") {
  Result<Spec> r = parse("model:\n  layers: [\n    {type: relu}\n");
  CHECK(only_code(r) == ErrCode::Syntax);
  CHECK(has_error(r, "test.yaml:4:1: YAML syntax error: "));
}

TEST_CASE("a duplicate key in a map is an error") {
  Result<Spec> r = parse("train:\n  epochs: 1\n  epochs: 2\n" + kModel);
  CHECK(only_code(r) == ErrCode::Syntax);
  CHECK(has_error(r, "test.yaml:3:3: duplicate key 'epochs' (first given at test.yaml:2:3)"));
}

TEST_CASE("YAML anchors and aliases are rejected") {
  Result<Spec> r = parse("train: &t {epochs: 2}\nrun: *t\n" + kModel);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 2);
  CHECK(has_error(r, "test.yaml:1:8: YAML aliases are not supported"));
  CHECK(has_error(r, "test.yaml:2:6: YAML aliases are not supported"));
}

TEST_CASE("an alias bomb is rejected without being expanded") {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    std::string prev(1, static_cast<char>(c - 1));
    bomb += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" +
            prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n";
  }
  Result<Spec> r = parse(bomb + kModel);
  REQUIRE_FALSE(r.ok());
  CHECK(has_error(r, "YAML aliases are not supported"));
}

TEST_CASE("nesting deeper than 32 levels is rejected") {
  std::string deep = "model: " + std::string(40, '[') + std::string(40, ']') + "\n";
  Result<Spec> r = parse(deep);
  REQUIRE_FALSE(r.ok());
  CHECK(count_errors(r, "nesting deeper than 32 levels is not supported") == 1);
  std::string ok = "model: {layers: [{type: relu}]}\nx: " + std::string(31, '[') + std::string(31, ']') + "\n";
  CHECK_FALSE(has_error(parse(ok), "nesting"));
}

TEST_CASE("very deep nesting is rejected without exhausting the stack") {
  std::string deep = "model: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  Result<Spec> r = parse(deep);
  REQUIRE_FALSE(r.ok());
  CHECK(has_error(r, "nesting deeper than 32 levels"));
}

TEST_CASE("a spec larger than 1 MiB is rejected") {
  std::string big = kModel + "# " + std::string(1 << 20, 'x') + "\n";
  Result<Spec> r = parse(big);
  REQUIRE_FALSE(r.ok());
  CHECK(has_error(r, "1 MiB"));
}

TEST_CASE("more than one YAML document is an error") {
  Result<Spec> r = parse(kModel + "---\nseed: 1\n");
  CHECK(only_code(r) == ErrCode::NotSupported);
}

TEST_CASE("nesterov without momentum is an invalid combination") {
  Result<Spec> r = parse("optimizer: {type: sgd, nesterov: true}\n" + kModel);
  CHECK(only_code(r) == ErrCode::Invalid);
  CHECK(has_error(r, "test.yaml:1:34: 'optimizer.nesterov' needs momentum > 0 and dampening 0"));
}

TEST_CASE("nesterov with dampening is an invalid combination") {
  Result<Spec> r = parse("optimizer: {type: sgd, momentum: 0.9, dampening: 0.1, nesterov: true}\n" + kModel);
  CHECK(only_code(r) == ErrCode::Invalid);
}

TEST_CASE("a key of another optimizer type is an error") {
  Result<Spec> r = parse("optimizer:\n  type: adamw\n  momentum: 0.9\n" + kModel);
  CHECK(only_code(r) == ErrCode::Invalid);
  CHECK(has_error(r, "test.yaml:3:3: key 'optimizer.momentum' does not apply to optimizer.type 'adamw' "
                     "(it is for sgd)"));
  Result<Spec> sgd = parse("optimizer: {type: sgd, betas: [0.9, 0.99]}\n" + kModel);
  CHECK(only_code(sgd) == ErrCode::Invalid);
}

TEST_CASE("a key of another scheduler type is an error") {
  Result<Spec> r = parse("scheduler: {type: cosine, step_size: 3}\ntrain: {epochs: 10}\n" + kModel);
  CHECK(only_code(r) == ErrCode::Invalid);
  CHECK(has_error(r, "key 'scheduler.step_size' does not apply to scheduler.type 'cosine' (it is for step)"));
}

TEST_CASE("a cosine warm-up may be as long as the run (a short trial of a long recipe)") {
  Result<Spec> r = parse("scheduler: {type: cosine, warmup_epochs: 5}\ntrain: {epochs: 1}\n" + kModel);
  REQUIRE(r.ok());
  CHECK(scheduler_lr(r->scheduler, 1e-3, 1, 1) == Approx(2e-4));
}

TEST_CASE("milestones must be strictly increasing and at least 1") {
  Result<Spec> r = parse("scheduler: {type: multistep, milestones: [0, 3, 3]}\n" + kModel);
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 2);
  CHECK(has_error(r, "value '0' for 'scheduler.milestones[0]'"));
  CHECK(has_error(r, "'scheduler.milestones' must be strictly increasing: 3 follows 3"));
}

TEST_CASE("a linear layer without out_features is an error") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: linear}\n");
  CHECK(only_code(r) == ErrCode::Missing);
  CHECK(has_error(r, "test.yaml:3:7: missing 'model.layers[0].out_features'"));
}

TEST_CASE("a key of another layer type is an error") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: relu, p: 0.5}\n");
  CHECK(only_code(r) == ErrCode::Invalid);
  CHECK(has_error(r, "key 'model.layers[0].p' does not apply to layer type 'relu' (it is for dropout)"));
}

TEST_CASE("a layer input that names no layer is an error with a suggestion") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: flatten, name: flat}\n"
                         "    - {type: linear, out_features: 3, inputs: [flta]}\n");
  CHECK(only_code(r) == ErrCode::Invalid);
  CHECK(has_error(r, "test.yaml:4:48: unknown input 'flta' for layer 'linear1' (did you mean 'flat'?)"));
}

TEST_CASE("a layer input that names a later layer is an error") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: relu, inputs: [fc]}\n"
                         "    - {type: linear, out_features: 3, name: fc}\n");
  CHECK(only_code(r) == ErrCode::Invalid);
  CHECK(has_error(r, "layer 'relu0' takes input 'fc', which is not an earlier layer"));
}

TEST_CASE("duplicate layer names are an error, automatic names included") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: relu, name: a}\n    - {type: relu, name: a}\n"
                         "    - {type: relu, name: relu3}\n    - {type: relu}\n");
  REQUIRE_FALSE(r.ok());
  CHECK(r.errors().size() == 2);
  CHECK(has_error(r, "test.yaml:4:26: duplicate layer name 'a' (also the name of model.layers[0])"));
  CHECK(has_error(r, "duplicate layer name 'relu3' (also the name of model.layers[2])"));
}

TEST_CASE("a layer may not be named 'input'") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: relu, name: input}\n");
  CHECK(only_code(r) == ErrCode::Invalid);
}

TEST_CASE("all errors are reported at once, in file order") {
  Result<Spec> r = parse(
      "optimzer: {}\n"                          // unknown key
      "data:\n  batch_size: x\n  workers: 0\n"  // wrong type, out of range
      "train: {precision: fp33}\n"              // unknown enum
      "model:\n  layers:\n    - {type: linear}\n");  // missing out_features
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 5);
  CHECK(r.errors()[0].where == "test.yaml:1:1");
  CHECK(r.errors()[1].where == "test.yaml:3:15");
  CHECK(r.errors()[2].where == "test.yaml:4:12");
  CHECK(r.errors()[3].where == "test.yaml:5:20");
  CHECK(r.errors()[4].where == "test.yaml:8:7");
  CHECK(r.error_text().find("(did you mean 'fp32'?)") != std::string::npos);
}

TEST_CASE("every located error reads file:line:col: message") {
  Result<Spec> r = parse("data: {workers: 0}\ntrain: {epochs: 0}\n" + kModel);
  REQUIRE_FALSE(r.ok());
  for (const Error& e : r.errors()) {
    CHECK(e.where.rfind("test.yaml:", 0) == 0);
    CHECK(std::count(e.where.begin(), e.where.end(), ':') == 2);
    CHECK(e.str() == e.where + ": " + e.message);
  }
}

TEST_CASE("an override without '=' or with an empty key is an error") {
  Result<Spec> r = parse(kModel, {"train.epochs", "=3", "train..epochs=3"});
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.errors().size() == 3);
  CHECK(r.errors()[0].str() == "<override 1>:1:1: expected key.path=value, got 'train.epochs'");
  CHECK(r.errors()[1].str() == "<override 2>:1:1: expected key.path=value, got '=3'");
  CHECK(r.errors()[2].where == "<override 3>:1:1");
}

TEST_CASE("a bad override value is located at the value in the override") {
  Result<Spec> r = parse(kModel, {"seed=1", "train.epochs=abc"});
  CHECK(only_code(r) == ErrCode::WrongType);
  CHECK(r.errors()[0].str() == "<override 2>:1:14: expected an integer for 'train.epochs', got 'abc'");
}

TEST_CASE("a bad item in an override list is located at that item") {
  Result<Spec> r = parse(kModel, {"optimizer.betas=[0.9, 2]"});
  CHECK(only_code(r) == ErrCode::OutOfRange);
  CHECK(r.errors()[0].where == "<override 1>:1:23");
}

TEST_CASE("an unknown key introduced by an override is located in the override") {
  Result<Spec> r = parse(kModel, {"train.epohcs=3"});
  CHECK(only_code(r) == ErrCode::UnknownKey);
  CHECK(has_error(r, "<override 1>:1:7: unknown key 'epohcs' in 'train' (did you mean 'epochs'?)"));
}

TEST_CASE("an override list index out of range is an error") {
  Result<Spec> r = parse(kModel, {"model.layers.5.p=0.1"});
  CHECK(only_code(r) == ErrCode::OutOfRange);
  CHECK(has_error(r, "<override 1>:1:14: index 5 is out of range for 'model.layers' (2 items)"));
}

TEST_CASE("an override value with a YAML syntax error is reported in the override") {
  Result<Spec> r = parse(kModel, {"optimizer.betas=[0.9"});
  CHECK(only_code(r) == ErrCode::Syntax);
  CHECK(has_error(r, "<override 1>:1:"));
}

TEST_CASE("an override into a scalar is an error") {
  Result<Spec> r = parse(std::string("train: {epochs: 3}\n") + kModel, {"train.epochs.x=1"});
  CHECK(only_code(r) == ErrCode::WrongType);
}
