// Gradient accumulation (train.accumulate_steps) on the CPU backend: k micro-batches of B/k train like one batch of
// B (SGD and AdamW, within float rounding), the summed float64 gradients equal the full batch's, an epoch's leftover
// micro-batches step with what they have (still / k; steps = ceil(batches / k)), dropout draws a new mask per
// micro-batch, and runs stay deterministic and resume bitwise exactly (epoch and mid-epoch checkpoints).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "core/compiler.h"
#include "runtime/backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/mlp_spec.h"
#include "tests/support/weights_diff.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

// A small dropout MLP on Fashion-MNIST: the masks must differ per micro-batch and survive a resume.
const char* kDropoutMlp =
    "model.layers=[{type: flatten, name: flatten}, {type: linear, name: fc1, out_features: 64}, "
    "{type: relu, name: relu1}, {type: dropout, name: drop1, p: 0.3}, {type: linear, name: fc2, out_features: 10}]";

Spec load(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"train.device=cpu", "train.epochs=2", "run.progress=off",
                                       "data.val_batch_size=2000", "scheduler.warmup_epochs=0"});
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

Result<TrainResult> run(const Spec& spec, const std::string& resume = "", const std::atomic<int>* stop = nullptr,
                        std::function<void(int64_t)> on_step = {}) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = spec.run.out_dir != "runs";  // the tests that checkpoint set run.out_dir
  opt.resume = resume;
  opt.stop_signal = stop;
  opt.on_step = std::move(on_step);
  return train_run(spec, opt, log);
}

TrainResult run_ok(const Spec& spec) {
  Result<TrainResult> r = run(spec);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

using testing::rel_diff;

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("trctl_accum_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(path); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// ---- Backend-level float64 runs (no optimizer: the flush programs end with the summed gradients).

struct GradRig {
  std::unique_ptr<Compiled> c;
  std::unique_ptr<Backend> be;
  // 4x4x1 samples, 3 classes: flatten -> fc1 (8) -> relu1 [-> drop1] -> fc2.
  GradRig(int k, int batch, int64_t train_n, bool dropout) {
    Spec s = testing::mlp_spec(8, batch, dropout);
    s.train.accumulate_steps = k;
    CompileOptions o;
    o.compute = DType::F64;
    o.optimizer = false;
    Result<Compiled> r = compile_spec(s, testing::small_data(train_n, 4), o);
    INFO((r.ok() ? std::string() : r.error_text()));
    REQUIRE(r.ok());
    c = std::make_unique<Compiled>(std::move(r.value()));
    be = make_cpu_backend(*c, 11, 1);
    REQUIRE(be->write_region(Region::Weights, params_init(*c, 7)).ok());
  }
  int program(const std::string& name) const {
    for (size_t i = 0; i < c->graph.programs.size(); ++i)
      if (c->graph.programs[i].name == name) return static_cast<int>(i);
    FAIL("no program " << name);
    return -1;
  }
  // Runs `name` on samples [from, from + n) of x (n, 4, 4, 1) / y (n).
  void step(const std::string& name, const std::vector<float>& x, const std::vector<int32_t>& y, int64_t from,
            int64_t n) {
    const int p = program(name);
    REQUIRE(be->load_batch(p, 0, x.data() + from * 16, y.data() + from, n).ok());
    REQUIRE(be->run(p, 0).ok());
  }
  // The gradient layout (without the accumulators after it), and the accumulators.
  std::vector<double> grads(bool accumulators = false) {
    const std::vector<std::byte> b = be->read_region(Region::Grads);
    const int64_t layout = c->plan.grad_accum_offset > 0 ? c->plan.grad_accum_offset : static_cast<int64_t>(b.size());
    std::vector<double> g(static_cast<size_t>(layout / 8));
    std::memcpy(g.data(), b.data() + (accumulators ? layout : 0), static_cast<size_t>(layout));
    return g;
  }
};

void random_batch(size_t n, std::vector<float>& x, std::vector<int32_t>& y) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  x.resize(n * 16);
  y.resize(n);
  for (auto& v : x) v = d(rng);
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>(i % 3);
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst / std::max(scale, 1e-300);
}

}  // namespace

