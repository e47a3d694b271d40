// Non-finite gradients on the CPU backend, provoked by debug.inject_nonfinite_grad_steps: the step is skipped
// (weights, optimizer state and the update count unchanged), counted per epoch in the records, metrics.jsonl and
// summary.csv, and training continues with a finite loss.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "core/ckpt/checkpoint.h"
#include "runtime/train/trainer.h"
#include "tests/support/train_util.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

// 2000 samples at batch 200: 10 steps an epoch.
const std::vector<std::string> kSmall = {"train.device=cpu", "data.train_subset=2000", "train.epochs=2",
                                         "run.progress=off", "data.val_batch_size=10000"};

std::vector<std::string> with(std::vector<std::string> o, const std::vector<std::string>& more) {
  o.insert(o.end(), more.begin(), more.end());
  return o;
}

}  // namespace

TEST_CASE("injected non-finite gradients skip exactly those steps and training continues", "[e2e][nonfinite]") {
  const TrainResult r = testing::train_config("mlp_fmnist.yaml", with(kSmall, {"debug.inject_nonfinite_grad_steps=[3, 7, 12]"}));
  REQUIRE(r.epochs.size() == 2);
  CHECK(r.epochs[0].skipped_steps == 2);  // steps 3 and 7 of 1..10
  CHECK(r.epochs[1].skipped_steps == 1);  // step 12 of 11..20
  CHECK(r.skipped_steps == 3);
  CHECK(r.epochs[1].step == 20);          // skipped steps still count as steps
  CHECK(r.epochs[0].loss_scale == 1.0);   // the CPU backend computes in fp32: no loss scale to back off
  for (const EpochRecord& e : r.epochs) {
    CHECK(std::isfinite(e.train_loss));
    CHECK(std::isfinite(e.val_loss));
  }
  for (float w : r.final_weights) REQUIRE(std::isfinite(w));
  CHECK(r.epochs[1].val_top1 > 0.5);  // still learning
}

TEST_CASE("a skipped step leaves the weights as they were: skipping the last step equals stopping before it",
          "[e2e][nonfinite]") {
  // One epoch of 10 steps with step 10 skipped, against the same run stopped after step 9: same weights, bitwise.
  const TrainResult skipped = testing::train_config(
      "mlp_fmnist.yaml", {"train.device=cpu", "data.train_subset=2000", "train.epochs=1", "run.progress=off",
                          "debug.inject_nonfinite_grad_steps=[10]"});
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml",
                                {"train.device=cpu", "data.train_subset=2000", "train.epochs=1", "run.progress=off"});
  REQUIRE(spec.ok());
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  std::atomic<int> stop{0};
  TrainOptions opt;
  opt.write_run_dir = false;
  opt.stop_signal = &stop;
  opt.on_step = [&](int64_t step) {
    if (step == 9) stop.store(2);
  };
  Result<TrainResult> nine = train_run(spec.value(), opt, log);
  REQUIRE(nine.ok());
  REQUIRE(skipped.epochs.size() == 1);
  CHECK(skipped.epochs[0].skipped_steps == 1);
  CHECK(nine->stopped_by == 2);
  CHECK(skipped.final_weights == nine->final_weights);
}

TEST_CASE("skipped steps are in metrics.jsonl, summary.csv and the checkpoint's update count", "[e2e][nonfinite]") {
  const fs::path dir = fs::temp_directory_path() / ("trctl_nonfinite_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml",
                                with(kSmall, {"debug.inject_nonfinite_grad_steps=[2, 5]", "train.checkpoint_every=1",
                                              "run.out_dir=" + dir.string(), "run.name=nf"}));
  REQUIRE(spec.ok());
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  Result<TrainResult> r = train_run(spec.value(), TrainOptions{}, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  std::ifstream m(dir / "nf" / "metrics.jsonl");
  std::stringstream ms;
  ms << m.rdbuf();
  CHECK_THAT(ms.str(), Catch::Contains("\"epoch\":1,\"step\":10,") && Catch::Contains("\"skipped_steps\":2,") &&
                           Catch::Contains("\"epoch\":2,\"step\":20,") && Catch::Contains("\"skipped_steps\":0,"));
  std::ifstream s(dir / "nf" / "summary.csv");
  std::string header, row1;
  std::getline(s, header);
  std::getline(s, row1);
  CHECK_THAT(header, Catch::EndsWith(",val_top5,skipped_steps"));
  CHECK_THAT(row1, Catch::EndsWith(",2"));
  Result<CkptStateFile> st = ckpt_read_state((dir / "nf" / "checkpoints" / "epoch-0002" / "state.bin").string());
  REQUIRE(st.ok());
  CHECK(st->state.step == 20);
  CHECK(st->state.updates() == 18);  // Adam's step count skips them too, as GradScaler's skipped optimizer.step()
  fs::remove_all(dir);
}
