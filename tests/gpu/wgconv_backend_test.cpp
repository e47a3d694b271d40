// train.conv_wgconv on the CUDA backend (CudaBackend::lower_wgconv_conv_node). dgrad: the data gradient of a
// 64 -> 64 3x3/1 conv runs trctl's wgmma ring kernel on flipped filters instead of cuDNN -- counted in
// conv_algo_sources() (run.json's conv_algorithms.wgconv_dgrad) per backward program, none with the default off or
// under fp32; from the same weights and batch, one step's loss bitwise equal to off's (the forward is the same),
// the conv's own weight gradient bitwise equal (it does not read dX), the gradients upstream of dX (the first batch
// norm's, the stem's) within 1e-2 norm-wise (a wrong flip or transpose is off by O(1); run 61 on an H100 found them
// bitwise equal to cuDNN's: its data-gradient kernel sums the taps and channel steps in the same order), and two
// backends of one seed bitwise equal. That the route is taken is what the count says; `[wgconv]` checks the kernel's
// data gradient against float64.
// The net: VGG16-BN's first two layers in small (an RGB stem to 64 channels, batch norm + ReLU, a 64 -> 64 conv).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tests/gpu/backend_step_util.h"
#include "tests/support/weights_diff.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

const char* kYaml = R"(
seed: 13
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 20, width: 24, channels: 3, classes: 10}
  batch_size: 16
  val_batch_size: 16
model:
  layers:
    - {type: conv2d, name: stem, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn0}
    - {type: relu, name: relu0}
    - {type: conv2d, name: conv1, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: relu1}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 2, precision: fp16, device: cuda}
run: {progress: off}
)";

Spec spec_of(const std::vector<std::string>& overrides) {
  return parsed_spec(kYaml, "wgconv_backend.yaml", overrides);
}

}  // namespace

TEST_CASE("train.conv_wgconv dgrad runs the 64-channel data gradient on wgconv: counted, repeatable, and the same "
          "gradients as cuDNN's (fp16 AMP)",
          "[gpu][backend][cnn][wgconv]") {
  const BuiltBackend wg = build_backend(spec_of({"train.conv_wgconv=dgrad"})),
                     wg2 = build_backend(spec_of({"train.conv_wgconv=dgrad"})),
                     off = build_backend(spec_of({}));
  const int backward = backward_programs(*wg.c);
  REQUIRE(backward >= 1);
  CHECK(wg.be->conv_algo_sources()->wgconv_dgrad == backward);  // conv1's dgrad; the stem's dX is never computed
  CHECK(off.be->conv_algo_sources()->wgconv_dgrad == 0);
  // deterministic: true (the default), conv_bn_backward auto: bn0's reductions in the data gradient's epilogue
  CHECK(wg.be->conv_algo_sources()->bn_bwd_mode == "wgconv");
  CHECK(wg.be->conv_algo_sources()->bn_bwd_fused == backward);
  CHECK(off.be->conv_algo_sources()->bn_bwd_mode == "separate");
  const int64_t sample = 20 * 24 * 3;
  const double lw = one_train_step(wg, sample), lw2 = one_train_step(wg2, sample), lo = one_train_step(off, sample);
  CHECK(lw == lw2);
  CHECK(lw == lo);  // the same forward
  const std::vector<float> gw = floats_of(wg.be->read_region(Region::Grads)),
                           gw2 = floats_of(wg2.be->read_region(Region::Grads)),
                           go = floats_of(off.be->read_region(Region::Grads));
  CHECK(gw == gw2);  // one seed: bitwise
  CHECK(value_slice(*wg.c, gw, "conv1.weight.grad") == value_slice(*off.c, go, "conv1.weight.grad"));
  for (const char* name : {"stem.weight.grad", "bn0.weight.grad", "bn0.bias.grad"}) {
    const double r = testing::rel_diff(value_slice(*wg.c, gw, name), value_slice(*off.c, go, name));
    INFO(name << ": relative difference " << r << " to cuDNN's data gradient");
    CHECK(r < 1e-2);
  }
}

