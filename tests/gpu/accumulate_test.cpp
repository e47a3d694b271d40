// Gradient accumulation (train.accumulate_steps) on the GPU: the GradAccumulate kernel bitwise equal to the CPU
// reference (add and flush, vector and scalar paths), the step bookkeeping's dropout keys ((step - 1) * k + j + 1,
// as the CPU backend), 20 optimizer steps of k = 2 on CUDA fp32 within tolerance of the CPU backend (with and without
// dropout), k = 2 at batch 100 close to k = 1 at batch 200, fp16 AMP with accumulation finite with injected
// non-finite steps skipped and counted per optimizer step, and bitwise-equal repeated runs and resumes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/ops/augment/augment_cuda.h"
#include "runtime/ops/grad_accum/grad_accum.h"
#include "runtime/ops/grad_accum/grad_accum_cuda.h"
#include "runtime/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/weights_diff.h"
#include "tests/gpu/gpu_train_util.h"

using namespace trctl;
using namespace trctl::gputest;
namespace fs = std::filesystem;

namespace {

const char* kDropoutMlp =
    "model.layers=[{type: flatten, name: flatten}, {type: linear, name: fc1, out_features: 256}, "
    "{type: relu, name: relu1}, {type: dropout, name: drop1, p: 0.3}, {type: linear, name: fc2, out_features: 10}]";

Spec load_spec(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"train.epochs=1", "scheduler.warmup_epochs=0", "run.progress=off",
                                       "data.val_batch_size=2000"});
  if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) overrides.push_back(std::string("data.root=") + root);
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

Result<TrainResult> train_spec(const Spec& spec, const std::string& resume = "") {
  TrainOptions opt;
  opt.write_run_dir = spec.run.out_dir != "runs";
  opt.resume = resume;
  return gputest::train_cuda_result(spec, opt);
}

TrainResult train(const std::vector<std::string>& overrides) {
  Result<TrainResult> r = train_spec(load_spec(overrides));
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

using testing::rel_diff;

}  // namespace

TEST_CASE("grad_accumulate_cuda adds and flushes bitwise as the CPU reference, aligned or not", "[kernel][accumulate]") {
  CudaContext ctx = make_context();
  Rng rng(41);
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{1001}, int64_t{(1 << 20) + 5}}) {
    for (int64_t off : {int64_t{0}, int64_t{1}}) {
      INFO("n=" << n << " offset=" << off);
      const std::vector<float> g1 = rng.normal_vec(n, 0.0f, 1.0f), g2 = rng.normal_vec(n, 0.0f, 1.0f);
      std::vector<float> acc_ref(n, 0.0f), g_ref = g2;
      grad_accum_add_cpu(g1.data(), acc_ref.data(), n);
      const std::vector<float> after_add = acc_ref;
      grad_accum_flush_cpu(g_ref.data(), acc_ref.data(), n);
      // One buffer: [pad][gradients (n)][accumulators (n)], the layout the plan uses (accumulators after the grads).
      DevBuf buf((2 * n + off) * 4 + 16);
      memset_sync(buf.get(), 0, buf.bytes());
      float* g = buf.as<float>() + off;
      float* acc = g + n;
      upload(g, g1);
      REQUIRE_OK(grad_accumulate_cuda(ctx.stream, g, acc, n, false));
      sync_ok(ctx);
      const std::vector<float> a = from_device<float>(acc, n);
      CHECK_RESULT(compare_bitwise("accumulate add", a.data(), after_add.data(), n * 4, 4));
      upload(g, g2);
      REQUIRE_OK(grad_accumulate_cuda(ctx.stream, g, acc, n, true));
      sync_ok(ctx);
      const std::vector<float> gf = from_device<float>(g, n), af = from_device<float>(acc, n);
      CHECK_RESULT(compare_bitwise("accumulate flush", gf.data(), g_ref.data(), n * 4, 4));
      CHECK_RESULT(compare_bitwise("accumulators cleared", af.data(), acc_ref.data(), n * 4, 4));
    }
  }
  CHECK(grad_accumulate_cuda(ctx.stream, nullptr, nullptr, 0, true).ok());
  DevBuf b(64);
  CHECK_FALSE(grad_accumulate_cuda(ctx.stream, b.as<float>(), b.as<float>() + 2, 4, false).ok());  // overlap
  CHECK_FALSE(grad_accumulate_cuda(ctx.stream, nullptr, b.as<float>(), 4, false).ok());
  sync_ok(ctx);
}

