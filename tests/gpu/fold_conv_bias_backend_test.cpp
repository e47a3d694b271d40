// The CUDA backend on a CNN whose conv biases are folded into the batch norms that follow them (pass_fold_conv_bias:
// no bias pass after cuDNN's convolution nor in the pointwise conv's GEMM, the bias in the batch-norm kernels'
// running mean (train) and centre (eval)), against the CPU backend: 20 fp32 steps from a checkpoint with non-zero
// conv biases, to the CPU's weights and losses within the bounds of cnn_backend_test.cpp. The folded biases'
// gradients (a ZeroFill node: a memset in the captured step) are exactly 0 after every step on CUDA, fp32 and fp16
// AMP, over gradient memory filled with 7 beforehand, and the fp32 weights follow the CPU backend's.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "core/compiler.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/weights_diff.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/gpu_train_util.h"
#include "tests/support/scratch_dir.h"

using namespace trctl;
using trctl::testing::ScratchDir;

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
  // Conv biases start at 0; one unfolded AdamW epoch on the CPU (noisy bias steps; folded, their gradients are
  // exactly 0 and Adam leaves them at 0) leaves them, and the running means, away from it. Both backends start from
  // that checkpoint.
  ScratchDir scratch("trctl_fold_gpu", false);
  Spec warm = s;
  warm.optimizer.kind = OptimizerKind::AdamW;
  warm.optimizer.lr = 0.01;
  warm.train.device = DeviceKind::Cpu;
  warm.train.checkpoint_every = 1;
  warm.run.out_dir = scratch.path.string();
  warm.run.name = "warm";
  TrainOptions warm_opt;
  warm_opt.fold_conv_bias = false;
  train(warm, warm_opt);
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

namespace {

bool is_conv_bias(const std::string& name) {
  return name == "conv1.bias" || name == "conv2.bias" || name == "conv3.bias";
}

std::vector<float> as_floats(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

// `steps` train steps of kYaml's net on one backend over fixed random batches (host-fed: load_batch, run), from
// params_init's weights with non-zero conv biases and the conv biases' gradients filled with 7 beforehand (a step
// must overwrite them). Each step's conv-bias gradients, the largest |conv weight gradient| and the final weights.
struct Steps {
  std::vector<std::vector<float>> bias_grads;  // per step: every conv bias, in parameter order
  float weight_grad_max = 0;
  bool grads_finite = true;
  std::vector<float> w;
};

Steps run_steps(const Compiled& c, Backend& be, int steps) {
  Steps r;
  int train = -1;
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == "train") train = static_cast<int>(i);
  REQUIRE(train >= 0);
  std::vector<float> w = as_floats(params_init(c, 5));
  std::vector<float> g(static_cast<size_t>(c.plan.region_bytes[static_cast<int>(Region::Grads)] / 4), 0.0f);
  for (const auto& prm : c.graph.params) {
    if (!is_conv_bias(prm.name)) continue;
    const int64_t off = c.plan.values[prm.value].offset / 4, n = c.graph.values[prm.value].shape.numel();
    for (int64_t i = 0; i < n; ++i) {
      w[static_cast<size_t>(off + i)] = static_cast<float>(0.6 * std::sin(1.0 + 2 * i + off));
      g[static_cast<size_t>(c.plan.values[prm.grad].offset / 4 + i)] = 7.0f;
    }
  }
  REQUIRE(be.write_weights(w).ok());
  REQUIRE(be.write_region(Region::Buffers, buffers_init(c)).ok());
  std::vector<std::byte> gb(g.size() * 4);
  std::memcpy(gb.data(), g.data(), gb.size());
  REQUIRE(be.write_region(Region::Grads, gb).ok());
  be.set_lr(0.05);
  const int64_t batch = c.graph.programs[train].batch, per = 16 * 16 * 3;
  for (int step = 0; step < steps; ++step) {
    gputest::Rng rng(100 + static_cast<uint64_t>(step));
    const std::vector<float> x = rng.uniform_vec(static_cast<size_t>(batch * per), -1.0f, 1.0f);
    std::vector<int32_t> y(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + step) % 10);
    Status st = ok_status();
    if (be.host_input_dtype() == OutDType::F32) {
      st = be.load_batch(train, step % 2, x.data(), y.data(), batch);
    } else {  // fp16 AMP: the input slot holds f16
      REQUIRE(be.host_input_dtype() == OutDType::F16);
      std::vector<uint16_t> h(x.size());
      for (size_t i = 0; i < x.size(); ++i) h[i] = gputest::f32_to_f16_bits(x[i]);
      st = be.load_batch(train, step % 2, h.data(), y.data(), batch);
    }
    INFO((st.ok() ? std::string() : st.error_text()));
    REQUIRE(st.ok());
    st = be.run(train, step % 2);
    INFO((st.ok() ? std::string() : st.error_text()));
    REQUIRE(st.ok());
    const std::vector<float> grads = as_floats(be.read_region(Region::Grads));
    std::vector<float> biases;
    for (const auto& prm : c.graph.params) {
      const int64_t off = c.plan.values[prm.grad].offset / 4, n = c.graph.values[prm.value].shape.numel();
      for (int64_t i = 0; i < n; ++i) r.grads_finite &= std::isfinite(grads[static_cast<size_t>(off + i)]);
      if (is_conv_bias(prm.name))
        biases.insert(biases.end(), grads.begin() + off, grads.begin() + off + n);
      else if (prm.name.find("conv") == 0 && prm.name.find(".weight") != std::string::npos)
        for (int64_t i = 0; i < n; ++i)
          r.weight_grad_max = std::max(r.weight_grad_max, std::abs(grads[static_cast<size_t>(off + i)]));
    }
    r.bias_grads.push_back(std::move(biases));
  }
  r.w = be.read_weights();
  return r;
}