TEST_CASE("accumulate_steps 2 at batch 100 trains like batch 200 (SGD with momentum and AdamW)",
          "[e2e][accumulate]") {
  for (const OptimizerKind kind : {OptimizerKind::Sgd, OptimizerKind::AdamW}) {
    INFO(to_string(kind));
    Spec whole = load({"data.train_subset=1200"});  // 6 steps an epoch either way
    whole.optimizer.kind = kind;
    if (kind == OptimizerKind::Sgd) {
      whole.optimizer.lr = 0.05;
      whole.optimizer.momentum = 0.9;
      whole.optimizer.weight_decay = 1e-4;
    }
    Spec split = whole;
    split.data.batch_size = 100;
    split.train.accumulate_steps = 2;
    const TrainResult a = run_ok(whole), b = run_ok(split);
    REQUIRE(a.epochs.size() == 2);
    REQUIRE(b.epochs.size() == 2);
    for (size_t e = 0; e < 2; ++e) {
      CHECK(b.epochs[e].step == a.epochs[e].step);  // optimizer steps
      // The logged loss is each micro-batch's mean (not / k): the epoch means agree up to rounding.
      CHECK(std::abs(b.epochs[e].train_loss - a.epochs[e].train_loss) < 1e-5);
      CHECK(std::abs(b.epochs[e].train_top1 - a.epochs[e].train_top1) < 0.002);  // a near-tie may flip
    }
    // Only the summation order of the weight gradients differs (two half sums added, not one), which 12 steps of
    // training carry along: measured 1.7e-8 (SGD) and 8.8e-8 (AdamW) relative.
    const double r = rel_diff(b.final_weights, a.final_weights);
    INFO("relative weight difference " << r);
    CHECK(r < 1e-6);
    CHECK(std::abs(b.epochs[1].val_loss - a.epochs[1].val_loss) < 1e-4);
  }
}

TEST_CASE("float64: two micro-batches' summed gradients equal the whole batch's", "[e2e][accumulate][gradcheck]") {
  std::vector<float> x;
  std::vector<int32_t> y;
  random_batch(8, x, y);
  GradRig one(1, 8, 16, false), two(2, 4, 16, false), four(4, 2, 16, false);
  one.step("train", x, y, 0, 8);
  two.step("train_micro", x, y, 0, 4);
  CHECK(max_rel(two.grads(true), one.grads()) > 0.1);  // the accumulator holds half the batch only
  two.step("train", x, y, 4, 4);
  for (int j = 0; j < 3; ++j) four.step("train_micro", x, y, 2 * j, 2);
  four.step("train", x, y, 6, 2);
  const std::vector<double> g1 = one.grads();
  // Not bitwise: the gradient GEMMs sum 8 rows at once there and 4 + 4 (2 + 2 + 2 + 2) rows here; the loss
  // gradient itself is bitwise the same ((p - t) * (1/k) / (N/k) = (p - t) / N for k a power of two).
  CHECK(max_rel(two.grads(), g1) < 1e-14);
  CHECK(max_rel(four.grads(), g1) < 1e-14);
  for (double v : two.grads(true)) REQUIRE(v == 0.0);  // the flush cleared the accumulators
  for (double v : four.grads(true)) REQUIRE(v == 0.0);
}

TEST_CASE("float64: an optimizer step with fewer than k micro-batches sums what it has, still divided by k",
          "[e2e][accumulate][gradcheck]") {
  std::vector<float> x;
  std::vector<int32_t> y;
  random_batch(6, x, y);
  GradRig one(1, 3, 6, false), three(3, 3, 6, false);
  one.step("train", x, y, 0, 3);
  const std::vector<double> ga = one.grads();
  one.step("train", x, y, 3, 3);
  const std::vector<double> gb = one.grads();
  three.step("train_micro", x, y, 0, 3);  // an epoch's leftover step: 2 micro-batches of k = 3
  three.step("train", x, y, 3, 3);
  std::vector<double> want(ga.size());
  // The multiplier is the float 1/k of the IR attribute (Attrs::grad_scale), 1/3 to 3e-8 relative.
  const double third = static_cast<double>(1.0f / 3.0f);
  for (size_t i = 0; i < ga.size(); ++i) want[i] = (ga[i] + gb[i]) * third;
  CHECK(max_rel(three.grads(), want) < 1e-14);
  CHECK(three.be->step() == 1);  // one optimizer step
}

TEST_CASE("dropout draws a new mask for every micro-batch: key (step - 1) * k + j + 1",
          "[e2e][accumulate][dropout]") {
  std::vector<float> x;
  std::vector<int32_t> y;
  random_batch(4, x, y);
  GradRig one(1, 4, 8, true), two(2, 4, 8, true);
  one.step("train", x, y, 0, 4);  // key 1
  const std::vector<double> k1 = one.grads();
  one.step("train", x, y, 0, 4);  // key 2
  const std::vector<double> k2 = one.grads();
  CHECK(max_rel(k1, k2) > 1e-3);  // another mask, same data
  two.step("train_micro", x, y, 0, 4);  // step 1, micro-batch 0: key 1
  two.step("train", x, y, 0, 4);        // step 1, micro-batch 1: key 2
  std::vector<double> want(k1.size());
  for (size_t i = 0; i < k1.size(); ++i) want[i] = (k1[i] + k2[i]) / 2;
  CHECK(max_rel(two.grads(), want) < 1e-14);
  CHECK(two.be->step() == 1);
  two.step("train_micro", x, y, 0, 4);  // step 2, micro-batch 0: key 3, as the third plain step
  one.step("train", x, y, 0, 4);
  std::vector<double> half(k1.size());
  const std::vector<double> k3 = one.grads();
  for (size_t i = 0; i < k3.size(); ++i) half[i] = k3[i] / 2;
  CHECK(max_rel(two.grads(true), half) < 1e-14);
}

