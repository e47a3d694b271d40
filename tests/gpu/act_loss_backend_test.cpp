// The new activations and losses through the CUDA backend against the CPU backend: configs/mlp_fmnist_silu.yaml
// (SiLU, weighted label-smoothed cross-entropy) and variants with every other activation and with the mse and
// bce_with_logits losses, 20 fp32 training steps each, give the CPU's weights, loss and accuracy within the
// tolerances of backend_test.cpp; under fp16 AMP the SiLU/weighted-CE MLP learns like fp32.
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

const std::string kConfig = std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist_silu.yaml";

TrainResult train_silu(std::vector<std::string> overrides) {
  if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) overrides.push_back(std::string("data.root=") + root);
  Result<Spec> s = spec_load(kConfig, overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return gputest::train_cuda(s.value());
}

using testing::rel_diff;

void compare_backends(std::vector<std::string> o) {
  o.insert(o.end(), {"data.train_subset=4000", "train.epochs=1", "train.precision=fp32"});
  std::vector<std::string> cpu = o, gpu = o;
  cpu.push_back("train.device=cpu");
  gpu.push_back("train.device=cuda");
  TrainResult a = train_silu(cpu), b = train_silu(gpu);
  CHECK(b.backend == "cuda");
  REQUIRE(a.final_weights.size() == b.final_weights.size());
  const double r = rel_diff(b.final_weights, a.final_weights);
  INFO("relative weight difference " << r << "; val top1 cpu " << a.epochs[0].val_top1 << " gpu "
                                     << b.epochs[0].val_top1 << "; val loss cpu " << a.epochs[0].val_loss << " gpu "
                                     << b.epochs[0].val_loss);
  CHECK(r < 2e-3);
  CHECK(std::abs(a.epochs[0].val_top1 - b.epochs[0].val_top1) < 0.01);
  CHECK(std::abs(a.epochs[0].train_loss - b.epochs[0].train_loss) < 1e-3);
  CHECK(std::abs(a.epochs[0].val_loss - b.epochs[0].val_loss) < 1e-3);
}

}  // namespace

TEST_CASE("SiLU with weighted cross-entropy: 20 fp32 GPU steps give the CPU backend's weights", "[gpu][backend][loss]") {
  compare_backends({});
}

TEST_CASE("every activation: 20 fp32 GPU steps give the CPU backend's weights", "[gpu][backend][activation]") {
  for (const char* act : {"relu6", "leaky_relu, negative_slope: 0.1", "elu, alpha: 0.7", "hardswish", "sigmoid",
                          "tanh"}) {
    INFO(act);
    compare_backends({std::string("model.layers.2={type: ") + act + ", name: act1}",
                      std::string("model.layers.4={type: ") + act + ", name: act2}"});
  }
}

TEST_CASE("mse and bce_with_logits: 20 fp32 GPU steps give the CPU backend's weights", "[gpu][backend][loss]") {
  for (const char* loss : {"loss={type: mse}", "loss={type: bce_with_logits}"}) {
    INFO(loss);
    compare_backends({loss});
  }
}

TEST_CASE("SiLU with weighted cross-entropy learns under fp16 AMP like fp32 on the GPU", "[gpu][backend][loss][long]") {
  TrainResult a = train_silu({"train.epochs=2", "train.precision=fp32", "train.device=cuda"});
  TrainResult b = train_silu({"train.epochs=2", "train.precision=fp16", "train.device=cuda"});
  INFO("val top1 fp32 " << a.epochs.back().val_top1 << " fp16 " << b.epochs.back().val_top1);
  CHECK(a.epochs.back().val_top1 > 0.8);
  CHECK(std::abs(a.epochs.back().val_top1 - b.epochs.back().val_top1) < 0.01);
}
