// CNNs through the whole compiler and the CPU backend: every parameter gradient of the compiled float64 train
// program of a small conv net and of a ResNet basic block (fused add+relu, 1x1 strided downsample) equals float64
// central finite differences of its loss; and a tiny CNN trains on the synthetic dataset through train_run,
// bitwise-equal across two runs with one seed.
#include <catch2/catch.hpp>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/cnn_spec.h"
#include "tests/support/gradcheck.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

int count_ops(const Program& p, OpKind op) {
  int c = 0;
  for (const auto& n : p.nodes) c += n.op == op;
  return c;
}

// Compiles `spec` in float64 without optimizer for batch-3 8x8x2 inputs, then compares the train program's
// Grads region with central differences of its loss over every parameter element. Biases and batch-norm
// parameters (zero / one at init) get non-trivial values first so that every gradient path is exercised.
// `zero_grad`: parameters whose exact gradient is 0 (a conv bias right before a batch norm: the normalisation
// removes any per-channel shift); for them both gradients must be ~0 instead of close in relative terms.
void gradcheck_train_program(const Spec& spec, int expect_grad_inputs,
                             const std::vector<std::string>& zero_grad = {}) {
  CompileOptions opt;
  opt.compute = DType::F64;
  opt.optimizer = false;
  Result<Compiled> cr = compile_spec(spec, image_data(3, 3), opt);
  INFO((cr.ok() ? std::string() : cr.error_text()));
  REQUIRE(cr.ok());
  const Compiled& c = cr.value();
  const int prog = 0;
  const Program& p = c.graph.programs[prog];
  REQUIRE(p.name == "train");
  REQUIRE(p.batch == 3);
  // Gradients w.r.t. the parameters only: none for the image, no optimizer.
  CHECK(count_ops(p, OpKind::Conv2dGradInput) == expect_grad_inputs);
  CHECK(count_ops(p, OpKind::OptimizerStep) == 0);

  auto be = make_cpu_backend(c, 77, 2);
  REQUIRE(be->write_region(Region::Buffers, buffers_init(c)).ok());
  std::vector<std::byte> wbytes = params_init(c, 5);
  std::vector<double> w(wbytes.size() / 8);
  std::memcpy(w.data(), wbytes.data(), wbytes.size());
  for (const auto& prm : c.graph.params) {
    if (prm.decay) continue;
    const bool scale = prm.init == ParamInfo::Init::Ones;  // batch-norm gamma: keep it away from 0
    for (int64_t i = 0; i < c.graph.values[prm.value].shape.numel(); ++i)
      w[c.plan.values[prm.value].offset / 8 + i] = (scale ? 1.0 : 0.0) + 0.3 * std::sin(1.0 + prm.value + i);
  }

  const std::vector<double> xd = random_vec(3 * 8 * 8 * 2, 9);
  const std::vector<float> x(xd.begin(), xd.end());
  const std::vector<int32_t> y = {2, 0, 1};
  REQUIRE(be->load_batch(prog, 0, x.data(), y.data(), 3).ok());

  auto loss = [&] {
    std::vector<std::byte> b(w.size() * 8);
    std::memcpy(b.data(), w.data(), b.size());
    REQUIRE(be->write_region(Region::Weights, b).ok());
    be->set_step(0);
    REQUIRE(be->run(prog, 0).ok());
    return be->last_loss(prog);
  };
  const double l0 = loss();
  REQUIRE(std::isfinite(l0));
  std::vector<std::byte> gb = be->read_region(Region::Grads);
  std::vector<double> grad(gb.size() / 8);
  std::memcpy(grad.data(), gb.data(), gb.size());
  REQUIRE(grad.size() == w.size());

  std::vector<bool> covered(w.size(), false);
  for (const auto& prm : c.graph.params) {
    const int64_t off = c.plan.values[prm.value].offset / 8, n = c.graph.values[prm.value].shape.numel();
    CHECK(c.plan.values[prm.grad].offset / 8 == off);
    std::vector<double> sub(w.begin() + off, w.begin() + off + n);
    auto sub_loss = [&] {
      std::copy(sub.begin(), sub.end(), w.begin() + off);
      return loss();
    };
    const std::vector<double> num = numeric_grad(sub_loss, sub);
    std::copy(sub.begin(), sub.end(), w.begin() + off);
    const std::vector<double> a(grad.begin() + off, grad.begin() + off + n);
    const Diff d = diff(a, num);
    double norm = 0;
    for (double v : num) norm += v * v;
    INFO(prm.name << ": " << d.str() << ", |numeric| " << std::sqrt(norm));
    if (std::find(zero_grad.begin(), zero_grad.end(), prm.name) != zero_grad.end()) {
      CHECK(std::sqrt(norm) < 1e-8);
      CHECK(d.max_abs < 1e-8);
    } else {
      CHECK(d.rel < 1e-6);
      CHECK(std::sqrt(norm) > 1e-6);  // the path is exercised
    }
    for (int64_t i = 0; i < n; ++i) covered[off + i] = true;
  }
  // Nothing else is written into the Grads region (alignment padding stays zero).
  for (size_t i = 0; i < grad.size(); ++i)
    if (!covered[i]) CHECK(grad[i] == 0.0);
  // The finite differences left the weights as they were: the loss is reproducible.
  CHECK(loss() == l0);
}

}  // namespace

