// Activation layers and the loss options in the spec and the compiler: YAML names, PyTorch defaults, located errors
// for keys of the wrong type or loss, round trips through spec_to_yaml, graph_build's head checks (class weights per
// class, the 1-logit binary head), and the autodiff rule keeping the tensor each activation's backward reads.
#include <catch2/catch.hpp>

#include "core/compiler.h"
#include "tests/core/spec_test_util.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

const char* kActModel = R"(model:
  layers:
    - {type: flatten}
    - {type: linear, out_features: 8}
    - {type: relu6}
    - {type: leaky_relu}
    - {type: leaky_relu, negative_slope: 0.2}
    - {type: elu}
    - {type: elu, alpha: 0.5}
    - {type: silu}
    - {type: hardswish}
    - {type: sigmoid}
    - {type: tanh}
    - {type: linear, out_features: 10}
)";

Spec parsed(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  Result<Spec> r = parse(yaml, overrides);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

const Node* first(const Program& p, OpKind op) {
  for (const auto& n : p.nodes)
    if (n.op == op) return &n;
  return nullptr;
}

Spec act_mlp(LayerKind act) {
  Spec s = testing::mlp_spec(6, 4);
  s.model.layers[2] = testing::layer(act, "act1");
  return s;
}

}  // namespace

TEST_CASE("activation layer types parse with PyTorch's default parameters", "[spec][activation]") {
  Spec s = parsed(kActModel);
  REQUIRE(s.model.layers.size() == 12);
  CHECK(s.model.layers[2].kind == LayerKind::Relu6);
  CHECK(s.model.layers[3].kind == LayerKind::LeakyRelu);
  CHECK(s.model.layers[3].negative_slope == 0.01);
  CHECK(s.model.layers[4].negative_slope == 0.2);
  CHECK(s.model.layers[5].alpha == 1.0);
  CHECK(s.model.layers[6].alpha == 0.5);
  CHECK(s.model.layers[7].kind == LayerKind::Silu);
  CHECK(s.model.layers[8].kind == LayerKind::Hardswish);
  CHECK(s.model.layers[9].kind == LayerKind::Sigmoid);
  CHECK(s.model.layers[10].kind == LayerKind::Tanh);
  CHECK(s.model.layers[7].name == "silu7");
}

TEST_CASE("activation parameters on the wrong layer type are located errors", "[spec][activation]") {
  Result<Spec> r = parse("model:\n  layers:\n    - {type: silu, alpha: 1.0}\n    - {type: elu, negative_slope: 0.1}\n"
                         "    - {type: leaky_relu, negative_slope: .inf}\n    - {type: linear, out_features: 10}\n");
  REQUIRE_FALSE(r.ok());
  CHECK(has_error(r, "test.yaml:3:20: key 'model.layers[0].alpha' does not apply to layer type 'silu'"));
  CHECK(has_error(r, "key 'model.layers[1].negative_slope' does not apply to layer type 'elu'"));
  CHECK(has_error(r, "model.layers[2].negative_slope"));
  CHECK(has_error(parse("model:\n  layers:\n    - {type: swish}\n"), "unknown value 'swish'"));
}

TEST_CASE("the loss types and cross_entropy's class weights parse", "[spec][loss]") {
  Spec s = parsed(std::string(kMinimal) + "loss: {type: cross_entropy, label_smoothing: 0.1, class_weights: [1, 2, 0]}\n");
  CHECK(s.loss.class_weights == std::vector<double>{1, 2, 0});
  CHECK(parsed(std::string(kMinimal) + "loss: {type: bce_with_logits}\n").loss.kind == LossKind::BceWithLogits);
  CHECK(parsed(std::string(kMinimal) + "loss: {type: mse}\n").loss.kind == LossKind::Mse);
  CHECK(parsed(kMinimal, {"loss.type=mse"}).loss.kind == LossKind::Mse);
}

TEST_CASE("loss options that do not apply or are out of range are located errors", "[spec][loss]") {
  Result<Spec> r = parse(std::string(kMinimal) + "loss: {type: mse, label_smoothing: 0.1, class_weights: [1, 1]}\n");
  CHECK(has_error(r, "key 'loss.label_smoothing' does not apply to loss.type 'mse' (it is for cross_entropy)"));
  CHECK(has_error(r, "key 'loss.class_weights' does not apply to loss.type 'mse'"));
  CHECK(has_error(parse(std::string(kMinimal) + "loss: {class_weights: [1, -1]}\n"),
                  "'loss.class_weights[1]' is out of range"));
  CHECK(has_error(parse(std::string(kMinimal) + "loss: {class_weights: [0, 0]}\n"),
                  "'loss.class_weights' are all 0"));
  CHECK(has_error(parse(std::string(kMinimal) + "loss: {type: bce_with_logit}\n"), "did you mean 'bce_with_logits'"));
}

