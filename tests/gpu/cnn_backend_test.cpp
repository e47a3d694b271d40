// The CUDA backend on CNNs against the CPU reference, on the device: a residual network (conv, batch norm with
// fused ReLU, max and average pools, strided 1x1 downsample, residual add with fused ReLU, global average pool,
// gradient sums) and the Fashion-MNIST CNN config train for a few steps in fp32 to the CPU's weights within
// tolerance; one seed gives bitwise-equal GPU runs in fp32 and fp16 AMP; AMP learns like fp32.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/weights_diff.h"
#include "tests/gpu/gpu_train_util.h"

using namespace trctl;

namespace {

// A small ResNet on synthetic 16x16x3 images: stem, one identity block (its first conv pointwise with a bias: a
// cuBLASLt GEMM whose bias pass_fold_conv_bias folds into the batch norm after it, so its gradient is the exact
// zero fill; the fused bias-gradient GEMM path is exercised by the fc bias only), one downsampling block.
const char* kResidualYaml = R"(
seed: 3
data:
  dataset: synthetic
  synthetic: {train_size: 256, val_size: 96, height: 16, width: 16, channels: 3, classes: 10}
  batch_size: 32
  val_batch_size: 40
  normalization: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}
model:
  layers:
    - {type: conv2d, name: stem, out_channels: 16, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: stem_bn}
    - {type: relu, name: stem_relu}
    - {type: max_pool, name: pool, kernel_size: 3, stride: 2, padding: 1}
    - {type: conv2d, name: b1_conv1, out_channels: 16, kernel_size: 1, bias: true}
    - {type: batch_norm, name: b1_bn1}
    - {type: relu, name: b1_relu1}
    - {type: conv2d, name: b1_conv2, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: b1_bn2}
    - {type: add, name: b1_add, inputs: [b1_bn2, pool]}
    - {type: relu, name: b1_relu}
    - {type: conv2d, name: b2_conv1, out_channels: 32, kernel_size: 3, stride: 2, padding: 1, bias: false}
    - {type: batch_norm, name: b2_bn1}
    - {type: relu, name: b2_relu1}
    - {type: conv2d, name: b2_conv2, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: b2_bn2}
    - {type: conv2d, name: b2_down, inputs: [b1_relu], out_channels: 32, kernel_size: 1, stride: 2, bias: false}
    - {type: batch_norm, name: b2_down_bn}
    - {type: add, name: b2_add, inputs: [b2_bn2, b2_down_bn]}
    - {type: relu, name: b2_relu}
    - {type: avg_pool, name: apool, kernel_size: 2, stride: 1}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1.0e-4}
train: {epochs: 1, precision: fp32}
run: {progress: off}
)";

Spec residual_spec(const std::vector<std::string>& overrides) {
  Result<Spec> s = spec_parse(kResidualYaml, "residual.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

Spec fmnist_cnn_spec(std::vector<std::string> overrides) {
  if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) overrides.push_back(std::string("data.root=") + root);
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/cnn_fmnist.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

TrainResult train(const Spec& spec) { return gputest::train_cuda(spec); }

using testing::rel_diff;

// fp32 on both backends: cuDNN's and the CPU's summation orders differ, so weights agree to rounding that the
// optimizer carries forward for a few steps (the MLP test's bound).
void check_gpu_matches_cpu(Spec spec, const char* what) {
  spec.train.precision = Precision::Fp32;
  Spec cpu = spec, gpu = spec;
  cpu.train.device = DeviceKind::Cpu;
  gpu.train.device = DeviceKind::Cuda;
  TrainResult a = train(cpu), b = train(gpu);
  CHECK(b.backend == "cuda");
  REQUIRE(a.final_weights.size() == b.final_weights.size());
  const double r = rel_diff(b.final_weights, a.final_weights);
  INFO(what << ": relative weight difference " << r << "; train loss cpu " << a.epochs[0].train_loss << " gpu "
            << b.epochs[0].train_loss << "; val loss cpu " << a.epochs[0].val_loss << " gpu "
            << b.epochs[0].val_loss);
  CHECK(r < 2e-3);
  CHECK(std::abs(a.epochs[0].train_loss - b.epochs[0].train_loss) < 2e-3);
  CHECK(std::abs(a.epochs[0].val_loss - b.epochs[0].val_loss) < 5e-3);
}

}  // namespace

TEST_CASE("a residual CNN trains on the GPU to the CPU backend's weights (fp32)", "[gpu][backend][cnn]") {
  check_gpu_matches_cpu(residual_spec({}), "residual");
}

TEST_CASE("the Fashion-MNIST CNN trains on the GPU to the CPU backend's weights (fp32)", "[gpu][backend][cnn]") {
  check_gpu_matches_cpu(fmnist_cnn_spec({"data.train_subset=1280", "train.epochs=1", "scheduler.warmup_epochs=0"}),
                        "cnn_fmnist");
}

TEST_CASE("two GPU CNN runs with one seed are bitwise equal, fp32 and fp16 AMP", "[gpu][backend][cnn][determinism]") {
  for (const char* prec : {"train.precision=fp32", "train.precision=fp16"}) {
    Spec s = residual_spec({prec, "train.epochs=2", "train.device=cuda"});
    TrainResult a = train(s), b = train(s);
    INFO(prec);
    CHECK(a.final_weights == b.final_weights);
    CHECK(a.epochs.back().val_loss == b.epochs.back().val_loss);
  }
}

TEST_CASE("fp16 AMP trains the residual CNN like fp32 on the GPU", "[gpu][backend][cnn]") {
  TrainResult a = train(residual_spec({"train.epochs=3", "train.precision=fp32", "train.device=cuda"}));
  TrainResult b = train(residual_spec({"train.epochs=3", "train.precision=fp16", "train.device=cuda"}));
  INFO("train loss fp32 " << a.epochs.back().train_loss << " fp16 " << b.epochs.back().train_loss);
  CHECK(std::isfinite(b.epochs.back().train_loss));
  CHECK(std::abs(a.epochs.back().train_loss - b.epochs.back().train_loss) < 0.05);
}
