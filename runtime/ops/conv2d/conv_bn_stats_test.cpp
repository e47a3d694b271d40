// conv_bn_stats_choose (runtime/ops/conv2d/conv_bn_stats.h) on compiled graphs: configs/vgg16bn.yaml (13 conv ->
// batch norm pairs per training program: features_0 over RGB runs trctl's few-channel kernel, whose epilogue sums
// too (route Fewc), six more have outputs of 56x56 or larger, six are smaller) under every train.conv_bn_stats mode
// and precision, and a small net for the other rules: an RGB stem (route Fewc; separate with conv_fewc off), a
// conv with a bias (the unfolded graph), a 1x1 conv (a cuBLASLt GEMM), a grouped conv, and a conv whose output
// feeds no batch norm.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/compiler.h"
#include "runtime/ops/conv2d/conv_bn_stats.h"
#include "runtime/ops/conv2d/fewc_bn_grad.h"
#include "runtime/train/trainer.h"
#include "tests/support/compile_util.h"

using namespace trctl;

namespace {

using testing::compile_amp;
using testing::programs_with;

// configs/vgg16bn.yaml at a small synthetic size, non-deterministic (the fused modes need it), with `overrides`.
Spec vgg(const std::vector<std::string>& overrides) {
  std::vector<std::string> o = {"data.synthetic.train_size=512", "data.synthetic.val_size=256",
                                "train.deterministic=false"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return testing::config_spec("vgg16bn.yaml", o);
}

}  // namespace

TEST_CASE("conv_bn_stats_choose on VGG16-BN: auto fuses the ten pairs of >= 28x28 outputs, fused all thirteen, "
          "separate and fp32 none",
          "[conv_bn_stats]") {
  struct Want {
    std::vector<std::string> overrides;
    int fused, separate;  // per program with a training batch norm
  };
  const Want cases[] = {
      {{"train.conv_bn_stats=auto", "train.precision=fp16"}, 10, 3},  // features_0 (fewc), nine cuDNN pairs >= 28²
      {{"train.conv_bn_stats=auto", "train.precision=bf16"}, 10, 3},
      {{"train.conv_bn_stats=fused", "train.precision=fp16"}, 13, 0},  // features_0: the few-channel kernel's sums
      {{"train.conv_bn_stats=fused", "train.precision=fp16", "train.conv_fewc=off"}, 12, 1},  // im2col, or padded
      {{"train.conv_bn_stats=separate", "train.precision=fp16"}, 0, 0},
      {{"train.precision=fp16"}, 10, 3},  // the default: auto
  };
  for (const Want& w : cases) {
    std::string tag;
    for (const std::string& o : w.overrides) tag += o + " ";
    INFO(tag);
    const Compiled c = compile_amp(vgg(w.overrides));
    const int p = programs_with(c.graph, OpKind::BatchNorm);
    REQUIRE(p >= 1);
    const ConvBnStatsChoice ch = conv_bn_stats_choose(c.graph, c.spec);
    CHECK(static_cast<int>(ch.fuse.size()) == w.fused * p);
    CHECK(ch.separate == w.separate * p);
    if (c.spec.train.conv_bn_stats == ConvBnStats::Fused) {  // fp32 (the spec refuses it): separate in effect
      Spec f32 = c.spec;
      f32.train.precision = Precision::Fp32;
      const ConvBnStatsChoice none = conv_bn_stats_choose(c.graph, f32);
      CHECK(none.fuse.empty());
      CHECK(none.separate == 0);  // nothing counted, as under separate
    }
    for (const ConvBnStatsPair& pr : ch.fuse) {
      const Node& conv = c.graph.programs[pr.program].nodes[pr.conv];
      INFO(conv.name);
      CHECK(conv.op == OpKind::Conv2d);
      CHECK(conv.out[0] == pr.y);
      CHECK((conv.name == "features_0") == (pr.route == ConvRoute::Fewc));
      CHECK((pr.route == ConvRoute::Fewc ? pr.g.c == 3 : pr.g.c % 8 == 0));
      CHECK(pr.g.groups == 1);
      if (c.spec.train.conv_bn_stats == ConvBnStats::Auto) CHECK(pr.g.p * pr.g.q >= kConvBnStatsAutoMinPixels);
      bool feeds_bn = false;  // a training batch norm of the same program reads y
      for (const Node& n : c.graph.programs[pr.program].nodes) feeds_bn |= n.op == OpKind::BatchNorm && n.in[0] == pr.y;
      CHECK(feeds_bn);
    }
  }
}

// configs/vgg16bn.yaml with train.deterministic left true: the defaults, auto and auto, fuse no statistics and no
// cuDNN graph (d) -- the backward pairs only features_3's data gradient on wgconv (the config's conv_wgconv bwd; its
// epilogue is deterministic: wgconv_bn_backward_pairs) with features_1, the other twelve counted separate; with
// conv_wgconv wgrad, or fp32 under train.deterministic: false, nothing pairs and nothing is counted.
TEST_CASE("with train.deterministic: true, or fp32, the default auto modes choose no cuDNN pairs", "[conv_bn_stats]") {
  const std::vector<std::string> small = {"data.synthetic.train_size=512", "data.synthetic.val_size=256"};
  std::vector<std::string> f32 = small, wgrad = small;
  f32.insert(f32.end(), {"train.deterministic=false", "train.precision=fp32"});
  wgrad.push_back("train.conv_wgconv=wgrad");
  const std::vector<std::vector<std::string>> runs = {small, wgrad, f32};
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::vector<std::string>& o = runs[i];
    INFO(o.back());
    const Compiled c = compile_amp(testing::config_spec("vgg16bn.yaml", o));
    CHECK(c.spec.train.conv_bn_stats == ConvBnStats::Auto);
    CHECK(c.spec.train.conv_bn_backward == ConvBnBackward::Auto);
    const ConvBnStatsChoice stats = conv_bn_stats_choose(c.graph, c.spec);
    CHECK(stats.fuse.empty());
    CHECK(stats.separate == 0);
    const ConvBnBwdChoice bwd = conv_bn_bwd_choose(c.graph, c.plan, c.spec, fewc_bn_grad_choose(c.graph, c.spec));
    if (i == 0) {  // the recipe as it is
      const int p = programs_with(c.graph, OpKind::BatchNormGrad);
      REQUIRE(p >= 1);
      CHECK(static_cast<int>(bwd.fuse.size()) == p);
      CHECK(bwd.separate == 12 * p);
      for (const ConvBnBwdPair& pr : bwd.fuse) {
        const Node& d = c.graph.programs[pr.program].nodes[pr.dgrad];
        INFO(d.name);
        CHECK(d.name.rfind("features_3.", 0) == 0);
        CHECK(pr.wgconv);
        CHECK(pr.fewc_dx);
      }
    } else {
      CHECK(bwd.fuse.empty());
      CHECK(bwd.separate == 0);
    }
  }
}

