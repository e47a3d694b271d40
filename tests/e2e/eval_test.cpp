// trctl eval's engine (eval_run): a checkpoint's weights through the validation set give exactly the training
// run's validation numbers for that epoch (loss, top-1, top-5), also for a CNN with batch-norm running statistics; a checkpoint of
// another model is refused naming the parameter.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include "runtime/train/trainer.h"

using namespace trctl;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("trctl_eval_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(path); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Spec load(const std::string& config, const std::vector<std::string>& overrides) {
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/" + config, overrides);
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  return spec.value();
}

}  // namespace

TEST_CASE("eval with a run's checkpoint reproduces that epoch's validation loss, top-1 and top-5 exactly",
          "[e2e][eval]") {
  Scratch dir;
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  struct Case {
    const char* config;
    std::vector<std::string> overrides;
  };
  const Case cases[] = {
      {"mlp_fmnist.yaml", {"data.train_subset=1000"}},
      {"cnn_fmnist.yaml", {"data.train_subset=512", "data.val_batch_size=1000"}},  // BN running statistics
  };
  for (const Case& k : cases) {
    INFO(k.config);
    std::vector<std::string> o = k.overrides;
    o.insert(o.end(), {"train.device=cpu", "train.epochs=1", "train.checkpoint_every=1",
                       "run.out_dir=" + dir.path.string(), "run.progress=off"});
    TrainOptions opt;
    Result<TrainResult> t = train_run(load(k.config, o), opt, log);
    INFO((t.ok() ? std::string() : t.error_text()));
    REQUIRE(t.ok());
    Result<EvalResult> e = eval_run(load(k.config, o), opt, t->run_dir, log);
    INFO((e.ok() ? std::string() : e.error_text()));
    REQUIRE(e.ok());
    CHECK(e->images == 10000);
    CHECK(e->loss == t->epochs.back().val_loss);
    CHECK(e->top1 == t->epochs.back().val_top1);
    CHECK(e->top5 == t->epochs.back().val_top5);
    CHECK(e->top5 >= e->top1);
    CHECK(e->top5 > 0.5);  // ten classes: top-5 of a trained model is far above chance
  }
}

TEST_CASE("eval refuses a checkpoint of another model, naming the parameter and both shapes", "[e2e][eval]") {
  Scratch dir;
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  const std::vector<std::string> o = {"train.device=cpu", "train.epochs=1", "data.train_subset=400",
                                      "train.checkpoint_every=1", "run.out_dir=" + dir.path.string()};
  TrainOptions opt;
  Result<TrainResult> t = train_run(load("mlp_fmnist.yaml", o), opt, log);
  REQUIRE(t.ok());
  std::vector<std::string> other = o;
  other.push_back("model.layers.1.out_features=64");
  Result<EvalResult> e = eval_run(load("mlp_fmnist.yaml", other), opt, t->run_dir, log);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error_text().find("fc1.weight") != std::string::npos);
  CHECK(e.error_text().find("(64, 784)") != std::string::npos);
}
