// A checkpoint write failing with ENOSPC (debug.fail_checkpoint_write; tests run as root, so chmod cannot stop a
// write): the run stops after that epoch's metrics with an error naming the path and the OS error, leaves no
// .partial directory, keeps the previous checkpoint loadable, and --resume auto continues from it to the same
// weights as an uninterrupted run. The CLI exits 1 (the environment failed, not the input).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "core/ckpt/checkpoint.h"
#include "runtime/train/trainer.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("trctl_ckpt_fault_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(path); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Spec load(const std::vector<std::string>& overrides) {
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/mlp_fmnist.yaml", overrides);
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  return spec.value();
}

std::vector<std::string> base(const fs::path& out, const std::string& name) {
  return {"train.device=cpu", "data.train_subset=400", "train.epochs=3", "train.checkpoint_every=1",
          "run.progress=off", "run.out_dir=" + out.string(), "run.name=" + name};
}

int count_lines(const fs::path& p, const std::string& needle) {
  std::ifstream f(p);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) n += line.find(needle) != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("a full disk during a checkpoint stops the run cleanly and --resume auto continues from the previous one",
          "[e2e][ckpt][fault]") {
  Scratch dir;
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  std::vector<std::string> o = base(dir.path, "full");
  o.push_back("debug.fail_checkpoint_write=2");
  Result<TrainResult> r = train_run(load(o), TrainOptions{}, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  const fs::path run = dir.path / "full";
  REQUIRE(r->checkpoint_errors.size() >= 2);
  std::string text;
  for (const Error& e : r->checkpoint_errors) text += e.str() + "\n";
  INFO(text);
  CHECK_THAT(text, Catch::Contains((run / "checkpoints" / "epoch-0002.partial" / "state.bin").string()) &&
                       Catch::Contains("No space left on device") && Catch::Contains("--resume"));
  CHECK(r->epochs.size() == 2);  // epoch 2 trained and logged; epoch 3 never started
  CHECK(count_lines(run / "metrics.jsonl", "\"kind\":\"epoch\"") == 2);
  CHECK(count_lines(run / "summary.csv", ",") == 3);  // header + 2 epochs
  CHECK(fs::exists(run / "checkpoints" / "epoch-0001" / "state.bin"));
  CHECK_FALSE(fs::exists(run / "checkpoints" / "epoch-0002"));
  CHECK_FALSE(fs::exists(run / "checkpoints" / "epoch-0002.partial"));
  for (const auto& e : fs::recursive_directory_iterator(run))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);

  // Space again: --resume auto picks the newest run directory with a checkpoint (epoch 1) and finishes the run.
  std::vector<std::string> again = base(dir.path, "full");
  again.push_back("debug.fail_checkpoint_write=0");  // not part of the spec hash: the checkpoint is accepted
  TrainOptions ro;
  ro.resume = "auto";
  Result<TrainResult> resumed = train_run(load(again), ro, log);
  INFO((resumed.ok() ? std::string() : resumed.error_text()));
  REQUIRE(resumed.ok());
  CHECK(resumed->checkpoint_errors.empty());
  REQUIRE(resumed->epochs.size() == 2);
  CHECK(resumed->epochs.front().epoch == 2);
  Result<TrainResult> whole = train_run(load(base(dir.path, "whole")), TrainOptions{}, log);
  REQUIRE(whole.ok());
  CHECK(resumed->final_weights == whole->final_weights);
}

TEST_CASE("trctl train exits 1 naming the path and the OS error when a checkpoint cannot be written", "[e2e][ckpt][fault][cli]") {
  Scratch dir;
  fs::create_directories(dir.path);
  const std::string err = (dir.path / "err").string();
  const std::string cmd = std::string(TRCTL_BINARY) + " train " + TRCTL_SOURCE_DIR +
                          "/configs/mlp_fmnist.yaml train.device=cpu data.train_subset=200 train.epochs=2 "
                          "train.checkpoint_every=1 run.progress=off debug.fail_checkpoint_write=1 run.out_dir=" +
                          dir.path.string() + " run.name=cli >/dev/null 2>" + err;
  const int st = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 1);
  std::ifstream f(err);
  std::stringstream s;
  s << f.rdbuf();
  CHECK_THAT(s.str(), Catch::Contains("error: " + (dir.path / "cli" / "checkpoints").string()) &&
                          Catch::Contains("No space left on device") && Catch::Contains("not written"));
  CHECK(count_lines(dir.path / "cli" / "metrics.jsonl", "\"kind\":\"epoch\"") == 1);
}
