// The compiler on CNNs: graph_build shapes, parameters and batch-norm buffers of a small conv net and a ResNet
// basic block with a downsample shortcut; fuse_norm_add_relu; the autodiff rules of the CNN ops; graph_verify
// after every stage; the memory plan (Buffers region, activation reuse); and graph_build's located errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "core/compiler.h"
#include "tests/support/cnn_spec.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

const Node* node_named(const Program& p, OpKind op, const std::string& name_prefix) {
  for (const auto& n : p.nodes)
    if (n.op == op && n.name.rfind(name_prefix, 0) == 0) return &n;
  return nullptr;
}

int count_ops(const Program& p, OpKind op) {
  int c = 0;
  for (const auto& n : p.nodes) c += n.op == op;
  return c;
}

const ParamInfo* param_named(const Graph& g, const std::string& name) {
  for (const auto& p : g.params)
    if (p.name == name) return &p;
  return nullptr;
}

Shape out_shape(const Graph& g, const Program& p, OpKind op, const std::string& name) {
  const Node* n = node_named(p, op, name);
  REQUIRE(n);
  return g.values[n->out[0]].shape;
}

Graph built(const Spec& s, const DataShape& d) {
  Result<Graph> g = graph_build(s, d);
  INFO((g.ok() ? std::string() : g.error_text()));
  REQUIRE(g.ok());
  return g.value();
}

// graph_build + both fusion passes over every program, verified after each.
Graph fused(const Spec& s, const DataShape& d) {
  Graph g = built(s, d);
  for (auto& p : g.programs) REQUIRE(pass_fuse_linear_relu(g, p).ok());
  REQUIRE(graph_verify(g).ok());
  for (auto& p : g.programs) REQUIRE(pass_fuse_norm_add_relu(g, p).ok());
  Status st = graph_verify(g);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
  return g;
}

Compiled compiled(const Spec& s, const DataShape& d, CompileOptions opt = {}) {
  Result<Compiled> c = compile_spec(s, d, opt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return c.value();
}

Result<Graph> build_error(const Spec& s, const DataShape& d) {
  Result<Graph> g = graph_build(s, d);
  REQUIRE_FALSE(g.ok());
  return g;
}

}  // namespace

// ---- graph_build ----

TEST_CASE("graph_build infers the shape of every layer of a small conv net (NHWC)", "[graph][cnn]") {
  Graph g = built(small_cnn_spec(5), image_data(20, 10));
  const Program& p = *g.find_program("train");
  CHECK(g.values[p.input].shape == Shape{{5, 8, 8, 2}});
  CHECK(out_shape(g, p, OpKind::Conv2d, "conv1") == Shape{{5, 8, 8, 4}});
  CHECK(out_shape(g, p, OpKind::BatchNorm, "bn1") == Shape{{5, 8, 8, 4}});
  CHECK(out_shape(g, p, OpKind::Relu, "relu1") == Shape{{5, 8, 8, 4}});
  CHECK(out_shape(g, p, OpKind::MaxPool, "pool1") == Shape{{5, 4, 4, 4}});
  CHECK(out_shape(g, p, OpKind::Conv2d, "conv2") == Shape{{5, 2, 2, 6}});
  CHECK(out_shape(g, p, OpKind::AvgPool, "pool2") == Shape{{5, 1, 1, 6}});
  CHECK(out_shape(g, p, OpKind::GlobalAvgPool, "gap") == Shape{{5, 6}});
  CHECK(g.values[p.logits].shape == Shape{{5, 3}});
  const Node* conv2 = node_named(p, OpKind::Conv2d, "conv2");
  CHECK(conv2->attrs.kernel == 3);
  CHECK(conv2->attrs.stride == 2);
  CHECK(conv2->attrs.pad == 1);
  CHECK(node_named(p, OpKind::Conv2d, "conv1")->attrs.stride == 1);  // stride 0 means 1 for conv2d
  CHECK(node_named(p, OpKind::MaxPool, "pool1")->attrs.stride == 2);  // and the kernel size for pools
  CHECK(graph_verify(g).ok());
}

