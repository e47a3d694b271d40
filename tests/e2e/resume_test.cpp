// Checkpoints in the run dir (train.checkpoint_every) and resuming from them: a run resumed after epoch 1 ends
// bitwise equal to the uninterrupted run; a checkpoint of another model is refused naming the parameter.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include <filesystem>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/train/trainer.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("trctl_resume_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(path); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Result<TrainResult> run(std::vector<std::string> overrides, const std::string& resume, bool write_dir) {
  overrides.insert(overrides.begin(), {"train.device=cpu", "data.train_subset=600", "train.epochs=2",
                                       "data.val_batch_size=2000"});
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", overrides);
  REQUIRE(spec.ok());
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = write_dir;
  opt.resume = resume;
  return train_run(spec.value(), opt, log);
}

}  // namespace

TEST_CASE("a run resumed from its epoch-1 checkpoint ends bitwise equal to the uninterrupted run", "[e2e][resume]") {
  Scratch s;
  const std::vector<std::string> o = {"train.checkpoint_every=1", "run.out_dir=" + s.path.string(), "run.name=a"};
  Result<TrainResult> full = run(o, "", true);
  REQUIRE(full.ok());
  const fs::path ck = s.path / "a" / "checkpoints";
  REQUIRE(fs::exists(ck / "epoch-0001" / "weights.safetensors"));
  REQUIRE(fs::exists(ck / "epoch-0002" / "state.bin"));

  Result<TrainResult> resumed = run({}, (ck / "epoch-0001").string(), false);
  INFO((resumed.ok() ? std::string() : resumed.error_text()));
  REQUIRE(resumed.ok());
  REQUIRE(resumed->epochs.size() == 1);
  CHECK(resumed->epochs[0].epoch == 2);
  CHECK(resumed->epochs[0].step == full->epochs[1].step);
  CHECK(resumed->final_weights == full->final_weights);
  CHECK(resumed->epochs[0].val_loss == full->epochs[1].val_loss);

  // A run directory resumes from its latest checkpoint: here the last epoch, so nothing is left to train.
  Result<TrainResult> again = run({}, (s.path / "a").string(), false);
  REQUIRE(again.ok());
  CHECK(again->epochs.empty());
  CHECK(again->final_weights == full->final_weights);
}

TEST_CASE("resuming with another model or from a missing checkpoint is a clear error", "[e2e][resume]") {
  Scratch s;
  Result<TrainResult> full =
      run({"train.checkpoint_every=2", "run.out_dir=" + s.path.string(), "run.name=b"}, "", true);
  REQUIRE(full.ok());
  Result<TrainResult> other = run({"model.layers.1.out_features=512"}, (s.path / "b").string(), false);
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.error_text(), Catch::Contains("fc1.weight"));
  Result<TrainResult> missing = run({}, (s.path / "nothing").string(), false);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error_text(), Catch::Contains("no checkpoint"));
}

TEST_CASE("keep_last prunes old epoch checkpoints and keep_best keeps the best validation epoch", "[e2e][ckpt]") {
  Scratch s;
  Result<TrainResult> r = run({"train.epochs=3", "train.checkpoint_every=1", "train.keep_last=1", "train.keep_best=true",
                               "run.out_dir=" + s.path.string(), "run.name=k"},
                              "", true);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  const fs::path ck = fs::path(r->run_dir) / "checkpoints";
  CHECK_FALSE(fs::exists(ck / "epoch-0001"));
  CHECK_FALSE(fs::exists(ck / "epoch-0002"));
  CHECK(fs::exists(ck / "epoch-0003" / "state.bin"));
  REQUIRE(fs::exists(ck / "best" / "state.bin"));
  CHECK_FALSE(fs::exists(ck / "best.new"));
  CHECK_FALSE(fs::exists(ck / "best.old"));
  // The best epoch (first of the highest top-1) is the one saved as best; --resume RUN_DIR still takes the latest.
  int best = 1;
  for (size_t i = 0; i < r->epochs.size(); ++i)
    if (r->epochs[i].val_top1 > r->epochs[best - 1].val_top1) best = static_cast<int>(i) + 1;
  Result<TrainResult> from_best = run({"train.epochs=3"}, (ck / "best").string(), false);
  REQUIRE(from_best.ok());
  CHECK(static_cast<int>(from_best->epochs.size()) == 3 - best);
  Result<TrainResult> from_dir = run({"train.epochs=3"}, r->run_dir, false);
  REQUIRE(from_dir.ok());
  CHECK(from_dir->epochs.empty());  // the latest checkpoint is after the last epoch
}