TEST_CASE("conv_bn_stats_choose leaves a biased, a 1x1, a grouped conv and a conv without batch norm separate; "
          "the RGB stem through the few-channel kernel",
          "[conv_bn_stats]") {
  const char* yaml = R"(
seed: 1
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 64, width: 64, channels: 3, classes: 10}
  batch_size: 16
model:
  layers:
    - {type: conv2d, name: stem, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn_stem}
    - {type: relu, name: r0}
    - {type: conv2d, name: plain, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn_plain}
    - {type: relu, name: r1}
    - {type: conv2d, name: biased, out_channels: 16, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: bn_biased}
    - {type: relu, name: r2}
    - {type: conv2d, name: pointwise, out_channels: 32, kernel_size: 1, bias: false}
    - {type: batch_norm, name: bn_pointwise}
    - {type: relu, name: r3}
    - {type: conv2d, name: grouped, out_channels: 32, kernel_size: 3, padding: 1, groups: 4, bias: false}
    - {type: batch_norm, name: bn_grouped}
    - {type: relu, name: r4}
    - {type: conv2d, name: no_bn, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: relu, name: r5}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 1, precision: fp16, deterministic: false, conv_bn_stats: fused}
run: {progress: off}
)";
  Result<Spec> s = spec_parse(yaml, "conv_bn_stats.yaml");
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  for (bool fewc : {true, false})
    for (bool fold : {true, false}) {
      INFO((fold ? "conv biases folded into the batch norms" : "unfolded: the biased conv keeps its bias input"));
      INFO((fewc ? "conv_fewc on: the stem's forward is the few-channel kernel" : "conv_fewc off"));
      Spec spec = s.value();
      if (!fewc) spec.train.conv_fewc = ConvFewc::Off;
      const Compiled c = compile_amp(spec, fold);
      const int p = programs_with(c.graph, OpKind::BatchNorm);
      const ConvBnStatsChoice ch = conv_bn_stats_choose(c.graph, c.spec);
      std::vector<std::string> names;
      for (const ConvBnStatsPair& pr : ch.fuse) {
        names.push_back(c.graph.programs[pr.program].nodes[pr.conv].name);
        CHECK((pr.route == ConvRoute::Fewc) == (names.back() == "stem"));
      }
      // Folded, the biased conv has no bias input any more (its bias went into the batch norm's prebias): fused.
      const int fused_per_program = (fold ? 2 : 1) + (fewc ? 1 : 0);
      CHECK(static_cast<int>(ch.fuse.size()) == fused_per_program * p);
      CHECK(ch.separate == (5 - fused_per_program) * p);  // pointwise, grouped (+ stem, biased when not fused)
      for (const std::string& n : names) {
        INFO(n);
        CHECK((n == "plain" || (fold && n == "biased") || (fewc && n == "stem")));
      }
    }
}

