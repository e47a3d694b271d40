// kill -9 trials: the trctl binary is killed at spread-out moments (during steps, validation and checkpoint
// writes), then `--resume auto` carries the run on (itself killed once more in some trials) until it finishes.
// The final checkpoint must be byte-identical to an uninterrupted run's, and no killed run may leave a checkpoint
// directory that is half written (checkpoints are DIR.partial until complete).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;

namespace {

std::vector<char> slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string train_cmd(const fs::path& out, bool resume) {
  return std::string(TRCTL_BINARY) + " train " + TRCTL_SOURCE_DIR +
         "/configs/mlp_fmnist.yaml train.device=cpu data.train_subset=1000 train.epochs=6 "
         "train.checkpoint_every=1 train.validate_every=3 data.val_batch_size=2000 run.progress=off run.name=k "
         "run.out_dir=" + out.string() + (resume ? " --resume auto" : "") + " >>" + (out / "log.txt").string() +
         " 2>&1";
}

// Runs cmd under /bin/sh; SIGKILLs it after `ms` milliseconds unless it ended. True when it was killed.
bool run_and_kill(const std::string& cmd, int ms) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(ms)) {
    if (waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

// The newest run directory out/k, k-2, ... that holds checkpoints/epoch-0006.
fs::path finished_run(const fs::path& out) {
  for (int i = 50; i >= 1; --i) {
    const fs::path d = out / (i == 1 ? std::string("k") : "k-" + std::to_string(i));
    if (fs::exists(d / "checkpoints/epoch-0006/weights.safetensors")) return d;
  }
  return {};
}

}  // namespace

TEST_CASE("kill -9 at spread-out moments, resumed with --resume auto, ends byte-identical to an uninterrupted run",
          "[e2e][kill][long]") {
  const fs::path root = fs::temp_directory_path() / ("trctl_kill_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "ref");
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(std::system(train_cmd(root / "ref", false).c_str()) == 0);
  const int full_ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  const fs::path ref = finished_run(root / "ref");
  REQUIRE(!ref.empty());
  const std::vector<char> want = slurp(ref / "checkpoints/epoch-0006/weights.safetensors");
  const std::vector<char> want_state = slurp(ref / "checkpoints/epoch-0006/state.bin");

  const int trials = 6;
  int kills = 0;
  for (int t = 0; t < trials; ++t) {
    INFO("trial " << t);
    const fs::path out = root / ("t" + std::to_string(t));
    fs::create_directories(out);
    // Kill moments spread over the run (its start-up included); trials 3.. kill the resumed run a second time.
    kills += run_and_kill(train_cmd(out, false), full_ms * (t + 1) / (trials + 1)) ? 1 : 0;
    if (t >= 3) kills += run_and_kill(train_cmd(out, true), full_ms / 3 + 37 * t) ? 1 : 0;
    REQUIRE(std::system(train_cmd(out, true).c_str()) == 0);
    const fs::path done = finished_run(out);
    REQUIRE(!done.empty());
    CHECK(slurp(done / "checkpoints/epoch-0006/weights.safetensors") == want);
    CHECK(slurp(done / "checkpoints/epoch-0006/state.bin") == want_state);
    // Every complete-looking checkpoint directory is whole.
    for (const auto& run : fs::directory_iterator(out)) {
      if (!run.is_directory()) continue;
      std::error_code ec;  // a run killed before its first checkpoint has no checkpoints/ folder
      for (const auto& ck : fs::directory_iterator(run.path() / "checkpoints", ec)) {
        const std::string n = ck.path().filename().string();
        if (n.size() > 8 && n.substr(n.size() - 8) == ".partial") continue;
        CHECK(fs::exists(ck.path() / "state.bin"));
        CHECK(fs::exists(ck.path() / "weights.safetensors"));
      }
    }
  }
  WARN("kill -9 trials: " << trials << " runs, " << kills << " processes killed, all resumed to the reference bytes");
  // The kill moments are fractions of the reference run's wall time; on a loaded machine a late moment may fall
  // after a run's end (seen: 4 kills of 6 planned). At least half must hit, or the test is not testing kills.
  CHECK(kills >= trials / 2);
  fs::remove_all(root);
}
