// GPU test helper: a training run of a spec through train_run on the CUDA backend factory (cuda_device_count,
// make_cuda_backend), the log discarded. train_cuda_result returns the Result; train_cuda fails the test case with
// the errors otherwise. The one-argument train_cuda writes no run directory.
#pragma once
#include <catch2/catch.hpp>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/train/trainer.h"

namespace trctl::gputest {

inline Result<TrainResult> train_cuda_result(const Spec& spec, TrainOptions opt) {
  spdlog::logger log("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  opt.gpu.device_count = cuda_device_count;
  opt.gpu.make = make_cuda_backend;
  return train_run(spec, opt, log);
}

inline TrainResult train_cuda(const Spec& spec, TrainOptions opt) {
  Result<TrainResult> r = train_cuda_result(spec, opt);
  INFO((r.ok() ? std::string() : r.error_text()));
  REQUIRE(r.ok());
  return r.value();
}

inline TrainResult train_cuda(const Spec& spec) {
  TrainOptions opt;
  opt.write_run_dir = false;
  return train_cuda(spec, opt);
}

}  // namespace trctl::gputest
