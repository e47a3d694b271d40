// The transforms for variable-size images in the spec (random_resized_crop, random_horizontal_flip,
// color_jitter, resize, center_crop): parsing with torchvision's defaults, located range and key errors, and
// spec_to_yaml round trips.
#include <catch2/catch.hpp>

#include "core/spec/spec.h"
#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

const std::string kModel(kMinimal);

Result<Spec> parse_train(const std::string& list) {
  return parse("data:\n  train_transforms: " + list + "\n" + kModel);
}

// The fields of the new kinds, compared one by one (spec_test_util.h's first_difference predates them).
void check_same(const TransformSpec& a, const TransformSpec& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.size == b.size);
  CHECK(a.p == b.p);
  CHECK(a.crop_scale_min == b.crop_scale_min);
  CHECK(a.crop_scale_max == b.crop_scale_max);
  CHECK(a.crop_ratio_min == b.crop_ratio_min);
  CHECK(a.crop_ratio_max == b.crop_ratio_max);
  CHECK(a.brightness == b.brightness);
  CHECK(a.contrast == b.contrast);
  CHECK(a.saturation == b.saturation);
  CHECK(a.hue == b.hue);
}

}  // namespace

TEST_CASE("the variable-size transforms parse with their parameters") {
  Result<Spec> r = parse_train(
      "\n    - random_resized_crop: {size: 224, scale: [0.25, 1], ratio: [0.5, 2]}\n"
      "    - random_horizontal_flip: {p: 0.25}\n"
      "    - color_jitter: {brightness: 0.4, contrast: 0.3, saturation: 0.2, hue: 0.1}\n"
      "    - resize: {size: 256}\n    - center_crop: {size: 200}\n    - normalize");
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  const std::vector<TransformSpec>& t = r.value().data.train_transforms;
  REQUIRE(t.size() == 6);
  CHECK(t[0].kind == TransformKind::RandomResizedCrop);
  CHECK(t[0].size == 224);
  CHECK(t[0].crop_scale_min == 0.25);
  CHECK(t[0].crop_scale_max == 1.0);
  CHECK(t[0].crop_ratio_min == 0.5);
  CHECK(t[0].crop_ratio_max == 2.0);
  CHECK(t[1].kind == TransformKind::RandomHorizontalFlip);
  CHECK(t[1].p == 0.25);
  CHECK(t[2].kind == TransformKind::ColorJitter);
  CHECK(t[2].brightness == 0.4);
  CHECK(t[2].contrast == 0.3);
  CHECK(t[2].saturation == 0.2);
  CHECK(t[2].hue == 0.1);
  CHECK(t[3].kind == TransformKind::Resize);
  CHECK(t[3].size == 256);
  CHECK(t[4].kind == TransformKind::CenterCrop);
  CHECK(t[4].size == 200);
}

TEST_CASE("the variable-size transforms take torchvision's defaults") {
  Result<Spec> r = parse_train("[{random_resized_crop: {size: 32}}, random_horizontal_flip, color_jitter]");
  REQUIRE(r.ok());
  const std::vector<TransformSpec>& t = r.value().data.train_transforms;
  REQUIRE(t.size() == 3);
  CHECK(t[0].crop_scale_min == 0.08);
  CHECK(t[0].crop_scale_max == 1.0);
  CHECK(t[0].crop_ratio_min == 3.0 / 4.0);
  CHECK(t[0].crop_ratio_max == 4.0 / 3.0);
  CHECK(t[1].p == 0.5);
  CHECK((t[2].brightness == 0 && t[2].contrast == 0 && t[2].saturation == 0 && t[2].hue == 0));
}

TEST_CASE("a size is required by random_resized_crop, resize and center_crop") {
  Result<Spec> r = parse_train("[random_resized_crop, resize, {center_crop: {}}]");
  CHECK(has_error(r, "test.yaml:2:22: missing 'data.train_transforms[0].random_resized_crop.size' (required)"));
  CHECK(has_error(r, "missing 'data.train_transforms[1].resize.size'"));
  CHECK(has_error(r, "missing 'data.train_transforms[2].center_crop.size'"));
}

