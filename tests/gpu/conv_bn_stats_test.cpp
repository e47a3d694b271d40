// train.conv_bn_stats on the CUDA backend (CudaBackend::plan_conv_bn_stats, runtime/cuda/cuda_lower_cnn.cpp):
// which conv -> training batch norm pairs run cuDNN's conv + genstats graph or the few-channel forward with its
// statistics epilogue (fused: every eligible pair; auto, the default: those whose output has >= 28x28 pixels, and
// none with train.deterministic: true), as conv_algo_sources() counts them; and a fused step against the separate
// statistics pass from the same weights and batches (fp16 AMP, train.deterministic: false and conv_bn_backward:
// separate on both): the running statistics after one step (the most direct view of the fused statistics), the
// weights, and the losses of six steps. The net has one pair of each kind: conv0 over RGB at 56x56 (trctl's
// few-channel kernel, its sums from the epilogue), conv1 at 56x56 (its batch norm fused with the ReLU and the max
// pool: the pooled forward from sums), conv2 at 28x28.
// Tolerances: the fused graph's convolution is another cuDNN engine than the legacy plan (its fp32 accumulation
// order differs, so a few f16 outputs round the other way) and its sums are fp32; the batch statistics then agree
// to ~1e-5 relative, and the running statistics, which move by momentum 0.1 of them, to ~1e-6 of their size: the
// bound 1e-4 relative (+ 1e-5) leaves room. The losses of six steps at lr 0.05 stay within 2e-2 (separate runs of
// non-deterministic algorithms already differ at the 1e-3 level). With train.conv_bn_apply: prologue, the batch
// norm whose output only conv1 reads (bn0) is folded into conv1 and its weight gradient: counted, and trained
// against the separate path with the looser bounds its f16 scale and shift need (see that case).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "core/compiler.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/run_facts.h"
#include "runtime/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/weights_diff.h"

using namespace trctl;

namespace {

const char* kYaml = R"(
seed: 9
data:
  dataset: synthetic
  synthetic: {train_size: 64, val_size: 32, height: 56, width: 56, channels: 3, classes: 10}
  batch_size: 16
  val_batch_size: 16
model:
  layers:
    - {type: conv2d, name: conv0, out_channels: 32, kernel_size: 3, padding: 1}
    - {type: batch_norm, name: bn0}
    - {type: relu, name: relu0}
    - {type: conv2d, name: conv1, out_channels: 32, kernel_size: 3, padding: 1}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: relu1}
    - {type: max_pool, name: pool, kernel_size: 2, stride: 2}
    - {type: conv2d, name: conv2, out_channels: 64, kernel_size: 3, padding: 1}
    - {type: batch_norm, name: bn2}
    - {type: relu, name: relu2}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 1.0e-4}
train: {epochs: 1, precision: fp16, deterministic: false, conv_bn_backward: separate}
run: {progress: off}
)";

struct Built {
  std::unique_ptr<Compiled> c;
  std::unique_ptr<Backend> be;
};

