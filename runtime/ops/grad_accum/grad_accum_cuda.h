// Gradient accumulation on the GPU (train.accumulate_steps): one elementwise launch over the fp32 gradient layout
// and its accumulator copy. Same arithmetic as the CPU reference (runtime/ops/grad_accum/grad_accum.h): one fp32
// add per element, so CPU and GPU agree bitwise on the same inputs.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"

namespace trctl {

// flush false (a micro-batch step): acc[i] += g[i]. flush true (the optimizer step's last micro-batch):
// g[i] += acc[i], acc[i] = 0. g, acc (n) f32; they must not overlap.
Status grad_accumulate_cuda(cudaStream_t stream, float* g, float* acc, int64_t n, bool flush);

}  // namespace trctl