// VGG16-BN's batch norms whose output only the next conv reads: features_1 -> conv features_3 (224x224), 8 -> 10
// (112), 15 -> 17, 18 -> 20 (56), then 25 -> 27, 28 -> 30 (28), 35 -> 37, 38 -> 40 (14); the others feed a max pool.
// Under auto the first six consumers (down to 28²) are fused pairs themselves. The recipe's train.conv_wgconv: wgrad
// runs features_3's weight gradient on the ring kernel, which takes no prologue: features_1 -> 3 is then no fold.
TEST_CASE("conv_bn_apply_choose on VGG16-BN: the batch norms whose output only a fused pair's conv reads",
          "[conv_bn_stats]") {
  struct Want {
    std::vector<std::string> overrides;
    int folds;  // per program with a training batch norm
  };
  const Want cases[] = {
      {{"train.conv_wgconv=off", "train.conv_bn_stats=auto", "train.conv_bn_apply=prologue"}, 6},
      {{"train.conv_wgconv=off", "train.conv_bn_stats=fused", "train.conv_bn_apply=prologue"}, 8},
      {{"train.conv_wgconv=off", "train.conv_bn_stats=fused"}, 0},  // conv_bn_apply: separate
      {{"train.conv_bn_stats=auto", "train.conv_bn_apply=prologue"}, 5},  // the recipe's conv_wgconv: wgrad
      {{"train.conv_bn_stats=fused", "train.conv_bn_apply=prologue"}, 7},
  };
  for (const Want& w : cases) {
    std::string tag;
    for (const std::string& o : w.overrides) tag += o + " ";
    INFO(tag);
    std::vector<std::string> o = w.overrides;
    o.push_back("train.precision=fp16");
    const Compiled c = compile_amp(vgg(o));
    const int p = programs_with(c.graph, OpKind::BatchNorm);
    const ConvBnStatsChoice stats = conv_bn_stats_choose(c.graph, c.spec);
    const std::vector<ConvBnApplyFold> folds = conv_bn_apply_choose(c.graph, c.spec, stats);
    CHECK(static_cast<int>(folds.size()) == w.folds * p);
    for (const ConvBnApplyFold& f : folds) {
      const Program& prog = c.graph.programs[f.program];
      const Node &bn = prog.nodes[f.bn], &conv = prog.nodes[f.conv];
      INFO(bn.name << " -> " << conv.name);
      CHECK(bn.op == OpKind::BatchNorm);
      CHECK(bn.attrs.relu);
      CHECK_FALSE(bn.attrs.pool);
      CHECK(conv.op == OpKind::Conv2d);
      CHECK(conv.in[0] == f.y);
      CHECK(bn.in[0] == f.x);
      CHECK(f.wgrads.size() == (prog.kind == ProgramKind::Train ? 1u : 0u));  // the consumer's weight gradient
      for (size_t wg : f.wgrads) {
        CHECK(prog.nodes[wg].op == OpKind::Conv2dGradWeight);
        CHECK(prog.nodes[wg].in[1] == f.y);
      }
    }
  }
}

