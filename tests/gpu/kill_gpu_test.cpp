// kill -9 trials on the CUDA backend (tests/e2e/kill_test.cpp is the CPU version; shared helpers in
// tests/support/kill_util.h): `trctl train` of the Fashion-MNIST MLP with train.device=cuda (deterministic, data
// resident on the device) is SIGKILLed at moments spread over its training -- after its first checkpoint, so the
// kills land in steps, validation, epoch and mid-epoch (checkpoint_every_steps) checkpoint writes and the keep_last
// pruning rather than in the start-up -- then `--resume auto` carries the run on (killed once more in trials 1..)
// until it finishes. The final checkpoint must be byte-identical to an uninterrupted run's, and no killed run may
// leave a half-written checkpoint directory under a name that readers take.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "tests/support/kill_util.h"

namespace fs = std::filesystem;
using namespace trctl::testing;

namespace {

// The trctl binary: $TRCTL_BIN when set (the device copy: tools/device_run.sh sets it), else the build's.
std::string trctl_binary() {
  const char* env = std::getenv("TRCTL_BIN");
  return env && *env ? env : TRCTL_BINARY;
}

// 30,000 images in batches of 200: 150 steps per epoch, 900 in 6 epochs. Checkpoints: epochs 2, 4, 6 and every
// 100th step inside an epoch (100, 200, 400, 500, 700, 800); the newest 3 kept.
std::string train_cmd(const fs::path& out, bool resume) {
  const char* root = std::getenv("TRCTL_FMNIST_ROOT");
  return trctl_binary() + " train " + TRCTL_SOURCE_DIR +
         "/configs/mlp_fmnist.yaml train.device=cuda train.deterministic=true data.train_subset=30000 "
         "train.epochs=6 train.checkpoint_every=2 train.checkpoint_every_steps=100 train.keep_last=3 "
         "train.validate_every=3 data.val_batch_size=2000 run.progress=off run.name=k run.out_dir=" +
         out.string() + (root ? std::string(" data.root=") + root : std::string()) +
         (resume ? " --resume auto" : "") + " >>" + (out / "log.txt").string() + " 2>&1";
}

const char* kLastWeights = "checkpoints/epoch-0006/weights.safetensors";
const char* kLastState = "checkpoints/epoch-0006/state.bin";

// The log of the runs under `out` (for a failure's message).
std::string log_of(const fs::path& out) {
  const std::vector<char> b = slurp(out / "log.txt");
  const std::string s(b.begin(), b.end());
  return s.size() > 4000 ? "..." + s.substr(s.size() - 4000) : s;
}

}  // namespace

TEST_CASE("GPU: kill -9 during training, resumed with --resume auto, ends byte-identical to an uninterrupted run",
          "[gpu][kill]") {
  const fs::path root = fs::temp_directory_path() / ("trctl_gpu_kill_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "ref");
  // The reference run, timed from its first checkpoint to its end: the span the kills are spread over.
  const KillRun ref_run = run_and_kill(train_cmd(root / "ref", false), 1 << 30,
                                       [&] { return count_checkpoints(root / "ref") > 0; });
  const fs::path ref = finished_run(root / "ref", "k", kLastWeights);
  INFO(log_of(root / "ref"));
  REQUIRE_FALSE(ref_run.killed);
  REQUIRE(!ref.empty());
  REQUIRE(ref_run.ready_ms >= 0);
  const int span_ms = std::max(ref_run.end_ms - ref_run.ready_ms, 50);
  const std::vector<char> want = slurp(ref / kLastWeights);
  const std::vector<char> want_state = slurp(ref / kLastState);
  REQUIRE(!want.empty());

  const int trials = 3;
  int kills = 0, planned = 0;
  for (int t = 0; t < trials; ++t) {
    const fs::path out = root / ("t" + std::to_string(t));
    fs::create_directories(out);
    INFO("trial " << t);
    // A kill at (t + 1) / (trials + 1) of the span after the first checkpoint appears; from trial 1 on the resumed
    // run is killed too, a third of the span (plus an offset per trial) after its own first checkpoint.
    ++planned;
    kills += run_and_kill(train_cmd(out, false), span_ms * (t + 1) / (trials + 1),
                          [&] { return count_checkpoints(out) > 0; })
                 .killed;
    if (t >= 1) {
      const int before = count_checkpoints(out);
      ++planned;
      kills += run_and_kill(train_cmd(out, true), span_ms / 3 + 29 * t,
                            [&] { return count_checkpoints(out) > before; })
                   .killed;
    }
    const int rc = std::system(train_cmd(out, true).c_str());
    INFO(log_of(out));
    REQUIRE(rc == 0);
    const fs::path done = finished_run(out, "k", kLastWeights);
    REQUIRE(!done.empty());
    CHECK(slurp(done / kLastWeights) == want);
    CHECK(slurp(done / kLastState) == want_state);
    check_checkpoints_whole(out);
  }
  WARN("GPU kill -9 trials: " << trials << " runs, " << kills << " of " << planned
                              << " planned kills landed, all resumed to the reference bytes");
  // A kill moment can fall after a run's end on a busy machine; at least half must land, or nothing was tested.
  CHECK(2 * kills >= planned);
  fs::remove_all(root);
}
