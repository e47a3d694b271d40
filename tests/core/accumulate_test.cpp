// Gradient accumulation (train.accumulate_steps): the spec key (range, location, round trip, written back only when
// set), and what the compiler makes of it: a micro-batch program "train_micro" ending with GradAccumulate (add), the
// flush programs "train" / "train_last" with GradAccumulate (flush) before the OptimizerStep, the loss gradient
// times 1/k, the accumulators as a second gradient layout in the Grads region; and k = 1 compiles as before.
#include <catch2/catch.hpp>

#include "core/ckpt/checkpoint.h"
#include "core/compiler.h"
#include "tests/core/spec_test_util.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;

namespace {

int count_ops(const Program& p, OpKind op) {
  int c = 0;
  for (const auto& n : p.nodes) c += n.op == op;
  return c;
}

const Node* find_op(const Program& p, OpKind op) {
  for (const auto& n : p.nodes)
    if (n.op == op) return &n;
  return nullptr;
}

Spec accumulating(int k, int batch = 5) {
  Spec s = testing::mlp_spec(8, batch);
  s.train.accumulate_steps = k;
  return s;
}

}  // namespace

TEST_CASE("train.accumulate_steps parses, round-trips and is written back only when set", "[spec][accumulate]") {
  using namespace spec_test;
  Result<Spec> r = parse(std::string("train: {accumulate_steps: 4}\n") + kMinimal);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  CHECK(r->train.accumulate_steps == 4);
  const std::string yaml = spec_to_yaml(r.value());
  CHECK_THAT(yaml, Catch::Contains("accumulate_steps: 4"));
  Result<Spec> back = parse(yaml);
  REQUIRE(back.ok());
  CHECK(first_difference(r.value(), back.value()).empty());
  Result<Spec> plain = parse(kMinimal);
  REQUIRE(plain.ok());
  CHECK(plain->train.accumulate_steps == 1);
  CHECK_THAT(spec_to_yaml(plain.value()), !Catch::Contains("accumulate_steps"));  // old checkpoint hashes hold
  Result<Spec> one = parse(std::string("train: {accumulate_steps: 1}\n") + kMinimal);
  REQUIRE(one.ok());
  CHECK(ckpt_spec_hash(one.value()) == ckpt_spec_hash(plain.value()));
  CHECK(ckpt_spec_hash(r.value()) != ckpt_spec_hash(plain.value()));  // a resume with another k is refused
  Result<Spec> over = parse(kMinimal, {"train.accumulate_steps=3"});
  REQUIRE(over.ok());
  CHECK(over->train.accumulate_steps == 3);
}

TEST_CASE("train.accumulate_steps outside 1..65536 or not an integer is a located error", "[spec][accumulate]") {
  using namespace spec_test;
  for (const char* bad : {"0", "-2", "65537"}) {
    INFO(bad);
    Result<Spec> r = parse(std::string("train:\n  accumulate_steps: ") + bad + "\n" + kMinimal);
    CHECK(has_error(r, "test.yaml:2:21"));
    CHECK(has_error(r, "out of range"));
    CHECK(has_error(r, "train.accumulate_steps"));
  }
  CHECK(has_error(parse(std::string("train: {accumulate_steps: two}\n") + kMinimal), "train.accumulate_steps"));
  CHECK(has_error(parse(std::string("train: {accumulate_step: 2}\n") + kMinimal), "did you mean 'accumulate_steps'"));
  CHECK(has_error(parse(kMinimal, {"train.accumulate_steps=0"}), "out of range"));
}

TEST_CASE("accumulate_steps 1 compiles exactly the plain graph and plan", "[compiler][accumulate]") {
  Result<Compiled> plain = compile_spec(testing::mlp_spec(8, 5, true), testing::small_data(23, 10));
  Spec s = testing::mlp_spec(8, 5, true);
  s.train.accumulate_steps = 1;
  Result<Compiled> one = compile_spec(s, testing::small_data(23, 10));
  REQUIRE((plain.ok() && one.ok()));
  CHECK(compiled_dump(one.value(), "memplan") == compiled_dump(plain.value(), "memplan"));
  CHECK_FALSE(one->graph.find_program("train_micro"));
  for (const Program& p : one->graph.programs) CHECK(count_ops(p, OpKind::GradAccumulate) == 0);
  CHECK(one->plan.grad_accum_offset == 0);
  for (const ParamInfo& prm : one->graph.params) CHECK(prm.accum == kNoValue);
  CHECK(find_op(*one->graph.find_program("train"), OpKind::SoftmaxCrossEntropyGrad)->attrs.grad_scale == 1.0f);
}

