// GPU test helper: a training run of a spec on the CUDA backend factory (cuda_device_count, make_cuda_backend)
// through tests/support/train_util.h's train_spec, the log discarded. train_cuda_result returns the Result;
// train_cuda fails the test case with the errors otherwise. The one-argument train_cuda writes no run directory.
#pragma once
#include "runtime/cuda/cuda_backend.h"
#include "tests/support/train_util.h"

namespace trctl::gputest {

inline Result<TrainResult> train_cuda_result(const Spec& spec, TrainOptions opt) {
  opt.gpu.device_count = cuda_device_count;
  opt.gpu.make = make_cuda_backend;
  return testing::train_spec_result(spec, opt);
}

inline TrainResult train_cuda(const Spec& spec, TrainOptions opt) {
  opt.gpu.device_count = cuda_device_count;
  opt.gpu.make = make_cuda_backend;
  return testing::train_spec(spec, opt);
}

inline TrainResult train_cuda(const Spec& spec) {
  TrainOptions opt;
  opt.write_run_dir = false;
  return train_cuda(spec, opt);
}

}  // namespace trctl::gputest
