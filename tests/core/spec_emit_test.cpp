// spec_to_yaml: a complete spec that spec_parse reads back equal, field by field; and the benchmark recipe
// configs/mlp_fmnist.yaml parses into the stated values and round-trips.
#include <catch2/catch.hpp>

#include "core/spec/spec.h"
#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

TransformSpec transform(TransformKind k) {
  TransformSpec t;
  t.kind = k;
  return t;
}

LayerSpec layer(LayerKind k, const std::string& name, std::vector<std::string> inputs = {}) {
  LayerSpec l;
  l.kind = k;
  l.name = name;
  l.inputs = std::move(inputs);
  return l;
}

// Every field away from its default (within what one optimizer/scheduler type can carry).
Spec complex_spec() {
  Spec s;
  s.seed = 18446744073709551615ull;
  s.data.dataset = DatasetKind::Idx;
  s.data.root = "/tmp/odd \"dir\"\\with\ttabs\nand \xc3\xa9 \x01";
  s.data.train_images = "ti";
  s.data.train_labels = "tl: not a key";
  s.data.val_images = "#vi";
  s.data.val_labels = "";
  s.data.batch_size = 7;
  s.data.val_batch_size = 9;
  s.data.workers = 3;
  s.data.train_subset = 123456789012;
  s.data.drop_last = true;
  s.data.mean = {0.1 + 0.2, 1.0 / 3};
  s.data.std = {1e-300, 12345.678901234567};
  TransformSpec pad = transform(TransformKind::Pad), crop = transform(TransformKind::RandomCrop);
  TransformSpec rot = transform(TransformKind::RandomRotation), scale = transform(TransformKind::RandomScale);
  TransformSpec erase = transform(TransformKind::RandomErasing);
  pad.padding = 3;
  crop.size = 31;
  rot.degrees = 12.345;
  scale.scale_min = 0.7;
  scale.scale_max = 1.7;
  erase.p = 0.3;
  erase.erase_scale_min = 0.05;
  erase.erase_scale_max = 0.5;
  erase.ratio_min = 0.25;
  erase.ratio_max = 4;
  erase.value = -0.75;
  s.data.train_transforms = {pad, crop, rot, scale, transform(TransformKind::Normalize), erase};
  s.data.val_transforms = {transform(TransformKind::Normalize), pad};
  s.model.layers = {layer(LayerKind::Flatten, "f"), layer(LayerKind::Linear, "fc", {"f"}),
                    layer(LayerKind::Dropout, "drop", {"fc"}), layer(LayerKind::Relu, "r", {"drop", "input"})};
  s.model.layers[1].out_features = 17;
  s.model.layers[1].bias = false;
  s.model.layers[2].p = 0.125;
  s.loss.label_smoothing = 0.2;
  s.optimizer.kind = OptimizerKind::Sgd;
  s.optimizer.lr = 0.37;
  s.optimizer.momentum = 0.95;
  s.optimizer.dampening = 0;
  s.optimizer.nesterov = true;
  s.optimizer.weight_decay = 3e-5;
  s.optimizer.decay_bias_and_norm = true;
  s.scheduler.kind = SchedulerKind::MultiStep;
  s.scheduler.warmup_epochs = 3;
  s.scheduler.gamma = 0.5;
  s.scheduler.milestones = {4, 9, 11};
  s.train.epochs = 12;
  s.train.precision = Precision::Tf32;
  s.train.device = DeviceKind::Cuda;
  s.train.threads = 5;
  s.train.checkpoint_every = 3;
  s.train.checkpoint_every_steps = 250;
  s.train.deterministic = false;
  s.train.conv_im2col = ConvIm2col::Off;
  s.train.conv_s2d = ConvS2d::Off;
  s.train.conv_fewc = ConvFewc::Off;
  s.run.out_dir = "out dir";
  s.run.name = "true";
  s.run.log_interval = 3;
  s.run.progress = ProgressKind::On;
  return s;
}

Spec round_trip(const Spec& s) {
  Result<Spec> back = spec_parse(spec_to_yaml(s), "emitted.yaml");
  INFO(spec_to_yaml(s));
  INFO((back.ok() ? std::string() : back.error_text()));
  REQUIRE(back.ok());
  return back.value();
}

}  // namespace

TEST_CASE("spec_to_yaml of a spec with every field set parses back equal") {
  Spec s = complex_spec();
  CHECK(first_difference(round_trip(s), s) == "");
}