TEST_CASE("the step bookkeeping gives micro-batch j of optimizer step s the dropout key (s - 1) * k + j + 1",
          "[kernel][accumulate]") {
  CudaContext ctx = make_context();
  DevBuf counters(16);  // step, micro, key
  memset_sync(counters.get(), 0, 16);
  uint32_t* step = counters.as<uint32_t>();
  uint32_t* micro = step + 1;
  uint32_t* key = step + 2;
  auto book = [&](bool flush) {
    StepBookkeeping b;
    if (flush) b.step = step;
    b.key = key;
    b.micro = micro;
    b.steps = step;
    b.accumulate = 3;
    b.flush = flush;
    REQUIRE_OK(step_bookkeeping_cuda(ctx.stream, b));
    sync_ok(ctx);
    return from_device<uint32_t>(step, 3);
  };
  // Optimizer step 1: micro, micro, flush; step 2: an epoch's leftover (micro, flush); step 3: micro.
  const std::vector<std::vector<uint32_t>> want = {{0, 1, 1}, {0, 2, 2}, {1, 0, 3}, {1, 1, 4}, {2, 0, 5}, {2, 1, 7}};
  const bool flushes[] = {false, false, true, false, true, false};
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("launch " << i);
    CHECK(book(flushes[i]) == want[i]);  // {step, micro, key}
  }
  StepBookkeeping bad;
  bad.key = key;  // without micro and steps
  CHECK_FALSE(step_bookkeeping_cuda(ctx.stream, bad).ok());
}

TEST_CASE("20 optimizer steps of accumulate_steps 2 on the GPU give the CPU backend's weights within tolerance",
          "[gpu][backend][accumulate]") {
  for (bool dropout : {false, true}) {
    INFO((dropout ? "with dropout" : "without dropout"));
    std::vector<std::string> o = {"data.train_subset=4000", "data.batch_size=100", "train.accumulate_steps=2",
                                  "train.precision=fp32"};
    if (dropout) o.push_back(kDropoutMlp);
    std::vector<std::string> cpu = o, gpu = o;
    cpu.push_back("train.device=cpu");
    gpu.push_back("train.device=cuda");
    TrainResult a = train(cpu), b = train(gpu);
    CHECK(b.backend == "cuda");
    CHECK(a.epochs[0].step == 20);
    CHECK(b.epochs[0].step == 20);
    REQUIRE(a.final_weights.size() == b.final_weights.size());
    const double r = rel_diff(b.final_weights, a.final_weights);
    INFO("relative weight difference " << r << "; val top1 cpu " << a.epochs[0].val_top1 << " gpu "
                                       << b.epochs[0].val_top1);
    CHECK(r < 2e-3);
    CHECK(std::abs(a.epochs[0].val_top1 - b.epochs[0].val_top1) < 0.01);
    CHECK(std::abs(a.epochs[0].train_loss - b.epochs[0].train_loss) < 1e-3);
  }
}

TEST_CASE("on the GPU accumulate_steps 2 at batch 100 trains like batch 200", "[gpu][backend][accumulate]") {
  TrainResult a = train({"data.train_subset=4000", "train.precision=fp32", "train.device=cuda"});
  TrainResult b = train({"data.train_subset=4000", "data.batch_size=100", "train.accumulate_steps=2",
                         "train.precision=fp32", "train.device=cuda"});
  CHECK(a.epochs[0].step == b.epochs[0].step);
  const double r = rel_diff(b.final_weights, a.final_weights);
  INFO("relative weight difference " << r);
  CHECK(r < 1e-3);
  CHECK(std::abs(a.epochs[0].train_loss - b.epochs[0].train_loss) < 1e-3);
}

