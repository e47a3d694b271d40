// The batch-norm backward folded into the few-channel weight gradient on the CUDA backend (fewc_bn_grad_choose,
// CudaBackend: the batch norm runs its first two passes, the stem's weight gradient computes dx while staging it):
// counted in conv_algo_sources() (run.json's conv_algorithms.bn_grad_folded) under fp16 AMP with conv_fewc on and not
// with conv_fewc forward or unfolded (the same gradients up to summation order); from the same weights and batch, one
// step's loss bitwise equal to conv_fewc forward's (the forward is the same), the stem's weight gradient close to its
// (cuDNN's weight gradient over the materialized dx, rounded to f16 before its fp32 copy: ~2^-11 relative per element,
// so 1e-2 norm-wise; a wrong dx, e.g. an unmasked ReLU or a dropped channel constant, is off by O(1)), every other
// gradient within the same bound, and two backends of one seed bitwise equal.
// The net: a 64-channel 3x3/1 RGB stem (the few-channel forward and weight gradient) whose batch norm + ReLU feeds
// only the next conv, so its backward dx is read only by the stem's weight gradient: VGG16-BN's features_0/1 shape.
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
seed: 11
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 40, width: 48, channels: 3, classes: 10}
  batch_size: 16
  val_batch_size: 16
model:
  layers:
    - {type: conv2d, name: stem, out_channels: 64, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn0}
    - {type: relu, name: relu0}
    - {type: conv2d, name: conv1, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: relu1}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 2, precision: fp16, device: cuda}
run: {progress: off}
)";

Spec spec_of(const std::vector<std::string>& overrides) {
  return parsed_spec(kYaml, "fewc_bn_grad.yaml", overrides);
}

}  // namespace

TEST_CASE("the stem batch norm's backward folds into the few-channel weight gradient: counted, repeatable, and "
          "the same gradients as the unfolded path (fp16 AMP)",
          "[gpu][backend][cnn][fewc]") {
  const BuiltBackend on = build_backend(spec_of({"train.conv_fewc=on"})),
                     on2 = build_backend(spec_of({"train.conv_fewc=on"})),
                     fwd = build_backend(spec_of({"train.conv_fewc=forward"})),
                     unf = build_backend(spec_of({"train.conv_fewc=unfolded"}));
  const int backward = backward_programs(*on.c);
  REQUIRE(backward >= 1);
  CHECK(on.be->conv_algo_sources()->bn_grad_folded == backward);
  CHECK(fwd.be->conv_algo_sources()->bn_grad_folded == 0);
  CHECK(unf.be->conv_algo_sources()->bn_grad_folded == 0);
  const int64_t sample = 40 * 48 * 3;
  const double la = one_train_step(on, sample), la2 = one_train_step(on2, sample), lr = one_train_step(fwd, sample),
               lu = one_train_step(unf, sample);
  CHECK(la == la2);
  CHECK(la == lr);  // the same forward
  CHECK(la == lu);
  const std::vector<float> ga = floats_of(on.be->read_region(Region::Grads)),
                           ga2 = floats_of(on2.be->read_region(Region::Grads)),
                           gr = floats_of(fwd.be->read_region(Region::Grads)),
                           gu = floats_of(unf.be->read_region(Region::Grads));
  CHECK(ga == ga2);  // one seed: bitwise
  // unfolded: the batch norm stores dx (the fold computes it with the same element functions), the plain kernel
  // reads it; only the fp32 partial sums' grid may differ
  CHECK(testing::rel_diff(ga, gu) < 1e-5);
  for (const char* name : {"stem.weight.grad", "conv1.weight.grad", "bn0.weight.grad", "bn0.bias.grad"}) {
    const double r = testing::rel_diff(value_slice(*on.c, ga, name), value_slice(*fwd.c, gr, name));
    INFO(name << ": relative difference " << r << " to conv_fewc forward");
    CHECK(r < 1e-2);
  }
}

// With train.conv_bn_backward fused (train.deterministic: false), bn0's reductions come from conv1's data gradient
// (cuDNN graph (d): the masked g, dgamma, dbeta) and its dx still from the stem's weight gradient, whose prologue
// then applies no mask of its own (conv_bn_bwd_choose's fewc_dx): counted in both, bn0's backward node runs nothing.
// Against conv_fewc unfolded under the same fusion (graph (d), batchnorm_bwd_apply_cuda's dx, the plain kernel: the
// same element functions) every gradient within 1e-3 (graph (d) is not bitwise repeatable); against the separate
// batch-norm backward within 1e-2 (graph (d)'s own dgrad engine and fp32 reductions, its mask recomputed in fp32).
TEST_CASE("the stem batch norm's fold with conv_bn_backward fused: graph (d)'s masked g, unfolded's and separate's "
          "gradients",
          "[gpu][backend][cnn][fewc][fuseddgrad]") {
  const std::vector<std::string> nd = {"train.deterministic=false", "train.conv_bn_stats=separate"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.end(), nd.begin(), nd.end());
    return build_backend(spec_of(o));
  };
  const BuiltBackend on = with({"train.conv_fewc=on", "train.conv_bn_backward=fused"}),
                     unf = with({"train.conv_fewc=unfolded", "train.conv_bn_backward=fused"}),
                     sep = with({"train.conv_fewc=on", "train.conv_bn_backward=separate"});
  const int backward = backward_programs(*on.c);
  REQUIRE(backward >= 1);
  const ConvAlgoSources* src = on.be->conv_algo_sources();
  INFO("fallback reason: " << src->bn_bwd_fallback_reason);
  REQUIRE(src->bn_bwd_fallback == 0);  // cuDNN serves graph (d) for conv1's stride-1 data gradient
  CHECK(src->bn_grad_folded == backward);
  CHECK(src->bn_bwd_fused == backward);     // bn0 (conv1's data gradient); bn1's g comes from the pool: separate
  CHECK(src->bn_bwd_separate == backward);
  CHECK(unf.be->conv_algo_sources()->bn_grad_folded == 0);
  CHECK(unf.be->conv_algo_sources()->bn_bwd_fused == backward);
  CHECK(sep.be->conv_algo_sources()->bn_grad_folded == backward);
  CHECK(sep.be->conv_algo_sources()->bn_bwd_fused == 0);
  const int64_t sample = 40 * 48 * 3;
  const double lo = one_train_step(on, sample), lu = one_train_step(unf, sample), ls = one_train_step(sep, sample);
  CHECK(lo == Approx(lu).epsilon(1e-5));  // the same forward (non-deterministic algorithms allowed)
  CHECK(lo == Approx(ls).epsilon(1e-5));
  const std::vector<float> go = floats_of(on.be->read_region(Region::Grads)),
                           gu = floats_of(unf.be->read_region(Region::Grads)),
                           gs = floats_of(sep.be->read_region(Region::Grads));
  for (const char* name :
       {"stem.weight.grad", "conv1.weight.grad", "bn0.weight.grad", "bn0.bias.grad", "bn1.weight.grad",
        "fc.weight.grad"}) {
    const double ru = testing::rel_diff(value_slice(*on.c, go, name), value_slice(*unf.c, gu, name)),
                 rs = testing::rel_diff(value_slice(*on.c, go, name), value_slice(*sep.c, gs, name));
    INFO(name << ": relative difference " << ru << " to unfolded, " << rs << " to the separate backward");
    CHECK(ru < 1e-3);
    CHECK(rs < 1e-2);
  }
}
