// pass_fold_conv_bias: a conv's bias moves into the batch norm that is the only reader of the conv's output
// (train programs: also that batch norm's backward), in train and eval programs, with a fused ReLU or residual;
// left alone for any other reader; its place among the stages and the switch that skips it; graph_verify's arity
// rule for the extra input. In train programs the folded bias's gradient node is a ZeroFill that reads nothing
// (batch statistics: dLoss/db = 0); unfolded biases, the unfolded graph and frozen biases keep LinearGradBias or
// no node. Node counts are those of the unfolded graph; the memory plan is no larger.
#include <catch2/catch.hpp>

#include <algorithm>

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

ValueId param_value(const Graph& g, const std::string& name) {
  for (const auto& p : g.params)
    if (p.name == name) return p.value;
  return kNoValue;
}

Compiled compiled(const Spec& s, const DataShape& d, bool fold = true) {
  CompileOptions opt;
  opt.fold_conv_bias = fold;
  Result<Compiled> c = compile_spec(s, d, opt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return c.value();
}

OpKind bn_op(const Program& p) { return p.kind == ProgramKind::Train ? OpKind::BatchNorm : OpKind::BatchNormEval; }

}  // namespace

TEST_CASE("fold_conv_bias moves a conv bias into the batch norm that reads the conv output, train and eval",
          "[passes][cnn][fold_conv_bias]") {
  // small_cnn_spec: conv1 (bias) -> bn1 -> relu1 (fused) -> ...; conv2 has no bias.
  const Compiled c = compiled(small_cnn_spec(3), image_data(7, 5));  // train, train_last, eval, eval_last
  const Graph& g = c.graph;
  const ValueId bias = param_value(g, "conv1.bias");
  REQUIRE(bias != kNoValue);
  REQUIRE(g.programs.size() == 4);
  for (const auto& p : g.programs) {
    INFO(p.name);
    const Node* conv1 = node_named(p, OpKind::Conv2d, "conv1");
    const Node* bn1 = node_named(p, bn_op(p), "bn1");
    REQUIRE(conv1);
    REQUIRE(bn1);
    CHECK(conv1->in.size() == 2);  // X, W: no bias added by the conv
    CHECK(bn1->attrs.prebias);
    CHECK(bn1->attrs.relu);
    CHECK_FALSE(bn1->attrs.residual);
    REQUIRE(bn1->in.size() == 6);
    CHECK(bn1->in[0] == conv1->out[0]);
    CHECK(bn1->in[5] == bias);
    CHECK(node_named(p, OpKind::Conv2d, "conv2")->in.size() == 2);
    if (p.kind != ProgramKind::Train) {
      for (const auto& n : p.nodes) CHECK(n.op != OpKind::ZeroFill);
      continue;
    }
    // The bias's gradient is exactly 0 (BN(y + b) = BN(y) with batch statistics): its node writes zeros into the
    // bias's gradient and reads nothing, so the batch norm's dX is read only by conv1's weight gradient.
    const Node* bn_grad = node_named(p, OpKind::BatchNormGrad, "bn1");
    const Node* db = node_named(p, OpKind::ZeroFill, "conv1.grad_bias");
    REQUIRE(bn_grad);
    REQUIRE(db);
    CHECK_FALSE(node_named(p, OpKind::LinearGradBias, "conv1"));
    CHECK(db->in.empty());
    REQUIRE(db->out.size() == 1);
    CHECK(db->out[0] == g.params[g.values[bias].param].grad);
    int dx_readers = 0;
    for (const auto& n : p.nodes)
      for (ValueId v : n.in)
        if (v == bn_grad->out[0]) {
          ++dx_readers;
          CHECK(n.op == OpKind::Conv2dGradWeight);
        }
    CHECK(dx_readers == 1);
    CHECK(node_named(p, OpKind::LinearGradBias, "fc.grad_bias"));  // a linear bias keeps its sum
    CHECK_FALSE(bn_grad->attrs.prebias);
    CHECK(bn_grad->in[1] == conv1->out[0]);  // the backward reads y with the statistics of y
  }
  const std::string dump = graph_dump(g);
  CHECK_THAT(dump, Catch::Contains("[prebias]"));
  CHECK_THAT(dump, Catch::Contains("= zero_fill()  # conv1.grad_bias"));
}