// A frozen prefix (model.freeze: features_0 and its batch norm): features_1 gets no backward, so its input x is
// dead after it in the memory plan while features_3's weight gradient still reads y: not folded (it would read x
// after its memory was reused). The other five of auto's folds stay. bf16 (which the spec refuses with prologue):
// none (cuDNN's prologue wgrad is f16).
TEST_CASE("conv_bn_apply_choose folds only batch norms whose backward keeps x alive, and only under fp16",
          "[conv_bn_stats]") {
  const std::vector<std::string> base = {"train.conv_bn_stats=auto", "train.conv_bn_apply=prologue"};
  std::vector<std::string> frozen = base;
  frozen.push_back("train.precision=fp16");
  frozen.push_back("model.freeze=[features_0, features_1]");
  const Compiled c = compile_amp(vgg(frozen));
  const int p = programs_with(c.graph, OpKind::BatchNorm);
  const std::vector<ConvBnApplyFold> folds =
      conv_bn_apply_choose(c.graph, c.spec, conv_bn_stats_choose(c.graph, c.spec));
  CHECK(static_cast<int>(folds.size()) == 5 * p);
  for (const ConvBnApplyFold& f : folds) CHECK(c.graph.programs[f.program].nodes[f.bn].name != "features_1");
  Spec bf16 = c.spec;
  bf16.train.precision = Precision::Bf16;
  CHECK(conv_bn_apply_choose(c.graph, bf16, conv_bn_stats_choose(c.graph, bf16)).empty());
}

// train.conv_bn_backward: fused on VGG16-BN: the non-pool batch norms + ReLU (features_1, 8, 15, 18, 25, 28, 35, 38)
// whose dY the next conv's data gradient writes right before them; with conv_fewc on, features_1's dx goes to the
// few-channel weight gradient (fewc_bn_grad_choose), which then reads the data gradient's masked g (fewc_dx). The
// five pooled ones are separate.
TEST_CASE("conv_bn_bwd_choose on VGG16-BN: the data gradients before the non-pool batch norms' backward",
          "[conv_bn_stats]") {
  struct Want {
    std::vector<std::string> overrides;
    int fused, separate;  // per program with a batch-norm backward
    bool fewc_dx;         // features_1's pair has its dx computed by the few-channel weight gradient
  };
  const Want cases[] = {
      {{"train.conv_bn_backward=fused", "train.precision=fp16"}, 8, 5, true},
      {{"train.conv_bn_backward=fused", "train.precision=fp16", "train.conv_fewc=off"}, 8, 5, false},
      {{"train.conv_bn_backward=fused", "train.precision=fp16", "train.conv_fewc=unfolded"}, 8, 5, false},
      {{"train.conv_bn_backward=separate", "train.precision=fp16"}, 0, 0, false},
      {{"train.conv_bn_backward=auto", "train.precision=fp16"}, 8, 5, true},
      {{"train.precision=fp16"}, 8, 5, true},  // the default: auto, fused here
      // auto under bf16: graph (d) takes f16 only, but features_3's data gradient on wgconv (the config's
      // conv_wgconv bwd) pairs through the ring px kernel's epilogue (wgconv_bn_backward_pairs); without wgconv
      // nothing pairs and nothing is counted
      {{"train.precision=bf16"}, 1, 12, true},
      {{"train.precision=bf16", "train.conv_wgconv=wgrad"}, 0, 0, false},
  };
  for (const Want& w : cases) {
    std::string tag;
    for (const std::string& o : w.overrides) tag += o + " ";
    INFO(tag);
    const Compiled c = compile_amp(vgg(w.overrides));
    const int p = programs_with(c.graph, OpKind::BatchNormGrad);
    REQUIRE(p >= 1);
    const std::vector<FewcBnGradFold> fewc = fewc_bn_grad_choose(c.graph, c.spec);
    const ConvBnBwdChoice ch = conv_bn_bwd_choose(c.graph, c.plan, c.spec, fewc);
    CHECK(static_cast<int>(ch.fuse.size()) == w.fused * p);
    CHECK(ch.separate == w.separate * p);
    int fewc_dx = 0;
    for (const ConvBnBwdPair& pr : ch.fuse) {
      const Program& prog = c.graph.programs[pr.program];
      const Node &d = prog.nodes[pr.dgrad], &bn = prog.nodes[pr.bn_grad];
      INFO(d.name << " -> " << bn.name);
      const bool first = d.name.rfind("features_3.", 0) == 0;  // features_3's data gradient -> features_1's backward
      CHECK(pr.fewc_dx == (w.fewc_dx && first));
      if (pr.fewc_dx) {  // the fold's g is the pair's masked g; its weight gradient the next node
        ++fewc_dx;
        bool in_fewc = false;
        for (const FewcBnGradFold& f : fewc)
          in_fewc |= f.program == pr.program && f.bn_grad == pr.bn_grad && f.g == d.out[0] && f.wgrad == pr.bn_grad + 1;
        CHECK(in_fewc);
      }
      CHECK(d.op == OpKind::Conv2dGradInput);
      CHECK(bn.op == OpKind::BatchNormGrad);
      CHECK(pr.bn_grad == pr.dgrad + 1);
      CHECK(bn.in[0] == d.out[0]);
      CHECK((bn.attrs.relu && !bn.attrs.pool && !bn.attrs.residual));
      CHECK(pr.g.c == c.graph.values[d.out[0]].shape.dims.back());
      CHECK(pr.beta != kNoValue);
    }
    CHECK(fewc_dx == (w.fewc_dx ? p : 0));
  }
}

