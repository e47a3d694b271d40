// A second image size for validation (issue 9): train programs compiled at the train_transforms' size, eval
// programs at the val_transforms' one, one set of parameters for both, a memory plan that holds every program's
// shapes; a model whose parameter shapes would follow the image size is a located error naming the layer.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/compiler.h"
#include "tests/support/cnn_spec.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

// Train at 24x24, validate at 28x28 (Fashion-MNIST with a train random_crop 24 and a normalize-only validation).
DataShape two_sizes(int64_t train_n, int64_t val_n, int64_t val_side = 28) {
  DataShape d = image_data(train_n, val_n, 24, 2);
  d.val_h = d.val_w = val_side;
  return d;
}

Compiled compiled(const Spec& s, const DataShape& d) {
  Result<Compiled> c = compile_spec(s, d);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return c.value();
}

Shape out_shape(const Graph& g, const std::string& program, const std::string& node) {
  const Program* p = g.find_program(program);
  REQUIRE(p);
  for (const Node& n : p->nodes)
    if (n.name == node) return g.values[n.out[0]].shape;
  FAIL("no node " << node << " in " << program);
  return {};
}

// conv1 3x3 p1 -> flatten -> fc: the linear layer's in-features are H * W * 4.
Spec flatten_spec(int batch) {
  Spec s = cnn_base_spec(batch);
  cnn_push(s, conv_layer("conv1", 4, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, cnn_layer(LayerKind::Flatten, "flatten"));
  cnn_push(s, linear_layer("fc", 3));
  return s;
}

}  // namespace

TEST_CASE("eval programs are built at the validation size, train programs at the training size",
          "[graph][val_size]") {
  // small_cnn_spec ends in a global average pool: 24 -> 24 -> 12 -> 6 -> 3 -> gap; 28 -> 28 -> 14 -> 7 -> 3 -> gap.
  Result<Graph> built = graph_build(small_cnn_spec(5), two_sizes(22, 12));
  INFO((built.ok() ? std::string() : built.error_text()));
  REQUIRE(built.ok());
  const Graph& g = built.value();
  CHECK(g.in_h == 24);
  CHECK(g.val_h == 28);
  CHECK(g.val_w == 28);
  for (const char* name : {"train", "train_last", "eval", "eval_last"}) REQUIRE(g.find_program(name));
  CHECK(g.values[g.find_program("train")->input].shape == Shape{{5, 24, 24, 2}});
  CHECK(g.values[g.find_program("train_last")->input].shape == Shape{{2, 24, 24, 2}});
  CHECK(g.values[g.find_program("eval")->input].shape == Shape{{5, 28, 28, 2}});
  CHECK(g.values[g.find_program("eval_last")->input].shape == Shape{{2, 28, 28, 2}});
  CHECK(out_shape(g, "train", "conv1") == Shape{{5, 24, 24, 4}});
  CHECK(out_shape(g, "eval", "conv1") == Shape{{5, 28, 28, 4}});
  CHECK(out_shape(g, "train", "conv2") == Shape{{5, 6, 6, 6}});
  CHECK(out_shape(g, "eval", "conv2") == Shape{{5, 7, 7, 6}});
  CHECK(out_shape(g, "eval_last", "pool2") == Shape{{2, 3, 3, 6}});
  CHECK(out_shape(g, "eval", "gap") == Shape{{5, 6}});
  CHECK(g.values[g.find_program("eval")->logits].shape == Shape{{5, 3}});
  // One parameter set: every program's conv1 reads the same weight value.
  const ValueId w = g.find_program("train")->nodes[0].in[1];
  for (const Program& p : g.programs) CHECK(p.nodes[0].in[1] == w);
  CHECK(graph_verify(g).ok());
  CHECK_THAT(graph_dump(g), Catch::Contains("sample (H, W, C) = (24, 24, 2), validation (28, 28, 2), classes 3"));
}

TEST_CASE("with one image size the graph records it once and dumps as before", "[graph][val_size]") {
  Result<Graph> g = graph_build(small_cnn_spec(5), image_data(20, 10));
  REQUIRE(g.ok());
  CHECK(g->val_h == g->in_h);
  CHECK(g->val_w == g->in_w);
  CHECK(g->values[g->find_program("eval")->input].shape == Shape{{5, 8, 8, 2}});
  CHECK_THAT(graph_dump(g.value()), Catch::Contains("sample (H, W, C) = (8, 8, 2), classes 3"));
  DataShape same = image_data(20, 10);
  same.val_h = same.val_w = 8;  // given explicitly, equal: the same graph
  CHECK(graph_dump(graph_build(small_cnn_spec(5), same).value()) == graph_dump(g.value()));
}

