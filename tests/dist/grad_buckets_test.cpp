// Gradient bucket planning: buckets cover the Grads region at parameter boundaries, each issued after the last
// backward node touching it and before the optimizer.
#include <catch2/catch.hpp>

#include "core/compiler.h"
#include "runtime/dist/grad_buckets.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;

namespace {

Compiled compiled_mlp() {
  Spec s = testing::mlp_spec(64, 8);
  Result<Compiled> c = compile_spec(s, testing::small_data(40, 8), {});
  REQUIRE(c.ok());
  return std::move(c.value());
}

int train_program(const Compiled& c) {
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == "train") return static_cast<int>(i);
  return -1;
}

}  // namespace

TEST_CASE("buckets tile the Grads region at parameter boundaries") {
  const Compiled c = compiled_mlp();
  const int prog = train_program(c);
  REQUIRE(prog >= 0);
  for (int64_t cap : {int64_t{1}, int64_t{4096}, kDistDefaultBucketBytes}) {
    GradBucketPlan bp = grad_buckets_plan(c, prog, cap);
    std::vector<GradBucket> by_offset = bp.buckets;
    std::sort(by_offset.begin(), by_offset.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const GradBucket& b : by_offset) {
      CHECK(b.begin == at);
      CHECK(b.begin % kAlign == 0);
      at = b.end;
    }
    CHECK(at == c.plan.region_bytes[static_cast<int>(Region::Grads)]);
    if (cap == 1) CHECK(bp.buckets.size() == 4);  // fc1.weight, fc1.bias, fc2.weight, fc2.bias: one bucket each
    if (cap == kDistDefaultBucketBytes) CHECK(bp.buckets.size() == 1);
  }
}

TEST_CASE("each bucket is issued after the last node writing its gradients, before the optimizer") {
  const Compiled c = compiled_mlp();
  const int prog = train_program(c);
  const Program& p = c.graph.programs[static_cast<size_t>(prog)];
  GradBucketPlan bp = grad_buckets_plan(c, prog, 1);
  REQUIRE(bp.optimizer_node >= 0);
  REQUIRE(p.nodes[static_cast<size_t>(bp.optimizer_node)].op == OpKind::OptimizerStep);
  int64_t prev = -1;
  for (const GradBucket& b : bp.buckets) {
    REQUIRE(b.issue_after >= 0);
    CHECK(b.issue_after < bp.optimizer_node);
    CHECK(b.issue_after >= prev);  // issue order follows the node order
    prev = b.issue_after;
    // The issuing node writes a gradient inside the bucket, and no later node before the optimizer touches one.
    const Node& n = p.nodes[static_cast<size_t>(b.issue_after)];
    bool writes = false;
    for (ValueId v : n.out)
      if (c.plan.values[v].region == Region::Grads && c.plan.values[v].offset >= b.begin && c.plan.values[v].offset < b.end)
        writes = true;
    CHECK(writes);
    for (int64_t i = b.issue_after + 1; i < bp.optimizer_node; ++i)
      for (const std::vector<ValueId>* vs : {&p.nodes[static_cast<size_t>(i)].in, &p.nodes[static_cast<size_t>(i)].out})
        for (ValueId v : *vs) {
          const Placement& pl = c.plan.values[v];
          CHECK_FALSE((pl.region == Region::Grads && pl.offset >= b.begin && pl.offset < b.end));
        }
  }
  // fc2's gradients are final before fc1's (backward runs from the last layer): its buckets come first
  auto owner = [&](const GradBucket& b) {
    for (const ParamInfo& pi : c.graph.params)
      if (c.plan.values[pi.grad].offset == b.begin) return pi.name;
    return std::string();
  };
  CHECK(owner(bp.buckets.front()).rfind("fc2.", 0) == 0);
  CHECK(owner(bp.buckets.back()).rfind("fc1.", 0) == 0);
}
