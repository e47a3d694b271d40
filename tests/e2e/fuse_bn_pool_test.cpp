// pass_fuse_bn_pool through the whole compiler and the CPU backend: a CNN with two conv + batch norm + ReLU + 2x2/2
// max-pool blocks (odd channel counts 5 and 3, odd pooled size 3) compiled with and without the pass gives bitwise
// the same train losses, gradients, weights, optimizer state and running statistics step by step (float32 with
// the optimizer; float64 gradients without), and the same eval loss: on inputs quantised to quarters (ties inside
// the pool windows, all-zero windows after the ReLU) and on inputs with a NaN.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "tests/support/backend_compare.h"
#include "tests/support/cnn_spec.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

constexpr int kBatch = 4;
constexpr int64_t kSide = 12, kChannels = 2;

// conv1 (5, bias) 3x3 p1 -> bn1 -> relu1 -> pool1 max 2 -> conv2 (3) 3x3 p1 -> bn2 -> relu2 -> pool2 max 2 -> gap
// -> fc. 12x12 -> 6x6 -> 3x3.
Spec two_block_spec() {
  Spec s = cnn_base_spec(kBatch);
  s.optimizer.kind = OptimizerKind::Sgd;
  s.optimizer.momentum = 0.9;
  cnn_push(s, conv_layer("conv1", 5, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool1", 2));
  cnn_push(s, conv_layer("conv2", 3, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool2", 2));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  return s;
}

struct Net {
  Compiled c;
  std::unique_ptr<Backend> be;
  int train = -1, eval = -1;

  Net(DType compute, bool fuse) {
    CompileOptions opt;
    opt.compute = compute;
    opt.optimizer = compute == DType::F32;
    opt.fuse_bn_pool = fuse;
    Result<Compiled> cr = compile_spec(two_block_spec(), image_data(kBatch, kBatch, kSide, kChannels), opt);
    INFO((cr.ok() ? std::string() : cr.error_text()));
    REQUIRE(cr.ok());
    c = std::move(cr.value());
    train = program_index(c, "train");
    eval = program_index(c, "eval");
    int pooled = 0;
    for (const Node& n : c.graph.programs[train].nodes) pooled += n.attrs.pool;
    CHECK(pooled == (fuse ? 4 : 0));  // two forward, two backward
    be = make_cpu_backend(c, 77, 2);
    be->set_lr(0.05);
    REQUIRE(be->write_region(Region::Weights, params_init(c, 5)).ok());
    REQUIRE(be->write_region(Region::Buffers, buffers_init(c)).ok());
  }
};

// Quarters in [-1, 1]: equal values inside windows; nan_at >= 0 puts a NaN there.
std::vector<float> batch_input(uint32_t seed, int64_t nan_at) {
  const std::vector<double> r = random_vec(kBatch * kSide * kSide * kChannels, seed);
  std::vector<float> x;
  for (double v : r) x.push_back(static_cast<float>(std::round(v * 4) / 4));
  if (nan_at >= 0) x[static_cast<size_t>(nan_at)] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

void run_pair(DType compute, int64_t nan_at) {
  Net fused(compute, true), plain(compute, false);
  const std::vector<int32_t> y = {2, 0, 1, 1};
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const std::vector<float> x = batch_input(11 + step, nan_at);
    for (Net* n : {&fused, &plain}) {
      REQUIRE(n->be->load_batch(n->train, 0, x.data(), y.data(), kBatch).ok());
      n->be->set_step(step);
      REQUIRE(n->be->run(n->train, 0).ok());
    }
    CHECK(same_bits(fused.be->last_loss(fused.train), plain.be->last_loss(plain.train)));
    check_same_region(*fused.be, *plain.be, Region::Grads, "gradients");
    check_same_region(*fused.be, *plain.be, Region::Weights, "weights");
    check_same_region(*fused.be, *plain.be, Region::Buffers, "running statistics");
    if (compute == DType::F32) check_same_region(*fused.be, *plain.be, Region::OptState, "momentum");
  }
  const std::vector<float> xv = batch_input(40, nan_at);
  for (Net* n : {&fused, &plain}) {
    REQUIRE(n->be->load_batch(n->eval, 0, xv.data(), y.data(), kBatch).ok());
    REQUIRE(n->be->run(n->eval, 0).ok());
  }
  CHECK(same_bits(fused.be->last_loss(fused.eval), plain.be->last_loss(plain.eval)));
}

}  // namespace

TEST_CASE("fuse_bn_pool on the CPU: float32 train steps and eval bitwise equal the unfused chain, ties in windows",
          "[e2e][cnn][fuse_bn_pool]") {
  run_pair(DType::F32, -1);
}

TEST_CASE("fuse_bn_pool on the CPU: float32 with a NaN input bitwise equals the unfused chain",
          "[e2e][cnn][fuse_bn_pool]") {
  run_pair(DType::F32, 5 * kChannels + 1);
}

TEST_CASE("fuse_bn_pool on the CPU: float64 gradients bitwise equal the unfused chain", "[e2e][cnn][fuse_bn_pool]") {
  run_pair(DType::F64, -1);
}