TEST_CASE("spec_to_yaml round-trips the adam and adamw keys and the other schedules") {
  Spec s = complex_spec();
  s.optimizer = OptimizerSpec{};
  s.optimizer.kind = OptimizerKind::Adam;
  s.optimizer.beta1 = 0.85;
  s.optimizer.beta2 = 0.9999;
  s.optimizer.eps = 1e-7;
  s.optimizer.weight_decay = 0.01;
  s.scheduler = SchedulerSpec{};
  s.scheduler.kind = SchedulerKind::Step;
  s.scheduler.warmup_epochs = 1;
  s.scheduler.step_size = 4;
  s.scheduler.gamma = 0.3;
  CHECK(first_difference(round_trip(s), s) == "");
  s.optimizer.kind = OptimizerKind::AdamW;
  s.scheduler = SchedulerSpec{};
  s.scheduler.kind = SchedulerKind::Cosine;
  s.scheduler.warmup_epochs = 2;
  s.scheduler.eta_min = 1e-6;
  CHECK(first_difference(round_trip(s), s) == "");
}

TEST_CASE("spec_to_yaml of a parsed spec is a fixed point") {
  std::string once = spec_to_yaml(complex_spec());
  Result<Spec> back = spec_parse(once, "emitted.yaml");
  REQUIRE(back.ok());
  CHECK(spec_to_yaml(back.value()) == once);
}

TEST_CASE("spec_to_yaml writes doubles in their shortest exact form") {
  Spec s = complex_spec();
  s.optimizer.lr = 0.1;
  std::string y = spec_to_yaml(s);
  CHECK(y.find("lr: 0.1\n") != std::string::npos);
  CHECK(y.find("0.30000000000000004") != std::string::npos);  // 0.1 + 0.2 needs all 17 digits
  CHECK(y.find("source") == std::string::npos);
}

TEST_CASE("the benchmark recipe configs/mlp_fmnist.yaml parses into the stated values") {
  Result<Spec> r = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml");
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  const Spec& s = r.value();
  CHECK(s.seed == 0);
  CHECK(s.data.dataset == DatasetKind::FashionMnist);
  CHECK(s.data.root == "/usr/share/datasets/fashion-mnist");
  CHECK(s.data.batch_size == 200);
  CHECK(s.data.workers == 4);
  CHECK(s.data.mean == std::vector<double>{0.2860});
  CHECK(s.data.std == std::vector<double>{0.3530});
  const auto& t = s.data.train_transforms;
  REQUIRE(t.size() == 6);
  CHECK(t[0].kind == TransformKind::Pad);
  CHECK(t[0].padding == 2);
  CHECK(t[1].size == 28);
  CHECK(t[2].degrees == 20);
  CHECK(t[3].scale_min == 0.8);
  CHECK(t[3].scale_max == 1.2);
  CHECK(t[4].kind == TransformKind::Normalize);
  CHECK(t[5].kind == TransformKind::RandomErasing);
  CHECK(t[5].p == 0.5);
  CHECK(t[5].value == 0);
  CHECK(t[5].erase_scale_min == 0.02);
  CHECK(t[5].ratio_max == 3.3);
  REQUIRE(s.data.val_transforms.size() == 1);
  const auto& l = s.model.layers;
  REQUIRE(l.size() == 8);
  const char* names[] = {"flatten", "fc1", "relu1", "fc2", "relu2", "fc3", "relu3", "fc4"};
  const int widths[] = {0, 1024, 0, 512, 0, 256, 0, 10};
  for (size_t i = 0; i < l.size(); ++i) {
    CHECK(l[i].name == names[i]);
    CHECK(l[i].out_features == widths[i]);
  }
  CHECK(s.loss.label_smoothing == 0.1);
  CHECK(s.optimizer.kind == OptimizerKind::AdamW);
  CHECK(s.optimizer.lr == 1e-3);
  CHECK(s.optimizer.beta1 == 0.9);
  CHECK(s.optimizer.beta2 == 0.999);
  CHECK(s.optimizer.eps == 1e-8);
  CHECK(s.optimizer.weight_decay == 1e-4);
  CHECK_FALSE(s.optimizer.decay_bias_and_norm);
  CHECK(s.scheduler.kind == SchedulerKind::Cosine);
  CHECK(s.scheduler.warmup_epochs == 5);
  CHECK(s.scheduler.eta_min == 1e-6);
  CHECK(s.train.epochs == 100);
  CHECK(s.train.precision == Precision::Fp16);
  CHECK(s.train.device == DeviceKind::Auto);
  CHECK(s.run.out_dir == "runs");
  CHECK(s.run.log_interval == 50);
}

TEST_CASE("the benchmark recipe round-trips through spec_to_yaml") {
  Result<Spec> r = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml");
  REQUIRE(r.ok());
  CHECK(first_difference(round_trip(r.value()), r.value()) == "");
}

