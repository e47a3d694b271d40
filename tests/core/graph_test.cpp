// Graph IR: graph_build, shape inference and its errors, the fuse/autodiff/optimizer passes, compile stages.
#include <catch2/catch.hpp>

#include "core/compiler.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;
using namespace trctl::testing;

static const Node* find_node(const Program& p, OpKind op, const std::string& name_prefix = "") {
  for (const auto& n : p.nodes)
    if (n.op == op && n.name.rfind(name_prefix, 0) == 0) return &n;
  return nullptr;
}

static int count_ops(const Program& p, OpKind op) {
  int c = 0;
  for (const auto& n : p.nodes) c += n.op == op;
  return c;
}

TEST_CASE("graph_build infers the shape of every layer of an MLP", "[graph]") {
  Result<Graph> g = graph_build(mlp_spec(8, 5), small_data(20, 10));
  REQUIRE(g.ok());
  const Program* train = g->find_program("train");
  REQUIRE(train);
  CHECK(train->batch == 5);
  CHECK(g->values[train->input].shape == Shape{{5, 4, 4, 1}});
  CHECK(g->values[train->logits].shape == Shape{{5, 3}});
  const Node* fc1 = find_node(*train, OpKind::Linear, "fc1");
  REQUIRE(fc1);
  CHECK(g->values[fc1->in[0]].shape == Shape{{5, 16}});
  CHECK(g->values[fc1->in[1]].shape == Shape{{8, 16}});
  CHECK(g->values[fc1->out[0]].shape == Shape{{5, 8}});
  CHECK(graph_verify(g.value()).ok());
}

TEST_CASE("graph_build plans a program for every batch size it will meet", "[graph]") {
  Result<Graph> g = graph_build(mlp_spec(8, 6), small_data(20, 10));  // 20 = 3*6 + 2; 10 = 6 + 4
  REQUIRE(g.ok());
  REQUIRE(g->find_program("train_last"));
  CHECK(g->find_program("train_last")->batch == 2);
  CHECK(g->find_program("eval")->batch == 6);
  CHECK(g->find_program("eval_last")->batch == 4);
  Spec s = mlp_spec(8, 6);
  s.data.drop_last = true;
  Result<Graph> g2 = graph_build(s, small_data(18, 12));
  REQUIRE(g2.ok());
  CHECK_FALSE(g2->find_program("train_last"));
  CHECK_FALSE(g2->find_program("eval_last"));
}

TEST_CASE("parameters share one instance across programs, decayed ones first", "[graph]") {
  Result<Graph> g = graph_build(mlp_spec(8, 6), small_data(20, 10));
  REQUIRE(g.ok());
  REQUIRE(g->params.size() == 4);
  CHECK(g->params[0].name == "fc1.weight");
  CHECK(g->params[1].name == "fc2.weight");
  CHECK_FALSE(g->params[2].decay);
  CHECK_FALSE(g->params[3].decay);
  const Node* a = find_node(*g->find_program("train"), OpKind::Linear, "fc2");
  const Node* b = find_node(*g->find_program("eval_last"), OpKind::Linear, "fc2");
  CHECK(a->in[1] == b->in[1]);
}

TEST_CASE("linear on a 4-D input is an error naming the layer and its location", "[graph]") {
  Spec s = mlp_spec(8, 5);
  s.model.layers.erase(s.model.layers.begin());  // no flatten
  s.model.layers[0].line = 7;
  s.model.layers[0].col = 5;
  Result<Graph> g = graph_build(s, small_data(20, 10));
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error_text(), Catch::Contains("test.yaml:7:5") && Catch::Contains("fc1") &&
                                 Catch::Contains("flatten"));
}

TEST_CASE("a model whose output does not match the number of classes is an error", "[graph]") {
  Spec s = mlp_spec(8, 5);
  s.model.layers.back().out_features = 7;
  Result<Graph> g = graph_build(s, small_data(20, 10));
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error_text(), Catch::Contains("3 classes"));
}

TEST_CASE("dropout is a node in train programs and the identity in eval programs", "[graph]") {
  Result<Graph> g = graph_build(mlp_spec(8, 5, true), small_data(20, 10));
  REQUIRE(g.ok());
  CHECK(count_ops(*g->find_program("train"), OpKind::Dropout) == 1);
  CHECK(count_ops(*g->find_program("eval"), OpKind::Dropout) == 0);
}

