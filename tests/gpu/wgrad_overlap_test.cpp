// train.conv_wgrad_overlap on the device (runtime/cuda/cuda_lower_overlap.cpp): the plain cuDNN weight gradients
// run on the step's second stream beside the nodes of their window — counted, and the captured step's losses,
// gradients and updated weights over several replays bitwise those of the in-order step (the same kernels on the
// same operands; a join too early or an input overwritten too soon would show as a difference), under fp16 and fp32,
// with windows of one and two data gradients, the side stream at the least priority (default) or at the step
// stream's; with data parallelism none would fork (not testable on one GPU).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tests/gpu/backend_step_util.h"
#include "tests/support/scratch_dir.h"

using namespace trctl;
using namespace trctl::gputest;

namespace {

// Four 3x3 convs with batch norm + ReLU (a max pool after the second): the VGG pattern of BatchNormGrad ->
// Conv2dGradWeight -> ZeroFill -> Conv2dGradInput per layer, biases folded, graph (d) pairs under fp16.
const char* kYaml = R"(
seed: 23
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 12, width: 12, channels: 3, classes: 10}
  batch_size: 16
  val_batch_size: 16
model:
  layers:
    - {type: conv2d, name: c1, out_channels: 16, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: b1}
    - {type: relu, name: r1}
    - {type: conv2d, name: c2, out_channels: 32, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: b2}
    - {type: relu, name: r2}
    - {type: max_pool, name: p2, kernel_size: 2, stride: 2}
    - {type: conv2d, name: c3, out_channels: 32, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: b3}
    - {type: relu, name: r3}
    - {type: conv2d, name: c4, out_channels: 64, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: b4}
    - {type: relu, name: r4}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1.0e-4}
train: {epochs: 1, precision: fp16, device: cuda}
run: {progress: off}
)";

Spec spec_of(const std::vector<std::string>& overrides) { return parsed_spec(kYaml, "wgrad_overlap.yaml", overrides); }

struct Steps {
  std::vector<double> losses;
  std::vector<float> grads, weights;
};

// From params_init's weights, `steps` host-fed steps of the train program (captured at the first, replayed after),
// each on its own fixed random batch (12 x 12 x 3 images in the backend's input dtype).
Steps run_steps(const BuiltBackend& b, int steps) {
  const Compiled& c = *b.c;
  const int train = reset_for_steps(b);
  const int64_t batch = c.graph.programs[static_cast<size_t>(train)].batch, sample = 12 * 12 * 3;
  const OutDType in_type = b.be->host_input_dtype();
  Steps out;
  Rng rng(99);
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> x = rng.uniform_vec(static_cast<size_t>(batch * sample), -1.0f, 1.0f);
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      h[i] = in_type == OutDType::F16 ? f32_to_f16_bits(x[i]) : f32_to_bf16_bits(x[i]);
    const void* data = in_type == OutDType::F32 ? static_cast<const void*>(x.data()) : h.data();
    std::vector<int32_t> y(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + s) % 10);
    REQUIRE_OK(b.be->load_batch(train, 0, data, y.data(), batch));
    REQUIRE_OK(b.be->run(train, 0));
    REQUIRE_OK(b.be->synchronize());
    out.losses.push_back(b.be->last_loss(train));
  }
  out.grads = floats_of(b.be->read_region(Region::Grads));
  out.weights = floats_of(b.be->read_region(Region::Weights));
  return out;
}

}  // namespace

TEST_CASE("train.conv_wgrad_overlap runs weight gradients on the second stream, bitwise the in-order step",
          "[gpu][backend][cnn][wgrad_overlap]") {
  testing::ScratchDir scratch("trctl_wgrad_overlap_gpu");
  EnvGuard env("TRCTL_AUTOTUNE_CACHE", (scratch.path / "none.txt").string());  // no cache: heuristics
  for (const char* precision : {"fp16", "fp32"}) {
    const std::string p = std::string("train.precision=") + precision;
    const BuiltBackend off = build_backend(spec_of({p})),
                       one = build_backend(spec_of({p, "train.conv_wgrad_overlap=1"})),
                       two = build_backend(spec_of({p, "train.conv_wgrad_overlap=2"})),
                       same = build_backend(
                           spec_of({p, "train.conv_wgrad_overlap=2", "train.conv_wgrad_priority=same"}));
    CAPTURE(precision);
    const int forked = two.be->conv_algo_sources()->wgrad_overlapped;
    CHECK(off.be->conv_algo_sources()->wgrad_overlapped == 0);
    CHECK(forked >= 3);  // c2, c3, c4 at least (c1's may take the few-channel kernel)
    CHECK(one.be->conv_algo_sources()->wgrad_overlapped == forked);
    const Steps a = run_steps(off, 4), b1 = run_steps(one, 4), b2 = run_steps(two, 4), b3 = run_steps(same, 4);
    for (double l : a.losses) CHECK(std::isfinite(l));
    CHECK(b1.losses == a.losses);
    CHECK(b2.losses == a.losses);
    CHECK(b1.grads == a.grads);
    CHECK(b2.grads == a.grads);
    CHECK(b1.weights == a.weights);
    CHECK(b2.weights == a.weights);
    CHECK(b3.losses == a.losses);  // one stream priority for both
    CHECK(b3.weights == a.weights);
  }
}
