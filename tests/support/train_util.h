// Test helpers: a training run of a spec (train_spec), or of a config in configs/ with overrides validated as the
// CLI's (later ones win) and no run directory (train_config), through train_run with the log discarded; they fail
// the test case with the errors otherwise.
#pragma once
#include <catch2/catch.hpp>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

#include "runtime/train/trainer.h"

namespace trctl::testing {

// train_run of a spec with the log discarded; train_spec fails the test case with the errors.
inline Result<TrainResult> train_spec_result(const Spec& spec, const TrainOptions& opt) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  return train_run(spec, opt, log);
}

inline TrainResult train_spec(const Spec& spec, const TrainOptions& opt) {
  Result<TrainResult> r = train_spec_result(spec, opt);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

inline TrainResult train_config(const std::string& config, const std::vector<std::string>& overrides) {
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/" + config, overrides);
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  TrainOptions opt;
  opt.write_run_dir = false;
  return train_spec(spec.value(), opt);
}

}  // namespace trctl::testing