TEST_CASE("train-program gradients of a small CNN equal float64 finite differences", "[e2e][gradcheck][cnn]") {
  // conv(bias) 3x3 p1 -> bn -> relu -> max_pool 2 -> conv 3x3 s2 p1 -> avg_pool 2 -> global_avg_pool -> linear
  gradcheck_train_program(small_cnn_spec(3), 1, {"conv1.bias"});  // conv2's input gradient only
}

TEST_CASE("train-program gradients of a residual block with a downsample shortcut equal finite differences",
          "[e2e][gradcheck][cnn][resnet]") {
  Spec s = resnet_block_spec(3);
  {
    Result<Compiled> c = compile_spec(s, image_data(3, 3));
    REQUIRE(c.ok());
    const Program& p = *c->graph.find_program("train");
    bool fused_add = false;
    for (const auto& n : p.nodes)  // the add+relu, fused into a batch norm (pass_fuse_bn_add)
      fused_add |= n.op == OpKind::BatchNorm && n.attrs.relu && n.attrs.residual;
    REQUIRE(fused_add);
  }
  gradcheck_train_program(s, 3);  // conv1, conv2, ds_conv; not the stem
}

TEST_CASE("a residual block with an identity shortcut: the input gradient is the sum of both paths",
          "[e2e][gradcheck][cnn][resnet]") {
  // stem conv0 -> bn0 -> relu0; conv1 -> bn1 -> relu1 -> conv2 -> bn2; add [bn2, relu0] -> relu -> gap -> fc
  Spec s = cnn_base_spec(3);
  cnn_push(s, conv_layer("conv0", 4, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn0"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu0"));
  cnn_push(s, conv_layer("conv1", 4, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, conv_layer("conv2", 4, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Add, "add", {"bn2", "relu0"}));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  gradcheck_train_program(s, 2);
}

TEST_CASE("a bottleneck block with pointwise convolutions: fused residual batch norm and fused gradient sums",
          "[e2e][gradcheck][cnn][resnet]") {
  // stem conv0 3x3 -> bn0 -> relu0; conv1 1x1 -> bn1 -> relu1 -> conv2 3x3 -> bn2 -> relu2 -> conv3 1x1 -> bn3;
  // shortcut ds_conv 1x1 (relu0) -> ds_bn; add [bn3, ds_bn] -> relu -> gap -> fc. relu0's gradient sums two
  // pointwise dgrads (conv1, ds_conv): the later one absorbs the sum (pass_fuse_grad_accumulate).
  Spec s = cnn_base_spec(3);
  cnn_push(s, conv_layer("conv0", 4, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn0"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu0"));
  cnn_push(s, conv_layer("conv1", 3, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, conv_layer("conv2", 3, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, conv_layer("conv3", 6, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn3"));
  cnn_push(s, conv_layer("ds_conv", 6, 1, 0, 0, false, {"relu0"}));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "ds_bn"));
  cnn_push(s, cnn_layer(LayerKind::Add, "add", {"bn3", "ds_bn"}));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu3"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  {
    Result<Compiled> c = compile_spec(s, image_data(3, 3));
    REQUIRE(c.ok());
    const Program& p = *c->graph.find_program("train");
    int residual = 0, accumulate = 0;
    for (const auto& n : p.nodes) {
      residual += n.op == OpKind::BatchNorm && n.attrs.residual;
      accumulate += n.op == OpKind::Conv2dGradInput && n.attrs.accumulate;
      CHECK(n.op != OpKind::Add);  // both sums are gone: the forward one and relu0's gradient sum
    }
    CHECK(residual == 1);
    CHECK(accumulate == 1);
  }
  gradcheck_train_program(s, 4);  // conv1, conv2, conv3, ds_conv
}

// ---- training through train_run on the synthetic dataset ----

namespace {

// conv 3x3 p1 (8) -> bn -> relu -> max_pool 2 -> conv 3x3 p1 (8) -> bn -> relu -> gap -> linear (4 classes), on
// 8x8x3 synthetic images (64 train / 32 val), batch 16, one epoch on the CPU.
Spec tiny_cnn_train_spec(uint64_t seed) {
  Spec s = cnn_base_spec(16);
  s.seed = seed;
  s.data.dataset = DatasetKind::Synthetic;
  s.data.synthetic.train_size = 64;
  s.data.synthetic.val_size = 32;
  s.data.synthetic.height = 8;
  s.data.synthetic.width = 8;
  s.data.synthetic.channels = 3;
  s.data.synthetic.classes = 4;
  s.data.workers = 2;
  s.data.mean = {0.5};
  s.data.std = {0.25};
  cnn_push(s, conv_layer("conv1", 8, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool1", 2));
  cnn_push(s, conv_layer("conv2", 8, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 4));
  s.optimizer.lr = 0.01;
  s.train.epochs = 1;
  s.train.device = DeviceKind::Cpu;
  s.train.threads = 2;
  return s;
}

TrainResult train_cnn(const Spec& s) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  Result<TrainResult> r = train_run(s, opt, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

}  // namespace

TEST_CASE("a tiny CNN trains one epoch on the synthetic dataset on the CPU backend", "[e2e][train][cnn]") {
  const Spec s = tiny_cnn_train_spec(3);
  TrainResult r = train_cnn(s);
  CHECK(r.backend == "cpu");
  REQUIRE(r.epochs.size() == 1);
  const EpochRecord& e = r.epochs[0];
  CHECK(e.step == 4);  // 64 / 16
  CHECK(std::isfinite(e.train_loss));
  CHECK(std::isfinite(e.val_loss));
  CHECK(e.train_loss > 0);
  CHECK(e.val_top1 >= 0);
  CHECK(e.val_top1 <= 1);
  REQUIRE_FALSE(r.final_weights.empty());
  for (float v : r.final_weights) CHECK(std::isfinite(v));
  // The weights moved away from their initialisation (some step was taken).
  Result<DataShape> d = data_shape(s);
  REQUIRE(d.ok());
  CHECK(d->h == 8);
  CHECK(d->c == 3);
  CHECK(d->num_classes == 4);
  Result<Compiled> c = compile_spec(s, d.value());
  REQUIRE(c.ok());
  std::vector<std::byte> init = params_init(c.value(), s.seed);
  REQUIRE(init.size() == r.final_weights.size() * 4);
  CHECK(std::memcmp(init.data(), r.final_weights.data(), init.size()) != 0);
}

TEST_CASE("two CNN runs with one seed give bitwise-equal final weights", "[e2e][determinism][cnn]") {
  TrainResult a = train_cnn(tiny_cnn_train_spec(11));
  TrainResult b = train_cnn(tiny_cnn_train_spec(11));
  REQUIRE_FALSE(a.final_weights.empty());
  CHECK(a.final_weights == b.final_weights);
  REQUIRE(a.epochs.size() == b.epochs.size());
  CHECK(a.epochs[0].train_loss == b.epochs[0].train_loss);
  CHECK(a.epochs[0].val_loss == b.epochs[0].val_loss);
}

TEST_CASE("CNN results do not depend on the number of compute threads", "[e2e][determinism][cnn]") {
  Spec one = tiny_cnn_train_spec(5), three = tiny_cnn_train_spec(5);
  one.train.threads = 1;
  one.data.workers = 1;
  three.train.threads = 3;
  TrainResult a = train_cnn(one), b = train_cnn(three);
  CHECK(a.final_weights == b.final_weights);
  CHECK(a.epochs[0].val_loss == b.epochs[0].val_loss);
}

TEST_CASE("a different seed gives a different CNN run", "[e2e][determinism][cnn]") {
  TrainResult a = train_cnn(tiny_cnn_train_spec(1));
  TrainResult b = train_cnn(tiny_cnn_train_spec(2));
  CHECK(a.final_weights != b.final_weights);
}

TEST_CASE("a train step updates the batch-norm running statistics as PyTorch does (unbiased variance)",
          "[e2e][cnn][batchnorm]") {
  // batch_norm straight on the image, so its input is the batch itself.
  Spec s = cnn_base_spec(3);
  LayerSpec bn = cnn_layer(LayerKind::BatchNorm, "bn");
  bn.momentum = 0.25;
  cnn_push(s, bn);
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  CompileOptions opt;
  opt.compute = DType::F64;
  opt.optimizer = false;
  Result<Compiled> cr = compile_spec(s, image_data(3, 3), opt);
  REQUIRE(cr.ok());
  const Compiled& c = cr.value();
  REQUIRE(c.graph.buffers.size() == 2);
  auto be = make_cpu_backend(c, 1, 1);
  REQUIRE(be->write_region(Region::Buffers, buffers_init(c)).ok());
  REQUIRE(be->write_region(Region::Weights, params_init(c, 2)).ok());
  const std::vector<double> xd = random_vec(3 * 8 * 8 * 2, 4, -2, 3);
  const std::vector<float> x(xd.begin(), xd.end());
  const std::vector<int32_t> y = {0, 1, 2};
  REQUIRE(be->load_batch(0, 0, x.data(), y.data(), 3).ok());
  REQUIRE(be->run(0, 0).ok());
  std::vector<std::byte> bb = be->read_region(Region::Buffers);
  auto at = [&](ValueId v, int ch) {
    double d;
    std::memcpy(&d, bb.data() + c.plan.values[v].offset + 8 * ch, 8);
    return d;
  };
  const int64_t rows = 3 * 8 * 8;
  for (int ch = 0; ch < 2; ++ch) {
    double mean = 0, sq = 0;
    for (int64_t r = 0; r < rows; ++r) mean += static_cast<double>(x[r * 2 + ch]);
    mean /= rows;
    for (int64_t r = 0; r < rows; ++r) sq += (x[r * 2 + ch] - mean) * (x[r * 2 + ch] - mean);
    const double unbiased = sq / (rows - 1);
    INFO("channel " << ch);
    CHECK(at(c.graph.buffers[0].value, ch) == Approx(0.75 * 0 + 0.25 * mean).epsilon(1e-12));
    CHECK(at(c.graph.buffers[1].value, ch) == Approx(0.75 * 1 + 0.25 * unbiased).epsilon(1e-12));
  }
}