TEST_CASE("fuse_linear_relu folds a ReLU into the preceding linear", "[passes]") {
  Result<Graph> g = graph_build(mlp_spec(8, 5), small_data(20, 10));
  REQUIRE(g.ok());
  Program& p = g->programs[0];
  REQUIRE(pass_fuse_linear_relu(g.value(), p).ok());
  CHECK(count_ops(p, OpKind::Relu) == 0);
  const Node* fc1 = find_node(p, OpKind::Linear, "fc1");
  REQUIRE(fc1);
  CHECK(fc1->attrs.relu);
  CHECK_FALSE(find_node(p, OpKind::Linear, "fc2")->attrs.relu);  // the logits are never fused
  CHECK(graph_verify(g.value()).ok());
}

TEST_CASE("autodiff gives every parameter a gradient and skips the input's", "[passes]") {
  Result<Compiled> c = compile_spec(mlp_spec(8, 5, true), small_data(20, 10));
  REQUIRE(c.ok());
  const Program& p = *c->graph.find_program("train");
  for (const auto& prm : c->graph.params) {
    REQUIRE(prm.grad != kNoValue);
    CHECK(c->graph.values[prm.grad].role == Role::Grad);
    CHECK(c->graph.values[prm.grad].shape == c->graph.values[prm.value].shape);
    bool written = false;
    for (const auto& n : p.nodes)
      for (ValueId o : n.out) written |= o == prm.grad;
    CHECK(written);
  }
  CHECK(count_ops(p, OpKind::LinearGradInput) == 1);  // fc2 only: fc1's input needs no gradient
  CHECK(count_ops(p, OpKind::LinearGradWeight) == 2);
  CHECK(count_ops(p, OpKind::LinearGradBias) == 2);
  CHECK(count_ops(p, OpKind::DropoutGrad) == 1);
  CHECK(count_ops(p, OpKind::ReluGrad) == 1);
  CHECK(count_ops(p, OpKind::SoftmaxCrossEntropyGrad) == 1);
  CHECK(p.nodes.back().op == OpKind::OptimizerStep);
  CHECK(count_ops(*c->graph.find_program("eval"), OpKind::LinearGradWeight) == 0);
}

TEST_CASE("optimizer_insert adds the state each optimizer keeps", "[passes]") {
  Spec s = mlp_spec(8, 5);
  Result<Compiled> adamw = compile_spec(s, small_data(20, 10));
  REQUIRE(adamw.ok());
  CHECK(adamw->graph.params[0].state.size() == 2);
  s.optimizer.kind = OptimizerKind::Sgd;
  s.optimizer.momentum = 0.9;
  Result<Compiled> sgd = compile_spec(s, small_data(20, 10));
  REQUIRE(sgd.ok());
  CHECK(sgd->graph.params[0].state.size() == 1);
  s.optimizer.momentum = 0;
  Result<Compiled> plain = compile_spec(s, small_data(20, 10));
  REQUIRE(plain.ok());
  CHECK(plain->graph.params[0].state.empty());
}

TEST_CASE("compile_spec runs the named stages in order and each can be dumped", "[compiler]") {
  std::vector<std::string> seen;
  std::string after_memplan;
  Result<Compiled> c = compile_spec(mlp_spec(8, 5), small_data(20, 10), {},
                                    [&](const std::string& s, const Compiled& cc) {
                                      seen.push_back(s);
                                      if (s == "memplan") after_memplan = compiled_dump(cc, s);
                                    });
  REQUIRE(c.ok());
  CHECK(seen == compiler_stages());
  CHECK_THAT(after_memplan, Catch::Contains("program train") && Catch::Contains("region weights") &&
                                Catch::Contains("optimizer_step"));
}

TEST_CASE("a float64 compile without optimizer types every float value f64", "[compiler]") {
  CompileOptions opt;
  opt.compute = DType::F64;
  opt.optimizer = false;
  Result<Compiled> c = compile_spec(mlp_spec(8, 5), small_data(20, 10), opt);
  REQUIRE(c.ok());
  for (const auto& v : c->graph.values)
    if (v.role != Role::Label && v.role != Role::Result) CHECK(v.dtype == DType::F64);
  CHECK(c->graph.find_program("train")->nodes.back().op != OpKind::OptimizerStep);
}