// ResNet-50: each bottleneck's first batch norm (its dY from conv2's 3x3 data gradient); the second's dY comes
// from conv3's 1x1 (a cuBLASLt GEMM), the third has the residual, the stem's the fused max pool: separate.
TEST_CASE("conv_bn_bwd_choose on ResNet-50: the first batch norm of each bottleneck", "[conv_bn_stats]") {
  const Compiled c = compile_amp(testing::config_spec(
      "resnet50.yaml", {"data.synthetic.train_size=512", "data.synthetic.val_size=256", "train.deterministic=false",
                        "train.precision=fp16", "train.conv_bn_backward=fused"}));
  const ConvBnBwdChoice ch = conv_bn_bwd_choose(c.graph, c.plan, c.spec, fewc_bn_grad_choose(c.graph, c.spec));
  const int p = programs_with(c.graph, OpKind::BatchNormGrad);
  CHECK(static_cast<int>(ch.fuse.size()) == 16 * p);
  for (const ConvBnBwdPair& pr : ch.fuse) {
    const Node& d = c.graph.programs[pr.program].nodes[pr.dgrad];
    INFO(d.name);
    CHECK(d.name.find("conv2.grad_input") != std::string::npos);
  }
}

// train.conv_wgconv: dgrad takes layer1's three 3x3 data gradients (64 output channels, 56x56) to wgconv: graph (d)
// cannot serve them (no cuDNN data gradient; RESULTS.md run 61: 16 -> 13 graph (d) pairs) and the ring px kernel's
// batch-norm backward epilogue does (the pair's wgconv): 16 pairs, layer1's three on wgconv.
TEST_CASE("conv_bn_bwd_choose on ResNet-50 with conv_wgconv dgrad pairs the data gradients wgconv runs with its "
          "epilogue",
          "[conv_bn_stats][wgconv]") {
  const Compiled c = compile_amp(testing::config_spec(
      "resnet50.yaml", {"data.synthetic.train_size=512", "data.synthetic.val_size=256", "train.deterministic=false",
                        "train.precision=fp16", "train.conv_bn_backward=fused", "train.conv_wgconv=dgrad"}));
  const ConvBnBwdChoice ch = conv_bn_bwd_choose(c.graph, c.plan, c.spec, fewc_bn_grad_choose(c.graph, c.spec));
  const int p = programs_with(c.graph, OpKind::BatchNormGrad);
  CHECK(static_cast<int>(ch.fuse.size()) == 16 * p);
  int wg = 0;
  for (const ConvBnBwdPair& pr : ch.fuse) {
    const Node& d = c.graph.programs[pr.program].nodes[pr.dgrad];
    INFO(d.name);
    CHECK(d.name.find("conv2.grad_input") != std::string::npos);
    CHECK(pr.wgconv == (d.name.find("layer1") != std::string::npos));
    CHECK_FALSE(pr.fewc_dx);
    wg += pr.wgconv ? 1 : 0;
  }
  CHECK(wg == 3 * p);
}