TEST_CASE("accumulate_steps k adds a micro-batch program, the accumulate nodes and 1/k on the loss gradient",
          "[compiler][accumulate]") {
  Result<Compiled> c = compile_spec(accumulating(4), testing::small_data(23, 10));  // 4 full batches + 3
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  const Graph& g = c->graph;
  CHECK(g.accumulate_steps == 4);
  const Program* micro = g.find_program("train_micro");
  const Program* full = g.find_program("train");
  const Program* last = g.find_program("train_last");
  REQUIRE((micro && full && last));
  CHECK(micro->micro);
  CHECK_FALSE(full->micro);
  CHECK_FALSE(last->micro);
  CHECK(micro->kind == ProgramKind::Train);
  CHECK(micro->batch == 5);
  CHECK(last->batch == 3);
  // The micro-batch program: forward and backward as "train", then the add; no optimizer.
  CHECK(micro->nodes.size() == full->nodes.size() - 1);
  CHECK(micro->nodes.back().op == OpKind::GradAccumulate);
  CHECK_FALSE(micro->nodes.back().attrs.flush);
  CHECK(count_ops(*micro, OpKind::OptimizerStep) == 0);
  // The flush programs: the accumulators added into the gradients just before the optimizer step.
  for (const Program* p : {full, last}) {
    INFO(p->name);
    REQUIRE(p->nodes.size() >= 2);
    CHECK(p->nodes.back().op == OpKind::OptimizerStep);
    const Node& acc = p->nodes[p->nodes.size() - 2];
    CHECK(acc.op == OpKind::GradAccumulate);
    CHECK(acc.attrs.flush);
    CHECK(acc.in.size() == 2 * g.params.size());
    CHECK(acc.out.size() == 2 * g.params.size());
  }
  for (const Program* p : {micro, full, last}) {
    const Node* lg = find_op(*p, OpKind::SoftmaxCrossEntropyGrad);
    REQUIRE(lg);
    CHECK(lg->attrs.grad_scale == 0.25f);
    CHECK(find_op(*p, OpKind::SoftmaxCrossEntropy)->attrs.grad_scale == 1.0f);  // the logged loss is not scaled
  }
  CHECK(count_ops(*g.find_program("eval"), OpKind::GradAccumulate) == 0);
  // Every micro-batch program node of "train" is there, in the same order, on the micro program's own values.
  for (size_t i = 0; i + 1 < micro->nodes.size(); ++i) CHECK(micro->nodes[i].op == full->nodes[i].op);
  const std::string dump = compiled_dump(c.value(), "memplan");
  CHECK_THAT(dump, Catch::Contains("accumulate_steps 4") && Catch::Contains("program train_micro (train micro-batch") &&
                       Catch::Contains("grad_accumulate[add]") && Catch::Contains("grad_accumulate[flush]") &&
                       Catch::Contains("[grad_scale=0.25]") && Catch::Contains("accumulators ["));
}

TEST_CASE("the accumulators are a second gradient layout after the first in the Grads region",
          "[memplan][accumulate]") {
  Result<Compiled> plain = compile_spec(accumulating(1), testing::small_data(23, 10));
  Result<Compiled> c = compile_spec(accumulating(3), testing::small_data(23, 10));
  REQUIRE((plain.ok() && c.ok()));
  const MemoryPlan& m = c->plan;
  const int64_t layout = plain->plan.region_bytes[static_cast<int>(Region::Grads)];
  CHECK(m.grad_accum_offset == layout);
  CHECK(m.region_bytes[static_cast<int>(Region::Grads)] == 2 * layout);
  for (int r = 0; r < kRegionCount; ++r)  // nothing else grows: weights, optimizer state, buffers as before
    if (r != static_cast<int>(Region::Grads) && r != static_cast<int>(Region::Activations) &&
        r != static_cast<int>(Region::Results))
      CHECK(m.region_bytes[r] == plain->plan.region_bytes[r]);
  for (const ParamInfo& prm : c->graph.params) {
    REQUIRE(prm.accum != kNoValue);
    CHECK(c->graph.values[prm.accum].role == Role::GradAccum);
    CHECK(c->graph.values[prm.accum].shape == c->graph.values[prm.grad].shape);
    CHECK(m.values[prm.accum].region == Region::Grads);
    CHECK(m.values[prm.accum].offset == layout + m.values[prm.grad].offset);
  }
  CHECK(memplan_verify(c->graph, m).ok());
  MemoryPlan broken = m;
  broken.values[c->graph.params[0].accum].offset += kAlign;
  CHECK_FALSE(memplan_verify(c->graph, broken).ok());
}

TEST_CASE("without the optimizer (gradient checks) the flush programs still end with the summed gradients",
          "[compiler][accumulate]") {
  CompileOptions opt;
  opt.compute = DType::F64;
  opt.optimizer = false;
  Result<Compiled> c = compile_spec(accumulating(2), testing::small_data(20, 10), opt);
  REQUIRE(c.ok());
  const Program* full = c->graph.find_program("train");
  REQUIRE(full);
  CHECK(full->nodes.back().op == OpKind::GradAccumulate);
  CHECK(full->nodes.back().attrs.flush);
  CHECK_FALSE(c->graph.find_program("train_last"));  // 20 = 4 full batches
  CHECK(c->graph.values[c->graph.params[0].accum].dtype == DType::F64);
}

TEST_CASE("no full batch means no micro-batch program: the lone partial batch is every step's flush",
          "[compiler][accumulate]") {
  Result<Compiled> c = compile_spec(accumulating(2, 8), testing::small_data(5, 10));
  REQUIRE(c.ok());
  CHECK_FALSE(c->graph.find_program("train_micro"));
  REQUIRE(c->graph.find_program("train_last"));
  CHECK(c->graph.find_program("train_last")->nodes.back().op == OpKind::OptimizerStep);
}