TEST_CASE("an epoch's leftover micro-batches make one more optimizer step: ceil(batches / k) per epoch",
          "[e2e][accumulate]") {
  struct Case {
    int64_t subset;
    int k;
    int64_t steps_per_epoch;
  };
  for (const Case& cs : {Case{1000, 2, 3}, Case{1100, 4, 2}, Case{1100, 3, 2}, Case{800, 4, 1}}) {
    INFO("train_subset " << cs.subset << ", accumulate_steps " << cs.k);  // batches: 5, 6 (5 + a partial), 6, 4
    const TrainResult r = run_ok(load({"data.train_subset=" + std::to_string(cs.subset),
                                       "train.accumulate_steps=" + std::to_string(cs.k)}));
    REQUIRE(r.epochs.size() == 2);
    CHECK(r.epochs[0].step == cs.steps_per_epoch);
    CHECK(r.epochs[1].step == 2 * cs.steps_per_epoch);
    CHECK(std::isfinite(r.epochs[1].train_loss));
    CHECK(r.epochs[1].train_loss < r.epochs[0].train_loss + 0.5);
  }
}

TEST_CASE("two runs with gradient accumulation and dropout are bitwise equal", "[e2e][accumulate][determinism]") {
  const Spec s = load({"data.train_subset=1100", "train.accumulate_steps=3", kDropoutMlp, "train.threads=2"});
  const TrainResult a = run_ok(s), b = run_ok(s);
  CHECK(a.final_weights == b.final_weights);
  for (size_t e = 0; e < a.epochs.size(); ++e) {
    CHECK(a.epochs[e].train_loss == b.epochs[e].train_loss);
    CHECK(a.epochs[e].val_loss == b.epochs[e].val_loss);
  }
  Spec plain = s;
  plain.train.accumulate_steps = 1;
  CHECK(run_ok(plain).final_weights != a.final_weights);
}

TEST_CASE("with gradient accumulation a resumed run ends bitwise equal: epoch and mid-epoch checkpoints",
          "[e2e][accumulate][resume]") {
  Scratch s;
  // 5 batches an epoch at k = 2: optimizer steps after batches 2, 4 and 5 (3 per epoch).
  const std::vector<std::string> o = {"data.train_subset=1000", "train.accumulate_steps=2", kDropoutMlp,
                                      "run.out_dir=" + s.path.string()};
  std::vector<std::string> full_o = o;
  full_o.insert(full_o.end(), {"train.checkpoint_every=1", "run.name=full"});
  Result<TrainResult> full = run(load(full_o));
  INFO((full.ok() ? std::string() : full.error_text()));
  REQUIRE(full.ok());
  REQUIRE(full->epochs.size() == 2);
  CHECK(full->epochs[0].step == 3);
  Result<TrainResult> from_epoch = run(load(o), (fs::path(full->run_dir) / "checkpoints" / "epoch-0001").string());
  INFO((from_epoch.ok() ? std::string() : from_epoch.error_text()));
  REQUIRE(from_epoch.ok());
  CHECK(from_epoch->final_weights == full->final_weights);
  CHECK(from_epoch->epochs.back().val_loss == full->epochs.back().val_loss);

  for (int64_t stop_at : {int64_t{2}, int64_t{4}}) {  // inside epoch 1 (after batch 4), inside epoch 2 (batch 2)
    INFO("stop after optimizer step " << stop_at);
    std::vector<std::string> so = o;
    so.push_back("run.name=sig" + std::to_string(stop_at));
    std::atomic<int> stop{0};
    std::vector<int64_t> seen;
    Result<TrainResult> part = run(load(so), "", &stop, [&](int64_t step) {
      seen.push_back(step);
      if (step == stop_at) stop.store(SIGINT);
    });
    REQUIRE(part.ok());
    CHECK(part->stopped_by == SIGINT);
    for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == static_cast<int64_t>(i) + 1);  // per optimizer step
    Result<TrainResult> rest = run(load(o), part->run_dir);
    INFO((rest.ok() ? std::string() : rest.error_text()));
    REQUIRE(rest.ok());
    CHECK(rest->final_weights == full->final_weights);
    CHECK(rest->epochs.back().val_loss == full->epochs.back().val_loss);
    CHECK(rest->epochs.back().step == full->epochs.back().step);
  }
}
