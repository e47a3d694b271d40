// grad_check_plan (core/memplan/grad_check.h), the train.grad_check key (and train.conv_dgrad_fwd,
// conv_wgrad_overlap and conv_wgrad_priority, the other train keys outside the checkpoint hash): under fp16 storage
// a linear weight
// gradient larger than twice its fp16 operands is checked through dY and X and left out of the ranges; everything
// else (bf16, fp32, accumulation, small layers, by_operands false) keeps [0, trainable_bytes); the ranges and the
// left-out bytes always add up to the layout; grad_check_by_operands says no for full, ranks and injected NaNs; the
// key parses, round-trips, is written only when not the default and does not change a checkpoint's spec hash.
#include <catch2/catch.hpp>

#include <string>

#include "core/ckpt/checkpoint.h"
#include "core/compiler.h"
#include "core/memplan/grad_check.h"
#include "tests/core/spec_test_util.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;

namespace {

Compiled compile_with(const Spec& s, const DataShape& d, DType storage) {
  CompileOptions opt;
  opt.storage = storage;
  Result<Compiled> c = compile_spec(s, d, opt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return std::move(c.value());
}

int train_program(const Graph& g) {
  for (size_t i = 0; i < g.programs.size(); ++i)
    if (g.programs[i].name == "train") return static_cast<int>(i);
  FAIL("no train program");
  return -1;
}

// The ranges are ascending, disjoint, inside the layout, and with the left-out bytes cover it exactly.
void check_cover(const GradCheckPlan& p, const MemoryPlan& m) {
  int64_t sum = 0, at = 0;
  for (const auto& [b, e] : p.ranges) {
    CHECK(b >= at);
    CHECK(e > b);
    CHECK(e <= m.trainable_bytes);
    CHECK(b % 4 == 0);
    CHECK(e % 4 == 0);
    sum += e - b;
    at = e;
  }
  CHECK(sum + p.skipped_bytes == m.trainable_bytes);
}

// A wide first layer: fc1 (64 x 256) f32 gradient 64 KiB against fp16 operands of 2 x (5 x 64) + 2 x (5 x 256).
Spec wide_mlp() {
  Spec s = testing::mlp_spec(64, 5);
  return s;
}
DataShape wide_data() {
  DataShape d = testing::small_data(20, 10);
  d.h = 16;
  d.w = 16;
  return d;
}

}  // namespace

TEST_CASE("grad_check_plan: fp16 storage checks a large linear weight gradient through its operands",
          "[grad_check]") {
  const Compiled c = compile_with(wide_mlp(), wide_data(), DType::F16);
  const int tp = train_program(c.graph);
  const GradCheckPlan p = grad_check_plan(c.graph, c.plan, tp, true);
  REQUIRE(p.operands.size() == 1);  // fc1 only: fc2's gradient (3 x 64) is smaller than its operands
  const GradCheckOperands& o = p.operands[0];
  const Node& n = c.graph.programs[static_cast<size_t>(tp)].nodes[o.node];
  CHECK(n.op == OpKind::LinearGradWeight);
  CHECK(o.dy == n.in[0]);
  CHECK(o.x == n.in[1]);
  CHECK(o.grad == n.out[0]);
  const Value& gv = c.graph.values[o.grad];
  CHECK(gv.role == Role::Grad);
  CHECK(c.graph.params[static_cast<size_t>(gv.param)].name == "fc1.weight");
  CHECK(p.skipped_bytes == align_up(64 * 256 * 4));
  CHECK(p.operand_bytes == (5 * 64 + 5 * 256) * 2);  // dY (5, 64) and X (5, 256) in fp16
  check_cover(p, c.plan);
  // The operand-checked gradient lies in no range.
  const int64_t gb = c.plan.values[o.grad].offset, ge = gb + c.plan.values[o.grad].bytes;
  for (const auto& [b, e] : p.ranges) CHECK((e <= gb || b >= ge));
  // Not asked (train.grad_check: full, ranks, a debug NaN): the whole layout, no operands.
  const GradCheckPlan full = grad_check_plan(c.graph, c.plan, tp, false);
  CHECK(full.operands.empty());
  CHECK(full.skipped_bytes == 0);
  REQUIRE(full.ranges.size() == 1);
  CHECK(full.ranges[0] == std::make_pair(int64_t{0}, c.plan.trainable_bytes));
}

TEST_CASE("grad_check_plan: bf16, fp32 and gradient accumulation read every gradient", "[grad_check]") {
  for (DType storage : {DType::BF16, DType::F32}) {
    const Compiled c = compile_with(wide_mlp(), wide_data(), storage);
    const GradCheckPlan p = grad_check_plan(c.graph, c.plan, train_program(c.graph), true);
    CHECK(p.operands.empty());
    CHECK(p.skipped_bytes == 0);
    check_cover(p, c.plan);
  }
  Spec acc = wide_mlp();
  acc.train.accumulate_steps = 2;  // the flag is cleared per micro-batch: an operand check there would be lost
  const Compiled c = compile_with(acc, wide_data(), DType::F16);
  for (size_t i = 0; i < c.graph.programs.size(); ++i) {
    const GradCheckPlan p = grad_check_plan(c.graph, c.plan, static_cast<int>(i), true);
    CHECK(p.operands.empty());
    check_cover(p, c.plan);
  }
}

TEST_CASE("grad_check_plan: VGG16-BN's classifier is checked through its operands", "[grad_check]") {
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/vgg16bn.yaml", {"train.precision=fp16"});
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  DataShape d = testing::small_data(2560, 512);  // the recipe's synthetic 224 x 224 x 3, 1,000 classes
  d.h = d.w = 224;
  d.c = 3;
  d.num_classes = 1000;
  const Compiled c = compile_with(s.value(), d, DType::F16);
  const GradCheckPlan p = grad_check_plan(c.graph, c.plan, train_program(c.graph), true);
  REQUIRE(p.operands.size() == 3);  // fc 25088 -> 4096, 4096 -> 4096, 4096 -> 1000; no conv
  const int64_t weights = (25088LL * 4096 + 4096LL * 4096 + 4096LL * 1000) * 4;
  CHECK(p.skipped_bytes >= weights);
  CHECK(p.skipped_bytes < weights + 3 * kAlign);
  check_cover(p, c.plan);
  CHECK(p.ranges.size() <= 4);  // the conv weights before, the biases and norm parameters after
}

TEST_CASE("grad_check_by_operands: auto, one process, no injected NaN", "[grad_check]") {
  Spec s = wide_mlp();
  CHECK(grad_check_by_operands(s, false));
  CHECK_FALSE(grad_check_by_operands(s, true));  // ranks: the flag must see the averaged gradients
  s.debug.inject_nonfinite_grad_steps = {3};
  CHECK_FALSE(grad_check_by_operands(s, false));  // the debug NaN is written into the gradients
  s.debug.inject_nonfinite_grad_steps.clear();
  s.train.grad_check = GradCheck::Full;
  CHECK_FALSE(grad_check_by_operands(s, false));
}

namespace {

// A train key that does not change what a step computes: `key: value` parses to `expected`, round-trips, is written
// only when not the default (`dflt`), keeps the checkpoint hash, takes a k=v override, and an unknown value is an
// error at its line.
template <class E>
void check_hash_neutral_key(const std::string& key, const std::string& value, E expected, E dflt,
                            E (*get)(const Spec&)) {
  using namespace spec_test;
  CAPTURE(key, value);
  Result<Spec> set = parse("train: {" + key + ": " + value + "}\n" + kMinimal);
  INFO((set.ok() ? std::string() : set.error_text()));
  REQUIRE(set.ok());
  CHECK(get(set.value()) == expected);
  const std::string yaml = spec_to_yaml(set.value());
  CHECK_THAT(yaml, Catch::Contains(key + ": " + value));
  Result<Spec> back = parse(yaml);
  REQUIRE(back.ok());
  CHECK(first_difference(set.value(), back.value()).empty());
  Result<Spec> plain = parse(kMinimal);
  REQUIRE(plain.ok());
  CHECK(get(plain.value()) == dflt);
  CHECK_THAT(spec_to_yaml(plain.value()), !Catch::Contains(key));
  CHECK(ckpt_spec_hash(set.value()) == ckpt_spec_hash(plain.value()));  // the same computation
  Result<Spec> over = parse(kMinimal, {"train." + key + "=" + value});
  REQUIRE(over.ok());
  CHECK(get(over.value()) == expected);
  Result<Spec> bad = parse("train: {" + key + ": sometimes}\n" + kMinimal);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error_text(), Catch::Contains(key));
  CHECK_THAT(bad.error_text(), Catch::Contains("test.yaml:1"));
}

}  // namespace

