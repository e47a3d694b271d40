// Distributed training at the command line on a machine without GPUs: the torchrun variables are checked, and
// --gpus N and a distributed run on the cpu backend say "not supported" with exit code 2 (docs/distributed.md).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string err;
};

// Runs trctl with `env` prepended (VAR=value ...), stderr captured.
Run trctl_env(const std::string& env, const std::string& args) {
  static int n = 0;
  const fs::path err = fs::temp_directory_path() / ("trctl_dist_cli_" + std::to_string(getpid()) + "_" + std::to_string(n++));
  const std::string cmd = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT " + env + " " +
                          std::string(TRCTL_BINARY) + " " + args + " >/dev/null 2>" + err.string();
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

// A tiny synthetic run on the cpu backend (no dataset files needed).
std::string tiny_config() {
  const fs::path p = fs::temp_directory_path() / ("trctl_dist_cli_" + std::to_string(getpid()) + ".yaml");
  std::ofstream(p) << "data:\n  dataset: synthetic\n  synthetic: {train_size: 64, val_size: 16, height: 4, width: 4, "
                      "channels: 1, classes: 3}\n  batch_size: 8\nmodel:\n  layers:\n    - {type: flatten}\n"
                      "    - {type: linear, out_features: 3}\nloss: {type: cross_entropy}\n"
                      "optimizer: {type: sgd, lr: 0.1}\ntrain: {epochs: 1, device: cpu}\n";
  return p.string();
}

}  // namespace

TEST_CASE("trctl train --gpus N on the cpu backend is not supported (exit 2)", "[cli][dist]") {
  const std::string cfg = tiny_config();
  Run r = trctl_env("", "train " + cfg + " --gpus 2");
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("not supported on the cpu backend"));
}

TEST_CASE("a distributed rank on the cpu backend is not supported (exit 2)", "[cli][dist]") {
  const std::string cfg = tiny_config();
  Run r = trctl_env("RANK=0 WORLD_SIZE=1", "train " + cfg);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("distributed training is not supported on the cpu backend"));
}

TEST_CASE("malformed torchrun variables exit 2, each named", "[cli][dist]") {
  const std::string cfg = tiny_config();
  Run r = trctl_env("RANK=3 WORLD_SIZE=2 MASTER_PORT=abc", "train " + cfg);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("RANK=3 is not below WORLD_SIZE=2"));
  CHECK_THAT(r.err, Catch::Contains("MASTER_PORT: 'abc'"));
}

TEST_CASE("gpus together with an outer launcher's WORLD_SIZE is refused (exit 2)", "[cli][dist]") {
  const std::string cfg = tiny_config();
  Run r = trctl_env("WORLD_SIZE=2 RANK=0 MASTER_PORT=1", "train " + cfg + " --gpus 2");
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("already set"));
}
