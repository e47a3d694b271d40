// train.conv_bn_backward: fused on the CUDA backend (CudaBackend::plan_conv_bn_bwd, runtime/cuda/cuda_lower_cnn.cpp):
// which batch-norm backwards take their reductions from the preceding data gradient's epilogue (cuDNN graph (d)), as
// conv_algo_sources() counts them (run.json's conv_algorithms.bn_backward), and, from the same weights and batch,
// one fused step's gradients against the separate path's (both with train.deterministic: false and the batch
// norms' statistics pass: conv_bn_stats separate).
// The net: an RGB stem (32 channels: the few-channel forward, a cuDNN weight gradient), bn0 + ReLU whose g conv1's
// data gradient writes (fused), bn1 + ReLU likewise from conv2's (fused), bn2 + ReLU whose g comes from the global
// pool's backward (separate).
// Tolerance: the fused graph's data gradient is another cuDNN engine (fp32 accumulation in another order, g rounded
// once to f16 either way), its mask is recomputed in fp32 (it may differ where bn(x) rounds to 0) and its reductions
// are fp32 sums: every gradient within 1e-2 relative (norm-wise) of the separate path's; a dropped mask or a wrong
// reduction is off by O(1).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/run_facts.h"
#include "tests/gpu/backend_step_util.h"
#include "tests/support/weights_diff.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

const char* kYaml = R"(
seed: 13
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 32, width: 32, channels: 3, classes: 10}
  batch_size: 16
  val_batch_size: 16
model:
  layers:
    - {type: conv2d, name: stem, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn0}
    - {type: relu, name: relu0}
    - {type: conv2d, name: conv1, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: relu1}
    - {type: conv2d, name: conv2, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn2}
    - {type: relu, name: relu2}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 1, precision: fp16, deterministic: false, conv_bn_stats: separate}
run: {progress: off}
)";

Spec spec_of(const std::vector<std::string>& overrides) {
  return parsed_spec(kYaml, "conv_bn_bwd.yaml", overrides);
}

}  // namespace

TEST_CASE("train.conv_bn_backward: fused takes two batch norms' reductions from the data gradients, counted, and "
          "one step's gradients match the separate path (fp16 AMP)",
          "[gpu][backend][cnn][conv_bn_stats][fuseddgrad]") {
  const BuiltBackend fused = build_backend(spec_of({"train.conv_bn_backward=fused"}));
  const BuiltBackend sep = build_backend(spec_of({"train.conv_bn_backward=separate"}));  // the default: auto
  const ConvAlgoSources* src = fused.be->conv_algo_sources();
  REQUIRE(src != nullptr);
  const int p = backward_programs(*fused.c);
  REQUIRE(p >= 1);
  INFO("fallback reason: " << src->bn_bwd_fallback_reason);
  CHECK(src->bn_bwd_mode == "fused");
  CHECK(src->bn_bwd_fallback == 0);  // cuDNN serves graph (d) for these stride-1 convs (the probe's question)
  CHECK(src->bn_bwd_fused == 2 * p);
  CHECK(src->bn_bwd_separate == 1 * p);
  CHECK(sep.be->conv_algo_sources()->bn_bwd_mode == "separate");
  const BuiltBackend by_default = build_backend(spec_of({}));  // auto: fused here (fp16, deterministic: false)
  CHECK(by_default.be->conv_algo_sources()->bn_bwd_mode == "fused");
  CHECK(by_default.be->conv_algo_sources()->bn_bwd_fused == src->bn_bwd_fused);
  RunFacts f;
  f.backend = "cuda";
  f.has_conv = true;
  f.conv = *src;
  CHECK_THAT(run_facts_json(f), Catch::Contains("\"bn_backward\": {\"mode\": \"fused\", \"fused\": 2"));
  const int64_t sample = 32 * 32 * 3;
  const double lf = one_train_step(fused, sample), ls = one_train_step(sep, sample);
  CHECK(lf == Approx(ls).epsilon(1e-5));  // the same forward (non-deterministic algorithms allowed on both)
  const std::vector<float> gf = floats_of(fused.be->read_region(Region::Grads)),
                           gs = floats_of(sep.be->read_region(Region::Grads));
  for (const char* name : {"stem.weight.grad", "conv1.weight.grad", "conv2.weight.grad", "bn0.weight.grad",
                           "bn0.bias.grad", "bn1.weight.grad", "bn1.bias.grad", "bn2.weight.grad", "fc.weight.grad"}) {
    const double r = testing::rel_diff(value_slice(*fused.c, gf, name), value_slice(*sep.c, gs, name));
    INFO(name << ": relative difference " << r << " to the separate path");
    CHECK(r < 1e-2);
  }
}
