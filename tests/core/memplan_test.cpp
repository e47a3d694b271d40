// MemoryPlan: regions, 256-byte alignment, one layout for weights/grads/state, liveness reuse of activations.
#include <catch2/catch.hpp>

#include "core/compiler.h"
#include "tests/support/mlp_spec.h"

using namespace trctl;
using namespace trctl::testing;

static Compiled compiled_mlp(int hidden = 32, int batch = 8, bool dropout = true) {
  Result<Compiled> c = compile_spec(mlp_spec(hidden, batch, dropout), small_data(29, 13));
  REQUIRE(c.ok());
  return c.value();
}

TEST_CASE("every placed value is 256-byte aligned and inside its region", "[memplan]") {
  Compiled c = compiled_mlp();
  for (ValueId v = 0; v < static_cast<ValueId>(c.graph.values.size()); ++v) {
    const Placement& p = c.plan.values[v];
    if (p.offset < 0) continue;
    CHECK(p.offset % 256 == 0);
    int64_t cap = p.region == Region::Inputs ? c.plan.input_slot_bytes : c.plan.region_bytes[int(p.region)];
    CHECK(p.offset + p.bytes <= cap);
  }
  CHECK(memplan_verify(c.graph, c.plan).ok());
}

TEST_CASE("activations that are live at the same time never overlap", "[memplan]") {
  Compiled c = compiled_mlp(64, 16);
  int checked = 0;
  for (ValueId a = 0; a < static_cast<ValueId>(c.graph.values.size()); ++a)
    for (ValueId b = a + 1; b < static_cast<ValueId>(c.graph.values.size()); ++b) {
      const Placement &pa = c.plan.values[a], &pb = c.plan.values[b];
      if (pa.offset < 0 || pb.offset < 0 || pa.region != Region::Activations || pb.region != Region::Activations)
        continue;
      if (c.graph.values[a].alias_of != kNoValue || c.graph.values[b].alias_of != kNoValue) continue;
      bool live = pa.first <= pb.last && pb.first <= pa.last;
      bool mem = pa.offset < pb.offset + pb.bytes && pb.offset < pa.offset + pa.bytes;
      CHECK_FALSE((live && mem));
      ++checked;
    }
  CHECK(checked > 10);
}

TEST_CASE("liveness reuse makes the activation arena smaller than the naive sum", "[memplan]") {
  Compiled c = compiled_mlp(64, 16);
  CHECK(c.plan.region_bytes[int(Region::Activations)] < c.plan.activation_naive_bytes);
}

TEST_CASE("grads and optimizer state use the weights' layout", "[memplan]") {
  Compiled c = compiled_mlp();
  for (const auto& p : c.graph.params) {
    CHECK(c.plan.values[p.grad].offset == c.plan.values[p.value].offset);
    REQUIRE(p.state.size() == 2);
    CHECK(c.plan.values[p.state[0]].offset == c.plan.values[p.value].offset);
    CHECK(c.plan.values[p.state[1]].offset == c.plan.weights_bytes + c.plan.values[p.value].offset);
  }
  CHECK(c.plan.region_bytes[int(Region::OptState)] == 2 * c.plan.weights_bytes);
}

TEST_CASE("decayed weights come first, biases after them: one update range each", "[memplan]") {
  Compiled c = compiled_mlp();
  REQUIRE(c.plan.update_ranges.size() == 2);
  const int64_t boundary = c.plan.update_ranges[0].end;
  CHECK(c.plan.update_ranges[1].begin == boundary);
  for (const auto& p : c.graph.params) {
    if (p.decay) CHECK(c.plan.values[p.value].offset < boundary);
    else CHECK(c.plan.values[p.value].offset >= boundary);
  }
}