TEST_CASE("train.grad_check parses, round-trips, is written only when not auto and keeps the checkpoint hash",
          "[spec][grad_check]") {
  check_hash_neutral_key<GradCheck>("grad_check", "full", GradCheck::Full, GradCheck::Auto,
                                    [](const Spec& s) { return s.train.grad_check; });
}

TEST_CASE("train.conv_dgrad_fwd parses, round-trips, is written only when not off and keeps the checkpoint hash",
          "[spec][dgrad_fwd]") {
  auto get = [](const Spec& s) { return s.train.conv_dgrad_fwd; };
  check_hash_neutral_key<ConvDgradFwd>("conv_dgrad_fwd", "on", ConvDgradFwd::On, ConvDgradFwd::Off, get);
  check_hash_neutral_key<ConvDgradFwd>("conv_dgrad_fwd", "auto", ConvDgradFwd::Auto, ConvDgradFwd::Off, get);
}

TEST_CASE("train.conv_wgrad_overlap parses, round-trips, is written only when not 0 and keeps the checkpoint hash",
          "[spec][wgrad_overlap]") {
  auto get = [](const Spec& s) { return s.train.conv_wgrad_overlap; };
  check_hash_neutral_key<int>("conv_wgrad_overlap", "2", 2, 0, get);
  check_hash_neutral_key<bool>("conv_wgrad_priority", "same", false, true,
                               [](const Spec& s) { return s.train.conv_wgrad_low_priority; });
  Result<Spec> big = spec_test::parse("train: {conv_wgrad_overlap: 5}\n" + std::string(spec_test::kMinimal));
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(big.error_text(), Catch::Contains("conv_wgrad_overlap"));
}
