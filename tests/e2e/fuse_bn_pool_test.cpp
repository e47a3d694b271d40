// pass_fuse_bn_pool through the whole compiler and the CPU backend: a CNN with two conv + batch norm + ReLU + max
// pool blocks (odd channel counts 5 and 3) compiled with and without the pass gives bitwise the same train losses,
// gradients, weights, optimizer state and running statistics step by step (float32 with the optimizer; float64
// gradients without), and the same eval loss: on inputs quantised to quarters (ties inside the pool windows,
// all-zero windows after the ReLU) and on inputs with a NaN. Pools: VGG's tiling 2x2/2 (12x12 -> 6x6 -> 3x3),
// ResNet's overlapping stem 3x3/2 pad 1 on odd sizes (11x11 -> 6x6 -> 3x3), 3x3/1 pad 1 and 2x2/1.
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
constexpr int64_t kChannels = 2;

// Both blocks' max pools: kernel, stride, pad, and the input side.
struct PoolGeo {
  int kernel, stride, pad;
  int64_t side;
};
constexpr PoolGeo kTiling{2, 2, 0, 12}, kStem{3, 2, 1, 11};

// conv1 (5, bias) 3x3 p1 -> bn1 -> relu1 -> pool1 max -> conv2 (3) 3x3 p1 -> bn2 -> relu2 -> pool2 max -> gap -> fc.
Spec two_block_spec(const PoolGeo& pg) {
  Spec s = cnn_base_spec(kBatch);
  s.optimizer.kind = OptimizerKind::Sgd;
  s.optimizer.momentum = 0.9;
  cnn_push(s, conv_layer("conv1", 5, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool1", pg.kernel, pg.stride, pg.pad));
  cnn_push(s, conv_layer("conv2", 3, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool2", pg.kernel, pg.stride, pg.pad));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  return s;
}

struct Net {
  Compiled c;
  std::unique_ptr<Backend> be;
  int train = -1, eval = -1;

  Net(DType compute, bool fuse, const PoolGeo& pg) {
    CompileOptions opt;
    opt.compute = compute;
    opt.optimizer = compute == DType::F32;
    opt.fuse_bn_pool = fuse;
    Result<Compiled> cr = compile_spec(two_block_spec(pg), image_data(kBatch, kBatch, pg.side, kChannels), opt);
    INFO((cr.ok() ? std::string() : cr.error_text()));
    REQUIRE(cr.ok());
    c = std::move(cr.value());
    train = program_index(c, "train");
    eval = program_index(c, "eval");
    int pooled = 0;
    for (const Node& n : c.graph.programs[train].nodes) {
      if (!n.attrs.pool) continue;
      ++pooled;
      CHECK(n.attrs.kernel == pg.kernel);
      CHECK(n.attrs.stride == pg.stride);
      CHECK(n.attrs.pad == pg.pad);
    }
    CHECK(pooled == (fuse ? 4 : 0));  // two forward, two backward
    be = make_cpu_backend(c, 77, 2);
    be->set_lr(0.05);
    REQUIRE(be->write_region(Region::Weights, params_init(c, 5)).ok());
    REQUIRE(be->write_region(Region::Buffers, buffers_init(c)).ok());
  }
};

// Quarters in [-1, 1]: equal values inside windows; nan_at >= 0 puts a NaN there.
std::vector<float> batch_input(uint32_t seed, int64_t side, int64_t nan_at) {
  const std::vector<double> r = random_vec(kBatch * side * side * kChannels, seed);
  std::vector<float> x;
  for (double v : r) x.push_back(static_cast<float>(std::round(v * 4) / 4));
  if (nan_at >= 0) x[static_cast<size_t>(nan_at)] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

void run_pair(DType compute, int64_t nan_at, const PoolGeo& pg = kTiling) {
  INFO("pool " << pg.kernel << "x" << pg.kernel << "/" << pg.stride << " pad " << pg.pad << " on " << pg.side << "x"
               << pg.side);
  Net fused(compute, true, pg), plain(compute, false, pg);
  const std::vector<int32_t> y = {2, 0, 1, 1};
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const std::vector<float> x = batch_input(11 + step, pg.side, nan_at);
    step_both_and_compare(*fused.be, fused.train, *plain.be, plain.train, step, x, y, kBatch, compute == DType::F32);
  }
  const std::vector<float> xv = batch_input(40, pg.side, nan_at);
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

TEST_CASE("fuse_bn_pool on the CPU: ResNet's stem pool 3x3/2 pad 1 on odd sizes, float32 steps and eval bitwise",
          "[e2e][cnn][fuse_bn_pool]") {
  run_pair(DType::F32, -1, kStem);
}

TEST_CASE("fuse_bn_pool on the CPU: the stem pool 3x3/2 pad 1 with a NaN input bitwise equals the unfused chain",
          "[e2e][cnn][fuse_bn_pool]") {
  run_pair(DType::F32, 5 * kChannels + 1, kStem);  // row 0, column 5: inside two overlapping windows
}

TEST_CASE("fuse_bn_pool on the CPU: the stem pool 3x3/2 pad 1, float64 gradients bitwise", "[e2e][cnn][fuse_bn_pool]") {
  run_pair(DType::F64, -1, kStem);
}

TEST_CASE("fuse_bn_pool on the CPU: overlapping 3x3/1 pad 1 and 2x2/1 pools bitwise equal the unfused chain",
          "[e2e][cnn][fuse_bn_pool]") {
  run_pair(DType::F32, -1, PoolGeo{3, 1, 1, 7});
  run_pair(DType::F32, -1, PoolGeo{2, 1, 0, 9});
}
