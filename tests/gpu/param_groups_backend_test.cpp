// Parameter groups, freezing, and the optimizer extras (clip_grad_norm, EMA, LARS) through the CUDA backend against the CPU backend: an MLP with fc1 frozen and a
// param group (own lr and weight decay) on fc4, and a CNN with conv1 + bn1 frozen and a group on the convolutions,
// under AdamW and SGD with Nesterov; 20 fp32 training steps each give the CPU's weights (the tolerances of
// act_loss_backend_test.cpp), and frozen parameters end exactly at their initial values on the GPU too. Under fp16
// AMP the frozen CNN trains (finite loss, frozen weights unchanged).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/weights_diff.h"
#include "tests/gpu/gpu_train_util.h"

using namespace trctl;

namespace {

Spec load(const std::string& config, std::vector<std::string> overrides) {
  if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) overrides.push_back(std::string("data.root=") + root);
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/" + config, overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

TrainResult train(const Spec& spec) { return gputest::train_cuda(spec); }

using testing::rel_diff;

// The frozen parameters' elements of `weights` (the plan's layout) equal their initial values bitwise.
void check_frozen_unchanged(const Spec& spec, const std::vector<float>& weights) {
  Result<Compiled> c = compile_spec(spec, DataShape{28, 28, 1, 10, 60000, 10000});
  REQUIRE(c.ok());
  const std::vector<std::byte> init = params_init(c.value(), spec.seed);
  const float* w0 = reinterpret_cast<const float*>(init.data());
  int frozen = 0;
  for (const ParamInfo& p : c.value().graph.params) {
    if (!p.frozen) continue;
    ++frozen;
    const int64_t off = c.value().plan.values[p.value].offset / 4, n = c.value().graph.values[p.value].shape.numel();
    REQUIRE(off + n <= static_cast<int64_t>(weights.size()));
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += weights[off + i] != w0[off + i];
    INFO(p.name);
    CHECK(differ == 0);
  }
  CHECK(frozen > 0);
}

void compare_backends(const std::string& config, std::vector<std::string> o) {
  o.insert(o.end(), {"data.train_subset=4000", "train.epochs=1", "train.precision=fp32"});
  std::vector<std::string> cpu = o, gpu = o;
  cpu.push_back("train.device=cpu");
  gpu.push_back("train.device=cuda");
  const Spec gs = load(config, gpu);
  TrainResult a = train(load(config, cpu)), b = train(gs);
  CHECK(b.backend == "cuda");
  REQUIRE(a.final_weights.size() == b.final_weights.size());
  const double r = rel_diff(b.final_weights, a.final_weights);
  INFO("relative weight difference " << r << "; val top1 cpu " << a.epochs[0].val_top1 << " gpu "
                                     << b.epochs[0].val_top1);
  CHECK(r < 2e-3);
  CHECK(std::abs(a.epochs[0].val_top1 - b.epochs[0].val_top1) < 0.01);
  CHECK(std::abs(a.epochs[0].train_loss - b.epochs[0].train_loss) < 1e-3);
  check_frozen_unchanged(gs, b.final_weights);
}

const char* kMlpGroups = "optimizer.param_groups=[{params: [fc4], lr: 0.003, weight_decay: 0.1}, "
                         "{params: 'fc2.bias', lr: 0.0001}]";
const char* kCnnGroups = "optimizer.param_groups=[{params: ['conv*.weight'], lr: 0.002, weight_decay: 0.05}]";

}  // namespace

TEST_CASE("param groups and a frozen layer: 20 fp32 GPU steps give the CPU backend's weights (MLP)",
          "[gpu][backend][groups]") {
  compare_backends("mlp_fmnist.yaml", {"model.freeze=fc1", kMlpGroups});
  compare_backends("mlp_fmnist.yaml",
                   {"model.freeze=[fc1, fc3.bias]",
                    "optimizer={type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 0.0005, "
                    "param_groups: [{params: [fc4], lr: 0.01}, {params: ['fc2.*'], weight_decay: 0.01}]}"});
}

TEST_CASE("param groups and frozen conv + batch norm: 20 fp32 GPU steps give the CPU backend's weights (CNN)",
          "[gpu][backend][groups]") {
  compare_backends("cnn_fmnist.yaml", {"model.freeze=[conv1, bn1]", kCnnGroups, "scheduler.warmup_epochs=0"});
}

TEST_CASE("a frozen CNN prefix trains under fp16 AMP and stays frozen", "[gpu][backend][groups]") {
  const Spec s = load("cnn_fmnist.yaml", {"model.freeze=[conv1, bn1, conv2]", kCnnGroups, "data.train_subset=4000",
                                          "train.epochs=1", "train.precision=fp16", "train.device=cuda"});
  TrainResult r = train(s);
  CHECK(std::isfinite(r.epochs[0].train_loss));
  CHECK(r.epochs[0].val_top1 > 0.5);
  check_frozen_unchanged(s, r.final_weights);
}

// The optimizer extras lowered on the CUDA backend (runtime/ops/optim/optim_extra.cu): gradient clipping by the
// global norm, the weights' EMA (validation on the averaged weights) and LARS, each with a param group and a frozen
// layer, against the CPU backend.
TEST_CASE("clip_grad_norm, the weights' EMA and LARS: 20 fp32 GPU steps give the CPU backend's weights",
          "[gpu][backend][groups][optim]") {
  SECTION("clip_grad_norm with AdamW") {
    compare_backends("mlp_fmnist.yaml", {"model.freeze=fc1", kMlpGroups, "optimizer.clip_grad_norm=0.5"});
  }
  SECTION("ema_decay, validation on the EMA") {
    compare_backends("mlp_fmnist.yaml", {"model.freeze=fc1", "train.ema_decay=0.9", "train.eval_ema=true"});
  }
  SECTION("lars with momentum, clipped") {
    compare_backends("mlp_fmnist.yaml",
                     {"model.freeze=fc1",
                      "optimizer={type: lars, lr: 0.5, momentum: 0.9, weight_decay: 0.0005, clip_grad_norm: 2.0, "
                      "param_groups: [{params: [fc4], lr: 0.1}]}"});
  }
  SECTION("lars on a CNN with batch norm, trust_clip") {
    compare_backends("cnn_fmnist.yaml",
                     {"scheduler.warmup_epochs=0", "model.freeze=conv1",
                      "optimizer={type: lars, lr: 0.2, momentum: 0.9, nesterov: true, weight_decay: 0.0001, "
                      "trust_clip: true}"});
  }
}

TEST_CASE("clip, EMA and LARS under fp16 AMP train and skip nothing on a healthy run", "[gpu][backend][optim]") {
  const Spec s = load("mlp_fmnist.yaml", {"data.train_subset=4000", "train.epochs=2", "train.precision=fp16",
                                          "train.device=cuda", "train.ema_decay=0.9", "optimizer.clip_grad_norm=1.0"});
  // ema_decay 0.9 over 40 steps: the EMA validated on holds < 2 % of the initial weights (0.99 would still hold 67 %:
  // H200 run 22 validated 50.7 % with it, as expected of so young an average)
  TrainResult r = train(s);
  CHECK(std::isfinite(r.epochs.back().train_loss));
  CHECK(r.epochs.back().val_top1 > 0.6);
}