TEST_CASE("conv weights are (K, R, S, C/groups), decayed; biases and batch-norm parameters are not",
          "[graph][cnn]") {
  Graph g = built(small_cnn_spec(5), image_data(20, 10));
  std::vector<std::string> names;
  for (const auto& p : g.params) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"conv1.weight", "conv2.weight", "fc.weight", "conv1.bias", "bn1.weight",
                                          "bn1.bias", "fc.bias"});
  auto shape_of = [&](const std::string& n) { return g.values[param_named(g, n)->value].shape; };
  CHECK(shape_of("conv1.weight") == Shape{{4, 3, 3, 2}});
  CHECK(shape_of("conv2.weight") == Shape{{6, 3, 3, 4}});
  CHECK(shape_of("conv1.bias") == Shape{{4}});
  CHECK(shape_of("bn1.weight") == Shape{{4}});
  CHECK(shape_of("bn1.bias") == Shape{{4}});
  CHECK(shape_of("fc.weight") == Shape{{3, 6}});
  for (const auto& p : g.params) {
    INFO(p.name);
    const bool weight = p.name == "conv1.weight" || p.name == "conv2.weight" || p.name == "fc.weight";
    CHECK(p.decay == weight);
    CHECK(g.values[p.value].role == Role::Param);
    CHECK(g.values[p.value].param == &p - g.params.data());
  }
  CHECK(param_named(g, "conv1.weight")->fan_in == 2 * 3 * 3);
  CHECK(param_named(g, "conv2.weight")->fan_in == 4 * 3 * 3);
  CHECK(param_named(g, "bn1.weight")->init == ParamInfo::Init::Ones);
  CHECK(param_named(g, "bn1.bias")->init == ParamInfo::Init::Zeros);
  CHECK(param_named(g, "conv1.bias")->init == ParamInfo::Init::Zeros);
}

TEST_CASE("decay_bias_and_norm makes biases and batch-norm parameters decay too", "[graph][cnn]") {
  Spec s = small_cnn_spec(5);
  s.optimizer.decay_bias_and_norm = true;
  Graph g = built(s, image_data(20, 10));
  for (const auto& p : g.params) CHECK(p.decay);
}

TEST_CASE("grouped conv weights hold C/groups input channels", "[graph][cnn]") {
  Spec s = cnn_base_spec(4);
  LayerSpec c = conv_layer("gconv", 6, 3, 1, 1);
  c.groups = 2;
  cnn_push(s, c);
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  Graph g = built(s, image_data(8, 4, 5, 4));
  CHECK(g.values[param_named(g, "gconv.weight")->value].shape == Shape{{6, 3, 3, 2}});
  CHECK(param_named(g, "gconv.weight")->fan_in == 2 * 9);
  CHECK(graph_verify(g).ok());
}

TEST_CASE("a ResNet basic block with a downsample shortcut has the expected shapes", "[graph][cnn][resnet]") {
  Graph g = built(resnet_block_spec(3), image_data(6, 3));
  const Program& p = *g.find_program("train");
  CHECK(out_shape(g, p, OpKind::Conv2d, "conv0") == Shape{{3, 8, 8, 4}});
  CHECK(out_shape(g, p, OpKind::Conv2d, "conv1") == Shape{{3, 4, 4, 8}});
  CHECK(out_shape(g, p, OpKind::Conv2d, "conv2") == Shape{{3, 4, 4, 8}});
  CHECK(out_shape(g, p, OpKind::Conv2d, "ds_conv") == Shape{{3, 4, 4, 8}});
  CHECK(out_shape(g, p, OpKind::BatchNorm, "ds_bn") == Shape{{3, 4, 4, 8}});
  CHECK(out_shape(g, p, OpKind::Add, "add") == Shape{{3, 4, 4, 8}});
  CHECK(out_shape(g, p, OpKind::GlobalAvgPool, "gap") == Shape{{3, 8}});
  CHECK(g.values[p.logits].shape == Shape{{3, 3}});
  // The shortcut reads the stem's output, the add reads both branches.
  const Node* ds = node_named(p, OpKind::Conv2d, "ds_conv");
  CHECK(ds->in[0] == node_named(p, OpKind::Relu, "relu0")->out[0]);
  const Node* add = node_named(p, OpKind::Add, "add");
  REQUIRE(add->in.size() == 2);
  CHECK(add->in[0] == node_named(p, OpKind::BatchNorm, "bn2")->out[0]);
  CHECK(add->in[1] == node_named(p, OpKind::BatchNorm, "ds_bn")->out[0]);
  CHECK(g.values[param_named(g, "ds_conv.weight")->value].shape == Shape{{8, 1, 1, 4}});
  CHECK(g.values[param_named(g, "conv1.weight")->value].shape == Shape{{8, 3, 3, 4}});
  CHECK_FALSE(param_named(g, "conv1.bias"));  // bias: false
  CHECK(g.params.size() == 4 + 1 + 4 * 2 + 1);  // 4 conv weights, fc.weight, 4 BN (gamma, beta), fc.bias
  CHECK(graph_verify(g).ok());
}