TEST_CASE("train.conv_wgconv dgrad does nothing under fp32 (the kernel takes f16 or bf16)", "[gpu][backend][wgconv]") {
  const BuiltBackend b = build_backend(spec_of({"train.conv_wgconv=dgrad", "train.precision=fp32"}));
  CHECK(b.be->conv_algo_sources()->wgconv_dgrad == 0);
}

// train.conv_wgconv: fwd -- conv1's forward on the ring px kernel, bn0's apply + ReLU folded into its prologue
// (bn0 computes its statistics alone; the conv writes bn0's output for the weight gradient) and, with the statistics
// fusion in effect (deterministic false), bn1's sums from the conv's epilogue. Against off: the loss within fp16
// rounding (the conv sums in another order), every gradient within 1e-2 norm-wise (a wrong prologue, a missing
// activation write or wrong sums are off by O(1)); two backends of one seed bitwise equal; counted per program.
// (conv_bn_backward separate: since bn0's backward may pair with conv1's cuDNN data gradient (graph (d), not bitwise
// repeatable) under deterministic false, the bitwise check would test cuDNN.)
TEST_CASE("train.conv_wgconv fwd: the 64-channel forward on wgconv, the batch norm in its prologue; counted, "
          "repeatable, cuDNN's gradients",
          "[gpu][backend][cnn][wgconv]") {
  for (const char* det : {"train.deterministic=true", "train.deterministic=false"}) {
    INFO(det);
    const char* sep = "train.conv_bn_backward=separate";
    const BuiltBackend wg = build_backend(spec_of({"train.conv_wgconv=fwd", det, sep})),
                       wg2 = build_backend(spec_of({"train.conv_wgconv=fwd", det, sep})),
                       off = build_backend(spec_of({det, sep}));
    const int backward = backward_programs(*wg.c);
    REQUIRE(backward >= 1);
    const ConvAlgoSources* src = wg.be->conv_algo_sources();
    CHECK(src->wgconv_fwd >= backward);  // conv1 of every program that runs it (training and eval)
    CHECK(src->wgconv_bn_folded == backward);
    CHECK(src->wgconv_dgrad == 0);
    CHECK(off.be->conv_algo_sources()->wgconv_fwd == 0);
    const int64_t sample = 20 * 24 * 3;
    const double lw = one_train_step(wg, sample), lw2 = one_train_step(wg2, sample), lo = one_train_step(off, sample);
    CHECK(lw == lw2);
    CHECK(std::abs(lw - lo) <= 1e-3 * std::abs(lo));
    const std::vector<float> gw = floats_of(wg.be->read_region(Region::Grads)),
                             gw2 = floats_of(wg2.be->read_region(Region::Grads)),
                             go = floats_of(off.be->read_region(Region::Grads));
    CHECK(gw == gw2);  // one seed: bitwise
    for (const char* name : {"conv1.weight.grad", "bn1.weight.grad", "bn1.bias.grad", "stem.weight.grad",
                             "bn0.weight.grad", "bn0.bias.grad", "fc.weight.grad"}) {
      const double r = testing::rel_diff(value_slice(*wg.c, gw, name), value_slice(*off.c, go, name));
      INFO(name << ": relative difference " << r << " to cuDNN's forward and the apply pass");
      CHECK(r < 1e-2);
    }
  }
}

