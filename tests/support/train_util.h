// Test helper: a training run of a config in configs/ through train_run, with overrides validated as the CLI's
// (later ones win), no run directory and the log discarded; fails the test case with the errors otherwise.
#pragma once
#include <catch2/catch.hpp>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

#include "runtime/train/trainer.h"

namespace trctl::testing {

inline TrainResult train_config(const std::string& config, const std::vector<std::string>& overrides) {
  Result<Spec> spec = spec_load(std::string(TRCTL_SOURCE_DIR) + "/configs/" + config, overrides);
  INFO((spec.ok() ? std::string() : spec.error_text()));
  REQUIRE(spec.ok());
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  TrainOptions opt;
  opt.write_run_dir = false;
  Result<TrainResult> r = train_run(spec.value(), opt, log);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

}  // namespace trctl::testing
