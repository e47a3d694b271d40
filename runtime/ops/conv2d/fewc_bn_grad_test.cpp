// fewc_bn_grad_choose (runtime/ops/conv2d/fewc_bn_grad.h) on compiled graphs: VGG16-BN folds features_1's backward
// (its dx read only by features_0's few-channel weight gradient, the next node) under fp16 and bf16 with
// train.conv_fewc: on, and nothing under fp32, conv_fewc forward or off; ResNet-50's stem batch norm has its max
// pool fused (none); a small net: a stem batch norm without ReLU (folded, no beta), a K = 16 stem (its weight
// gradient is not few-channel: none) and a stem whose dx a second reader also takes (none).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/compiler.h"
#include "runtime/ops/conv2d/fewc_bn_grad.h"
#include "runtime/train/trainer.h"
#include "tests/support/compile_util.h"

using namespace trctl;

namespace {

using testing::compile_amp;

// configs/<config> at a small synthetic size with `overrides`.
Spec load(const std::string& config, const std::vector<std::string>& overrides) {
  std::vector<std::string> o = {"data.synthetic.train_size=512", "data.synthetic.val_size=256"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return testing::config_spec(config, o);
}

int backward_programs(const Graph& g) { return testing::programs_with(g, OpKind::BatchNormGrad); }

}  // namespace

TEST_CASE("fewc_bn_grad_choose on VGG16-BN: features_1's backward into features_0's weight gradient, AMP with "
          "conv_fewc on only",
          "[fewc][conv2d]") {
  struct Want {
    std::vector<std::string> overrides;
    int folds;  // per program with a batch-norm backward
  };
  const Want cases[] = {
      {{"train.precision=fp16"}, 1},
      {{"train.precision=bf16"}, 1},
      {{"train.precision=fp32"}, 0},
      {{"train.precision=fp16", "train.conv_fewc=unfolded"}, 0},  // the weight gradient on fewc, reading dx
      {{"train.precision=fp16", "train.conv_fewc=forward"}, 0},
      {{"train.precision=fp16", "train.conv_fewc=off"}, 0},
  };
  for (const Want& w : cases) {
    std::string tag;
    for (const std::string& o : w.overrides) tag += o + " ";
    INFO(tag);
    const Compiled c = compile_amp(load("vgg16bn.yaml", w.overrides));
    const int p = backward_programs(c.graph);
    REQUIRE(p >= 1);
    const std::vector<FewcBnGradFold> folds = fewc_bn_grad_choose(c.graph, c.spec);
    CHECK(static_cast<int>(folds.size()) == w.folds * p);
    for (const FewcBnGradFold& f : folds) {
      const Program& prog = c.graph.programs[f.program];
      const Node &bn = prog.nodes[f.bn_grad], &wg = prog.nodes[f.wgrad];
      INFO(bn.name << " -> " << wg.name);
      CHECK(bn.name == "features_1+features_2.grad");
      CHECK(wg.name == "features_0.grad_weight");
      CHECK(f.wgrad == f.bn_grad + 1);
      CHECK((f.g == bn.in[0] && f.x == bn.in[1] && f.dx == bn.out[0] && wg.in[0] == f.dx));
      CHECK(c.graph.values[f.relu_beta].name == "features_1.bias");  // the forward's beta
    }
  }
}

TEST_CASE("fewc_bn_grad_choose leaves ResNet-50's stem (its batch norm fuses the max pool) alone", "[fewc][conv2d]") {
  const Compiled c = compile_amp(load("resnet50.yaml", {"train.precision=fp16"}));
  CHECK(fewc_bn_grad_choose(c.graph, c.spec).empty());
}

TEST_CASE("fewc_bn_grad_choose: a batch norm without ReLU folds without a beta; K = 16 and a second reader of dx "
          "do not fold",
          "[fewc][conv2d]") {
  const std::string head = R"(
seed: 1
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 32, width: 32, channels: 3, classes: 10}
  batch_size: 16
train: {epochs: 1, precision: fp16}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
run: {progress: off}
model:
  layers:
)";
  struct Net {
    const char* name;
    std::string layers;
    int folds;
    bool relu;
  };
  const Net nets[] = {
      {"no ReLU", R"(    - {type: conv2d, name: stem, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn}
    - {type: conv2d, name: c1, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: relu, name: r1}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
)",
       1, false},
      {"ReLU", R"(    - {type: conv2d, name: stem, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn}
    - {type: relu, name: r0}
    - {type: conv2d, name: c1, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: relu, name: r1}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
)",
       1, true},
      {"K = 16", R"(    - {type: conv2d, name: stem, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn}
    - {type: relu, name: r0}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
)",
       0, true},
      // The stem's output also feeds c1: its gradient is the sum of the batch norm's dx and c1's input gradient.
      {"two readers", R"(    - {type: conv2d, name: stem, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn}
    - {type: conv2d, name: c1, inputs: [stem], out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: add, name: sum, inputs: [bn, c1]}
    - {type: relu, name: r1}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
)",
       0, false},
  };
  for (const Net& n : nets) {
    INFO(n.name);
    Result<Spec> s = spec_parse(head + n.layers, "fewc_bn_grad.yaml");
    INFO((s.ok() ? std::string() : s.error_text()));
    REQUIRE(s.ok());
    const Compiled c = compile_amp(s.value());
    const std::vector<FewcBnGradFold> folds = fewc_bn_grad_choose(c.graph, c.spec);
    CHECK(static_cast<int>(folds.size()) == n.folds * backward_programs(c.graph));
    for (const FewcBnGradFold& f : folds) CHECK((f.relu_beta != kNoValue) == n.relu);
  }
}
