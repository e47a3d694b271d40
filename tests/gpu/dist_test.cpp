// Data parallelism on the device (docs/distributed.md): world size 1 through the whole NCCL path (rendezvous,
// communicator, bucketed all-reduces forked onto the communication stream inside the captured step) trains bitwise
// equal to the non-distributed run; `trctl train --gpus 1` runs and writes its run directory; --gpus beyond the
// visible devices exits 2; with two or more GPUs, `--gpus 2` trains.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

Spec dist_spec(const std::string& config, std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"train.device=cuda", "data.train_subset=3000", "train.epochs=2",
                                       "data.val_batch_size=2000", "run.progress=off"});
  if (const char* root = std::getenv("TRCTL_FMNIST_ROOT")) overrides.push_back(std::string("data.root=") + root);
  Result<Spec> s = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/" + config, overrides);
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

// world 0: not distributed (make_cuda_backend); world 1: rank 0 of 1 through NCCL with `bucket_bytes` buckets.
std::vector<float> train_weights(const Spec& spec, int world, int64_t bucket_bytes) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  opt.gpu.device_count = cuda_device_count;
  opt.gpu.make = make_cuda_backend;
  if (world > 0) {
    opt.dist.enabled = true;
    opt.dist.world_size = world;
    opt.dist.timeout_s = 60;
    opt.dist.bucket_bytes = bucket_bytes;
    opt.gpu.make = [d = opt.dist](const Compiled& c, uint64_t seed) { return make_cuda_backend_dist(c, seed, d); };
  }
  Result<TrainResult> r = train_run(spec, opt, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r->final_weights;
}

void check_bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  size_t diff = 0, first = a.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      if (first == a.size()) first = i;
      ++diff;
    }
  INFO(diff << " of " << a.size() << " weights differ; first at " << first << ": "
            << (first < a.size() ? a[first] : 0.f) << " vs " << (first < a.size() ? b[first] : 0.f));
  CHECK(diff == 0);
}

struct Run {
  int code = -1;
  std::string err;
};

// The trctl binary: $TRCTL_BIN when set (the device copy: tools/device_run.sh sets it), else the build's.
std::string trctl_binary() {
  const char* env = std::getenv("TRCTL_BIN");
  return env && *env ? env : TRCTL_BINARY;
}

Run run_trctl(const std::string& args) {
  const fs::path err = fs::temp_directory_path() / ("trctl_gpu_dist_" + std::to_string(getpid()));
  const std::string cmd = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK " + trctl_binary() + " " + args +
                          " >/dev/null 2>" + err.string();
  const int st = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(err);
  std::stringstream s;
  s << f.rdbuf();
  r.err = s.str();
  fs::remove(err);
  return r;
}

std::string fmnist_root_override() {
  const char* root = std::getenv("TRCTL_FMNIST_ROOT");
  return root ? std::string(" data.root=") + root : std::string();
}

}  // namespace

TEST_CASE("world size 1 through NCCL trains bitwise equal to the non-distributed run (fp32 MLP, one and many buckets)",
          "[gpu][dist]") {
  const Spec spec = dist_spec("mlp_fmnist.yaml", {"train.precision=fp32"});
  const std::vector<float> plain = train_weights(spec, 0, 0);
  SECTION("one bucket") { check_bitwise(plain, train_weights(spec, 1, int64_t{25} << 20)); }
  SECTION("a bucket per parameter, issued during backward") { check_bitwise(plain, train_weights(spec, 1, 1)); }
}

TEST_CASE("world size 1 through NCCL trains bitwise equal to the non-distributed run (fp16 AMP CNN with batch norm)",
          "[gpu][dist]") {
  const Spec spec = dist_spec("cnn_fmnist.yaml", {"train.epochs=1"});
  check_bitwise(train_weights(spec, 0, 0), train_weights(spec, 1, 1 << 16));
}

TEST_CASE("trctl train --gpus 1 runs one NCCL rank and rank 0 writes the run directory", "[gpu][dist][cli]") {
  const fs::path out = fs::temp_directory_path() / ("trctl_gpu_dist_runs_" + std::to_string(getpid()));
  fs::remove_all(out);
  Run r = run_trctl("train " + std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml --gpus 1 train.epochs=1 "
                "data.train_subset=3000 run.progress=off run.name=dist1 run.out_dir=" + out.string() +
                fmnist_root_override());
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(fs::exists(out / "dist1" / "metrics.jsonl"));
  CHECK_THAT(r.err, Catch::Contains("rank 0: "));
  fs::remove_all(out);
}

TEST_CASE("trctl train --gpus beyond the visible devices exits 2", "[gpu][dist][cli]") {
  const int n = cuda_device_count();
  Run r = run_trctl("train " + std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml --gpus " + std::to_string(n + 1));
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("visible"));
}

TEST_CASE("trctl train --gpus 2 trains on two GPUs (skipped with one)", "[gpu][dist][cli]") {
  if (cuda_device_count() < 2) {
    WARN("skipped: needs 2 CUDA devices, " << cuda_device_count() << " visible");
    return;
  }
  const fs::path out = fs::temp_directory_path() / ("trctl_gpu_dist2_" + std::to_string(getpid()));
  fs::remove_all(out);
  Run r = run_trctl("train " + std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml --gpus 2 train.epochs=2 "
                "data.train_subset=3000 run.progress=off run.name=dist2 run.out_dir=" + out.string() +
                fmnist_root_override());
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(fs::exists(out / "dist2" / "metrics.jsonl"));
  CHECK_FALSE(fs::exists(out / "dist2-2"));  // rank 1 wrote nothing
  fs::remove_all(out);
}