TEST_CASE("fold_conv_bias keeps every program's node count; only the folded bias's gradient node changes kind",
          "[passes][cnn][fold_conv_bias][memplan]") {
  const Compiled a = compiled(small_cnn_spec(3), image_data(7, 5), true);
  const Compiled b = compiled(small_cnn_spec(3), image_data(7, 5), false);
  REQUIRE(a.graph.programs.size() == b.graph.programs.size());
  for (size_t i = 0; i < a.graph.programs.size(); ++i) {
    const Program &pa = a.graph.programs[i], &pb = b.graph.programs[i];
    INFO(pa.name);
    CHECK(pa.nodes.size() == pb.nodes.size());
    int zeroed = 0;
    for (size_t k = 0; k < pa.nodes.size() && k < pb.nodes.size(); ++k) {
      CHECK(pa.nodes[k].name == pb.nodes[k].name);
      CHECK(pa.nodes[k].out == pb.nodes[k].out);
      if (pa.nodes[k].op == OpKind::ZeroFill) {
        ++zeroed;
        CHECK(pb.nodes[k].op == OpKind::LinearGradBias);
        CHECK(pa.nodes[k].name == "conv1.grad_bias");
      } else {
        CHECK(pa.nodes[k].op == pb.nodes[k].op);
      }
    }
    CHECK(zeroed == (pa.kind == ProgramKind::Train ? 1 : 0));
  }
  CHECK(a.graph.values.size() == b.graph.values.size());  // no value added or removed
  // The zero fill reads nothing: the batch norm's dX may die earlier, never later.
  CHECK(a.plan.region_bytes[static_cast<int>(Region::Activations)] <=
        b.plan.region_bytes[static_cast<int>(Region::Activations)]);
  for (int r = 0; r < kRegionCount; ++r)
    if (r != static_cast<int>(Region::Activations)) CHECK(a.plan.region_bytes[r] == b.plan.region_bytes[r]);
  Status m = memplan_verify(a.graph, a.plan);
  INFO((m.ok() ? std::string() : m.error_text()));
  CHECK(m.ok());
}

TEST_CASE("fold_conv_bias folds into a batch norm with a fused residual add: the bias after the residual",
          "[passes][cnn][resnet][fold_conv_bias]") {
  Spec s = resnet_block_spec(3);
  for (auto& l : s.model.layers)
    if (l.name == "ds_conv" || l.name == "conv2") l.bias = true;
  const Compiled c = compiled(s, image_data(7, 5));
  for (const auto& p : c.graph.programs) {
    INFO(p.name);
    const Node* fused = node_named(p, bn_op(p), "ds_bn+add");  // ds_bn + add + relu2 (pass_fuse_bn_add)
    const Node* bn2 = node_named(p, bn_op(p), "bn2");
    REQUIRE(fused);
    REQUIRE(bn2);
    CHECK(fused->attrs.residual);
    CHECK(fused->attrs.prebias);
    REQUIRE(fused->in.size() == 7);  // X, gamma, beta, running mean/var, R, b
    CHECK(fused->in[5] == bn2->out[0]);
    CHECK(fused->in[6] == param_value(c.graph, "ds_conv.bias"));
    CHECK(bn2->attrs.prebias);
    CHECK(bn2->in.back() == param_value(c.graph, "conv2.bias"));
    CHECK(node_named(p, OpKind::Conv2d, "ds_conv")->in.size() == 2);
    CHECK(node_named(p, OpKind::Conv2d, "conv2")->in.size() == 2);
  }
}

