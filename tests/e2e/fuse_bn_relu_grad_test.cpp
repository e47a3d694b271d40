// pass_fuse_bn_relu_grad through the whole compiler and the CPU backend: a stem and two residual blocks (a
// downsample shortcut, then an identity one, so a fused gradient feeds the next block's fused backward) compiled
// with and without the pass give bitwise the same train losses, gradients, weights, optimizer state and running
// statistics step by step (float32 with the optimizer, float64 gradients without), on inputs quantised to quarters
// (exact zeros before the ReLUs, where the mask cuts) and on inputs with a NaN.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "tests/support/backend_compare.h"
#include "tests/support/cnn_spec.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

constexpr int kBatch = 3;
constexpr int64_t kSide = 8, kChannels = 2;

// resnet_block_spec's stem and downsample block (8x8 -> 4x4, 4 -> 8 channels), then an identity block:
// conv3 3x3 p1 -> bn3 -> relu3 -> conv4 3x3 p1 -> bn4; add [bn4, relu2] -> relu4 -> gap -> fc.
Spec two_residual_spec() {
  Spec s = resnet_block_spec(kBatch);
  s.optimizer.kind = OptimizerKind::Sgd;
  s.optimizer.momentum = 0.9;
  s.model.layers.resize(s.model.layers.size() - 2);  // drop gap, fc
  cnn_push(s, conv_layer("conv3", 8, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn3"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu3"));
  cnn_push(s, conv_layer("conv4", 8, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn4"));
  cnn_push(s, cnn_layer(LayerKind::Add, "add2", {"bn4", "relu2"}));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu4"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  return s;
}

struct Net {
  Compiled c;
  std::unique_ptr<Backend> be;
  int train = -1;

  Net(DType compute, bool fuse) {
    CompileOptions opt;
    opt.compute = compute;
    opt.optimizer = compute == DType::F32;
    opt.fuse_bn_relu_grad = fuse;
    Result<Compiled> cr = compile_spec(two_residual_spec(), image_data(kBatch, kBatch, kSide, kChannels), opt);
    INFO((cr.ok() ? std::string() : cr.error_text()));
    REQUIRE(cr.ok());
    c = std::move(cr.value());
    train = program_index(c, "train");
    int fused = 0, relu_grads = 0;
    for (const Node& n : c.graph.programs[train].nodes) {
      fused += n.op == OpKind::BatchNormGrad && n.attrs.residual;
      relu_grads += n.op == OpKind::ReluGrad;
    }
    CHECK(fused == (fuse ? 2 : 0));       // one per residual block
    CHECK(relu_grads == (fuse ? 0 : 2));
    be = make_cpu_backend(c, 77, 2);
    be->set_lr(0.05);
    REQUIRE(be->write_region(Region::Weights, params_init(c, 5)).ok());
    REQUIRE(be->write_region(Region::Buffers, buffers_init(c)).ok());
  }
};

// Quarters in [-1, 1]; nan_at >= 0 puts a NaN there.
std::vector<float> batch_input(uint32_t seed, int64_t nan_at) {
  const std::vector<double> r = random_vec(kBatch * kSide * kSide * kChannels, seed);
  std::vector<float> x;
  for (double v : r) x.push_back(static_cast<float>(std::round(v * 4) / 4));
  if (nan_at >= 0) x[static_cast<size_t>(nan_at)] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

void run_pair(DType compute, int64_t nan_at) {
  Net fused(compute, true), plain(compute, false);
  const std::vector<int32_t> y = {2, 0, 1};
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const std::vector<float> x = batch_input(21 + step, nan_at);
    step_both_and_compare(*fused.be, fused.train, *plain.be, plain.train, step, x, y, kBatch, compute == DType::F32);
  }
}

}  // namespace

TEST_CASE("fuse_bn_relu_grad on the CPU: float32 train steps bitwise equal the unfused backward",
          "[e2e][cnn][resnet][fuse_bn_relu_grad]") {
  run_pair(DType::F32, -1);
}

TEST_CASE("fuse_bn_relu_grad on the CPU: float32 with a NaN input bitwise equals the unfused backward",
          "[e2e][cnn][resnet][fuse_bn_relu_grad]") {
  run_pair(DType::F32, 37);
}

TEST_CASE("fuse_bn_relu_grad on the CPU: float64 gradients bitwise equal the unfused backward",
          "[e2e][cnn][resnet][fuse_bn_relu_grad]") {
  run_pair(DType::F64, -1);
}