TEST_CASE("a stop signal mid-epoch writes the data position and the resumed run ends bitwise equal",
          "[e2e][ckpt][signal]") {
  Scratch s;
  Result<TrainResult> whole = run({}, "", false);
  REQUIRE(whole.ok());
  for (int64_t stop_at : {int64_t{2}, int64_t{4}}) {  // inside epoch 1 (3 steps of 200), inside epoch 2
    INFO("stop after step " << stop_at);
    std::atomic<int> stop{0};
    Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml",
                                  {"train.device=cpu", "data.train_subset=600", "train.epochs=2",
                                   "data.val_batch_size=2000", "run.out_dir=" + s.path.string(),
                                   "run.name=sig" + std::to_string(stop_at)});
    REQUIRE(spec.ok());
    spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
    TrainOptions opt;
    opt.stop_signal = &stop;
    opt.on_step = [&](int64_t step) {
      if (step == stop_at) stop.store(SIGTERM);
    };
    Result<TrainResult> part = train_run(spec.value(), opt, log);
    REQUIRE(part.ok());
    CHECK(part->stopped_by == SIGTERM);
    CHECK(part->epochs.size() == static_cast<size_t>(stop_at / 3));  // epochs completed before the stop
    Result<TrainResult> rest = run({}, part->run_dir, false);
    INFO((rest.ok() ? std::string() : rest.error_text()));
    REQUIRE(rest.ok());
    CHECK(rest->final_weights == whole->final_weights);
    CHECK(rest->epochs.back().val_loss == whole->epochs.back().val_loss);
  }
}

TEST_CASE("resume auto continues the newest run of the same name, or starts fresh when there is none",
          "[e2e][resume]") {
  Scratch s;
  Result<TrainResult> whole = run({}, "", false);
  REQUIRE(whole.ok());
  const std::vector<std::string> o = {"run.out_dir=" + s.path.string(), "run.name=auto"};
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml",
                                {"train.device=cpu", "data.train_subset=600", "train.epochs=2",
                                 "data.val_batch_size=2000", o[0], o[1]});
  REQUIRE(spec.ok());
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  std::atomic<int> stop{0};
  TrainOptions opt;
  opt.resume = "auto";  // nothing to resume yet: a fresh start
  opt.stop_signal = &stop;
  opt.on_step = [&](int64_t step) {
    if (step == 4) stop.store(SIGINT);
  };
  Result<TrainResult> part = train_run(spec.value(), opt, log);
  REQUIRE(part.ok());
  CHECK(part->stopped_by == SIGINT);
  Result<TrainResult> rest = run(o, "auto", true);  // the newest runs/auto* with a checkpoint: the stopped one
  INFO((rest.ok() ? std::string() : rest.error_text()));
  REQUIRE(rest.ok());
  CHECK(rest->final_weights == whole->final_weights);
  CHECK(rest->epochs.back().val_loss == whole->epochs.back().val_loss);
}

TEST_CASE("init-from starts from a checkpoint's weights with a fresh optimizer; it excludes --resume",
          "[e2e][resume]") {
  Scratch s;
  Result<TrainResult> first =
      run({"train.checkpoint_every=1", "run.out_dir=" + s.path.string(), "run.name=init"}, "", true);
  REQUIRE(first.ok());
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml",
                                {"train.device=cpu", "data.train_subset=600", "train.epochs=1",
                                 "data.val_batch_size=2000", "optimizer.lr=2e-4"});
  REQUIRE(spec.ok());
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  Result<TrainResult> cold = train_run(spec.value(), opt, log);
  opt.init_from = (s.path / "init").string();  // a run directory: its latest checkpoint
  Result<TrainResult> warm = train_run(spec.value(), opt, log);
  INFO((warm.ok() ? std::string() : warm.error_text()));
  REQUIRE((cold.ok() && warm.ok()));
  CHECK(warm->epochs[0].step == cold->epochs[0].step);  // the optimizer starts at step 0
  CHECK(warm->epochs[0].train_loss < cold->epochs[0].train_loss - 0.1);  // but from trained weights
  opt.resume = (s.path / "init").string();
  Result<TrainResult> both = train_run(spec.value(), opt, log);
  CHECK_THAT(both.error_text(), Catch::Contains("--init-from and --resume exclude each other"));
  opt.resume.clear();
  Result<Spec> other = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml",
                                 {"train.device=cpu", "data.train_subset=600", "model.layers.1.out_features=100"});
  Result<TrainResult> mismatch = train_run(other.value(), opt, log);
  CHECK_THAT(mismatch.error_text(), Catch::Contains("fc1.weight"));
}