TEST_CASE("the memory plan of a two-size compile holds every program at its own size", "[memplan][val_size]") {
  const Spec s = small_cnn_spec(5);
  const Compiled two = compiled(s, two_sizes(22, 12));
  const Compiled at24 = compiled(s, image_data(22, 12, 24, 2));
  const Compiled at28 = compiled(s, image_data(22, 12, 28, 2));
  CHECK(graph_verify(two.graph).ok());
  CHECK(memplan_verify(two.graph, two.plan).ok());
  // The input slots take the largest input: the validation batch at 28x28 (as a run at 28x28 throughout).
  const ValueId eval_in = two.graph.find_program("eval")->input;
  CHECK(two.plan.values[eval_in].bytes == 5 * 28 * 28 * 2 * 4);
  CHECK(two.plan.input_slot_bytes >= align_up(two.plan.values[eval_in].bytes));
  CHECK(two.plan.input_slot_bytes == at28.plan.input_slot_bytes);
  CHECK(two.plan.input_slot_bytes > at24.plan.input_slot_bytes);
  // Every activation of every program is placed inside the arena, at its own program's size.
  int64_t largest_eval = 0, largest_train = 0;
  for (const Program& p : two.graph.programs)
    for (const Node& n : p.nodes)
      for (ValueId v : n.out) {
        const Placement& pl = two.plan.values[v];
        if (pl.region != Region::Activations || pl.offset < 0) continue;
        INFO(two.graph.values[v].name);
        CHECK(pl.bytes == stored_bytes(two.graph, v));
        CHECK(pl.offset + pl.bytes <= two.plan.region_bytes[static_cast<int>(Region::Activations)]);
        int64_t& largest = p.kind == ProgramKind::Eval ? largest_eval : largest_train;
        largest = std::max(largest, pl.bytes);
      }
  CHECK(largest_eval == 5 * 28 * 28 * 4 * 4);  // eval/conv1 (5, 28, 28, 4) f32
  CHECK(largest_train == 5 * 24 * 24 * 4 * 4);
  // The persistent regions do not depend on the image size; the peak covers the larger of the two sizes.
  for (Region r : {Region::Weights, Region::Grads, Region::OptState, Region::Buffers})
    CHECK(two.plan.region_bytes[static_cast<int>(r)] == at24.plan.region_bytes[static_cast<int>(r)]);
  CHECK(two.plan.total_bytes() > at24.plan.total_bytes());
  CHECK(two.plan.region_bytes[static_cast<int>(Region::Activations)] >= largest_eval);
}

TEST_CASE("a linear layer after a flatten with two image sizes is a located error naming the layer and both sizes",
          "[graph][val_size]") {
  const Spec s = flatten_spec(4);
  Result<Graph> g = graph_build(s, two_sizes(8, 8));
  REQUIRE_FALSE(g.ok());
  REQUIRE(g.errors().size() == 1);
  const Error& e = g.errors()[0];
  CHECK(e.code == ErrCode::Invalid);
  CHECK(e.where == "cnn.yaml:6:7");  // fc, the fourth layer
  CHECK_THAT(e.message, Catch::Contains("linear layer 'fc'") && Catch::Contains("'fc.weight'") &&
                            Catch::Contains("(3, 2304) at the training image size 24x24") &&
                            Catch::Contains("(3, 3136) at the validation image size 28x28") &&
                            Catch::Contains("global_avg_pool"));
  // Through the whole compiler: the same error value, no abort.
  Result<Compiled> c = compile_spec(s, two_sizes(8, 8));
  REQUIRE_FALSE(c.ok());
  CHECK(c.error_text() == g.error_text());
  // One size: the same model compiles.
  CHECK(graph_build(s, image_data(8, 8, 24, 2)).ok());
}

TEST_CASE("a validation size at which a layer does not fit is an error that names the validation size",
          "[graph][val_size]") {
  Spec s = cnn_base_spec(4);
  cnn_push(s, conv_layer("conv1", 4, 5));  // 5x5, no padding: fits 24x24, not 4x4
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  CHECK(graph_build(s, two_sizes(8, 8, 6)).ok());
  Result<Graph> g = graph_build(s, two_sizes(8, 8, 4));
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error_text(), Catch::Contains("conv2d layer 'conv1'") && Catch::Contains("does not fit") &&
                                 Catch::Contains("at the validation image size 4x4"));
}

TEST_CASE("graph_build plans the validation programs at their size for every batch variant", "[graph][val_size]") {
  Spec s = small_cnn_spec(6);
  s.data.val_batch_size = 4;
  DataShape d = two_sizes(12, 9);  // train: 2 full batches; val: 2 of 4 and 1 of 1
  Result<Graph> g = graph_build(s, d);
  REQUIRE(g.ok());
  CHECK_FALSE(g->find_program("train_last"));
  CHECK(g->values[g->find_program("eval")->input].shape == Shape{{4, 28, 28, 2}});
  CHECK(g->values[g->find_program("eval_last")->input].shape == Shape{{1, 28, 28, 2}});
}