TEST_CASE("the variable-size transform parameters are range-checked with locations") {
  Result<Spec> r = parse_train(
      "\n    - random_resized_crop: {size: 0, scale: [0.5, 0.1], ratio: [0, 1]}\n"
      "    - random_horizontal_flip: {p: 1.5}\n"
      "    - color_jitter: {brightness: -0.1, hue: 0.6}\n"
      "    - resize: {size: 16385}\n");
  REQUIRE_FALSE(r.ok());
  CHECK(has_error(r, "test.yaml:3:35: value '0' for 'data.train_transforms[0].random_resized_crop.size' is out "
                     "of range"));
  CHECK(has_error(r, "'data.train_transforms[0].random_resized_crop.scale' = [0.5, 0.1] must have first <= second"));
  CHECK(has_error(r, "value '0' for 'data.train_transforms[0].random_resized_crop.ratio[0]' is out of range"));
  CHECK(has_error(r, "test.yaml:4:35: value '1.5' for 'data.train_transforms[1].random_horizontal_flip.p'"));
  CHECK(has_error(r, "value '-0.1' for 'data.train_transforms[2].color_jitter.brightness' is out of range"));
  CHECK(has_error(r, "value '0.6' for 'data.train_transforms[2].color_jitter.hue' is out of range"));
  CHECK(has_error(r, "value '16385' for 'data.train_transforms[3].resize.size' is out of range"));
}

TEST_CASE("an unknown color_jitter key suggests the right one") {
  Result<Spec> r = parse_train("[{color_jitter: {brightnes: 0.2}}]");
  CHECK(has_error(r, "unknown key 'brightnes' in 'data.train_transforms[0].color_jitter' (did you mean "
                     "'brightness'?)"));
}

TEST_CASE("a misspelt variable-size transform suggests the closest kind") {
  Result<Spec> r = parse_train("[{center_crp: {size: 3}}]");
  CHECK(has_error(r, "unknown value 'center_crp' for 'data.train_transforms[0]' (did you mean 'center_crop'?)"));
}

TEST_CASE("the variable-size transforms round-trip through spec_to_yaml") {
  Spec s;
  TransformSpec rrc, flip, jitter, resize, crop;
  rrc.kind = TransformKind::RandomResizedCrop;
  rrc.size = 176;
  rrc.crop_scale_min = 0.35;
  rrc.crop_ratio_max = 1.7;
  flip.kind = TransformKind::RandomHorizontalFlip;
  flip.p = 0.125;
  jitter.kind = TransformKind::ColorJitter;
  jitter.brightness = 0.4;
  jitter.contrast = 1.0 / 3.0;
  jitter.saturation = 0.0;
  jitter.hue = 0.5;
  resize.kind = TransformKind::Resize;
  resize.size = 256;
  crop.kind = TransformKind::CenterCrop;
  crop.size = 224;
  TransformSpec norm;
  s.data.train_transforms = {rrc, flip, jitter, norm};
  s.data.val_transforms = {resize, crop, norm};
  s.model.layers.resize(2);
  s.model.layers[0].kind = LayerKind::Flatten;
  s.model.layers[0].name = "flat";
  s.model.layers[1].kind = LayerKind::Linear;
  s.model.layers[1].name = "fc";
  s.model.layers[1].out_features = 10;
  const std::string yaml = spec_to_yaml(s);
  INFO(yaml);
  CHECK(yaml.find("random_resized_crop: {size: 176, scale: [0.35, 1], ratio: [0.75, 1.7]}") != std::string::npos);
  CHECK(yaml.find("color_jitter: {brightness: 0.4, contrast: 0.3333333333333333,") != std::string::npos);
  Result<Spec> back = spec_parse(yaml, "emitted.yaml");
  INFO((back.ok() ? std::string() : back.error_text()));
  REQUIRE(back.ok());
  CHECK(first_difference(s, back.value()) == "");
  REQUIRE(back.value().data.train_transforms.size() == 4);
  REQUIRE(back.value().data.val_transforms.size() == 3);
  for (size_t i = 0; i < 4; ++i) check_same(s.data.train_transforms[i], back.value().data.train_transforms[i]);
  for (size_t i = 0; i < 3; ++i) check_same(s.data.val_transforms[i], back.value().data.val_transforms[i]);
}

TEST_CASE("the variable-size transform kinds have their YAML names") {
  CHECK(std::string(to_string(TransformKind::RandomResizedCrop)) == "random_resized_crop");
  CHECK(std::string(to_string(TransformKind::RandomHorizontalFlip)) == "random_horizontal_flip");
  CHECK(std::string(to_string(TransformKind::ColorJitter)) == "color_jitter");
  CHECK(std::string(to_string(TransformKind::Resize)) == "resize");
  CHECK(std::string(to_string(TransformKind::CenterCrop)) == "center_crop");
}