TEST_CASE("the enum names are the YAML names") {
  CHECK(std::string(to_string(Precision::Bf16)) == "bf16");
  CHECK(std::string(to_string(DeviceKind::Cuda)) == "cuda");
  CHECK(std::string(to_string(OptimizerKind::AdamW)) == "adamw");
  CHECK(std::string(to_string(SchedulerKind::MultiStep)) == "multistep");
  CHECK(std::string(to_string(LayerKind::Dropout)) == "dropout");
  CHECK(std::string(to_string(TransformKind::RandomErasing)) == "random_erasing");
  CHECK(std::string(to_string(DatasetKind::FashionMnist)) == "fashion_mnist");
  CHECK(std::string(to_string(InitKind::KaimingUniformFanIn)) == "kaiming_uniform_fan_in");
  CHECK(std::string(to_string(LossKind::CrossEntropy)) == "cross_entropy");
  CHECK(std::string(to_string(ProgressKind::Off)) == "off");
  CHECK(std::string(to_string(ConvIm2col::Forward)) == "forward");
  CHECK(std::string(to_string(ConvS2d::On)) == "on");
  CHECK(std::string(to_string(ConvS2d::Forward)) == "forward");
  CHECK(std::string(to_string(ConvS2d::Off)) == "off");
  CHECK(std::string(to_string(ConvFewc::On)) == "on");
  CHECK(std::string(to_string(ConvFewc::Forward)) == "forward");
  CHECK(std::string(to_string(ConvFewc::Off)) == "off");
}

TEST_CASE("train.conv_im2col is written only when not the default 'forward', so older specs keep their checkpoint hash") {
  Spec s = complex_spec();
  s.train.conv_im2col = ConvIm2col::Forward;
  CHECK(spec_to_yaml(s).find("conv_im2col") == std::string::npos);
  for (ConvIm2col m : {ConvIm2col::On, ConvIm2col::Off}) {
    s.train.conv_im2col = m;
    const std::string y = spec_to_yaml(s);
    CHECK(y.find(std::string("  conv_im2col: ") + to_string(m) + "\n") != std::string::npos);
    Result<Spec> back = spec_parse(y, "emitted.yaml");
    REQUIRE(back.ok());
    CHECK(back.value().train.conv_im2col == m);
  }
}

TEST_CASE("train.conv_s2d is written only when not the default 'forward', so older specs keep their checkpoint hash") {
  Spec s = complex_spec();
  s.train.conv_s2d = ConvS2d::Forward;
  CHECK(spec_to_yaml(s).find("conv_s2d") == std::string::npos);
  for (ConvS2d m : {ConvS2d::On, ConvS2d::Off}) {
    s.train.conv_s2d = m;
    const std::string y = spec_to_yaml(s);
    CHECK(y.find(std::string("  conv_s2d: ") + to_string(m) + "\n") != std::string::npos);
    Result<Spec> back = spec_parse(y, "emitted.yaml");
    REQUIRE(back.ok());
    CHECK(back.value().train.conv_s2d == m);
  }
}

TEST_CASE("train.conv_bn_backward is written only when not the default 'auto'; an explicit separate is written") {
  Spec s = complex_spec();  // deterministic: false
  s.train.precision = Precision::Fp16;
  s.train.conv_bn_backward = ConvBnBackward::Auto;
  CHECK(spec_to_yaml(s).find("conv_bn_backward") == std::string::npos);  // older specs without it: now auto
  for (ConvBnBackward m : {ConvBnBackward::Separate, ConvBnBackward::Fused}) {
    s.train.conv_bn_backward = m;
    const std::string y = spec_to_yaml(s);
    CHECK(y.find(std::string("  conv_bn_backward: ") + to_string(m) + "\n") != std::string::npos);
    Result<Spec> back = spec_parse(y, "emitted.yaml");
    INFO((back.ok() ? std::string() : back.error_text()));
    REQUIRE(back.ok());
    CHECK(back.value().train.conv_bn_backward == m);
  }
}

TEST_CASE("train.conv_bn_apply is written only when not the default 'separate', so older specs keep their hash") {
  Spec s = complex_spec();  // deterministic: false
  s.train.precision = Precision::Fp16;
  s.train.conv_bn_stats = ConvBnStats::Auto;
  s.train.conv_bn_apply = ConvBnApply::Separate;
  CHECK(spec_to_yaml(s).find("conv_bn_apply") == std::string::npos);
  s.train.conv_bn_apply = ConvBnApply::Prologue;
  const std::string y = spec_to_yaml(s);
  CHECK(y.find("  conv_bn_apply: prologue\n") != std::string::npos);
  Result<Spec> back = spec_parse(y, "emitted.yaml");
  REQUIRE(back.ok());
  CHECK(back.value().train.conv_bn_apply == ConvBnApply::Prologue);
}