TEST_CASE("activation layers and loss options round-trip through spec_to_yaml", "[spec][emit]") {
  for (const char* loss : {"loss: {type: cross_entropy, label_smoothing: 0.1, class_weights: [1, 2.5]}\n",
                          "loss: {type: bce_with_logits}\n", "loss: {type: mse}\n"}) {
    INFO(loss);
    Spec a = parsed(std::string(kActModel) + loss);
    Spec b = parsed(spec_to_yaml(a));
    CHECK(first_difference(a, b) == "");
  }
}

TEST_CASE("graph_build wants one class weight per class", "[graph][loss]") {
  Spec s = testing::mlp_spec(6, 4);
  s.loss.class_weights = {1, 2};
  Result<Graph> g = graph_build(s, testing::small_data(8, 4));
  REQUIRE_FALSE(g.ok());
  CHECK(g.error_text().find("'loss.class_weights' has 2 weights but the dataset has 3 classes") != std::string::npos);
  s.loss.class_weights = {1, 2, 3};
  Result<Graph> ok = graph_build(s, testing::small_data(8, 4));
  REQUIRE(ok.ok());
  const Node* loss = first(ok->programs[0], OpKind::Loss);
  REQUIRE(loss);
  CHECK(loss->attrs.loss == LossFn::WeightedCrossEntropy);
  CHECK(loss->attrs.class_weights == std::vector<float>{1, 2, 3});
  CHECK(first(ok->programs[0], OpKind::SoftmaxCrossEntropy) == nullptr);
}

TEST_CASE("bce_with_logits takes a 1-logit head on 2-class data, or one logit per class", "[graph][loss]") {
  Spec s = testing::mlp_spec(6, 4);
  s.loss.kind = LossKind::BceWithLogits;
  DataShape two = testing::small_data(8, 4);
  two.num_classes = 2;
  s.model.layers.back().out_features = 1;
  Result<Graph> g = graph_build(s, two);
  REQUIRE(g.ok());
  CHECK(first(g->programs[0], OpKind::BinaryAccuracy));
  CHECK(first(g->programs[0], OpKind::Loss)->attrs.loss == LossFn::BceWithLogits);
  Result<Graph> three = graph_build(s, testing::small_data(8, 4));  // 1 logit, 3 classes
  REQUIRE_FALSE(three.ok());
  CHECK(three.error_text().find("the loss (bce_with_logits) needs (N, 3)") != std::string::npos);
  s.model.layers.back().out_features = 3;
  Result<Graph> per_class = graph_build(s, testing::small_data(8, 4));
  REQUIRE(per_class.ok());
  CHECK(first(per_class->programs[0], OpKind::Accuracy));
  s.loss.kind = LossKind::Mse;
  s.model.layers.back().out_features = 1;
  CHECK_FALSE(graph_build(s, two).ok());  // mse wants one logit per class
}

TEST_CASE("activation backward reads the output for sigmoid/tanh, the input otherwise", "[graph][activation]") {
  for (LayerKind k : {LayerKind::Silu, LayerKind::Elu, LayerKind::Sigmoid, LayerKind::Tanh, LayerKind::Hardswish}) {
    Result<Compiled> c = compile_spec(act_mlp(k), testing::small_data(8, 4));
    INFO((c.ok() ? std::string() : c.error_text()));
    REQUIRE(c.ok());
    const Program& p = c->graph.programs[0];
    const Node* fwd = first(p, OpKind::Activation);
    const Node* bwd = first(p, OpKind::ActivationGrad);
    REQUIRE(fwd);
    REQUIRE(bwd);
    CHECK(bwd->attrs.act == fwd->attrs.act);
    const bool out = k == LayerKind::Sigmoid || k == LayerKind::Tanh;
    CHECK(bwd->in[1] == (out ? fwd->out[0] : fwd->in[0]));
    // The saved tensor is live (placed, not overlapped) until the backward: the plan verified this.
    CHECK(c->plan.values[bwd->in[1]].last >= c->plan.values[bwd->out[0]].first);
    CHECK(first(p, OpKind::Relu) == nullptr);  // no ReLU fusion touches the new activations
    CHECK_FALSE(first(p, OpKind::Linear)->attrs.relu);
  }
}

TEST_CASE("the Loss node gets a LossGrad with the same attributes", "[graph][loss]") {
  Spec s = testing::mlp_spec(6, 4);
  s.loss.kind = LossKind::Mse;
  Result<Compiled> c = compile_spec(s, testing::small_data(8, 4));
  REQUIRE(c.ok());
  const Node* g = first(c->graph.programs[0], OpKind::LossGrad);
  REQUIRE(g);
  CHECK(g->attrs.loss == LossFn::Mse);
  CHECK(graph_dump(c->graph).find("loss_grad[mse]") != std::string::npos);
}