Compiled compile_for(const Spec& s, DType storage) {
  Result<DataShape> d = data_shape(s);
  REQUIRE(d.ok());
  CompileOptions opt;
  opt.storage = storage;
  Result<Compiled> c = compile_spec(s, d.value(), opt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  int zero_fills = 0;
  for (const auto& n : c->graph.find_program("train")->nodes) zero_fills += n.op == OpKind::ZeroFill;
  CHECK(zero_fills == 3);  // conv1.bias, conv2.bias, conv3.bias (the pointwise one too)
  return std::move(c.value());
}

}  // namespace

TEST_CASE("folded conv biases get exactly zero gradients on the GPU, every step, fp32 and fp16 AMP",
          "[gpu][backend][cnn][fold_conv_bias]") {
  const int steps = 6;
  SECTION("fp32: zero bias gradients and the CPU backend's weights") {
    const Spec s = spec_of({"train.precision=fp32"});
    const Compiled c = compile_for(s, DType::F32);
    Result<std::unique_ptr<Backend>> gpu = make_cuda_backend(c, s.seed);
    INFO((gpu.ok() ? std::string() : gpu.error_text()));
    REQUIRE(gpu.ok());
    std::unique_ptr<Backend> cpu = make_cpu_backend(c, s.seed, 2);
    const Steps a = run_steps(c, *gpu.value(), steps), b = run_steps(c, *cpu, steps);
    REQUIRE(a.bias_grads.size() == static_cast<size_t>(steps));
    for (int step = 0; step < steps; ++step) {
      INFO("step " << step + 1);
      REQUIRE(a.bias_grads[step].size() == 16 + 32 + 32);
      for (float v : a.bias_grads[step]) CHECK(v == 0.0f);  // not 7 (unwritten), not rounding noise
      for (float v : b.bias_grads[step]) CHECK(v == 0.0f);
    }
    CHECK(a.grads_finite);
    CHECK(a.weight_grad_max > 1e-3f);
    REQUIRE(a.w.size() == b.w.size());
    const double r = rel_diff(a.w, b.w);
    INFO("relative weight difference GPU vs CPU after " << steps << " steps: " << r);
    CHECK(r < 2e-3);
  }
  SECTION("fp16 AMP: zero bias gradients (fp32 gradients, memset by size as stored)") {
    const Spec s = spec_of({"train.precision=fp16"});
    const Compiled c = compile_for(s, amp_storage(s));
    REQUIRE(c.graph.storage == DType::F16);
    Result<std::unique_ptr<Backend>> gpu = make_cuda_backend(c, s.seed);
    INFO((gpu.ok() ? std::string() : gpu.error_text()));
    REQUIRE(gpu.ok());
    const Steps a = run_steps(c, *gpu.value(), steps);
    for (int step = 0; step < steps; ++step) {
      INFO("step " << step + 1);
      for (float v : a.bias_grads[step]) CHECK(v == 0.0f);
    }
    CHECK(a.weight_grad_max > 0.0f);
  }
}
