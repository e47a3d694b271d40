// optimizer.param_groups and model.freeze: parsing, located errors, round-trips, and what the compiler makes of
// them (group order and hyper-parameters, update ranges in the plan, no gradients for frozen parameters).
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/compiler.h"
#include "core/graph/param_groups.h"
#include "tests/core/spec_test_util.h"

using namespace trctl;
using namespace trctl::spec_test;

namespace {

// flatten -> fc1 (8) -> relu -> bn? no: fc2 (6) -> relu -> fc3 (3): six parameters.
const char* kMlp =
    "data: {batch_size: 4}\n"
    "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, name: fc1, out_features: 8}\n"
    "    - {type: relu}\n    - {type: linear, name: fc2, out_features: 6}\n    - {type: relu}\n"
    "    - {type: linear, name: fc3, out_features: 3}\n"
    "optimizer: {type: adamw, lr: 0.001, weight_decay: 0.01}\n";

DataShape data() {
  DataShape d;
  d.h = d.w = 4;
  d.c = 1;
  d.num_classes = 3;
  d.train_n = 8;
  d.val_n = 4;
  return d;
}

Compiled compile(const std::vector<std::string>& overrides) {
  Result<Spec> s = parse(kMlp, overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  Result<Compiled> c = compile_spec(s.value(), data());
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return c.value();
}

std::string compile_error(const std::vector<std::string>& overrides) {
  Result<Spec> s = parse(kMlp, overrides);
  REQUIRE(s.ok());
  Result<Compiled> c = compile_spec(s.value(), data());
  REQUIRE_FALSE(c.ok());
  return c.error_text();
}

// A node of `op` whose name starts with the layer name (fusion passes rename "fc2" to "fc2+relu4").
bool has_node(const Program& p, const std::string& layer, OpKind op) {
  for (const Node& n : p.nodes)
    if (n.op == op && n.name.rfind(layer, 0) == 0 && (n.name.size() == layer.size() || n.name[layer.size()] == '+' ||
                                                      n.name[layer.size()] == '.'))
      return true;
  return false;
}

std::vector<std::string> names(const Graph& g) {
  std::vector<std::string> n;
  for (const ParamInfo& p : g.params) n.push_back(p.name);
  return n;
}

}  // namespace

TEST_CASE("param_groups and freeze parse (a string or a list of patterns) and round-trip") {
  Result<Spec> r = parse(std::string(kMlp), {"optimizer.param_groups=[{params: fc3, lr: 0.01}, "
                                             "{params: ['fc1.*', 'fc2.bias'], weight_decay: 0.5}]",
                                             "model.freeze=fc2.weight"});
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  const auto& g = r->optimizer.param_groups;
  REQUIRE(g.size() == 2);
  CHECK(g[0].params.size() == 1);
  CHECK(g[0].params[0].glob == "fc3");
  CHECK(g[0].has_lr);
  CHECK(g[0].lr == 0.01);
  CHECK_FALSE(g[0].has_weight_decay);
  CHECK(g[1].params.size() == 2);
  CHECK(g[1].params[1].glob == "fc2.bias");
  CHECK(g[1].params[1].where.find("<override 1>:1:") == 0);
  CHECK(g[1].weight_decay == 0.5);
  REQUIRE(r->model.freeze.size() == 1);
  CHECK(r->model.freeze[0].glob == "fc2.weight");
  Result<Spec> back = parse(spec_to_yaml(r.value()));
  INFO((back.ok() ? std::string() : back.error_text()));
  REQUIRE(back.ok());
  CHECK(first_difference(r.value(), back.value()).empty());
}

TEST_CASE("a spec without groups or freezing writes neither key (its checkpoint hash is unchanged)") {
  Result<Spec> r = parse(kMlp);
  REQUIRE(r.ok());
  const std::string y = spec_to_yaml(r.value());
  CHECK(y.find("param_groups") == std::string::npos);
  CHECK(y.find("freeze") == std::string::npos);
}

TEST_CASE("bad param_groups and freeze entries are located errors") {
  CHECK(has_error(parse(kMlp, {"optimizer.param_groups=[{lr: 0.1}]"}), "missing 'optimizer.param_groups[0].params'"));
  CHECK(has_error(parse(kMlp, {"optimizer.param_groups=[{params: fc1}]"}), "sets neither lr nor weight_decay"));
  CHECK(has_error(parse(kMlp, {"optimizer.param_groups=[{params: fc1, lr: 0}]"}), "param_groups[0].lr"));
  CHECK(has_error(parse(kMlp, {"optimizer.param_groups=[{params: fc1, lr: 0.1, momentum: 0.9}]"}),
                  "unknown key 'momentum'"));
  CHECK(has_error(parse(kMlp, {"optimizer.param_groups=[{params: [''], lr: 0.1}]"}), "is empty"));
  CHECK(has_error(parse(kMlp, {"optimizer.param_groups={params: fc1, lr: 0.1}"}), "optimizer.param_groups"));
  CHECK(has_error(parse(kMlp, {"model.freeze=[1, {a: b}]"}), "model.freeze[1]"));
  std::string eight = "optimizer.param_groups=[";
  for (int i = 0; i < 8; ++i) eight += std::string(i ? ", " : "") + "{params: fc1, lr: 0.1}";
  CHECK(has_error(parse(kMlp, {eight + "]"}), "at most 7"));
}

TEST_CASE("without groups the parameters are ordered decayed first, in two groups") {
  Compiled c = compile({});
  CHECK(names(c.graph) == std::vector<std::string>{"fc1.weight", "fc2.weight", "fc3.weight", "fc1.bias", "fc2.bias",
                                                   "fc3.bias"});
  REQUIRE(c.graph.param_groups.size() == 2);
  CHECK(c.graph.param_groups[0].name == "default");
  CHECK(c.graph.param_groups[0].weight_decay == 0.01);
  CHECK(c.graph.param_groups[1].name == "default.no_decay");
  CHECK(c.graph.param_groups[1].weight_decay == 0.0);
  REQUIRE(c.plan.update_ranges.size() == 2);
  CHECK(c.plan.update_ranges[0].begin == 0);
  CHECK(c.plan.update_ranges[1].end == c.plan.weights_bytes);
  CHECK(c.plan.trainable_bytes == c.plan.weights_bytes);
}

TEST_CASE("param groups: first matching group wins, groups in spec order, each with its lr and weight decay") {
  Compiled c = compile({"optimizer.param_groups=[{params: fc3, lr: 0.01}, {params: ['fc*.weight'], weight_decay: 0.5}]"});
  CHECK(names(c.graph) == std::vector<std::string>{"fc3.weight", "fc3.bias", "fc1.weight", "fc2.weight", "fc1.bias",
                                                   "fc2.bias"});
  std::vector<std::string> groups;
  for (const ParamGroupInfo& g : c.graph.param_groups) groups.push_back(g.name);
  CHECK(groups == std::vector<std::string>{"param_groups[0]", "param_groups[0].no_decay", "param_groups[1]",
                                           "default.no_decay"});
  CHECK(c.graph.param_groups[0].lr == 0.01);
  CHECK(c.graph.param_groups[0].weight_decay == 0.01);  // the optimizer's: this group sets only lr
  CHECK(c.graph.param_groups[1].weight_decay == 0.0);   // biases: no decay in any group
  CHECK(c.graph.param_groups[2].lr == 0.001);
  CHECK(c.graph.param_groups[2].weight_decay == 0.5);
  REQUIRE(c.plan.update_ranges.size() == 4);
  for (size_t k = 0; k < 4; ++k) CHECK(c.plan.update_ranges[k].group == static_cast<int32_t>(k));
  for (const ParamInfo& p : c.graph.params) {
    const UpdateRange& r = c.plan.update_ranges[static_cast<size_t>(p.group)];
    CHECK(c.plan.values[p.value].offset >= r.begin);
    CHECK(c.plan.values[p.value].offset < r.end);
  }
  CHECK(memplan_dump(c.graph, c.plan).find("optimizer groups: [0, ") != std::string::npos);
}

TEST_CASE("the scheduler moves every group's lr from the group's own base") {
  Result<Spec> s = parse(std::string(kMlp) + "scheduler: {type: cosine, eta_min: 0.0001}\ntrain: {epochs: 4}\n",
                         {"optimizer.param_groups=[{params: fc3, lr: 0.01}]"});
  REQUIRE(s.ok());
  Result<Compiled> c = compile_spec(s.value(), data());
  REQUIRE(c.ok());
  for (int e = 1; e <= 4; ++e) {
    const std::vector<double> lrs = param_group_lrs(s.value(), c->graph, e);
    REQUIRE(lrs.size() == c->graph.param_groups.size());
    CHECK(lrs[0] == scheduler_lr(s->scheduler, 0.01, e, 4));
    CHECK(lrs.back() == scheduler_lr(s->scheduler, 0.001, e, 4));
  }
}

TEST_CASE("frozen parameters come last, get no gradient and no optimizer input; the layers before them no dX") {
  Compiled c = compile({"model.freeze=[fc1]"});
  CHECK(names(c.graph) == std::vector<std::string>{"fc2.weight", "fc3.weight", "fc2.bias", "fc3.bias", "fc1.weight",
                                                   "fc1.bias"});
  CHECK(trainable_param_count(c.graph) == 4);
  for (const ParamInfo& p : c.graph.params) CHECK((p.grad == kNoValue) == p.frozen);
  CHECK(c.plan.trainable_bytes < c.plan.weights_bytes);
  CHECK(c.plan.region_bytes[static_cast<int>(Region::Grads)] == c.plan.trainable_bytes);
  for (const ParamInfo& p : c.graph.params)
    if (p.frozen) CHECK(c.plan.values[p.value].offset >= c.plan.trainable_bytes);
  const Program& train = *c.graph.find_program("train");
  for (const Node& n : train.nodes)
    if (n.op == OpKind::OptimizerStep) CHECK(n.in.size() == 4);
  CHECK_FALSE(has_node(train, "fc1", OpKind::LinearGradWeight));
  CHECK_FALSE(has_node(train, "fc1", OpKind::LinearGradBias));
  CHECK_FALSE(has_node(train, "fc2", OpKind::LinearGradInput));  // fc1 is frozen: nothing needs its output's gradient
  CHECK(has_node(train, "fc2", OpKind::LinearGradWeight));
  CHECK(graph_dump(c.graph).find("fc1.weight (8, 16) decay grad=%-1") != std::string::npos);
}

TEST_CASE("freezing a middle layer keeps the gradient flowing to the layers before it") {
  Compiled c = compile({"model.freeze=fc2"});
  const Program& train = *c.graph.find_program("train");
  CHECK(has_node(train, "fc2", OpKind::LinearGradInput));
  CHECK_FALSE(has_node(train, "fc2", OpKind::LinearGradWeight));
  CHECK(has_node(train, "fc1", OpKind::LinearGradWeight));
}

TEST_CASE("patterns that match nothing, and freezing everything, are located compile errors") {
  const std::string e1 = compile_error({"model.freeze=[fc1, fc9]"});
  CHECK(e1.find("<override 1>:1:") != std::string::npos);
  CHECK(e1.find("'model.freeze' pattern 'fc9' matches no parameter (parameters: fc1.weight") != std::string::npos);
  const std::string e2 = compile_error({"optimizer.param_groups=[{params: [fc1, 'conv*'], lr: 0.1}]"});
  CHECK(e2.find("'optimizer.param_groups[0].params' pattern 'conv*' matches no parameter") != std::string::npos);
  const std::string e3 = compile_error({"model.freeze='fc*'"});
  CHECK(e3.find("freezes every parameter") != std::string::npos);
}

TEST_CASE("a pattern matches a parameter's full name or its layer's name") {
  CHECK(pattern_matches_param("fc1", "fc1.weight"));
  CHECK(pattern_matches_param("fc1.weight", "fc1.weight"));
  CHECK(pattern_matches_param("*.bias", "fc1.bias"));
  CHECK(pattern_matches_param("layer[12]*", "layer1.conv1.weight"));
  CHECK_FALSE(pattern_matches_param("fc1", "fc10.weight"));
  CHECK_FALSE(pattern_matches_param("fc1.w", "fc1.weight"));
}
