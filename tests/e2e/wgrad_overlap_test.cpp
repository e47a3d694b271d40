// train.conv_wgrad_overlap through the compiler and the CPU backend: pass_overlap_wgrad's windows (up to and
// including the N-th data gradient after each weight gradient, never past the optimizer, never over a reader of
// the gradient; none for pointwise convolutions or N = 0), the memory plan keeping each weight gradient's inputs
// live through its window, graph_verify refusing a window that passes the optimizer, and the CPU backend (which
// runs the plan in order) training bitwise as without the key on a VGG-style net and a residual block.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/compiler.h"
#include "core/graph/build.h"
#include "core/memplan/memplan.h"
#include "runtime/backend.h"
#include "tests/support/backend_compare.h"
#include "tests/support/cnn_spec.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

constexpr int kBatch = 3;
constexpr int64_t kSide = 8, kChannels = 2;

// conv1 -> bn1 -> relu1 -> conv2 -> bn2 -> relu2 -> pool2 max 2 -> conv3 -> bn3 -> relu3 -> conv4 (1x1) -> gap
// -> fc: per 3x3 layer BatchNormGrad, Conv2dGradWeight, ZeroFill (the folded bias), Conv2dGradInput in the backward;
// conv4 pointwise (no window).
Spec vgg_style_spec() {
  Spec s = cnn_base_spec(kBatch);
  s.optimizer.kind = OptimizerKind::Sgd;
  s.optimizer.momentum = 0.9;
  s.optimizer.nesterov = true;
  cnn_push(s, conv_layer("conv1", 4, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, conv_layer("conv2", 6, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool2", 2));
  cnn_push(s, conv_layer("conv3", 6, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn3"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu3"));
  cnn_push(s, conv_layer("conv4", 5, 1, 0, 0, false));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  return s;
}

Compiled compiled(Spec s, int overlap) {
  s.train.conv_wgrad_overlap = overlap;
  Result<Compiled> c = compile_spec(s, image_data(kBatch, kBatch, kSide, kChannels), CompileOptions{});
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return std::move(c.value());
}

// Every window of the train program as the pass's rule says, and the plan's liveness covering it; returns how
// many weight gradients got one.
int check_windows(const Compiled& c, int n) {
  const int train = program_index(c, "train");
  const Program& p = c.graph.programs[static_cast<size_t>(train)];
  const int64_t base = program_bases(c.graph)[static_cast<size_t>(train)];
  int windows = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& w = p.nodes[i];
    CAPTURE(w.name, w.attrs.overlap);
    if (w.op != OpKind::Conv2dGradWeight || pointwise_conv(w) || n == 0) {
      CHECK(w.attrs.overlap == 0);
      continue;
    }
    size_t q = i + 1;  // the rule, restated: stop after the n-th data gradient, or before a reader / non-window op
    for (int seen = 0; q < p.nodes.size() && seen < n; ++q) {
      if (reads_any(p.nodes[q], w.out) || !overlap_window_op(p.nodes[q].op)) break;
      seen += p.nodes[q].op == OpKind::Conv2dGradInput;
    }
    CHECK(w.attrs.overlap == static_cast<int32_t>(q - i - 1));
    REQUIRE(i + static_cast<size_t>(w.attrs.overlap) < p.nodes.size());
    windows += w.attrs.overlap > 0;
    for (ValueId v : w.in) {
      const Placement& pl = c.plan.values[v];
      if (pl.region == Region::Activations) CHECK(pl.last >= base + static_cast<int64_t>(i) + w.attrs.overlap);
    }
  }
  return windows;
}

}  // namespace

TEST_CASE("pass_overlap_wgrad: windows up to the N-th data gradient, never past the optimizer; the plan keeps the "
          "inputs", "[e2e][cnn][wgrad_overlap]") {
  const Compiled c0 = compiled(vgg_style_spec(), 0);
  CHECK(check_windows(c0, 0) == 0);
  const Compiled c1 = compiled(vgg_style_spec(), 1), c2 = compiled(vgg_style_spec(), 2);
  CHECK(check_windows(c1, 1) == 3);  // conv1..conv3; conv4 is pointwise
  CHECK(check_windows(c2, 2) == 3);
  // conv3's weight gradient with N = 1: ZeroFill and its own data gradient; with N = 2 also bn2's backward, conv2's
  // weight gradient, its ZeroFill and data gradient.
  const Program& p1 = c1.graph.programs[static_cast<size_t>(program_index(c1, "train"))];
  const Program& p2 = c2.graph.programs[static_cast<size_t>(program_index(c2, "train"))];
  for (const auto& [p, want] : {std::pair<const Program*, int>{&p1, 2}, {&p2, 6}})
    for (const Node& n : p->nodes)
      if (n.name == "conv3.grad_weight") CHECK(n.attrs.overlap == want);
  CHECK_THAT(graph_dump(c2.graph), Catch::Contains("[overlap="));
  CHECK(memplan_verify(c2.graph, c2.plan).ok());
  // The residual block: its Add and the 1x1 shortcut's GEMM inside the windows, still none over a reader.
  Spec res = resnet_block_spec(kBatch);
  res.train.conv_wgrad_overlap = 2;
  CHECK(check_windows(compiled(res, 2), 2) >= 3);
}

TEST_CASE("graph_verify refuses an overlap window past the optimizer or on another op", "[e2e][cnn][wgrad_overlap]") {
  Compiled c = compiled(vgg_style_spec(), 1);
  Program& p = c.graph.programs[static_cast<size_t>(program_index(c, "train"))];
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (p.nodes[i].name == "conv1.grad_weight") p.nodes[i].attrs.overlap = static_cast<int32_t>(p.nodes.size() - i - 1);
  Status st = graph_verify(c.graph);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error_text(), Catch::Contains("conv1.grad_weight") && Catch::Contains("optimizer_step"));
  Compiled d = compiled(vgg_style_spec(), 0);
  Program& q = d.graph.programs[static_cast<size_t>(program_index(d, "train"))];
  for (Node& n : q.nodes)
    if (n.op == OpKind::BatchNormGrad) {
      n.attrs.overlap = 1;
      break;
    }
  Status bad = graph_verify(d.graph);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error_text(), Catch::Contains("only a weight gradient overlaps"));
}

TEST_CASE("train.conv_wgrad_overlap on the CPU: train steps bitwise those without it", "[e2e][cnn][wgrad_overlap]") {
  for (const Spec& spec : {vgg_style_spec(), resnet_block_spec(kBatch)}) {
    Compiled a = compiled(spec, 0), b = compiled(spec, 2);
    std::unique_ptr<Backend> ba = make_cpu_backend(a, 77, 2), bb = make_cpu_backend(b, 77, 2);
    for (Backend* be : {ba.get(), bb.get()}) {
      const Compiled& c = be == ba.get() ? a : b;
      be->set_lr(0.05);
      REQUIRE(be->write_region(Region::Weights, params_init(c, 5)).ok());
      REQUIRE(be->write_region(Region::Buffers, buffers_init(c)).ok());
    }
    const std::vector<int32_t> y = {2, 0, 1};
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      std::vector<float> x;
      for (double v : random_vec(kBatch * kSide * kSide * kChannels, 31 + static_cast<uint32_t>(step)))
        x.push_back(static_cast<float>(v));
      step_both_and_compare(*ba, program_index(a, "train"), *bb, program_index(b, "train"), step, x, y, kBatch, true);
    }
  }
}
