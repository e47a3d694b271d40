// run.json's conv_algorithms on the device: a tiny CNN trained on the CUDA backend with no autotune cache file
// records every cuDNN plan (fwd, dgrad where a program needs it, wgrad; per distinct geometry) as from the
// heuristics; after conv_autotune_spec (what `trctl bench CFG --autotune` runs) every plan comes from the cache;
// with the cache's wgrad entries removed the wgrad plans come from the heuristics ("mixed"). Under fp16 AMP the RGB
// stem's directions that run as im2col + GEMM (train.conv_im2col) have no cuDNN plan and are not counted; the other
// plans are fully cached after autotune.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <set>
#include <sstream>

#include "core/compiler.h"
#include "core/passes/passes.h"
#include "runtime/backend.h"
#include "runtime/cuda/conv_autotune.h"
#include "runtime/run_facts.h"
#include "runtime/train/trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/gpu_train_util.h"
#include "tests/support/scratch_dir.h"

using namespace trctl;
using trctl::testing::ScratchDir;
using trctl::gputest::EnvGuard;

namespace {

constexpr const char* kScratch = "trctl_conv_sources_gpu";  // ScratchDir prefix

namespace fs = std::filesystem;

// conv 3x3 (C=3, the input: no dgrad) -> bn -> relu -> pool -> conv 3x3 16->32 -> bn -> relu -> conv 1x1 (a
// cuBLASLt GEMM, not a cuDNN plan) -> gap -> fc. Batch 32 for training and validation: one N for all programs.
const char* kYaml = R"(
seed: 11
data:
  dataset: synthetic
  synthetic: {train_size: 128, val_size: 64, height: 16, width: 16, channels: 3, classes: 10}
  batch_size: 32
  val_batch_size: 32
  normalization: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}
model:
  layers:
    - {type: conv2d, name: conv1, out_channels: 16, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn1}
    - {type: relu, name: relu1}
    - {type: max_pool, name: pool, kernel_size: 2, stride: 2}
    - {type: conv2d, name: conv2, out_channels: 32, kernel_size: 3, padding: 1, bias: false}
    - {type: batch_norm, name: bn2}
    - {type: relu, name: relu2}
    - {type: conv2d, name: conv3, out_channels: 32, kernel_size: 1, bias: false}
    - {type: global_avg_pool, name: gap}
    - {type: linear, name: fc, out_features: 10}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 1, precision: fp32}
run: {progress: off}
)";

Spec spec_of(const fs::path& out_dir, const std::string& precision) {
  Result<Spec> s = spec_parse(kYaml, "conv_sources.yaml",
                              {"run.out_dir=" + out_dir.string(), "run.name=r", "train.precision=" + precision});
  INFO((s.ok() ? std::string() : s.error_text()));
  REQUIRE(s.ok());
  return s.value();
}

// Trains spec on the GPU into a fresh run directory and returns its run.json.
RunFacts train_facts(const Spec& spec) {
  const TrainResult r = gputest::train_cuda(spec, TrainOptions{});
  REQUIRE(!r.run_dir.empty());
  std::ifstream f(fs::path(r.run_dir) / "run.json");
  REQUIRE(f.good());
  std::stringstream text;
  text << f.rdbuf();
  Result<RunFacts> facts = run_facts_parse(text.str(), r.run_dir + "/run.json");
  INFO((facts.ok() ? std::string() : facts.error_text()));
  REQUIRE(facts.ok());
  CHECK(facts->backend == "cuda");
  REQUIRE(facts->has_conv);
  return facts.value();
}

Compiled compiled_of(const Spec& spec) {
  Result<DataShape> shape = data_shape(spec);
  REQUIRE(shape.ok());
  CompileOptions copt;
  copt.storage = amp_storage(spec);
  Result<Compiled> c = compile_spec(spec, shape.value(), copt);
  INFO((c.ok() ? std::string() : c.error_text()));
  REQUIRE(c.ok());
  return std::move(c.value());
}

// The plans an fp32 compile gets, counted independently of the backend: fwd and wgrad per distinct geometry of the
// non-pointwise conv nodes, dgrad per geometry some program takes the input gradient of. `geometries` gets |G|.
int expected_plans(const Compiled& c, int* geometries) {
  std::set<std::string> all, dgrad;
  for (const Program& p : c.graph.programs)
    for (const Node& n : p.nodes) {
      ValueId x = 0, w = 0;
      if (n.op == OpKind::Conv2d) x = n.in[0], w = n.in[1];
      else if (n.op == OpKind::Conv2dGradInput) x = n.out[0], w = n.in[1];
      else if (n.op == OpKind::Conv2dGradWeight) x = n.in[1], w = n.out[0];
      else continue;
      if (pointwise_conv(n)) continue;
      const Conv2dGeom g = conv2d_geom_of(c.graph, n, x, w);
      std::string key;
      for (int64_t v : {g.n, g.h, g.w, g.c, g.k, g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dil_h, g.dil_w,
                        g.groups})
        key += std::to_string(v) + ",";
      all.insert(key);
      if (n.op == OpKind::Conv2dGradInput) dgrad.insert(key);
    }
  *geometries = static_cast<int>(all.size());
  return 2 * static_cast<int>(all.size()) + static_cast<int>(dgrad.size());
}

}  // namespace