// train.conv_wgconv: wgrad -- conv1's weight gradient on the ring weight-gradient kernel (dW straight in f32), the
// rest as off. Against off: the loss bitwise (the forward is the same), every gradient but conv1's bitwise (nothing
// else reads dW before the step's end), conv1's within 1e-2 norm-wise (cuDNN rounds its dW to f16 first; a wrong tap,
// transpose or window is off by O(1)); two backends of one seed bitwise equal; counted per backward program; and
// under all (fwd + dgrad + wgrad) every gradient within 1e-2 of off's.
TEST_CASE("train.conv_wgconv wgrad runs the 64-channel weight gradient on wgconv: counted, repeatable, the same "
          "gradient as cuDNN's (fp16 AMP)",
          "[gpu][backend][cnn][wgconv]") {
  const BuiltBackend wg = build_backend(spec_of({"train.conv_wgconv=wgrad"})),
                     wg2 = build_backend(spec_of({"train.conv_wgconv=wgrad"})),
                     off = build_backend(spec_of({}));
  const int backward = backward_programs(*wg.c);
  REQUIRE(backward >= 1);
  CHECK(wg.be->conv_algo_sources()->wgconv_wgrad == backward);  // conv1's; the stem's (C = 3) stays on fewc
  CHECK(wg.be->conv_algo_sources()->wgconv_dgrad == 0);
  CHECK(off.be->conv_algo_sources()->wgconv_wgrad == 0);
  const int64_t sample = 20 * 24 * 3;
  const double lw = one_train_step(wg, sample), lw2 = one_train_step(wg2, sample), lo = one_train_step(off, sample);
  CHECK(lw == lw2);
  CHECK(lw == lo);
  const std::vector<float> gw = floats_of(wg.be->read_region(Region::Grads)),
                           gw2 = floats_of(wg2.be->read_region(Region::Grads)),
                           go = floats_of(off.be->read_region(Region::Grads));
  CHECK(gw == gw2);  // one seed: bitwise
  for (const char* name : {"stem.weight.grad", "bn0.weight.grad", "bn1.weight.grad", "fc.weight.grad"})
    CHECK(value_slice(*wg.c, gw, name) == value_slice(*off.c, go, name));
  const double r = testing::rel_diff(value_slice(*wg.c, gw, "conv1.weight.grad"),
                                     value_slice(*off.c, go, "conv1.weight.grad"));
  INFO("conv1.weight.grad: relative difference " << r << " to cuDNN's weight gradient");
  CHECK(r < 1e-2);

  const BuiltBackend all = build_backend(spec_of({"train.conv_wgconv=all"}));
  const ConvAlgoSources* src = all.be->conv_algo_sources();
  CHECK(src->wgconv_wgrad == backward);
  CHECK(src->wgconv_dgrad == backward);
  CHECK(src->wgconv_fwd >= backward);
  // bn0's apply folded into conv1's forward and, conv1's weight gradient being y's only other reader, into that
  // weight gradient too (its ring kernel's batch-norm prologue): bn0's output is never written.
  CHECK(src->wgconv_bn_folded == backward);
  CHECK(src->wgconv_bn_unwritten == backward);
  const double la = one_train_step(all, sample);
  CHECK(std::abs(la - lo) <= 1e-3 * std::abs(lo));
  const std::vector<float> ga = floats_of(all.be->read_region(Region::Grads));
  for (const char* name : {"conv1.weight.grad", "bn1.weight.grad", "stem.weight.grad", "bn0.weight.grad",
                           "fc.weight.grad"}) {
    const double ra = testing::rel_diff(value_slice(*all.c, ga, name), value_slice(*off.c, go, name));
    INFO(name << " (all): relative difference " << ra);
    CHECK(ra < 1e-2);
  }
}