TEST_CASE("train.conv_bn_stats is written only when not the default 'auto'; an explicit separate is written") {
  Spec s = complex_spec();  // deterministic: false
  s.train.precision = Precision::Bf16;
  s.train.conv_bn_stats = ConvBnStats::Auto;
  CHECK(spec_to_yaml(s).find("conv_bn_stats") == std::string::npos);  // older specs without it: now auto
  for (ConvBnStats m : {ConvBnStats::Separate, ConvBnStats::Fused}) {
    s.train.conv_bn_stats = m;
    const std::string y = spec_to_yaml(s);
    CHECK(y.find(std::string("  conv_bn_stats: ") + to_string(m) + "\n") != std::string::npos);
    Result<Spec> back = spec_parse(y, "emitted.yaml");
    REQUIRE(back.ok());
    CHECK(back.value().train.conv_bn_stats == m);
  }
}

// parse -> emit -> parse keeps both switches, whichever of the three values was given (or none: auto).
TEST_CASE("conv_bn_stats and conv_bn_backward survive parse -> emit -> parse, an explicit separate included") {
  const std::string model = "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 10}\n";
  for (const char* stats : {"", "separate", "fused", "auto"})
    for (const char* bwd : {"", "separate", "fused", "auto"}) {
      std::string yaml = "train:\n  precision: fp16\n  deterministic: false\n";
      if (*stats) yaml += std::string("  conv_bn_stats: ") + stats + "\n";
      if (*bwd) yaml += std::string("  conv_bn_backward: ") + bwd + "\n";
      INFO(yaml);
      Result<Spec> first = spec_parse(yaml + model, "given.yaml");
      REQUIRE(first.ok());
      const TrainSpec& given = first.value().train;
      CHECK(to_string(given.conv_bn_stats) == std::string(*stats ? stats : "auto"));
      CHECK(to_string(given.conv_bn_backward) == std::string(*bwd ? bwd : "auto"));
      const Spec back = round_trip(first.value());
      CHECK(back.train.conv_bn_stats == given.conv_bn_stats);
      CHECK(back.train.conv_bn_backward == given.conv_bn_backward);
      const std::string emitted = spec_to_yaml(first.value());
      CHECK((emitted.find("conv_bn_stats: separate") != std::string::npos) == (std::string(stats) == "separate"));
      CHECK((emitted.find("conv_bn_backward: separate") != std::string::npos) == (std::string(bwd) == "separate"));
    }
}

TEST_CASE("train.conv_fewc is written only when not the default 'on', so older specs keep their checkpoint hash") {
  Spec s = complex_spec();
  s.train.conv_fewc = ConvFewc::On;
  CHECK(spec_to_yaml(s).find("conv_fewc") == std::string::npos);
  for (ConvFewc m : {ConvFewc::Unfolded, ConvFewc::Forward, ConvFewc::Off}) {
    s.train.conv_fewc = m;
    const std::string y = spec_to_yaml(s);
    CHECK(y.find(std::string("  conv_fewc: ") + to_string(m) + "\n") != std::string::npos);
    Result<Spec> back = spec_parse(y, "emitted.yaml");
    REQUIRE(back.ok());
    CHECK(back.value().train.conv_fewc == m);
  }
}

TEST_CASE("train.conv_wgconv is written only when not the default 'off', so older specs keep their checkpoint hash") {
  Spec s = complex_spec();
  s.train.conv_wgconv = ConvWgconv::Off;
  CHECK(spec_to_yaml(s).find("conv_wgconv") == std::string::npos);
  s.train.conv_wgconv = ConvWgconv::Dgrad;
  const std::string y = spec_to_yaml(s);
  CHECK(y.find("  conv_wgconv: dgrad\n") != std::string::npos);
  Result<Spec> back = spec_parse(y, "emitted.yaml");
  REQUIRE(back.ok());
  CHECK(back.value().train.conv_wgconv == ConvWgconv::Dgrad);
  for (ConvWgconv m : {ConvWgconv::Fwd, ConvWgconv::Both, ConvWgconv::Wgrad, ConvWgconv::Bwd, ConvWgconv::All}) {
    s.train.conv_wgconv = m;
    Result<Spec> again = spec_parse(spec_to_yaml(s), "emitted.yaml");
    REQUIRE(again.ok());
    CHECK(again.value().train.conv_wgconv == m);
  }
}