// conv_wgconv bwd on VGG16-BN: conv1_2's data gradient (features_3) on wgconv pairs with features_1's backward through
// the epilogue, whose dx the few-channel weight gradient computes (wgconv and fewc_dx); the other 7 pairs graph (d).
TEST_CASE("conv_bn_bwd_choose on VGG16-BN with conv_wgconv bwd: features_3's data gradient on wgconv, features_1's dx "
          "in the few-channel weight gradient",
          "[conv_bn_stats][wgconv]") {
  const Compiled c =
      compile_amp(vgg({"train.conv_bn_backward=fused", "train.precision=fp16", "train.conv_wgconv=bwd"}));
  const std::vector<FewcBnGradFold> fewc = fewc_bn_grad_choose(c.graph, c.spec);
  const ConvBnBwdChoice ch = conv_bn_bwd_choose(c.graph, c.plan, c.spec, fewc);
  const int p = programs_with(c.graph, OpKind::BatchNormGrad);
  REQUIRE(p >= 1);
  CHECK(static_cast<int>(ch.fuse.size()) == 8 * p);
  CHECK(ch.separate == 5 * p);
  int wg = 0;
  for (const ConvBnBwdPair& pr : ch.fuse) {
    const Node& d = c.graph.programs[pr.program].nodes[pr.dgrad];
    INFO(d.name);
    const bool f3 = d.name.rfind("features_3.", 0) == 0;
    CHECK(pr.wgconv == f3);
    CHECK(pr.fewc_dx == f3);
    wg += pr.wgconv ? 1 : 0;
  }
  CHECK(wg == p);
}

TEST_CASE("train.conv_wgconv fwd: VGG16-BN's conv1_2 routes to wgconv with its statistics pair, and features_1's apply "
          "folds into it; ResNet-50 folds layer1's three bn1",
          "[conv_bn_stats][wgconv]") {
  for (bool det : {false, true}) {  // the fold does not need the statistics fusion (deterministic: none)
    INFO("deterministic " << det);
    std::vector<std::string> o = {"data.synthetic.train_size=512", "data.synthetic.val_size=256",
                                  "train.precision=fp16", "train.conv_wgconv=fwd"};
    o.push_back(det ? "train.deterministic=true" : "train.deterministic=false");
    const Compiled c = compile_amp(testing::config_spec("vgg16bn.yaml", o));
    const int p = programs_with(c.graph, OpKind::BatchNorm);
    REQUIRE(p >= 1);
    const ConvBnStatsChoice stats = conv_bn_stats_choose(c.graph, c.spec);
    int wg_pairs = 0;
    for (const ConvBnStatsPair& pr : stats.fuse)
      if (pr.route == ConvRoute::Wgconv) {
        ++wg_pairs;
        CHECK(c.graph.programs[pr.program].nodes[pr.conv].name == "features_3");
      }
    CHECK(wg_pairs == (det ? 0 : p));  // the statistics pair needs conv_bn_stats in effect
    const std::vector<ConvBnApplyFold> folds = wgconv_bn_apply_choose(c.graph, c.spec);
    CHECK(static_cast<int>(folds.size()) == p);
    for (const ConvBnApplyFold& f : folds) {
      const Program& prog = c.graph.programs[f.program];
      const Node &bn = prog.nodes[f.bn], &conv = prog.nodes[f.conv];
      CHECK(bn.name == "features_1+features_2");
      CHECK(conv.name == "features_3");
      CHECK((bn.in[0] == f.x && bn.out[0] == f.y && conv.in[0] == f.y));
      CHECK(f.wgrads.empty());
    }
    Spec off = c.spec;
    off.train.conv_wgconv = ConvWgconv::Dgrad;
    CHECK(wgconv_bn_apply_choose(c.graph, off).empty());
    // train.conv_wgconv: all -- features_3's weight gradient runs on the ring kernel too, and y's only other reader:
    // it applies the batch norm to x itself and y is never written.
    Spec all = c.spec;
    all.train.conv_wgconv = ConvWgconv::All;
    const std::vector<ConvBnApplyFold> all_folds = wgconv_bn_apply_choose(c.graph, all);
    CHECK(static_cast<int>(all_folds.size()) == p);
    for (const ConvBnApplyFold& f : all_folds) {
      REQUIRE(f.wgrads.size() == 1);
      const Node& wg = c.graph.programs[f.program].nodes[f.wgrads.front()];
      CHECK(wg.op == OpKind::Conv2dGradWeight);
      CHECK(wg.name == "features_3.grad_weight");
      CHECK(wg.in[1] == f.y);
    }
  }
  const Compiled r = compile_amp(testing::config_spec(
      "resnet50.yaml", {"data.synthetic.train_size=512", "data.synthetic.val_size=256", "train.precision=fp16",
                        "train.conv_wgconv=both"}));
  const std::vector<ConvBnApplyFold> folds = wgconv_bn_apply_choose(r.graph, r.spec);
  CHECK(static_cast<int>(folds.size()) == 3 * programs_with(r.graph, OpKind::BatchNorm));
  for (const ConvBnApplyFold& f : folds) {
    const Node& conv = r.graph.programs[f.program].nodes[f.conv];
    INFO(conv.name);
    CHECK(conv.name.find("layer1") != std::string::npos);
    CHECK(conv.name.find("conv2") != std::string::npos);
  }
}