TEST_CASE("each batch norm has running mean and variance buffers shared by train and eval programs",
          "[graph][cnn][resnet]") {
  Graph g = built(resnet_block_spec(3), image_data(7, 5));  // train, train_last, eval, eval_last
  REQUIRE(g.programs.size() == 4);
  REQUIRE(g.buffers.size() == 8);
  const std::vector<std::pair<std::string, int64_t>> bns = {{"bn0", 4}, {"bn1", 8}, {"bn2", 8}, {"ds_bn", 8}};
  for (size_t i = 0; i < bns.size(); ++i) {
    INFO(bns[i].first);
    const BufferInfo& mean = g.buffers[2 * i];
    const BufferInfo& var = g.buffers[2 * i + 1];
    CHECK(mean.name == bns[i].first + ".running_mean");
    CHECK(var.name == bns[i].first + ".running_var");
    CHECK(mean.init == 0.0f);
    CHECK(var.init == 1.0f);
    CHECK(g.values[mean.value].role == Role::Buffer);
    CHECK(g.values[var.value].role == Role::Buffer);
    CHECK(g.values[mean.value].shape == Shape{{bns[i].second}});
    for (const auto& p : g.programs) {
      INFO(p.name);
      const OpKind op = p.kind == ProgramKind::Train ? OpKind::BatchNorm : OpKind::BatchNormEval;
      const Node* n = node_named(p, op, bns[i].first);
      REQUIRE(n);
      REQUIRE(n->in.size() == 5);
      CHECK(n->in[3] == mean.value);
      CHECK(n->in[4] == var.value);
      CHECK(n->out.size() == (p.kind == ProgramKind::Train ? 3u : 1u));
    }
  }
}

TEST_CASE("eval programs normalise with BatchNormEval, train programs with BatchNorm", "[graph][cnn]") {
  Graph g = built(resnet_block_spec(3), image_data(6, 3));
  const Program& train = *g.find_program("train");
  const Program& eval = *g.find_program("eval");
  CHECK(count_ops(train, OpKind::BatchNorm) == 4);
  CHECK(count_ops(train, OpKind::BatchNormEval) == 0);
  CHECK(count_ops(eval, OpKind::BatchNorm) == 0);
  CHECK(count_ops(eval, OpKind::BatchNormEval) == 4);
  const Node* bn = node_named(train, OpKind::BatchNorm, "bn1");
  CHECK(g.values[bn->out[1]].shape == Shape{{8}});  // save_mean
  CHECK(g.values[bn->out[2]].shape == Shape{{8}});  // save_invstd
  CHECK(bn->attrs.eps == 1e-5f);
  CHECK(bn->attrs.momentum == 0.1f);
}

// ---- fuse_norm_add_relu ----

TEST_CASE("fuse_norm_add_relu folds a ReLU into batch norm and into the residual add", "[passes][cnn][fuse]") {
  Graph g = fused(resnet_block_spec(3), image_data(6, 3));
  for (const auto& p : g.programs) {
    INFO(p.name);
    const OpKind bn = p.kind == ProgramKind::Train ? OpKind::BatchNorm : OpKind::BatchNormEval;
    CHECK(count_ops(p, OpKind::Relu) == 0);
    const Node* bn0 = node_named(p, bn, "bn0");
    const Node* bn1 = node_named(p, bn, "bn1");
    REQUIRE(bn0);
    REQUIRE(bn1);
    CHECK(bn0->attrs.relu);
    CHECK(bn1->attrs.relu);
    CHECK_FALSE(node_named(p, bn, "bn2")->attrs.relu);    // feeds the add
    CHECK_FALSE(node_named(p, bn, "ds_bn")->attrs.relu);  // feeds the add
    const Node* add = node_named(p, OpKind::Add, "add");
    REQUIRE(add);
    CHECK(add->attrs.relu);
    CHECK(add->name == "add+relu2");
    // Consumers now read the fused node's output.
    CHECK(node_named(p, OpKind::Conv2d, "ds_conv")->in[0] == bn0->out[0]);
    CHECK(node_named(p, OpKind::GlobalAvgPool, "gap")->in[0] == add->out[0]);
  }
}

