// pass_fold_conv_bias through the whole compiler and the CPU backend. float64: a net with conv(bias) + batch norm
// (+ReLU) blocks, folded vs unfolded, gives the same train loss, gradients (block input, conv weights and biases,
// gamma, beta), running statistics after the train step, and eval logits, to ~1e-12; the folded net's gradients
// equal central finite differences, and its conv biases' gradients are exactly 0 (a ZeroFill node), which central
// differences of the unfolded net (b added before the batch norm) confirm. float32: a small conv-bias + batch-norm
// CNN trains on the synthetic dataset through train_run, from a checkpoint with non-zero conv biases, with and
// without the pass to the same losses and weights within float32 rounding; and step by step on the CPU backend,
// where the folded run's bias gradients are exactly 0 every step and its biases move by weight decay alone.
#include <catch2/catch.hpp>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <unistd.h>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/backend_compare.h"
#include "tests/support/cnn_spec.h"
#include "tests/support/gradcheck.h"
#include "tests/support/weights_diff.h"

using namespace trctl;
using namespace trctl::testing;

namespace {

// conv0 3x3 p1 (no bias) -> relu0 -> conv1 3x3 p1 (bias) -> bn1 -> relu1 -> pool1 max 2 -> conv2 3x3 s2 p1 (bias)
// -> bn2 -> gap -> fc. conv1's input gradient is the gradient w.r.t. the first block's input.
Spec bias_bn_spec(int batch) {
  Spec s = cnn_base_spec(batch);
  cnn_push(s, conv_layer("conv0", 4, 3, 0, 1));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu0"));
  cnn_push(s, conv_layer("conv1", 5, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool1", 2));
  cnn_push(s, conv_layer("conv2", 6, 3, 2, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 3));
  return s;
}

std::vector<double> doubles(const std::vector<std::byte>& b, int64_t offset, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  std::memcpy(v.data(), b.data() + offset, static_cast<size_t>(n) * 8);
  return v;
}

// The activation v still holds what its node wrote after program `prog` ran: no node after v's producer writes an
// activation over v's bytes.
bool survives(const Compiled& c, int prog, ValueId v) {
  const Program& p = c.graph.programs[prog];
  const Placement& pv = c.plan.values[v];
  bool after = false;
  for (const Node& n : p.nodes) {
    if (after)
      for (ValueId u : n.out) {
        const Placement& pu = c.plan.values[u];
        if (u != v && pu.region == pv.region && pu.offset < pv.offset + pv.bytes && pv.offset < pu.offset + pu.bytes)
          return false;
      }
    after |= std::find(n.out.begin(), n.out.end(), v) != n.out.end();
  }
  return after;
}

// A compiled float64 train + eval pair on one backend, with non-trivial biases, batch-norm parameters and
// running statistics.
struct F64Net {
  Compiled c;
  std::unique_ptr<Backend> be;
  std::vector<double> w;  // the Weights region
  int train = -1, eval = -1;

  explicit F64Net(const Spec& s, bool fold) {
    CompileOptions opt;
    opt.compute = DType::F64;
    opt.optimizer = false;
    opt.fold_conv_bias = fold;
    Result<Compiled> cr = compile_spec(s, image_data(3, 3), opt);
    INFO((cr.ok() ? std::string() : cr.error_text()));
    REQUIRE(cr.ok());
    c = std::move(cr.value());
    train = program_index(c, "train");
    eval = program_index(c, "eval");
    be = make_cpu_backend(c, 77, 2);
    std::vector<std::byte> wb = params_init(c, 5);
    w.resize(wb.size() / 8);
    std::memcpy(w.data(), wb.data(), wb.size());
    for (const auto& prm : c.graph.params) {
      if (prm.decay) continue;  // biases and batch-norm parameters: away from 0 and 1
      const bool scale = prm.init == ParamInfo::Init::Ones;
      for (int64_t i = 0; i < c.graph.values[prm.value].shape.numel(); ++i)
        w[c.plan.values[prm.value].offset / 8 + i] = (scale ? 1.0 : 0.0) + 0.7 * std::sin(1.0 + prm.value + 3 * i);
    }
    std::vector<std::byte> bb = buffers_init(c);
    std::vector<double> buf(bb.size() / 8);
    std::memcpy(buf.data(), bb.data(), bb.size());
    for (const auto& b : c.graph.buffers)
      for (int64_t i = 0; i < c.graph.values[b.value].shape.numel(); ++i)
        buf[c.plan.values[b.value].offset / 8 + i] = b.init + 0.4 * std::cos(2.0 + b.value + i);
    std::memcpy(bb.data(), buf.data(), bb.size());
    REQUIRE(be->write_region(Region::Buffers, bb).ok());
    const std::vector<double> xd = random_vec(3 * 8 * 8 * 2, 9), vd = random_vec(3 * 8 * 8 * 2, 10);
    x.assign(xd.begin(), xd.end());
    xv.assign(vd.begin(), vd.end());
  }

  std::vector<float> x, xv;
  const std::vector<int32_t> y = {2, 0, 1}, yv = {1, 1, 0};

  double train_loss() {
    std::vector<std::byte> b(w.size() * 8);
    std::memcpy(b.data(), w.data(), b.size());
    REQUIRE(be->write_region(Region::Weights, b).ok());
    REQUIRE(be->load_batch(train, 0, x.data(), y.data(), 3).ok());
    be->set_step(0);
    REQUIRE(be->run(train, 0).ok());
    return be->last_loss(train);
  }

  std::vector<double> param_slice(const std::vector<std::byte>& region, ValueId v) const {
    return doubles(region, c.plan.values[v].offset, c.graph.values[v].shape.numel());
  }
};

// What one train step and one eval batch give, by parameter / buffer name.
struct F64Result {
  double loss = 0, eval_loss = 0;
  std::map<std::string, std::vector<double>> grads, buffers;
  std::vector<double> dx, eval_logits;  // the gradient w.r.t. the first block's input (relu0's output); eval logits
};

F64Result run_once(const Spec& s, bool fold) {
  F64Net net(s, fold);
  F64Result r;
  r.loss = net.train_loss();
  const Program& tp = net.c.graph.programs[net.train];
  const std::vector<std::byte> acts = net.be->read_region(Region::Activations);
  for (const Node& n : tp.nodes)
    if (n.op == OpKind::Conv2dGradInput && n.name == "conv1.grad_input") {
      REQUIRE(survives(net.c, net.train, n.out[0]));
      r.dx = net.param_slice(acts, n.out[0]);
    }
  REQUIRE_FALSE(r.dx.empty());
  const std::vector<std::byte> grads = net.be->read_region(Region::Grads);
  for (const auto& prm : net.c.graph.params) r.grads[prm.name] = net.param_slice(grads, prm.grad);
  const std::vector<std::byte> bufs = net.be->read_region(Region::Buffers);
  for (const auto& b : net.c.graph.buffers) r.buffers[b.name] = net.param_slice(bufs, b.value);
  // Eval after the step: the running statistics it updated.
  REQUIRE(net.be->load_batch(net.eval, 0, net.xv.data(), net.yv.data(), 3).ok());
  REQUIRE(net.be->run(net.eval, 0).ok());
  r.eval_loss = net.be->last_loss(net.eval);
  const ValueId logits = net.c.graph.programs[net.eval].logits;
  REQUIRE(survives(net.c, net.eval, logits));
  r.eval_logits = net.param_slice(net.be->read_region(Region::Activations), logits);
  return r;
}

bool is_conv_bias(const std::string& name) { return name == "conv1.bias" || name == "conv2.bias"; }

}  // namespace

TEST_CASE("a folded conv bias gives the unfolded float64 loss, gradients, running statistics and eval output",
          "[e2e][cnn][fold_conv_bias]") {
  const Spec s = bias_bn_spec(3);
  {  // both conv biases are folded (bn1 with its fused ReLU, bn2 without)
    F64Net net(s, true);
    int folded = 0;
    for (const auto& p : net.c.graph.programs)
      for (const auto& n : p.nodes) folded += n.attrs.prebias;
    CHECK(folded == 2 * static_cast<int>(net.c.graph.programs.size()));
  }
  const F64Result a = run_once(s, true), b = run_once(s, false);
  INFO("loss folded " << a.loss << " unfolded " << b.loss);
  CHECK(std::abs(a.loss - b.loss) <= 1e-12 * std::abs(b.loss));
  CHECK(std::abs(a.eval_loss - b.eval_loss) <= 1e-12 * std::abs(b.eval_loss));
  auto close = [](const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
    const Diff d = diff(got, want);
    INFO(what << ": " << d.str());
    CHECK(d.rel < 1e-12);
  };
  close(a.dx, b.dx, "dx (block input)");
  close(a.eval_logits, b.eval_logits, "eval logits");
  REQUIRE(a.grads.size() == b.grads.size());
  for (const auto& [name, g] : b.grads) {
    REQUIRE(a.grads.count(name));
    if (is_conv_bias(name)) {  // exactly 0 in exact arithmetic (the batch norm removes a per-channel shift)
      const Diff d = diff(a.grads.at(name), g);
      INFO(name << ": " << d.str());
      CHECK(d.max_abs < 1e-12);
      for (double v : g) CHECK(std::abs(v) < 1e-12);  // unfolded: the column sums of dX, rounding noise
      for (double v : a.grads.at(name)) CHECK(v == 0.0);  // folded: the zero fill
    } else {
      close(a.grads.at(name), g, name + " gradient");
    }
  }
  REQUIRE(a.buffers.size() == 4);
  for (const auto& [name, v] : b.buffers) close(a.buffers.at(name), v, name + " after the step");
}

TEST_CASE("the folded float64 net's gradients equal central finite differences", "[e2e][gradcheck][fold_conv_bias]") {
  F64Net net(bias_bn_spec(3), true);
  const double l0 = net.train_loss();
  REQUIRE(std::isfinite(l0));
  const std::vector<std::byte> gb = net.be->read_region(Region::Grads);
  for (const auto& prm : net.c.graph.params) {
    const int64_t off = net.c.plan.values[prm.value].offset / 8, n = net.c.graph.values[prm.value].shape.numel();
    std::vector<double> sub(net.w.begin() + off, net.w.begin() + off + n);
    auto loss = [&] {
      std::copy(sub.begin(), sub.end(), net.w.begin() + off);
      return net.train_loss();
    };
    const std::vector<double> num = numeric_grad(loss, sub);
    std::copy(sub.begin(), sub.end(), net.w.begin() + off);
    const std::vector<double> a = net.param_slice(gb, prm.grad);
    const Diff d = diff(a, num);
    INFO(prm.name << ": " << d.str());
    if (is_conv_bias(prm.name)) {
      CHECK(d.max_abs < 1e-8);
      for (double v : a) CHECK(v == 0.0);
    } else {
      CHECK(d.rel < 1e-6);
    }
  }
  CHECK(net.train_loss() == l0);
}

TEST_CASE("d loss / d conv bias through a train-mode batch norm is zero: central differences of the unfolded net",
          "[e2e][gradcheck][fold_conv_bias]") {
  // The folded forward never adds b to the normalised input, so its finite differences in b are trivially 0. The
  // unfolded net adds b to y before the batch norm: its central differences measure dLoss/db itself, and find 0
  // to finite-difference noise, which is what the folded net's zero fill writes.
  F64Net unfolded(bias_bn_spec(3), false);
  F64Net folded(bias_bn_spec(3), true);
  REQUIRE(unfolded.w == folded.w);  // the same layout and values: the fold changes no parameter
  const double l0 = unfolded.train_loss();
  REQUIRE(std::abs(folded.train_loss() - l0) <= 1e-12 * std::abs(l0));
  const std::vector<std::byte> gu = unfolded.be->read_region(Region::Grads);
  const std::vector<std::byte> gf = folded.be->read_region(Region::Grads);
  int checked = 0;
  for (const auto& prm : unfolded.c.graph.params) {
    if (!is_conv_bias(prm.name)) continue;
    ++checked;
    const int64_t off = unfolded.c.plan.values[prm.value].offset / 8;
    const int64_t n = unfolded.c.graph.values[prm.value].shape.numel();
    std::vector<double> sub(unfolded.w.begin() + off, unfolded.w.begin() + off + n);
    auto loss = [&] {
      std::copy(sub.begin(), sub.end(), unfolded.w.begin() + off);
      return unfolded.train_loss();
    };
    std::vector<double> moved = sub;
    for (double& v : moved) v += 0.5;  // a shift of 0.5 changes the loss by rounding only
    std::copy(moved.begin(), moved.end(), unfolded.w.begin() + off);
    const double l_moved = unfolded.train_loss();
    std::copy(sub.begin(), sub.end(), unfolded.w.begin() + off);
    const std::vector<double> num = numeric_grad(loss, sub);
    const std::vector<double> sums = unfolded.param_slice(gu, prm.grad), zeros = folded.param_slice(gf, prm.grad);
    INFO(prm.name << ": loss " << l0 << ", with the bias shifted by 0.5 " << l_moved);
    CHECK(std::abs(l_moved - l0) <= 1e-12 * std::abs(l0));
    for (int64_t i = 0; i < n; ++i) {
      INFO("channel " << i << ": finite differences " << num[i] << ", unfolded sum " << sums[i]);
      CHECK(std::abs(num[i]) < 1e-8);
      CHECK(std::abs(sums[i]) < 1e-12);
      CHECK(zeros[i] == 0.0);
    }
  }
  CHECK(checked == 2);
}

namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("trctl_fold_conv_bias_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(path); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// conv1 3x3 p1 (bias) -> bn1 -> relu1 -> pool1 max 2 -> conv2 3x3 p1 (bias) -> bn2 -> relu2 -> gap -> fc, on 8x8x3
// synthetic images (96 train / 40 val), batch 16, SGD with momentum, 2 epochs on the CPU. (Adam would turn the
// unfolded run's conv-bias gradients, rounding noise around 0, into full-size steps of either sign, where the
// folded run's exact zeros give none: the runs would then part by more than rounding, in the running means and so
// in the validation loss.)
Spec bias_bn_train_spec() {
  Spec s = cnn_base_spec(16);
  s.seed = 7;
  s.data.dataset = DatasetKind::Synthetic;
  s.data.synthetic.train_size = 96;
  s.data.synthetic.val_size = 40;
  s.data.synthetic.height = 8;
  s.data.synthetic.width = 8;
  s.data.synthetic.channels = 3;
  s.data.synthetic.classes = 4;
  s.data.workers = 1;
  s.data.mean = {0.5};
  s.data.std = {0.25};
  cnn_push(s, conv_layer("conv1", 8, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn1"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu1"));
  cnn_push(s, pool_layer(LayerKind::MaxPool, "pool1", 2));
  cnn_push(s, conv_layer("conv2", 8, 3, 0, 1, true));
  cnn_push(s, cnn_layer(LayerKind::BatchNorm, "bn2"));
  cnn_push(s, cnn_layer(LayerKind::Relu, "relu2"));
  cnn_push(s, cnn_layer(LayerKind::GlobalAvgPool, "gap"));
  cnn_push(s, linear_layer("fc", 4));
  s.optimizer.kind = OptimizerKind::Sgd;
  s.optimizer.lr = 0.05;
  s.optimizer.momentum = 0.9;
  s.optimizer.weight_decay = 1e-4;
  s.train.epochs = 2;
  s.train.device = DeviceKind::Cpu;
  s.train.threads = 2;
  s.run.progress = ProgressKind::Off;
  return s;
}

TrainResult train(const Spec& s, TrainOptions opt) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  Result<TrainResult> r = train_run(s, opt, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

// Conv biases start at 0 (y + 0 rounds to y: nothing to compare), so the compared runs start from a checkpoint of
// one unfolded AdamW epoch, whose noisy bias steps leave them well away from 0, and whose running statistics hold
// them (folded, the biases' gradients are exactly 0 and Adam would leave them at 0). Options for a run from there.
TrainOptions from_warm_checkpoint(const Spec& s, const Scratch& scratch) {
  Spec warm = s;
  warm.optimizer.kind = OptimizerKind::AdamW;
  warm.optimizer.lr = 0.01;
  warm.train.epochs = 1;
  warm.train.accumulate_steps = 1;
  warm.optimizer.clip_grad_norm = 0;
  warm.train.checkpoint_every = 1;
  warm.run.out_dir = scratch.path.string();
  warm.run.name = "warm";
  TrainOptions warm_opt;
  warm_opt.fold_conv_bias = false;
  train(warm, warm_opt);
  TrainOptions opt;
  opt.write_run_dir = false;
  opt.init_from = (scratch.path / "warm").string();
  return opt;
}

}  // namespace

TEST_CASE("a conv-bias + batch-norm CNN trains with the folded bias to the unfolded run's losses (float32)",
          "[e2e][train][cnn][fold_conv_bias]") {
  const Spec s = bias_bn_train_spec();
  {
    Result<DataShape> d = data_shape(s);
    REQUIRE(d.ok());
    Result<Compiled> c = compile_spec(s, d.value());
    REQUIRE(c.ok());
    int folded = 0;
    for (const auto& n : c->graph.find_program("train")->nodes) folded += n.attrs.prebias;
    CHECK(folded == 2);
  }
  Scratch scratch;
  TrainOptions opt = from_warm_checkpoint(s, scratch);
  const TrainResult a = train(s, opt);
  opt.fold_conv_bias = false;
  const TrainResult b = train(s, opt);
  REQUIRE(a.epochs.size() == 2);
  REQUIRE(b.epochs.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    INFO("epoch " << e + 1 << ": train loss folded " << a.epochs[e].train_loss << " unfolded "
                  << b.epochs[e].train_loss << "; val loss " << a.epochs[e].val_loss << " / " << b.epochs[e].val_loss);
    CHECK(std::isfinite(a.epochs[e].train_loss));
    CHECK(std::abs(a.epochs[e].train_loss - b.epochs[e].train_loss) <= 1e-5 * std::abs(b.epochs[e].train_loss));
    CHECK(std::abs(a.epochs[e].val_loss - b.epochs[e].val_loss) <= 1e-5 * std::abs(b.epochs[e].val_loss));
  }
  REQUIRE(a.final_weights.size() == b.final_weights.size());
  const double r = rel_diff(a.final_weights, b.final_weights);
  INFO("relative weight difference " << r);
  CHECK(r < 1e-5);
  CHECK(a.final_weights != b.final_weights);  // the y + b rounding did differ: a real comparison
}

TEST_CASE("with gradient accumulation and clipping, the folded biases' zero gradients train like the unfolded run",
          "[e2e][train][cnn][fold_conv_bias][accumulate]") {
  // Micro-batch programs zero the biases' gradients too; the accumulators add zeros, clipping scales them, the
  // non-finite check and the optimizer see ordinary zeros.
  Spec s = bias_bn_train_spec();
  s.train.accumulate_steps = 2;
  s.optimizer.clip_grad_norm = 0.5;
  {
    Result<DataShape> d = data_shape(s);
    REQUIRE(d.ok());
    Result<Compiled> c = compile_spec(s, d.value());
    REQUIRE(c.ok());
    int micro = 0;
    for (const auto& p : c->graph.programs) {
      if (p.kind != ProgramKind::Train) continue;
      micro += p.micro;
      int zero_fills = 0;
      for (const auto& n : p.nodes) zero_fills += n.op == OpKind::ZeroFill;
      INFO(p.name);
      CHECK(zero_fills == 2);
    }
    CHECK(micro == 1);
  }
  Scratch scratch;
  TrainOptions opt = from_warm_checkpoint(s, scratch);
  const TrainResult a = train(s, opt);
  opt.fold_conv_bias = false;
  const TrainResult b = train(s, opt);
  REQUIRE(a.epochs.size() == 2);
  REQUIRE(b.epochs.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    INFO("epoch " << e + 1 << ": train loss folded " << a.epochs[e].train_loss << " unfolded "
                  << b.epochs[e].train_loss);
    CHECK(std::isfinite(a.epochs[e].train_loss));
    CHECK(std::abs(a.epochs[e].train_loss - b.epochs[e].train_loss) <= 1e-5 * std::abs(b.epochs[e].train_loss));
  }
  CHECK(a.skipped_steps == 0);
  REQUIRE(a.final_weights.size() == b.final_weights.size());
  const double r = rel_diff(a.final_weights, b.final_weights);
  INFO("relative weight difference " << r);
  CHECK(r < 1e-5);
}

namespace {

// One float32 run of `steps` SGD steps of bias_bn_train_spec's net on the CPU backend (weight decay on biases too,
// as PyTorch's default), from weights with non-zero conv biases, over fixed random batches. Records every step's
// conv-bias gradients, the largest |gradient| of the conv weights, and the final Weights region.
struct StepRun {
  Compiled c;
  std::vector<std::vector<float>> bias_grads;  // per step: conv1.bias then conv2.bias
  float weight_grad_max = 0;                   // the largest |conv weight gradient| over all steps
  std::vector<float> w0, w;                    // Weights region before the first and after the last step
};

std::vector<float> floats(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

StepRun run_steps(bool fold, int steps) {
  Spec s = bias_bn_train_spec();
  s.optimizer.decay_bias_and_norm = true;
  s.optimizer.weight_decay = 0.05;  // large, so that the biases' decay is visible over a few steps
  Result<DataShape> d = data_shape(s);
  REQUIRE(d.ok());
  CompileOptions opt;
  opt.fold_conv_bias = fold;
  Result<Compiled> cr = compile_spec(s, d.value(), opt);
  INFO((cr.ok() ? std::string() : cr.error_text()));
  REQUIRE(cr.ok());
  StepRun r;
  r.c = std::move(cr.value());
  const Compiled& c = r.c;
  int train = -1;
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == "train") train = static_cast<int>(i);
  REQUIRE(train >= 0);
  std::unique_ptr<Backend> be = make_cpu_backend(c, 7, 2);
  r.w0 = floats(params_init(c, 7));
  std::vector<float> g0(static_cast<size_t>(c.plan.region_bytes[static_cast<int>(Region::Grads)] / 4), 0.0f);
  for (const auto& prm : c.graph.params) {
    if (!is_conv_bias(prm.name)) continue;
    const int64_t off = c.plan.values[prm.value].offset / 4, n = c.graph.values[prm.value].shape.numel();
    for (int64_t i = 0; i < n; ++i) {
      r.w0[static_cast<size_t>(off + i)] = static_cast<float>(0.6 * std::sin(1.0 + 2 * i + off));
      g0[static_cast<size_t>(c.plan.values[prm.grad].offset / 4 + i)] = 7.0f;  // must be overwritten by a step
    }
  }
  REQUIRE(be->write_weights(r.w0).ok());
  REQUIRE(be->write_region(Region::Buffers, buffers_init(c)).ok());
  std::vector<std::byte> gb(g0.size() * 4);
  std::memcpy(gb.data(), g0.data(), gb.size());
  REQUIRE(be->write_region(Region::Grads, gb).ok());
  be->set_lr(0.05);
  const int64_t batch = c.graph.programs[train].batch, per = 8 * 8 * 3;
  for (int step = 0; step < steps; ++step) {
    const std::vector<double> xd = random_vec(static_cast<size_t>(batch * per), 100 + step);
    const std::vector<float> x(xd.begin(), xd.end());
    std::vector<int32_t> y(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + step) % 4);
    REQUIRE(be->load_batch(train, 0, x.data(), y.data(), batch).ok());
    REQUIRE(be->run(train, 0).ok());
    const std::vector<float> g = floats(be->read_region(Region::Grads));
    std::vector<float> biases;
    for (const auto& prm : c.graph.params) {
      const int64_t off = c.plan.values[prm.grad].offset / 4, n = c.graph.values[prm.value].shape.numel();
      if (is_conv_bias(prm.name))
        biases.insert(biases.end(), g.begin() + off, g.begin() + off + n);
      else if (prm.name == "conv1.weight" || prm.name == "conv2.weight")
        for (int64_t i = 0; i < n; ++i) r.weight_grad_max = std::max(r.weight_grad_max, std::abs(g[off + i]));
    }
    r.bias_grads.push_back(std::move(biases));
  }
  r.w = be->read_weights();
  return r;
}

}  // namespace

TEST_CASE("training with the folded conv biases: their gradients are exactly 0 every step, the weights match the "
          "unfolded run's",
          "[e2e][train][cnn][fold_conv_bias]") {
  const int steps = 12;
  const StepRun a = run_steps(true, steps), b = run_steps(false, steps);
  int zero_fills = 0;
  for (const auto& n : a.c.graph.find_program("train")->nodes) zero_fills += n.op == OpKind::ZeroFill;
  CHECK(zero_fills == 2);
  REQUIRE(a.bias_grads.size() == static_cast<size_t>(steps));
  REQUIRE(b.bias_grads.size() == static_cast<size_t>(steps));
  float noise = 0;  // the unfolded run's bias gradients: the column sums of dX, rounding noise around 0
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step + 1);
    REQUIRE(a.bias_grads[step].size() == 16);
    for (float v : a.bias_grads[step]) CHECK(v == 0.0f);
    for (float v : b.bias_grads[step]) noise = std::max(noise, std::abs(v));
  }
  INFO("unfolded bias gradients up to " << noise << ", conv weight gradients up to " << b.weight_grad_max);
  CHECK(b.weight_grad_max > 1e-3f);
  CHECK(noise < 1e-4f * b.weight_grad_max);
  // Same weights to float32 rounding (the unfolded run's biases take steps of that noise; y + b rounds).
  REQUIRE(a.w.size() == b.w.size());
  const double r = rel_diff(a.w, b.w);
  INFO("relative weight difference " << r);
  CHECK(r < 1e-5);
  // With a zero gradient, SGD with momentum moves each folded bias by weight decay alone:
  // buf = momentum * buf + wd * b, b -= lr * buf (buf starts as the first step's wd * b).
  for (const auto& prm : a.c.graph.params) {
    if (!is_conv_bias(prm.name)) continue;
    const int64_t off = a.c.plan.values[prm.value].offset / 4, n = a.c.graph.values[prm.value].shape.numel();
    for (int64_t i = 0; i < n; ++i) {
      double w = a.w0[static_cast<size_t>(off + i)], buf = 0;
      for (int step = 0; step < steps; ++step) {
        buf = step == 0 ? 0.05 * w : 0.9 * buf + 0.05 * w;
        w -= 0.05 * buf;
      }
      INFO(prm.name << "[" << i << "]: start " << a.w0[static_cast<size_t>(off + i)] << ", expected " << w << ", got "
                    << a.w[static_cast<size_t>(off + i)]);
      CHECK(std::abs(a.w[static_cast<size_t>(off + i)] - w) <= 1e-6 * std::max(1.0, std::abs(w)));
      CHECK(a.w[static_cast<size_t>(off + i)] != a.w0[static_cast<size_t>(off + i)]);  // decay did apply
    }
  }
}