TEST_CASE("fold_conv_bias leaves a conv alone when its output has another reader or no batch norm",
          "[passes][cnn][fold_conv_bias]") {
  // conv1 (bias) -> relu1: no batch norm. conv2 (bias) -> bn2, and conv2's output also feeds the add (two readers).
  // conv3 (bias) -> bn3 with its output only there: folded.
  Spec s = cnn_base_spec(3);
  cnn_push(s, conv_layer("conv1", 4, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, conv_layer("conv2", 4, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Add, "add", {"bn2", "conv2"}));
  cnn_push(s, conv_layer("conv3", 4, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn3"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  const Compiled c = compiled(s, image_data(6, 3));
  for (const auto& p : c.graph.programs) {
    INFO(p.name);
    CHECK(node_named(p, OpKind::Conv2d, "conv1")->in.size() == 3);
    CHECK(node_named(p, OpKind::Conv2d, "conv2")->in.size() == 3);
    CHECK(node_named(p, OpKind::Conv2d, "conv3")->in.size() == 2);
    int prebias = 0;
    for (const auto& n : p.nodes) prebias += n.attrs.prebias;
    CHECK(prebias == 1);
    CHECK(node_named(p, bn_op(p), "bn3")->attrs.prebias);
    if (p.kind != ProgramKind::Train) continue;
    // The biases that stay in their convs have real gradients: the sums over N*H*W; the folded one is 0.
    CHECK(node_named(p, OpKind::LinearGradBias, "conv1.grad_bias"));
    CHECK(node_named(p, OpKind::LinearGradBias, "conv2.grad_bias"));
    CHECK(node_named(p, OpKind::ZeroFill, "conv3.grad_bias"));
    CHECK_FALSE(node_named(p, OpKind::LinearGradBias, "conv3"));
  }
}

TEST_CASE("a frozen batch norm still normalises with batch statistics: the folded bias's gradient stays zero",
          "[passes][cnn][fold_conv_bias][freeze]") {
  // model.freeze on bn1 (gamma, beta): the train program still runs BatchNorm (batch statistics, as PyTorch in
  // train mode), so BN(y + b) = BN(y) still holds. Freezing conv1.bias instead leaves it no gradient node at all.
  Spec s = small_cnn_spec(3);
  s.model.freeze = {NamePattern{"bn1", "cnn.yaml:1:1"}};
  const Compiled c = compiled(s, image_data(7, 5));
  const Program& p = *c.graph.find_program("train");
  CHECK(node_named(p, OpKind::BatchNorm, "bn1")->attrs.prebias);
  const Node* db = node_named(p, OpKind::ZeroFill, "conv1.grad_bias");
  REQUIRE(db);
  CHECK(db->in.empty());
  Spec f = small_cnn_spec(3);
  f.model.freeze = {NamePattern{"conv1.bias", "cnn.yaml:1:1"}};
  const Compiled cf = compiled(f, image_data(7, 5));
  const Program& pf = *cf.graph.find_program("train");
  CHECK(node_named(pf, OpKind::BatchNorm, "bn1")->attrs.prebias);  // folded all the same (the forward needs b)
  CHECK_FALSE(node_named(pf, OpKind::ZeroFill, "conv1"));
  CHECK_FALSE(node_named(pf, OpKind::LinearGradBias, "conv1"));
}

TEST_CASE("the zero gradient is tied to batch statistics: a program that is not a train program keeps the sum",
          "[passes][cnn][fold_conv_bias]") {
  // No compiled program runs a batch norm on running statistics with a backward (eval programs have none), so the
  // guard is checked on the unfolded train program relabelled: the bias is folded, its LinearGradBias stays.
  const Compiled u = compiled(small_cnn_spec(3), image_data(7, 5), false);
  Graph g = u.graph;
  Program p = *g.find_program("train");
  p.kind = ProgramKind::Eval;
  REQUIRE(pass_fold_conv_bias(g, p).ok());
  CHECK(node_named(p, OpKind::BatchNorm, "bn1")->attrs.prebias);
  CHECK(node_named(p, OpKind::LinearGradBias, "conv1.grad_bias"));
  for (const auto& n : p.nodes) CHECK(n.op != OpKind::ZeroFill);
  Program t = *g.find_program("train");
  REQUIRE(pass_fold_conv_bias(g, t).ok());
  CHECK(node_named(t, OpKind::ZeroFill, "conv1.grad_bias"));  // the same nodes in the train program: zeroed
}

TEST_CASE("fold_conv_bias runs after autodiff and can be skipped for comparisons", "[compiler][fold_conv_bias]") {
  const std::vector<std::string>& st = compiler_stages();
  auto at = [&](const std::string& name) { return std::find(st.begin(), st.end(), name) - st.begin(); };
  CHECK(at("fold_conv_bias") == at("autodiff") + 1);
  CHECK(at("fold_conv_bias") < at("memplan"));
  std::vector<std::string> seen;
  CompileOptions opt;
  opt.fold_conv_bias = false;
  Result<Compiled> c =
      compile_spec(small_cnn_spec(3), image_data(7, 5), opt, [&](const std::string& s, const Compiled&) {
        seen.push_back(s);
      });
  REQUIRE(c.ok());
  CHECK(std::find(seen.begin(), seen.end(), "fold_conv_bias") == seen.end());
  for (const auto& p : c->graph.programs) {
    CHECK(node_named(p, OpKind::Conv2d, "conv1")->in.size() == 3);
    for (const auto& n : p.nodes) {
      CHECK_FALSE(n.attrs.prebias);
      CHECK(n.op != OpKind::ZeroFill);
    }
    if (p.kind == ProgramKind::Train) CHECK(node_named(p, OpKind::LinearGradBias, "conv1.grad_bias"));
  }
}

TEST_CASE("graph_verify checks a folded batch norm's extra input", "[graph][fold_conv_bias]") {
  Compiled c = compiled(small_cnn_spec(3), image_data(7, 5));
  REQUIRE(graph_verify(c.graph).ok());
  SECTION("prebias without the input") {
    for (auto& n : c.graph.programs[0].nodes)
      if (n.attrs.prebias) n.in.pop_back();
  }
  SECTION("an input of the wrong shape") {
    for (auto& n : c.graph.programs[0].nodes)
      if (n.attrs.prebias) n.in.back() = n.in[0];
  }
  Status st = graph_verify(c.graph);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error_text(), Catch::Contains("bn1"));
}

TEST_CASE("graph_verify checks a zero fill: no inputs, one output with storage of its own",
          "[graph][fold_conv_bias]") {
  Compiled c = compiled(small_cnn_spec(3), image_data(7, 5));
  Node* zero = nullptr;
  for (auto& n : c.graph.programs[0].nodes)
    if (n.op == OpKind::ZeroFill) zero = &n;
  REQUIRE(zero);
  REQUIRE(graph_verify(c.graph).ok());
  SECTION("an input") { zero->in.push_back(zero->out[0]); }
  SECTION("two outputs") { zero->out.push_back(zero->out[0]); }
  SECTION("a view as output") { c.graph.values[zero->out[0]].alias_of = c.graph.programs[0].input; }
  Status st = graph_verify(c.graph);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error_text(), Catch::Contains("zero_fill"));
}
