// spec_parse on valid input: stated values, defaults, the accepted YAML forms, automatic layer names, overrides.
#include <catch2/catch.hpp>

#include "core/spec/spec.h"
#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

const char* kFull = R"(seed: 42
data:
  dataset: idx
  root: /data/mnist
  train_images: a.gz
  train_labels: b.gz
  val_images: c
  val_labels: d
  batch_size: 128
  val_batch_size: 500
  workers: 3
  train_subset: 1000
  drop_last: true
  normalization: {mean: [0.5, 0.25], std: [0.5, 0.125]}
  train_transforms:
    - pad: {padding: 4}
    - random_crop: {size: 32}
    - random_rotation: {degrees: 15.5}
    - random_scale: {min: 0.9, max: 1.1}
    - normalize
    - random_erasing: {p: 0.25, scale: [0.1, 0.2], ratio: [0.5, 2], value: -1}
  val_transforms:
    - normalize: {}
model:
  init: kaiming_uniform_fan_in
  layers:
    - {type: flatten, name: flat}
    - {type: linear, out_features: 64, bias: false, name: fc1, inputs: [flat]}
    - {type: relu}
    - {type: dropout, p: 0.3}
    - {type: linear, out_features: 10, inputs: [dropout3]}
loss:
  type: cross_entropy
  label_smoothing: 0.05
optimizer:
  type: sgd
  lr: 0.1
  momentum: 0.9
  dampening: 0
  nesterov: true
  weight_decay: 5e-4
  decay_bias_and_norm: true
scheduler:
  type: multistep
  warmup_epochs: 2
  gamma: 0.2
  milestones: [30, 60, 80]
train:
  epochs: 90
  precision: bf16
  device: cpu
  threads: 2
  deterministic: false
run:
  out_dir: out
  name: exp1
  log_interval: 10
  progress: off
)";

}  // namespace

TEST_CASE("a full spec parses into the values it states") {
  Result<Spec> r = parse(kFull);
  REQUIRE(r.ok());
  const Spec& s = r.value();
  CHECK(s.seed == 42);
  CHECK(s.source == kFile);
  CHECK(s.data.dataset == DatasetKind::Idx);
  CHECK(s.data.root == "/data/mnist");
  CHECK(s.data.train_images == "a.gz");
  CHECK(s.data.val_labels == "d");
  CHECK(s.data.batch_size == 128);
  CHECK(s.data.val_batch_size == 500);
  CHECK(s.data.workers == 3);
  CHECK(s.data.train_subset == 1000);
  CHECK(s.data.drop_last);
  CHECK(s.data.mean == std::vector<double>{0.5, 0.25});
  CHECK(s.data.std == std::vector<double>{0.5, 0.125});
  REQUIRE(s.data.train_transforms.size() == 6);
  CHECK(s.data.train_transforms[0].kind == TransformKind::Pad);
  CHECK(s.data.train_transforms[0].padding == 4);
  CHECK(s.data.train_transforms[1].size == 32);
  CHECK(s.data.train_transforms[2].degrees == 15.5);
  CHECK(s.data.train_transforms[3].scale_min == 0.9);
  CHECK(s.data.train_transforms[3].scale_max == 1.1);
  CHECK(s.data.train_transforms[4].kind == TransformKind::Normalize);
  const TransformSpec& e = s.data.train_transforms[5];
  CHECK(e.kind == TransformKind::RandomErasing);
  CHECK(e.p == 0.25);
  CHECK(e.erase_scale_min == 0.1);
  CHECK(e.erase_scale_max == 0.2);
  CHECK(e.ratio_min == 0.5);
  CHECK(e.ratio_max == 2);
  CHECK(e.value == -1);
  REQUIRE(s.data.val_transforms.size() == 1);
  CHECK(s.data.val_transforms[0].kind == TransformKind::Normalize);

  REQUIRE(s.model.layers.size() == 5);
  CHECK(s.model.layers[1].kind == LayerKind::Linear);
  CHECK(s.model.layers[1].out_features == 64);
  CHECK_FALSE(s.model.layers[1].bias);
  CHECK(s.model.layers[1].inputs == std::vector<std::string>{"flat"});
  CHECK(s.model.layers[3].p == 0.3);

  CHECK(s.loss.label_smoothing == 0.05);
  CHECK(s.optimizer.kind == OptimizerKind::Sgd);
  CHECK(s.optimizer.lr == 0.1);
  CHECK(s.optimizer.momentum == 0.9);
  CHECK(s.optimizer.nesterov);
  CHECK(s.optimizer.weight_decay == 5e-4);
  CHECK(s.optimizer.decay_bias_and_norm);
  CHECK(s.scheduler.kind == SchedulerKind::MultiStep);
  CHECK(s.scheduler.warmup_epochs == 2);
  CHECK(s.scheduler.gamma == 0.2);
  CHECK(s.scheduler.milestones == std::vector<int>{30, 60, 80});
  CHECK(s.train.epochs == 90);
  CHECK(s.train.precision == Precision::Bf16);
  CHECK(s.train.device == DeviceKind::Cpu);
  CHECK(s.train.threads == 2);
  CHECK_FALSE(s.train.deterministic);
  CHECK(s.run.out_dir == "out");
  CHECK(s.run.name == "exp1");
  CHECK(s.run.log_interval == 10);
  CHECK(s.run.progress == ProgressKind::Off);
}

