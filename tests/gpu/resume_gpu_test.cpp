// Resuming on the CUDA backend: the step counters, the optimizer's update count (Adam's bias corrections) and the
// fp16 loss scaler restored from state.bin, so that a run resumed after an epoch, or after a stop signal inside
// one (resident data: the cursor moved to the saved position; host-fed data: the trained batches skipped), ends
// bitwise equal to the uninterrupted run.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"
#include "tests/support/scratch_dir.h"

using namespace trctl;
using trctl::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

constexpr const char* kScratch = "trctl_gpu_resume";  // ScratchDir prefix

Spec mlp_spec(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"train.device=cuda", "data.train_subset=3000", "train.epochs=3",
                                       "data.val_batch_size=2000", "run.progress=off"});
  if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) overrides.push_back(std::string("data.root=") + root);
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

Result<TrainResult> train(const Spec& spec, const std::string& resume, bool write_dir,
                          const std::atomic<int>* stop = nullptr, std::function<void(int64_t)> on_step = {}) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = write_dir;
  opt.resume = resume;
  opt.stop_signal = stop;
  opt.on_step = std::move(on_step);
  opt.gpu.device_count = cuda_device_count;
  opt.gpu.make = make_cuda_backend;
  return train_run(spec, opt, log);
}

}  // namespace

TEST_CASE("GPU runs resumed after epoch 1 end bitwise equal to the uninterrupted run (fp16 and fp32)",
          "[gpu][resume]") {
  for (const char* prec : {"fp16", "fp32"}) {
    INFO(prec);
    ScratchDir s(kScratch, false);
    const std::vector<std::string> o = {std::string("train.precision=") + prec, "train.checkpoint_every=1",
                                        "run.out_dir=" + s.path.string(), "run.name=a"};
    Result<TrainResult> full = train(mlp_spec(o), "", true);
    INFO((full.ok() ? std::string() : full.error_text()));
    REQUIRE(full.ok());
    CHECK(full->backend == "cuda");
    Result<TrainResult> resumed =
        train(mlp_spec({std::string("train.precision=") + prec}), (s.path / "a/checkpoints/epoch-0001").string(), false);
    INFO((resumed.ok() ? std::string() : resumed.error_text()));
    REQUIRE(resumed.ok());
    REQUIRE(resumed->epochs.size() == 2);
    CHECK(resumed->epochs.back().step == full->epochs.back().step);
    CHECK(resumed->final_weights == full->final_weights);
    CHECK(resumed->epochs.back().val_loss == full->epochs.back().val_loss);
  }
}

TEST_CASE("a GPU run stopped mid-epoch resumes at the saved batch and ends bitwise equal", "[gpu][resume][signal]") {
  ScratchDir s(kScratch, false);
  const std::vector<std::string> o = {"train.precision=fp16"};
  Result<TrainResult> whole = train(mlp_spec(o), "", false);
  REQUIRE(whole.ok());
  std::atomic<int> stop{0};
  std::vector<std::string> os = o;
  os.push_back("run.out_dir=" + s.path.string());
  os.push_back("run.name=sig");
  Result<TrainResult> part = train(mlp_spec(os), "", true, &stop, [&](int64_t step) {
    if (step == 22) stop.store(SIGTERM);  // inside epoch 2 (15 steps of 200 per epoch)
  });
  REQUIRE(part.ok());
  CHECK(part->stopped_by == SIGTERM);
  CHECK(part->epochs.size() == 1);
  Result<TrainResult> rest = train(mlp_spec(o), part->run_dir, false);
  INFO((rest.ok() ? std::string() : rest.error_text()));
  REQUIRE(rest.ok());
  CHECK(rest->final_weights == whole->final_weights);
  CHECK(rest->epochs.back().val_loss == whole->epochs.back().val_loss);
}

TEST_CASE("state.bin carries the device's fp16 loss scale and Adam's update count", "[gpu][resume]") {
  ScratchDir s(kScratch, false);
  Result<TrainResult> full = train(mlp_spec({"train.precision=fp16", "train.checkpoint_every=1", "train.epochs=1",
                                             "run.out_dir=" + s.path.string(), "run.name=c"}),
                                   "", true);
  REQUIRE(full.ok());
  // docs/checkpoint.md: header 24 bytes, then spec_hash, step, epoch, loss_scale, growth, seed, data_epoch,
  // data_batch, opt_updates.
  std::ifstream f((s.path / "c/checkpoints/epoch-0001/state.bin").string(), std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE(b.size() > 88);
  int64_t step = 0, updates = 0;
  float scale = 0;
  std::memcpy(&step, &b[32], 8);
  std::memcpy(&scale, &b[48], 4);
  std::memcpy(&updates, &b[80], 8);
  CHECK(step == 15);
  CHECK((scale > 0 && scale <= 65536.0f));
  CHECK(updates <= step);
  // growth_interval is 2000 steps: within 15 steps the scale only falls, once per skipped (overflowing) step.
  CHECK(scale * float(int64_t(1) << (step - updates)) == 65536.0f);
}