TEST_CASE("fuse_norm_add_relu leaves a batch norm whose output has another consumer unfused",
          "[passes][cnn][fuse]") {
  // bn1 feeds relu1 and the add: the ReLU must stay a node (the add needs the pre-ReLU value).
  Spec s = cnn_base_spec(3);
  cnn_push(s, conv_layer("conv1", 4, 3, 1, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, conv_layer("conv2", 4, 3, 1, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Add, "add", {"bn2", "bn1"}));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  Graph g = fused(s, image_data(6, 3));
  for (const auto& p : g.programs) {
    INFO(p.name);
    const OpKind bn = p.kind == ProgramKind::Train ? OpKind::BatchNorm : OpKind::BatchNormEval;
    CHECK_FALSE(node_named(p, bn, "bn1")->attrs.relu);
    CHECK(count_ops(p, OpKind::Relu) == 1);
    CHECK(node_named(p, OpKind::Relu, "relu1"));
    CHECK(node_named(p, OpKind::Add, "add")->attrs.relu);
  }
}

TEST_CASE("fuse_norm_add_relu does not fuse into conv or pools", "[passes][cnn][fuse]") {
  Spec s = cnn_base_spec(3);
  cnn_push(s, conv_layer("conv1", 4, 3, 1, 1));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool", 2));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  Graph g = fused(s, image_data(6, 3));
  CHECK(count_ops(*g.find_program("train"), OpKind::Relu) == 2);
}

// ---- autodiff ----

TEST_CASE("autodiff gives every parameter of a conv net a gradient and skips the image's", "[passes][cnn]") {
  Compiled c = compiled(small_cnn_spec(5), image_data(20, 10));
  const Graph& g = c.graph;
  const Program& p = *g.find_program("train");
  for (const auto& prm : g.params) {
    INFO(prm.name);
    REQUIRE(prm.grad != kNoValue);
    CHECK(g.values[prm.grad].role == Role::Grad);
    CHECK(g.values[prm.grad].shape == g.values[prm.value].shape);
    int writers = 0;
    for (const auto& n : p.nodes)
      for (ValueId o : n.out) writers += o == prm.grad;
    CHECK(writers == 1);
  }
  CHECK(count_ops(p, OpKind::Conv2dGradWeight) == 2);
  CHECK(count_ops(p, OpKind::Conv2dGradInput) == 1);  // conv2 only: conv1's input is the image
  CHECK(node_named(p, OpKind::Conv2dGradInput, "conv2"));
  CHECK(count_ops(p, OpKind::LinearGradBias) == 1);   // fc.bias
  CHECK(count_ops(p, OpKind::ZeroFill) == 1);  // conv1.bias, folded into bn1 (pass_fold_conv_bias): exactly 0
  CHECK(count_ops(p, OpKind::BatchNormGrad) == 1);
  CHECK(count_ops(p, OpKind::MaxPoolGrad) == 0);  // pool1 fused into bn1's backward (pass_fuse_bn_pool)
  CHECK(count_ops(p, OpKind::AvgPoolGrad) == 1);
  CHECK(count_ops(p, OpKind::GlobalAvgPoolGrad) == 1);
  CHECK(count_ops(p, OpKind::ReluGrad) == 0);  // relu1 fused into bn1
  for (const auto& n : p.nodes)
    for (ValueId o : n.out) CHECK(o != p.input);
  CompileOptions unfolded;  // autodiff's own node for conv1.bias
  unfolded.fold_conv_bias = false;
  const Compiled u = compiled(small_cnn_spec(5), image_data(20, 10), unfolded);
  const Node* gb = node_named(*u.graph.find_program("train"), OpKind::LinearGradBias, "conv1");
  REQUIRE(gb);
  CHECK(u.graph.values[gb->in[0]].shape == Shape{{5, 8, 8, 4}});  // sums over N, H, W
  CHECK(count_ops(*g.find_program("eval"), OpKind::Conv2dGradWeight) == 0);
}

// Autodiff's own nodes (pass_fuse_bn_relu_grad, tested below, merges the residual ReluGrad into the backward).
CompileOptions unfused_relu_grad() {
  CompileOptions o;
  o.fuse_bn_relu_grad = false;
  return o;
}

TEST_CASE("BatchNormGrad reads the fused output when the ReLU was fused, and not otherwise",
          "[passes][cnn][resnet]") {
  Compiled c = compiled(resnet_block_spec(3), image_data(6, 3), unfused_relu_grad());
  const Graph& g = c.graph;
  const Program& p = *g.find_program("train");
  REQUIRE(count_ops(p, OpKind::BatchNormGrad) == 4);
  for (const auto& n : p.nodes) {
    if (n.op != OpKind::BatchNormGrad) continue;
    INFO(n.name);
    const std::string layer = n.name.substr(0, n.name.find_first_of("+."));
    const Node* fwd = node_named(p, OpKind::BatchNorm, layer);
    REQUIRE(fwd);
    // A fused residual's ReLU is applied by its own ReluGrad (the residual needs the masked gradient too).
    const bool masks = fwd->attrs.relu && !fwd->attrs.residual;
    CHECK(n.attrs.relu == masks);
    CHECK_FALSE(n.attrs.residual);
    REQUIRE(n.in.size() == (masks ? 6u : 5u));
    CHECK(n.in[1] == fwd->in[0]);   // X
    CHECK(n.in[2] == fwd->in[1]);   // gamma
    CHECK(n.in[3] == fwd->out[1]);  // save_mean
    CHECK(n.in[4] == fwd->out[2]);  // save_invstd
    if (masks) CHECK(n.in[5] == fwd->out[0]);  // Y = max(BN(X), 0) masks dY
    REQUIRE(n.out.size() == 3);
    CHECK(n.out[1] == param_named(g, layer + ".weight")->grad);
    CHECK(n.out[2] == param_named(g, layer + ".bias")->grad);
  }
  CHECK(node_named(p, OpKind::BatchNormGrad, "bn0")->attrs.relu);
  CHECK_FALSE(node_named(p, OpKind::BatchNormGrad, "bn2")->attrs.relu);
}

TEST_CASE("autodiff of the residual block: pass-through views, summed stem gradient, no input gradient",
          "[passes][cnn][resnet]") {
  Compiled c = compiled(resnet_block_spec(3), image_data(6, 3), unfused_relu_grad());
  const Graph& g = c.graph;
  const Program& p = *g.find_program("train");
  for (const auto& prm : g.params) {
    INFO(prm.name);
    int writers = 0;
    for (const auto& n : p.nodes)
      for (ValueId o : n.out) writers += o == prm.grad;
    CHECK(writers == 1);
  }
  CHECK(count_ops(p, OpKind::Conv2dGradWeight) == 4);
  CHECK(count_ops(p, OpKind::Conv2dGradInput) == 3);  // conv1, conv2, ds_conv; not conv0 (the image)
  CHECK_FALSE(node_named(p, OpKind::Conv2dGradInput, "conv0"));
  // The add+relu is fused into the later batch norm (ds_bn; bn2's output is its residual): one ReluGrad, whose
  // output the residual branch gets as a view (no copy) and ds_bn's backward reads directly.
  CHECK_FALSE(node_named(p, OpKind::Add, "add"));
  const Node* fused = node_named(p, OpKind::BatchNorm, "ds_bn+add");
  REQUIRE(fused);
  REQUIRE(fused->attrs.relu);
  REQUIRE(fused->attrs.residual);
  REQUIRE(fused->in.size() == 6);
  CHECK(fused->in[5] == node_named(p, OpKind::BatchNorm, "bn2")->out[0]);
  const Node* rg = node_named(p, OpKind::ReluGrad, "ds_bn+add");
  REQUIRE(rg);
  CHECK(rg->in[1] == fused->out[0]);
  const Node* ds_grad = node_named(p, OpKind::BatchNormGrad, "ds_bn+add");
  REQUIRE(ds_grad);
  CHECK(ds_grad->in[0] == rg->out[0]);
  CHECK_FALSE(ds_grad->attrs.relu);
  int views = 0;
  for (const auto& n : p.nodes) {
    if (n.op != OpKind::Flatten || n.name.rfind("ds_bn+add", 0) != 0) continue;
    ++views;
    CHECK(g.values[n.out[0]].alias_of == rg->out[0]);
    CHECK(n.in[0] == rg->out[0]);
  }
  CHECK(views == 1);
  // relu0's output feeds conv1 and ds_conv: its gradient is the sum of two Conv2dGradInput outputs.
  const Node* bn0 = node_named(p, OpKind::BatchNorm, "bn0");
  REQUIRE(bn0);
  const Node* bn0_grad = node_named(p, OpKind::BatchNormGrad, "bn0");
  REQUIRE(bn0_grad);
  const Node* sum = nullptr;
  for (const auto& n : p.nodes)
    if (n.op == OpKind::Add && n.out[0] == bn0_grad->in[0]) sum = &n;
  REQUIRE(sum);
  std::set<std::string> summed;
  for (ValueId v : sum->in)
    for (const auto& n : p.nodes)
      if (n.out[0] == v) summed.insert(n.name);
  CHECK(summed == std::set<std::string>{"conv1.grad_input", "ds_conv.grad_input"});
}

TEST_CASE("fuse_bn_relu_grad: the residual ReLU's backward becomes part of the batch-norm backward",
          "[passes][cnn][resnet][fuse_bn_relu_grad]") {
  Compiled c = compiled(resnet_block_spec(3), image_data(6, 3));
  const Graph& g = c.graph;
  const Program& p = *g.find_program("train");
  CHECK(count_ops(p, OpKind::ReluGrad) == 0);
  const Node* fwd = node_named(p, OpKind::BatchNorm, "ds_bn+add");
  REQUIRE(fwd);
  const Node* b = node_named(p, OpKind::BatchNormGrad, "ds_bn+add");
  REQUIRE(b);
  CHECK(b->attrs.relu);
  CHECK(b->attrs.residual);
  REQUIRE(b->in.size() == 6);
  CHECK(b->in[1] == fwd->in[0]);   // X
  CHECK(b->in[3] == fwd->out[1]);  // save_mean
  CHECK(b->in[5] == fwd->out[0]);  // Y = relu(BN(X) + R) masks dY
  REQUIRE(b->out.size() == 4);
  const ValueId gv = b->out[3];  // the masked dY: R's gradient (a view) and nothing else's input
  CHECK(g.values[gv].shape == g.values[b->in[0]].shape);
  int views = 0;
  for (const auto& n : p.nodes)
    if (n.op == OpKind::Flatten && !n.in.empty() && n.in[0] == gv) {
      ++views;
      CHECK(g.values[n.out[0]].alias_of == gv);
    }
  CHECK(views == 1);
  // Defined before every reader: the fused node stands where the ReluGrad stood.
  size_t at = p.nodes.size();
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (&p.nodes[i] == b) at = i;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    for (ValueId v : p.nodes[i].in)
      if (v == gv) CHECK(i > at);
  // The other batch norms' backwards are untouched.
  CHECK_FALSE(node_named(p, OpKind::BatchNormGrad, "bn2")->attrs.residual);
  CHECK_FALSE(node_named(p, OpKind::BatchNormGrad, "bn0")->attrs.residual);
}

TEST_CASE("graph_verify refuses a residual batch-norm backward without its masked-gradient output",
          "[passes][cnn][resnet][fuse_bn_relu_grad]") {
  Compiled c = compiled(resnet_block_spec(3), image_data(6, 3));
  Graph g = c.graph;
  Program& p = *std::find_if(g.programs.begin(), g.programs.end(), [](const Program& q) { return q.name == "train"; });
  for (auto& n : p.nodes)
    if (n.op == OpKind::BatchNormGrad && n.attrs.residual) n.out.pop_back();
  CHECK_FALSE(graph_verify(g).ok());
  Graph h = c.graph;
  Program& q = *std::find_if(h.programs.begin(), h.programs.end(), [](const Program& r) { return r.name == "train"; });
  for (auto& n : q.nodes)
    if (n.op == OpKind::BatchNormGrad && n.attrs.residual) n.attrs.relu = false;
  CHECK_FALSE(graph_verify(h).ok());
}

// ---- every stage verifies; the memory plan ----

TEST_CASE("graph_verify passes after every compiler stage and memplan_verify after the plan", "[compiler][cnn]") {
  for (const Spec& s : {small_cnn_spec(5), resnet_block_spec(3)}) {
    std::vector<std::string> seen;
    Result<Compiled> c = compile_spec(s, image_data(7, 5), {}, [&](const std::string& stage, const Compiled& cc) {
      seen.push_back(stage);
      Status st = graph_verify(cc.graph);
      INFO(stage << ": " << (st.ok() ? std::string() : st.error_text()));
      CHECK(st.ok());
      if (stage == "memplan") {
        Status m = memplan_verify(cc.graph, cc.plan);
        INFO((m.ok() ? std::string() : m.error_text()));
        CHECK(m.ok());
      }
    });
    INFO((c.ok() ? std::string() : c.error_text()));
    REQUIRE(c.ok());
    CHECK(seen == compiler_stages());
  }
}

TEST_CASE("a float64 CNN compile without optimizer types buffers and activations f64", "[compiler][cnn]") {
  CompileOptions opt;
  opt.compute = DType::F64;
  opt.optimizer = false;
  Compiled c = compiled(resnet_block_spec(3), image_data(6, 3), opt);
  for (const auto& b : c.graph.buffers) CHECK(c.graph.values[b.value].dtype == DType::F64);
  for (const auto& v : c.graph.values)
    if (v.role != Role::Label && v.role != Role::Result) CHECK(v.dtype == DType::F64);
  CHECK(c.graph.find_program("train")->nodes.back().op != OpKind::OptimizerStep);
  CHECK(memplan_verify(c.graph, c.plan).ok());
}

TEST_CASE("the Buffers region holds 2*C values per batch norm, contiguous in graph order", "[memplan][cnn]") {
  Compiled c = compiled(resnet_block_spec(3), image_data(6, 3));
  const MemoryPlan& m = c.plan;
  int64_t expect_off = 0, floats = 0;
  for (const auto& b : c.graph.buffers) {
    INFO(b.name);
    const Placement& pl = m.values[b.value];
    CHECK(pl.region == Region::Buffers);
    CHECK(pl.offset == expect_off);
    CHECK(pl.offset % kAlign == 0);
    CHECK(pl.bytes == c.graph.values[b.value].shape.numel() * 4);
    floats += c.graph.values[b.value].shape.numel();
    expect_off = align_up(pl.offset + pl.bytes);
  }
  CHECK(floats == 2 * (4 + 8 + 8 + 8));
  CHECK(m.region_bytes[int(Region::Buffers)] == expect_off);
  // Not part of the weights: the optimizer never touches them.
  CHECK(m.weights_bytes > 0);
  for (const auto& prm : c.graph.params) CHECK(m.values[prm.value].region == Region::Weights);
}

TEST_CASE("liveness reuse keeps the CNN activation arena below the naive sum", "[memplan][cnn]") {
  for (const Spec& s : {small_cnn_spec(8), resnet_block_spec(8)}) {
    Compiled c = compiled(s, image_data(20, 10));
    CHECK(c.plan.region_bytes[int(Region::Activations)] < c.plan.activation_naive_bytes);
    CHECK(memplan_verify(c.graph, c.plan).ok());
  }
}

TEST_CASE("a residual gradient view shares its source's storage", "[memplan][cnn][resnet]") {
  Compiled c = compiled(resnet_block_spec(3), image_data(6, 3));
  const Program& p = *c.graph.find_program("train");
  int views = 0;
  for (const auto& n : p.nodes) {
    if (n.op != OpKind::Flatten || c.graph.values[n.out[0]].alias_of == kNoValue) continue;
    ++views;
    CHECK(c.plan.values[n.out[0]].offset == c.plan.values[n.in[0]].offset);
    CHECK(c.plan.values[n.out[0]].region == c.plan.values[n.in[0]].region);
  }
  CHECK(views >= 1);
}

// ---- graph_build errors, located at the layer ----

TEST_CASE("conv2d on a 2-D input is an error at the layer", "[graph][cnn][errors]") {
  Spec s = cnn_base_spec(5);
  cnn_push(s, cnn_layer(LayerKind::Flatten, "flat"));
  cnn_push(s, conv_layer("conv", 4, 3));
  cnn_push(s, linear_layer("fc", 3));
  Result<Graph> g = build_error(s, image_data(20, 10));
  CHECK_THAT(g.error_text(), Catch::Contains("cnn.yaml:4:7") && Catch::Contains("conv") &&
                                 Catch::Contains("expects an image input (N, H, W, C), got (5, 128)"));
}

TEST_CASE("linear on a 4-D input is an error suggesting a flatten", "[graph][cnn][errors]") {
  Spec s = cnn_base_spec(5);
  cnn_push(s, conv_layer("conv", 4, 3));
  cnn_push(s, linear_layer("fc", 3));
  Result<Graph> g = build_error(s, image_data(20, 10));
  CHECK_THAT(g.error_text(), Catch::Contains("cnn.yaml:4:7") && Catch::Contains("'fc'") &&
                                 Catch::Contains("(5, 6, 6, 4)") && Catch::Contains("flatten"));
}

TEST_CASE("a kernel larger than the padded input is an error", "[graph][cnn][errors]") {
  Spec s = cnn_base_spec(5);
  cnn_push(s, conv_layer("big", 4, 9));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  Result<Graph> g = build_error(s, image_data(20, 10));
  CHECK_THAT(g.error_text(), Catch::Contains("cnn.yaml:3:7") && Catch::Contains("'big'") &&
                                 Catch::Contains("does not fit"));
  s.model.layers[0].padding = 1;  // 8 + 2 >= 9: fits
  CHECK(graph_build(s, image_data(20, 10)).ok());
  Spec d = cnn_base_spec(5);  // dilation 4: effective kernel 9
  cnn_push(d, conv_layer("dil", 4, 3));
  d.model.layers[0].dilation = 4;
  cnn_push(d, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(d, linear_layer("fc", 3));
  CHECK_THAT(build_error(d, image_data(20, 10)).error_text(), Catch::Contains("does not fit"));
}

TEST_CASE("a pool window larger than the input is an error", "[graph][cnn][errors]") {
  Spec s = cnn_base_spec(5);
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool", 9));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  CHECK_THAT(build_error(s, image_data(20, 10)).error_text(),
             Catch::Contains("cnn.yaml:3:7") && Catch::Contains("'pool'"));
}

TEST_CASE("add of two different shapes is an error naming both inputs and shapes", "[graph][cnn][errors]") {
  Spec s = cnn_base_spec(5);
  cnn_push(s, conv_layer("a", 4, 3, 1, 1));
  cnn_push(s, conv_layer("b", 4, 3, 2, 1, false, {"input"}));
  cnn_push(s, cnn_layer(LayerKind::Add, "sum", {"a", "b"}));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  Result<Graph> g = build_error(s, image_data(20, 10));
  CHECK_THAT(g.error_text(), Catch::Contains("cnn.yaml:5:7") && Catch::Contains("'sum'") &&
                                 Catch::Contains("(5, 8, 8, 4)") && Catch::Contains("(5, 4, 4, 4)"));
}

TEST_CASE("conv2d input channels not divisible by groups is an error", "[graph][cnn][errors]") {
  Spec s = cnn_base_spec(5);
  LayerSpec c = conv_layer("g", 4, 3, 1, 1);
  c.groups = 4;
  cnn_push(s, c);
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  CHECK_THAT(build_error(s, image_data(20, 10, 8, 2)).error_text(),
             Catch::Contains("cnn.yaml:3:7") && Catch::Contains("not divisible by groups"));
}

// ---- pass_fuse_bn_add ----

TEST_CASE("fuse_bn_add folds a residual add+relu into the later batch norm, in train and eval programs",
          "[passes][cnn][resnet]") {
  Compiled c = compiled(resnet_block_spec(3), image_data(7, 5));  // train, train_last, eval, eval_last
  for (const auto& p : c.graph.programs) {
    INFO(p.name);
    CHECK(count_ops(p, OpKind::Add) == (p.kind == ProgramKind::Train ? 1 : 0));  // left: the stem's gradient sum
    const OpKind bn = p.kind == ProgramKind::Train ? OpKind::BatchNorm : OpKind::BatchNormEval;
    const Node* fused = node_named(p, bn, "ds_bn+add");
    REQUIRE(fused);
    CHECK(fused->attrs.residual);
    CHECK(fused->attrs.relu);
    CHECK(fused->in[5] == node_named(p, bn, "bn2")->out[0]);
    CHECK_FALSE(node_named(p, bn, "bn2")->attrs.residual);
  }
}

TEST_CASE("fuse_bn_add leaves a batch norm alone when its output has another use or a ReLU of its own",
          "[passes][cnn][resnet]") {
  // bn1 -> relu1 feeds the add (ReLU in between: not fusable); bn2's output is also read by gap2 (two uses).
  Spec s = cnn_base_spec(3);
  cnn_push(s, conv_layer("conv1", 4, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, conv_layer("conv2", 4, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Add, "add", {"relu1", "bn2"}));
  cnn_push(s, cnn_layer(LayerKind::Add, "add2", {"add", "bn2"}));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  Compiled c = compiled(s, image_data(6, 3));
  const Program& p = *c.graph.find_program("train");
  for (const auto& n : p.nodes) CHECK_FALSE(n.attrs.residual);
  CHECK(node_named(p, OpKind::Add, "add"));
  CHECK(node_named(p, OpKind::Add, "add2"));
}