Built build(const std::vector<std::string>& overrides) {
  Result<Spec> s = spec_parse(kYaml, "conv_bn_stats.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  Result<DataShape> d = data_shape(s.value());
  REQUIRE(d.ok());
  CompileOptions opt;
  opt.storage = amp_storage(s.value());
  Result<Compiled> c = compile_spec(s.value(), d.value(), opt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  Built b;
  b.c = std::make_unique<Compiled>(std::move(c.value()));
  Result<std::unique_ptr<Backend>> be = make_cuda_backend(*b.c, s.value().seed);
  INFO((be.ok() ? std::string() : be.error_text()));
  REQUIRE(be.ok());
  b.be = std::move(be.value());
  return b;
}

// Programs with a training batch norm: each holds the three candidate pairs.
int programs_with_bn(const Compiled& c) {
  int k = 0;
  for (const Program& p : c.graph.programs) {
    bool any = false;
    for (const Node& n : p.nodes) any |= n.op == OpKind::BatchNorm;
    k += any;
  }
  return k;
}

std::vector<float> floats(const std::vector<std::byte>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

int train_program(const Compiled& c) {
  for (size_t i = 0; i < c.graph.programs.size(); ++i)
    if (c.graph.programs[i].name == "train") return static_cast<int>(i);
  FAIL("no train program");
  return -1;
}

// One host-fed step of the train program on batch `step` (fixed random f16 images and labels).
void step(const Compiled& c, Backend& be, int step) {
  const int train = train_program(c);
  const int64_t batch = c.graph.programs[train].batch, per = 56 * 56 * 3;
  gputest::Rng rng(300 + static_cast<uint64_t>(step));
  const std::vector<float> x = rng.uniform_vec(static_cast<size_t>(batch * per), -1.0f, 1.0f);
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = gputest::f32_to_f16_bits(x[i]);
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 3 + step) % 10);
  REQUIRE(be.host_input_dtype() == OutDType::F16);
  Status st = be.load_batch(train, step % 2, h.data(), y.data(), batch);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
  st = be.run(train, step % 2);
  INFO((st.ok() ? std::string() : st.error_text()));
  REQUIRE(st.ok());
}

void start(const Compiled& c, Backend& be) {
  REQUIRE(be.write_weights(floats(params_init(c, 5))).ok());
  REQUIRE(be.write_region(Region::Buffers, buffers_init(c)).ok());
  be.set_lr(0.05);
}

}  // namespace

TEST_CASE("train.conv_bn_stats picks the conv -> batch norm pairs it fuses: fused all eligible, auto >= 28x28, "
          "separate none",
          "[gpu][backend][cnn][conv_bn_stats]") {
  struct Want {
    std::vector<std::string> overrides;
    std::string mode;
    int fused, separate;  // per program with a training batch norm
  };
  const Want cases[] = {
      {{"train.conv_bn_stats=fused"}, "fused", 3, 0},                // conv0 (fewc), conv1, conv2
      {{"train.conv_bn_stats=auto"}, "auto", 3, 0},                  // conv0, conv1 (56x56), conv2 (28x28)
      {{"train.conv_bn_stats=fused", "train.conv_fewc=off"}, "fused", 2, 1},  // conv0: im2col or padded, separate
      {{"train.conv_bn_stats=separate"}, "separate", 0, 0},         // not planned, not counted
      {{"train.deterministic=true"}, "separate", 0, 0},  // the default auto resolves to separate: not counted
  };
  for (const Want& w : cases) {
    INFO(w.overrides.front() << (w.overrides.size() > 1 ? " " + w.overrides[1] : std::string()));
    const Built b = build(w.overrides);
    const ConvAlgoSources* src = b.be->conv_algo_sources();
    REQUIRE(src != nullptr);
    const int p = programs_with_bn(*b.c);
    CHECK(p >= 1);
    CHECK(src->bn_stats_mode == w.mode);
    INFO("fallback reason: " << src->bn_stats_fallback_reason);
    CHECK(src->bn_stats_fallback == 0);  // the H200's cuDNN serves these graphs (RESULTS.md run 25)
    CHECK(src->bn_stats_fused == w.fused * p);
    CHECK(src->bn_stats_separate == w.separate * p);
    if (w.mode != "separate") {
      RunFacts f;
      f.backend = "cuda";
      f.has_conv = true;
      f.conv = *src;
      CHECK_THAT(run_facts_json(f), Catch::Contains("\"bn_stats\": {\"mode\": \"" + w.mode + "\""));
    }
  }
}