TEST_CASE("run.json counts the cuDNN conv plans from the heuristics, the autotune cache, or both (fp32)",
          "[gpu][backend][cnn][autotune]") {
  ScratchDir scratch(kScratch);
  const std::string cache = (scratch.path / "conv_autotune.txt").string();
  EnvGuard env("TRCTL_AUTOTUNE_CACHE", cache);
  const Spec spec = spec_of(scratch.path / "runs", "fp32");
  const Compiled c = compiled_of(spec);
  int geometries = 0;
  const int plans = expected_plans(c, &geometries);
  INFO("expected " << plans << " plans over " << geometries << " geometries");
  REQUIRE(geometries == 2);  // conv1 and conv2 at N = 32 (conv3 is pointwise)
  REQUIRE(plans == 5);       // conv1: fwd, wgrad; conv2: fwd, dgrad, wgrad

  {  // no cache file: every plan from the heuristics
    const RunFacts f = train_facts(spec);
    CHECK(f.conv.cache == cache);
    CHECK_FALSE(f.conv.cache_exists);
    CHECK(f.conv.deterministic);
    CHECK(f.conv.from_cache == 0);
    CHECK(f.conv.from_heuristics == plans);
    CHECK(std::string(conv_algo_source(f.conv)) == "heuristics");
  }
  REQUIRE_OK(conv_autotune_spec(c, cache, true, nullptr));
  {  // autotuned: every plan from the cache
    const RunFacts f = train_facts(spec);
    CHECK(f.conv.cache_exists);
    CHECK(f.conv.from_cache == plans);
    CHECK(f.conv.from_heuristics == 0);
    CHECK(std::string(conv_algo_source(f.conv)) == "autotune cache");
  }
  {  // the wgrad entries removed: one wgrad plan per geometry from the heuristics
    Result<AutotuneCache> loaded = autotune_cache_load(cache);
    REQUIRE_OK(loaded);
    AutotuneCache partial;
    for (const auto& [key, choice] : loaded.value().entries)
      if (key.find(" dir=wgrad ") == std::string::npos) partial.entries.emplace(key, choice);
    REQUIRE(partial.entries.size() < loaded.value().entries.size());
    REQUIRE_OK(autotune_cache_save(cache, partial));
    const RunFacts f = train_facts(spec);
    CHECK(f.conv.from_cache == plans - geometries);
    CHECK(f.conv.from_heuristics == geometries);
    CHECK(std::string(conv_algo_source(f.conv)) == "mixed");
  }
}

TEST_CASE("after autotune every cuDNN conv plan of an fp16 AMP run comes from the cache, whichever stem directions run as im2col",
          "[gpu][backend][cnn][autotune][amp]") {
  // Under AMP the stem (C = 3, K = 16: im2col_conv_eligible) needs no dgrad (its input is data); its forward and
  // weight gradient run as im2col + GEMM (no cuDNN plan, not counted) as train.conv_im2col says: on = both,
  // forward (the default) = the forward only, off = neither. conv2 always has fwd, dgrad, wgrad = 3 plans.
  std::map<std::string, int> heuristic_plans;
  const std::pair<const char*, ConvIm2col> modes[] = {
      {"on", ConvIm2col::On}, {"forward", ConvIm2col::Forward}, {"off", ConvIm2col::Off}};
  for (const auto& [mode, value] : modes) {
    INFO("train.conv_im2col=" << mode);
    ScratchDir scratch(kScratch);
    const std::string cache = (scratch.path / "conv_autotune.txt").string();
    EnvGuard env("TRCTL_AUTOTUNE_CACHE", cache);
    Spec spec = spec_of(scratch.path / "runs", "fp16");
    spec.train.conv_im2col = value;
    spec.train.conv_fewc = ConvFewc::Off;  // else the stem's forward runs trctl's few-channel kernel in every mode
    const RunFacts before = train_facts(spec);
    CHECK(before.conv.from_cache == 0);
    heuristic_plans[mode] = before.conv.from_heuristics;
    REQUIRE_OK(conv_autotune_spec(compiled_of(spec), cache, true, nullptr));
    const RunFacts after = train_facts(spec);
    CHECK(after.conv.cache_exists);
    CHECK(after.conv.from_cache == before.conv.from_heuristics);
    CHECK(after.conv.from_heuristics == 0);
  }
  CHECK(heuristic_plans["on"] == 3);  // conv2's three (measured on the H200, RESULTS.md run 29)
  CHECK(heuristic_plans["forward"] > heuristic_plans["on"]);   // + the stem's cuDNN wgrad
  CHECK(heuristic_plans["off"] > heuristic_plans["forward"]);  // + the stem's padded cuDNN forward
}
