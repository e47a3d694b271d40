// run.json (runtime/run_facts.h): the counting of cuDNN conv plans by algorithm source, the file's writer and
// reader (errors name the member), and a CPU training run's run.json (the backend, no conv_algorithms).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/run_facts.h"
#include "runtime/train/trainer.h"
#include "tests/support/train_util.h"

namespace fs = std::filesystem;
using namespace trctl;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("conv plans are counted per planned direction, by whether the cache held the key", "[run_facts]") {
  ConvAlgoSources s;
  CHECK(std::string(conv_algo_source(s)) == "none");
  // The first layer: fwd and wgrad planned (no dgrad), the cache holds fwd and an unused dgrad entry.
  conv_algo_sources_add(s, {true, false, true}, {true, true, false});
  CHECK(s.from_cache == 1);
  CHECK(s.from_heuristics == 1);
  CHECK(std::string(conv_algo_source(s)) == "mixed");
  ConvAlgoSources all_cached;
  conv_algo_sources_add(all_cached, {true, true, true}, {true, true, true});
  conv_algo_sources_add(all_cached, {true, false, true}, {true, false, true});
  CHECK(all_cached.from_cache == 5);
  CHECK(all_cached.from_heuristics == 0);
  CHECK(std::string(conv_algo_source(all_cached)) == "autotune cache");
  ConvAlgoSources none_cached;
  conv_algo_sources_add(none_cached, {true, true, true}, {false, false, false});
  CHECK(none_cached.from_heuristics == 3);
  CHECK(std::string(conv_algo_source(none_cached)) == "heuristics");
}

TEST_CASE("run.json round-trips the backend, the device description and the conv algorithms' source", "[run_facts]") {
  RunFacts f;
  f.backend = "cuda";
  f.has_conv = true;
  f.conv.cache = "/home/u/.cache/trctl/conv \"autotune\".txt";  // quoted in JSON
  f.conv.cache_exists = true;
  f.conv.deterministic = false;
  f.conv.from_cache = 30;
  f.conv.from_heuristics = 9;
  f.device = "NVIDIA H200, sm_90, 132 SMs, device 0, cuBLASLt workspace 32 MiB, cuBLASLt 130000, cuDNN 91900";
  const std::string text = run_facts_json(f);
  CHECK_THAT(text, Catch::StartsWith("{\"backend\": \"cuda\", \"device\": \"NVIDIA H200, sm_90,"));
  CHECK_THAT(text, Catch::Contains("\"conv_algorithms\": {\"source\": \"mixed\""));
  CHECK_THAT(text, Catch::Contains("\"from_cache\": 30, \"from_heuristics\": 9, \"deterministic\": false"));
  Result<RunFacts> back = run_facts_parse(text, "run.json");
  INFO((back.ok() ? std::string() : back.error_text()));
  REQUIRE(back.ok());
  CHECK(back->backend == "cuda");
  CHECK(back->device == f.device);
  REQUIRE(back->has_conv);
  CHECK(back->conv.cache == f.conv.cache);
  CHECK(back->conv.cache_exists);
  CHECK_FALSE(back->conv.deterministic);
  CHECK(back->conv.from_cache == 30);
  CHECK(back->conv.from_heuristics == 9);

  RunFacts cpu;
  cpu.backend = "cpu";
  CHECK(run_facts_json(cpu) == "{\"backend\": \"cpu\"}\n");
  Result<RunFacts> c = run_facts_parse(run_facts_json(cpu), "run.json");
  REQUIRE(c.ok());
  CHECK(c->backend == "cpu");
  CHECK(c->device.empty());
  CHECK_FALSE(c->has_conv);
}

TEST_CASE("a run.json with a bad conv_algorithms member is an error naming the file and the member", "[run_facts]") {
  Result<RunFacts> r = run_facts_parse(R"({"backend": "cuda", "conv_algorithms": {"from_cache": "all",
                                          "from_heuristics": 0}})",
                                       "runs/x/run.json");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error_text(), Catch::Contains("runs/x/run.json") && Catch::Contains("conv_algorithms.from_cache"));
  r = run_facts_parse(R"({"conv_algorithms": {"from_cache": 1, "from_heuristics": -2}})", "run.json");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error_text(), Catch::Contains("conv_algorithms.from_heuristics"));
  r = run_facts_parse(R"({"conv_algorithms": {"from_cache": 1, "from_heuristics": 0, "cache_exists": "yes"}})",
                      "run.json");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error_text(), Catch::Contains("conv_algorithms.cache_exists"));
  r = run_facts_parse(R"({"conv_algorithms": 3})", "run.json");
  REQUIRE_FALSE(r.ok());
  r = run_facts_parse("{\"backend\": ", "run.json");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error_text(), Catch::Contains("run.json"));
  r = run_facts_parse("[1]", "run.json");
  REQUIRE_FALSE(r.ok());
}

TEST_CASE("a CPU training run writes run.json naming the backend and no conv algorithms", "[run_facts][e2e]") {
  const fs::path dir = fs::temp_directory_path() / ("trctl_run_facts_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const char* yaml = R"(
seed: 1
data:
  dataset: synthetic
  synthetic: {train_size: 32, val_size: 16, height: 8, width: 8, channels: 3, classes: 4}
  batch_size: 16
  val_batch_size: 16
  normalization: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}
model:
  layers:
    - {type: conv2d, name: conv1, out_channels: 8, kernel_size: 3, padding: 1}
    - {type: relu, name: relu1}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 4}
optimizer: {type: sgd, lr: 0.01}
train: {epochs: 1, device: cpu}
run: {progress: off}
)";
  Result<Spec> spec = spec_parse(yaml, "run_facts.yaml", {"run.out_dir=" + dir.string(), "run.name=cnn"});
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  const TrainResult r = testing::train_spec(spec.value(), TrainOptions{});
  REQUIRE(!r.run_dir.empty());
  const std::string text = slurp(fs::path(r.run_dir) / "run.json");
  CHECK(text == "{\"backend\": \"cpu\"}\n");
  fs::remove_all(dir);
}