namespace {

// From the same weights and batches: one step of `variant` and of the separate statistics pass, then each running
// statistic within rel_stats * |value| + floor (a running mean near 0 gets the floor: its error does not shrink
// with it), the weights within rel_w (rel_diff), and five more steps' losses within loss_tol.
void compare_steps(const std::vector<std::string>& variant, double rel_stats, double floor, double rel_w,
                   double loss_tol) {
  Built fused = build(variant), sep = build({"train.conv_bn_stats=separate"});
  REQUIRE(fused.be->conv_algo_sources()->bn_stats_fused > 0);
  start(*fused.c, *fused.be);
  start(*sep.c, *sep.be);
  step(*fused.c, *fused.be, 0);
  step(*sep.c, *sep.be, 0);
  REQUIRE(fused.be->synchronize().ok());
  REQUIRE(sep.be->synchronize().ok());
  // After one step: the running statistics (Buffers: every batch norm's running mean and var) and the weights.
  const std::vector<float> bf = floats(fused.be->read_region(Region::Buffers)),
                           bs = floats(sep.be->read_region(Region::Buffers));
  REQUIRE(bf.size() == bs.size());
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < bf.size(); ++i) {
    const double d = std::fabs(static_cast<double>(bf[i]) - bs[i]), bound = rel_stats * std::fabs(bs[i]) + floor;
    worst = std::max(worst, d / bound);
    bad += !(d <= bound);
  }
  INFO("running statistics: worst difference " << worst << " of its bound over " << bf.size() << " values");
  CHECK(bad == 0);
  const double rw = testing::rel_diff(fused.be->read_weights(), sep.be->read_weights());
  INFO("relative weight difference after one step " << rw);
  CHECK(rw < rel_w);
  const int train = train_program(*fused.c);
  for (int s = 1; s < 6; ++s) {
    step(*fused.c, *fused.be, s);
    step(*sep.c, *sep.be, s);
    const double lf = fused.be->last_loss(train), ls = sep.be->last_loss(train);
    INFO("step " << s + 1 << ": loss variant " << lf << " separate " << ls);
    CHECK(std::isfinite(lf));
    CHECK(std::fabs(lf - ls) < loss_tol);
  }
}

}  // namespace

TEST_CASE("a fused conv + genstats step gives the separate statistics pass's running statistics, weights and "
          "losses (fp16 AMP)",
          "[gpu][backend][cnn][conv_bn_stats]") {
  compare_steps({"train.conv_bn_stats=fused"}, 1e-4, 1e-5, 1e-4, 2e-2);
}

// train.conv_bn_apply: prologue folds bn0 into conv1 (its output feeds only conv1; bn1 feeds the max pool, bn2 the
// global pool): bn0 writes its f16 scale and shift, conv1 and its weight gradient run on relu(x0 * scale + shift).
// The f16 scale and shift move conv1's input by up to ~2^-11 of the normalised values' spread, the same way in every
// element of a channel (the separate path rounds relu(bn(x0)) to f16 per element instead), so conv1's per-channel
// means move by ~2e-4 of their spread across channels, and the running means (momentum 0.1) by ~2e-5 absolute:
// floor 2e-4, 1e-3 relative; the weights after one step and the losses as the statistics case, looser by that.
TEST_CASE("train.conv_bn_apply: prologue folds the batch norm whose output only the next conv reads, and trains "
          "like the apply pass (fp16 AMP)",
          "[gpu][backend][cnn][conv_bn_stats]") {
  const std::vector<std::string> variant = {"train.conv_bn_stats=fused", "train.conv_bn_apply=prologue"};
  {
    const Built b = build(variant);
    const ConvAlgoSources* src = b.be->conv_algo_sources();
    const int p = programs_with_bn(*b.c);
    INFO("fallback reason: " << src->bn_apply_fallback_reason);
    CHECK(src->bn_apply_mode == "prologue");
    CHECK(src->bn_apply_fallback == 0);
    CHECK(src->bn_apply_folded == p);  // bn0 in every program with a training batch norm
  }
  compare_steps(variant, 1e-3, 2e-4, 1e-3, 3e-2);
}
