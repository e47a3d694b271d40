// train.checkpoint_every_steps: mid-epoch checkpoints every N optimizer steps (checkpoints/epoch-NNNN-step-SSSSSSSS
// with the data position), counted by train.keep_last together with the epoch checkpoints; a run resumed from any
// of them (by path, by run directory or with --resume auto) ends bitwise equal to the uninterrupted run.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "core/ckpt/checkpoint.h"
#include "runtime/train/trainer.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("trctl_step_ckpt_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(path); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// 1000 training images in batches of 200: 5 steps per epoch, 10 in the run.
Spec small_spec(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"train.device=cpu", "data.train_subset=1000", "train.epochs=2",
                                       "data.val_batch_size=2000", "run.progress=off"});
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", overrides);
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  return spec.value();
}

Result<TrainResult> train(const Spec& spec, const std::string& resume, bool write_dir,
                          const std::atomic<int>* stop = nullptr, std::function<void(int64_t)> on_step = {}) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = write_dir;
  opt.resume = resume;
  opt.stop_signal = stop;
  opt.on_step = std::move(on_step);
  return train_run(spec, opt, log);
}

std::set<std::string> checkpoint_names(const std::string& run_dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints")) names.insert(e.path().filename());
  return names;
}

void check_same_end(const Result<TrainResult>& resumed, const TrainResult& whole) {
  INFO((resumed.ok() ? std::string() : resumed.error_text()));
  REQUIRE(resumed.ok());
  REQUIRE_FALSE(resumed->epochs.empty());
  CHECK(resumed->epochs.back().step == whole.epochs.back().step);
  CHECK(resumed->final_weights == whole.final_weights);
  CHECK(resumed->epochs.back().val_loss == whole.epochs.back().val_loss);
}

}  // namespace

TEST_CASE("step checkpoints hold the data position and a run resumed from each ends bitwise equal",
          "[e2e][ckpt][steps]") {
  Scratch s;
  Result<TrainResult> whole = train(small_spec({}), "", false);
  REQUIRE(whole.ok());
  Result<TrainResult> full = train(
      small_spec({"train.checkpoint_every_steps=3", "run.out_dir=" + s.path.string(), "run.name=a"}), "", true);
  INFO((full.ok() ? std::string() : full.error_text()));
  REQUIRE(full.ok());
  CHECK(full->final_weights == whole->final_weights);  // writing checkpoints changes nothing
  // Steps 3 (epoch 1, after batch 3), 6 (epoch 2, batch 1), 9 (epoch 2, batch 4); no epoch checkpoints.
  CHECK(checkpoint_names(full->run_dir) ==
        std::set<std::string>{"epoch-0000-step-00000003", "epoch-0001-step-00000006", "epoch-0001-step-00000009"});
  struct Want {
    const char* name;
    int64_t step, epoch, data_epoch, data_batch;
  };
  for (const Want& w : {Want{"epoch-0000-step-00000003", 3, 0, 1, 3}, Want{"epoch-0001-step-00000006", 6, 1, 2, 1},
                        Want{"epoch-0001-step-00000009", 9, 1, 2, 4}}) {
    INFO(w.name);
    const fs::path dir = fs::path(full->run_dir) / "checkpoints" / w.name;
    Result<CkptStateFile> st = ckpt_read_state((dir / kCkptStateFile).string());
    REQUIRE(st.ok());
    CHECK(st->state.step == w.step);
    CHECK(st->state.epoch == w.epoch);
    CHECK(st->state.data_epoch == w.data_epoch);
    CHECK(st->state.data_batch == w.data_batch);
    // The frequency of checkpoints is not part of the spec hash: the plain spec resumes them.
    Result<TrainResult> rest = train(small_spec({}), dir.string(), false);
    check_same_end(rest, whole.value());
    if (rest.ok()) CHECK(rest->epochs.size() == size_t(2 - w.epoch));
  }
  // The run directory resolves to its newest checkpoint, step 9.
  Result<std::string> newest = checkpoint_dir_resolve(full->run_dir);
  REQUIRE(newest.ok());
  CHECK(fs::path(newest.value()).filename() == "epoch-0001-step-00000009");
}

TEST_CASE("a step checkpoint that falls on an epoch's last step is written as that epoch's checkpoint",
          "[e2e][ckpt][steps]") {
  Scratch s;
  Result<TrainResult> r = train(
      small_spec({"train.checkpoint_every_steps=5", "run.out_dir=" + s.path.string(), "run.name=b"}), "", true);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  CHECK(checkpoint_names(r->run_dir) == std::set<std::string>{"epoch-0001", "epoch-0002"});
  Result<CkptStateFile> st = ckpt_read_state(r->run_dir + "/checkpoints/epoch-0001/" + kCkptStateFile);
  REQUIRE(st.ok());
  CHECK(st->state.step == 5);
  CHECK(st->state.data_batch == 0);
}

TEST_CASE("keep_last keeps the newest checkpoints of both kinds and resume auto continues from the newest",
          "[e2e][ckpt][steps]") {
  Scratch s;
  Result<TrainResult> whole = train(small_spec({}), "", false);
  REQUIRE(whole.ok());
  const std::vector<std::string> o = {"train.checkpoint_every=1", "train.checkpoint_every_steps=3",
                                      "train.keep_last=2", "run.out_dir=" + s.path.string(), "run.name=c"};
  // Written in order: step 3, epoch 1 (step 5), step 6, step 9 -- where a SIGTERM stops the run: the step
  // checkpoint just written is its stop checkpoint (not written twice).
  std::atomic<int> stop{0};
  Result<TrainResult> part = train(small_spec(o), "", true, &stop, [&](int64_t step) {
    if (step == 9) stop.store(SIGTERM);
  });
  INFO((part.ok() ? std::string() : part.error_text()));
  REQUIRE(part.ok());
  CHECK(part->stopped_by == SIGTERM);
  CHECK(checkpoint_names(part->run_dir) ==
        std::set<std::string>{"epoch-0001-step-00000006", "epoch-0001-step-00000009"});
  // --resume auto: the newest run named c with a checkpoint, and in it the newest checkpoint (step 9).
  Result<TrainResult> rest = train(small_spec(o), "auto", true);
  check_same_end(rest, whole.value());
  if (rest.ok()) {
    REQUIRE(rest->epochs.size() == 1);
    CHECK(rest->epochs[0].epoch == 2);
    CHECK(checkpoint_names(rest->run_dir) == std::set<std::string>{"epoch-0002"});  // nothing new before step 10
  }
}

TEST_CASE("a step checkpoint that cannot be written stops the run and the earlier one resumes bitwise equal",
          "[e2e][ckpt][steps]") {
  Scratch s;
  Result<TrainResult> whole = train(small_spec({}), "", false);
  REQUIRE(whole.ok());
  // The 2nd checkpoint write (step 6) fails with ENOSPC; step 3's is intact.
  Result<TrainResult> r = train(small_spec({"train.checkpoint_every_steps=3", "debug.fail_checkpoint_write=2",
                                            "run.out_dir=" + s.path.string(), "run.name=d"}),
                                "", true);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->checkpoint_errors.empty());
  std::string text;
  for (const Error& e : r->checkpoint_errors) text += e.str() + "\n";
  CHECK_THAT(text, Catch::Contains("No space left on device") &&
                       Catch::Contains("checkpoint at step 6 (epoch 2, batch 1) not written"));
  CHECK(r->epochs.size() == 1);
  CHECK(checkpoint_names(r->run_dir) == std::set<std::string>{"epoch-0000-step-00000003"});
  check_same_end(train(small_spec({}), r->run_dir, false), whole.value());
}
