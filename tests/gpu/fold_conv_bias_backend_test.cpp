// The CUDA backend on a CNN whose conv biases are folded into the batch norms that follow them (pass_fold_conv_bias:
// no bias pass after cuDNN's convolution nor in the pointwise conv's GEMM, the bias in the batch-norm kernels'
// running mean (train) and centre (eval)), against the CPU backend: 20 fp32 steps from a checkpoint with non-zero
// conv biases, to the CPU's weights and losses within the bounds of cnn_backend_test.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "core/compiler.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/weights_diff.h"
#include "tests/gpu/gpu_train_util.h"

using namespace trctl;

namespace {

namespace fs = std::filesystem;

// conv(bias) 3x3 -> bn -> relu -> max pool -> conv(bias) 3x3 -> bn -> relu -> conv(bias) 1x1 (a GEMM on CUDA) ->
// bn -> gap -> fc, on synthetic 16x16x3 images: 640 / 32 = 20 steps in the epoch.
const char* kYaml = R"(
seed: 5
data:
  dataset: synthetic
  synthetic: {train_size: 640, val_size: 96, height: 16, width: 16, channels: 3, classes: 10}
  batch_size: 32
  val_batch_size: 48
  normalization: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}
model:
  layers:
    - {type: conv2d, name: conv1, out_channels: 16, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: relu1}
    - {type: max_pool, name: pool, kernel_size: 2, stride: 2}
    - {type: conv2d, name: conv2, out_channels: 32, kernel_size: 3, padding: 1, bias: true}
    - {type: batch_norm, name: bn2}
    - {type: relu, name: relu2}
    - {type: conv2d, name: conv3, out_channels: 32, kernel_size: 1, bias: true}
    - {type: batch_norm, name: bn3}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 1.0e-4}
train: {epochs: 1, precision: fp32}
run: {progress: off}
)";

Spec spec_of(const std::vector<std::string>& overrides) {
  Result<Spec> s = spec_parse(kYaml, "fold_conv_bias.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

TrainResult train(const Spec& spec, TrainOptions opt) { return gputest::train_cuda(spec, opt); }

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("trctl_fold_gpu_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(path); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

using testing::rel_diff;

}  // namespace

TEST_CASE("a CNN with folded conv biases trains on the GPU to the CPU backend's weights (fp32)",
          "[gpu][backend][cnn][fold_conv_bias]") {
  const Spec s = spec_of({});
  {
    Result<DataShape> d = data_shape(s);
    REQUIRE(d.ok());
    Result<Compiled> c = compile_spec(s, d.value());
    REQUIRE(c.ok());
    for (const auto& p : c->graph.programs) {
      int folded = 0;
      for (const auto& n : p.nodes) {
        folded += n.attrs.prebias;
        if (n.op == OpKind::Conv2d) CHECK(n.in.size() == 2);  // no conv adds a bias
      }
      INFO(p.name);
      CHECK(folded == 3);
    }
  }
  // Conv biases start at 0; one AdamW epoch on the CPU (noisy bias steps) leaves them, and the running means, away
  // from it. Both backends start from that checkpoint.
  Scratch scratch;
  Spec warm = s;
  warm.optimizer.kind = OptimizerKind::AdamW;
  warm.optimizer.lr = 0.01;
  warm.train.device = DeviceKind::Cpu;
  warm.train.checkpoint_every = 1;
  warm.run.out_dir = scratch.path.string();
  warm.run.name = "warm";
  train(warm, TrainOptions{});
  TrainOptions opt;
  opt.write_run_dir = false;
  opt.init_from = (scratch.path / "warm").string();
  Spec cpu = s, gpu = s;
  cpu.train.device = DeviceKind::Cpu;
  gpu.train.device = DeviceKind::Cuda;
  const TrainResult a = train(cpu, opt), b = train(gpu, opt);
  CHECK(b.backend == "cuda");
  REQUIRE(a.epochs.size() == 1);
  REQUIRE(b.epochs.size() == 1);
  CHECK(a.epochs[0].step == 20);
  REQUIRE(a.final_weights.size() == b.final_weights.size());
  const double r = rel_diff(b.final_weights, a.final_weights);
  INFO("relative weight difference " << r << "; train loss cpu " << a.epochs[0].train_loss << " gpu "
                                     << b.epochs[0].train_loss << "; val loss cpu " << a.epochs[0].val_loss << " gpu "
                                     << b.epochs[0].val_loss);
  CHECK(r < 2e-3);
  CHECK(std::abs(a.epochs[0].train_loss - b.epochs[0].train_loss) < 2e-3);
  CHECK(std::abs(a.epochs[0].val_loss - b.epochs[0].val_loss) < 5e-3);
}