TEST_CASE("absent sections and keys take the struct defaults") {
  Result<Spec> r = parse(kMinimal);
  REQUIRE(r.ok());
  Spec expected;
  expected.model = r.value().model;
  CHECK(first_difference(r.value(), expected).empty());
  CHECK(r.value().optimizer.kind == OptimizerKind::AdamW);
  CHECK(r.value().data.batch_size == 200);
}

TEST_CASE("empty sections read as all defaults") {
  Result<Spec> r = parse(std::string("data:\ntrain: {}\n") + kMinimal);
  REQUIRE(r.ok());
  CHECK(r.value().data.workers == 4);
  CHECK(r.value().train.epochs == 1);
}

TEST_CASE("unnamed layers are named <type><index> and record their 1-based line and column") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: flatten}\n    - type: linear\n      out_features: 10\n");
  REQUIRE(r.ok());
  const auto& layers = r.value().model.layers;
  CHECK(layers[0].name == "flatten0");
  CHECK(layers[1].name == "linear1");
  CHECK(layers[0].line == 3);
  CHECK(layers[0].col == 7);
  CHECK(layers[1].line == 4);
  CHECK(layers[1].col == 7);
}

TEST_CASE("layer inputs may name 'input' or an earlier automatic name") {
  Result<Spec> r = parse(
      "model:\n  layers:\n    - {type: flatten, inputs: [input]}\n    - {type: linear, out_features: 3, "
      "inputs: [flatten0]}\n");
  REQUIRE(r.ok());
  CHECK(r.value().model.layers[1].inputs == std::vector<std::string>{"flatten0"});
}

TEST_CASE("parameterless transforms may be a bare name, an empty map or null") {
  Result<Spec> r = parse(std::string("data:\n  val_transforms: [normalize, {normalize: {}}, {normalize: null}]\n  "
                                     "train_transforms:\n    - normalize:\n") +
                         kMinimal);
  REQUIRE(r.ok());
  CHECK(r.value().data.val_transforms.size() == 3);
  CHECK(r.value().data.train_transforms.size() == 1);
}

TEST_CASE("random_erasing takes its defaults when written bare") {
  Result<Spec> r = parse(std::string("data:\n  train_transforms: [random_erasing]\n") + kMinimal);
  REQUIRE(r.ok());
  const TransformSpec& t = r.value().data.train_transforms.at(0);
  CHECK(t.p == 0.5);
  CHECK(t.erase_scale_min == 0.02);
  CHECK(t.ratio_max == 3.3);
}

TEST_CASE("an override sets a scalar, creating the section when absent") {
  Result<Spec> r = parse(kMinimal, {"train.epochs=3", "optimizer.lr=0.5"});
  REQUIRE(r.ok());
  CHECK(r.value().train.epochs == 3);
  CHECK(r.value().optimizer.lr == 0.5);
}

TEST_CASE("an override replaces a value given in the file") {
  Result<Spec> r = parse(std::string("train: {epochs: 7}\n") + kMinimal, {"train.epochs=9"});
  REQUIRE(r.ok());
  CHECK(r.value().train.epochs == 9);
}

TEST_CASE("an override value is YAML, so lists work") {
  Result<Spec> r = parse(kMinimal, {"optimizer.betas=[0.8,0.99]", "scheduler.type=multistep",
                                    "scheduler.milestones=[2, 4]"});
  REQUIRE(r.ok());
  CHECK(r.value().optimizer.beta1 == 0.8);
  CHECK(r.value().optimizer.beta2 == 0.99);
  CHECK(r.value().scheduler.milestones == std::vector<int>{2, 4});
}

TEST_CASE("an override indexes into lists with numbers") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: flatten}\n    - {type: dropout, p: 0.5}\n"
                         "    - {type: linear, out_features: 10}\n",
                         {"model.layers.1.p=0.2", "model.layers.2.out_features=7"});
  REQUIRE(r.ok());
  CHECK(r.value().model.layers[1].p == 0.2);
  CHECK(r.value().model.layers[2].out_features == 7);
}

TEST_CASE("overrides apply in order, the last one winning") {
  Result<Spec> r = parse(kMinimal, {"train.epochs=3", "train.epochs=4"});
  REQUIRE(r.ok());
  CHECK(r.value().train.epochs == 4);
}

TEST_CASE("a quoted string is a string even when it looks like a number") {
  Result<Spec> r = parse(std::string("run: {name: \"123\"}\n") + kMinimal);
  REQUIRE(r.ok());
  CHECK(r.value().run.name == "123");
}

TEST_CASE("spec_load reads a file and names it in errors") {
  Result<Spec> missing = spec_load("/nonexistent/dir/x.yaml");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.errors()[0].code == ErrCode::Io);
  CHECK(missing.error_text().find("/nonexistent/dir/x.yaml") != std::string::npos);
}