namespace {

// train.conv_wgconv bwd (data and weight gradients on wgconv) with bn0's backward paired: conv1's data gradient takes
// bn0's backward reductions in the ring px kernel's epilogue (its masked g, dgamma, dbeta; no cuDNN graph (d)), and
// bn0's dx comes from the stem's few-channel weight gradient, whose prologue applies no mask of its own; bn0's
// backward node runs nothing. Against the separate backward (bn0's reductions in its own first pass, the prologue
// masking g itself), from the same weights and batch: the same loss; conv1's and everything downstream of g
// untouched, bitwise; bn0's and the stem's gradients within `bound` (the same masks and dx arithmetic; only the
// reductions' summation order differs: a dropped or doubled mask or a wrong sum is off by O(1)); two backends of one
// seed bitwise equal, or within 1e-6 under deterministic: false (cuDNN's choices there aside); counted per program
// with the mode `mode`. `paired`: the override that pairs (conv_bn_backward fused or auto).
void check_bwd_pairing(const std::vector<std::string>& base, const char* paired, const std::string& mode,
                       double bound, bool bitwise) {
  auto with = [&](const char* o) {
    std::vector<std::string> v = base;
    v.push_back(o);
    return build_backend(spec_of(v));
  };
  const BuiltBackend fu = with(paired), fu2 = with(paired), sep = with("train.conv_bn_backward=separate");
  const int backward = backward_programs(*fu.c);
  REQUIRE(backward >= 1);
  const ConvAlgoSources* src = fu.be->conv_algo_sources();
  CHECK(src->wgconv_dgrad == backward);
  CHECK(src->wgconv_wgrad == backward);  // conv1's weight gradient (the stem's is the few-channel kernel's)
  CHECK(src->wgconv_fwd == 0);
  CHECK(src->bn_bwd_mode == mode);
  CHECK(src->bn_bwd_fused == backward);     // bn0, from conv1's wgconv data gradient
  CHECK(src->bn_bwd_separate == backward);  // bn1: its g comes from the pool
  CHECK(src->bn_bwd_fallback == 0);
  CHECK(src->bn_grad_folded == backward);
  CHECK(sep.be->conv_algo_sources()->bn_bwd_fused == 0);
  CHECK(sep.be->conv_algo_sources()->bn_bwd_mode == "separate");
  CHECK(sep.be->conv_algo_sources()->bn_grad_folded == backward);
  const int64_t sample = 20 * 24 * 3;
  const double lf = one_train_step(fu, sample), lf2 = one_train_step(fu2, sample), ls = one_train_step(sep, sample);
  CHECK(lf == ls);
  CHECK(lf == lf2);
  const std::vector<float> gf = floats_of(fu.be->read_region(Region::Grads)),
                           gf2 = floats_of(fu2.be->read_region(Region::Grads)),
                           gs = floats_of(sep.be->read_region(Region::Grads));
  if (bitwise)
    CHECK(gf == gf2);
  else
    CHECK(testing::rel_diff(gf, gf2) < 1e-6);
  for (const char* name : {"conv1.weight.grad", "bn1.weight.grad", "bn1.bias.grad", "fc.weight.grad"})
    CHECK(value_slice(*fu.c, gf, name) == value_slice(*sep.c, gs, name));
  for (const char* name : {"stem.weight.grad", "bn0.weight.grad", "bn0.bias.grad"}) {
    const double r = testing::rel_diff(value_slice(*fu.c, gf, name), value_slice(*sep.c, gs, name));
    INFO(name << ": relative difference " << r << " to the separate backward");
    CHECK(r < bound);
  }
}

}  // namespace

TEST_CASE("train.conv_wgconv bwd, conv_bn_backward fused: bn0's reductions in the wgconv data gradient's epilogue",
          "[gpu][backend][cnn][wgconv][fuseddgrad]") {
  check_bwd_pairing({"train.conv_wgconv=bwd", "train.deterministic=false", "train.conv_bn_stats=separate"},
                    "train.conv_bn_backward=fused", "fused", 1e-4, false);
}

// The same pairing under train.deterministic: true (conv_bn_backward auto), where cuDNN's graph (d) never runs but the
// ring px kernel's epilogue does (wgconv_bn_backward_pairs: it is deterministic), under fp16 and under bf16 (graph
// (d) takes f16 only): the mode reads "wgconv", two backends of one seed bitwise equal (bf16: bn0's and the stem's
// gradients within 1e-3 of the separate backward's -- the reductions' order differs as under fp16, and bf16's 8-bit
// dx may round a few elements the other way from that).
TEST_CASE("train.conv_wgconv bwd under deterministic: true: the epilogue pairs, bitwise repeatable",
          "[gpu][backend][cnn][wgconv][fuseddgrad]") {
  check_bwd_pairing({"train.conv_wgconv=bwd", "train.deterministic=true", "train.precision=fp16"},
                    "train.conv_bn_backward=auto", "wgconv", 1e-4, true);
  check_bwd_pairing({"train.conv_wgconv=bwd", "train.deterministic=true", "train.precision=bf16"},
                    "train.conv_bn_backward=auto", "wgconv", 1e-3, true);
}