TEST_CASE("fp16 AMP with accumulation on the GPU: finite, injected non-finite optimizer steps skipped and counted",
          "[gpu][accumulate][nonfinite]") {
  // 2000 samples, micro-batches of 100, k = 2: 10 optimizer steps an epoch; steps 3 and 7 get a NaN.
  const std::vector<std::string> o = {"data.train_subset=2000", "data.batch_size=100", "train.accumulate_steps=2",
                                      "train.precision=fp16", "train.device=cuda", "train.epochs=2"};
  std::vector<std::string> inj = o;
  inj.push_back("debug.inject_nonfinite_grad_steps=[3, 7]");
  TrainResult r = train(inj);
  REQUIRE(r.epochs.size() == 2);
  CHECK(r.epochs[0].step == 10);
  CHECK(r.epochs[1].step == 20);
  // A real fp16 overflow adds skips of its own: the injected ones are a lower bound; GradScaler's rule is exact.
  CHECK(r.epochs[0].skipped_steps >= 2);
  CHECK(r.epochs[0].loss_scale == std::ldexp(65536.0, -static_cast<int>(r.epochs[0].skipped_steps)));
  CHECK(r.skipped_steps == r.epochs[0].skipped_steps + r.epochs[1].skipped_steps);
  for (const EpochRecord& e : r.epochs) CHECK(std::isfinite(e.train_loss));
  for (float w : r.final_weights) REQUIRE(std::isfinite(w));
  TrainResult base = train(o);
  INFO("skipped with injection " << r.skipped_steps << ", without " << base.skipped_steps);
  CHECK(r.skipped_steps >= base.skipped_steps + 1);
  for (float w : base.final_weights) REQUIRE(std::isfinite(w));
  CHECK(base.epochs.back().val_top1 > 0.5);
}

TEST_CASE("GPU runs with accumulation and dropout are bitwise equal and resume bitwise exactly, fp32 and fp16",
          "[gpu][accumulate][determinism][resume]") {
  const fs::path scratch = fs::temp_directory_path() / ("trctl_gpu_accum_" + std::to_string(::getpid()));
  fs::remove_all(scratch);
  for (const char* prec : {"train.precision=fp32", "train.precision=fp16"}) {
    INFO(prec);
    // 1100 samples: 11 micro-batches of 100 an epoch, k = 3: steps after batches 3, 6, 9 and 11.
    const std::vector<std::string> o = {"data.train_subset=1100", "data.batch_size=100", "train.accumulate_steps=3",
                                        kDropoutMlp, prec, "train.device=cuda", "train.epochs=2",
                                        "run.out_dir=" + scratch.string()};
    std::vector<std::string> ck = o;
    ck.insert(ck.end(), {"train.checkpoint_every=1", std::string("run.name=") + (std::string(prec).find("fp32") != std::string::npos ? "a" : "b")});
    Result<TrainResult> a = train_spec(load_spec(ck));
    Result<TrainResult> b = train_spec(load_spec(ck));
    REQUIRE((a.ok() && b.ok()));
    CHECK(a->epochs[0].step == 4);
    CHECK(a->final_weights == b->final_weights);
    CHECK(a->epochs.back().val_loss == b->epochs.back().val_loss);
    Result<TrainResult> resumed =
        train_spec(load_spec(o), (fs::path(a->run_dir) / "checkpoints" / "epoch-0001").string());
    INFO((resumed.ok() ? std::string() : resumed.error_text()));
    REQUIRE(resumed.ok());
    CHECK(resumed->final_weights == a->final_weights);
    CHECK(resumed->epochs.back().val_loss == a->epochs.back().val_loss);
  }
  std::error_code ec;
  fs::remove_all(scratch, ec);
}