// A frozen batch norm (model.freeze: its gamma and beta): autodiff still writes dgamma and dbeta, as unused fp32
// activations defined at the batch norm's backward; graph (d) would write them one node early, into storage the
// plan may have given the data gradient's input. Such a pair stays separate unless memplan_early_write_safe says
// the early write is safe; the trainable ones are unaffected.
TEST_CASE("conv_bn_bwd_choose keeps a frozen batch norm's backward separate when its early write is unsafe",
          "[conv_bn_stats]") {
  const Compiled c = compile_amp(vgg({"train.conv_bn_backward=fused", "train.precision=fp16",
                                       "model.freeze=[features_8, features_15]"}));
  const ConvBnBwdChoice ch = conv_bn_bwd_choose(c.graph, c.plan, c.spec, fewc_bn_grad_choose(c.graph, c.spec));
  int frozen = 0, safe = 0;
  for (const Program& prog : c.graph.programs)
    for (size_t bi = 0; bi < prog.nodes.size(); ++bi) {
      const Node& bn = prog.nodes[bi];
      if (bn.op != OpKind::BatchNormGrad) continue;
      if (c.plan.values[bn.out[1]].region == Region::Grads) continue;
      ++frozen;
      const int pi = static_cast<int>(&prog - c.graph.programs.data());
      const bool ok = memplan_early_write_safe(c.graph, c.plan, pi, bn.out[1], static_cast<int64_t>(bi) - 1) &&
                      memplan_early_write_safe(c.graph, c.plan, pi, bn.out[2], static_cast<int64_t>(bi) - 1);
      safe += ok;
      bool fused = false;
      for (const ConvBnBwdPair& pr : ch.fuse) fused |= pr.program == pi && pr.bn_grad == bi;
      INFO(bn.name);
      CHECK(fused == ok);
    }
  CHECK(frozen >= 2);  // features_8 and features_15 in each program with a backward
  for (const ConvBnBwdPair& pr : ch.fuse) {
    const Node& bn = c.graph.programs[pr.program].nodes[pr.bn_grad];
    if (c.plan.values[bn.out[1]].region == Region::Grads) continue;
    INFO(bn.name << ": frozen, fused because its early write is safe");
    CHECK(memplan_early_write_safe(c.graph, c.plan, pr.program, bn.out[1], static_cast<int64_t>(pr.dgrad)));
  }
  UNSCOPED_INFO("frozen batch-norm backwards whose early write is safe: " << safe << " of " << frozen);
}