TEST_CASE("inputs have two slots sized for the largest batch; a flatten view shares its input", "[memplan]") {
  Compiled c = compiled_mlp(32, 8);
  const Program& train = *c.graph.find_program("train");
  const Program& last = *c.graph.find_program("train_last");
  CHECK(c.plan.region_bytes[int(Region::Inputs)] == 2 * c.plan.input_slot_bytes);
  CHECK(c.plan.values[train.input].offset == c.plan.values[last.input].offset);
  CHECK(c.plan.input_slot_bytes >= c.graph.values[train.input].bytes() + c.graph.values[train.label].bytes());
  const Node& flat = train.nodes.front();
  REQUIRE(flat.op == OpKind::Flatten);
  CHECK(c.plan.values[flat.out[0]].region == Region::Inputs);
  CHECK(c.plan.values[flat.out[0]].offset == c.plan.values[train.input].offset);
}

TEST_CASE("memplan_verify catches an overlap of live activations", "[memplan]") {
  Compiled c = compiled_mlp(64, 16);
  ValueId a = kNoValue, b = kNoValue;
  for (ValueId v = 0; v < static_cast<ValueId>(c.graph.values.size()) && b == kNoValue; ++v) {
    const Placement& p = c.plan.values[v];
    if (p.region != Region::Activations || p.offset < 0 || c.graph.values[v].alias_of != kNoValue) continue;
    if (a == kNoValue) a = v;
    else if (p.first <= c.plan.values[a].last && c.plan.values[a].first <= p.last) b = v;
  }
  REQUIRE(b != kNoValue);
  c.plan.values[b].offset = c.plan.values[a].offset;
  CHECK_FALSE(memplan_verify(c.graph, c.plan).ok());
}

TEST_CASE("memplan_dump lists regions and values", "[memplan]") {
  Compiled c = compiled_mlp();
  std::string d = memplan_dump(c.graph, c.plan);
  CHECK_THAT(d, Catch::Contains("region weights") && Catch::Contains("region activations") &&
                    Catch::Contains("fc1.weight") && Catch::Contains("live ["));
}

TEST_CASE("an early write is unsafe where the plan reuses the storage in between", "[memplan]") {
  // The ReluGrad after a dX GEMM: its output is defined one node later, so the planner may give it the GEMM's
  // input storage; writing it from the GEMM (a DRELU fusion) would be an in-place GEMM.
  Spec s = mlp_spec(64, 16);
  s.model.layers.insert(s.model.layers.begin() + 3, layer(LayerKind::Linear, "fc_mid", 64));
  s.model.layers.insert(s.model.layers.begin() + 4, layer(LayerKind::Relu, "relu_mid"));
  Result<Compiled> cr = compile_spec(s, small_data(32, 16));
  REQUIRE(cr.ok());
  const Compiled& c = cr.value();
  const Program& p = c.graph.programs[0];
  int checked = 0, unsafe = 0;
  for (size_t r = 0; r < p.nodes.size(); ++r) {
    if (p.nodes[r].op != OpKind::ReluGrad) continue;
    size_t gi = 0;
    for (size_t i = 0; i < r; ++i)
      if (p.nodes[i].out[0] == p.nodes[r].in[0]) gi = i;
    const Placement &out = c.plan.values[p.nodes[r].out[0]], &in = c.plan.values[p.nodes[gi].in[0]];
    const bool aliases = out.offset < in.offset + in.bytes && in.offset < out.offset + out.bytes;
    CHECK(memplan_early_write_safe(c.graph, c.plan, 0, p.nodes[r].out[0], static_cast<int64_t>(gi)) == !aliases);
    unsafe += aliases;
    CHECK(memplan_early_write_safe(c.graph, c.plan, 0, p.nodes[r].out[0], static_cast<int64_t>(r)));
    ++checked;
  }
  CHECK(checked >= 1);
  CHECK(unsafe >= 1);  // this plan does reuse the storage (as the benchmark MLP's plan does)
}

TEST_CASE("the fused loss kernel may write the logits' gradient early", "[memplan]") {
  Compiled c = compiled_mlp(64, 16);
  const Program& p = c.graph.programs[0];
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (p.nodes[i].op == OpKind::SoftmaxCrossEntropy)
      for (const Node& g : p.nodes)
        if (g.op == OpKind::SoftmaxCrossEntropyGrad)
          CHECK(memplan_early_write_safe(c.graph, c.plan, 0, g.out[0], static_cast<int64_t>(i)));
}
