// Dropout (training) on the GPU with a counter-based mask that needs no stored state: element i of op `op_id` at
// training step `step` is kept iff philox_uniform(philox4x32(i >> 2, step, op_id, RngPurpose::Dropout, seed_lo,
// seed_hi).v[i & 3]) >= p. The backward regenerates the same mask. `step` is read from device memory so a captured
// graph draws a new mask every replay; p, seed and op_id are fixed for the run and passed by value.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

struct DropoutParams {
  float p = 0.0f;         // drop probability in [0, 1]
  float scale = 1.0f;     // 1.0f / (1.0f - p), computed in float by the caller (dropout_params() does it)
  uint64_t seed = 0;      // run seed
  uint32_t op_id = 0;     // distinct per dropout op of the graph
  const uint32_t* step = nullptr;  // device: the training step counter
};

inline DropoutParams dropout_params(float p, uint64_t seed, uint32_t op_id, const uint32_t* step_dev) {
  return DropoutParams{p, 1.0f / (1.0f - p), seed, op_id, step_dev};
}

// y = keep ? x * scale : 0. (n) dtype; x may alias y.
Status dropout_fwd_cuda(cudaStream_t stream, const DropoutParams& prm, const void* x, void* y, int64_t n,
                        GpuDType dtype);
// dx = keep ? dy * scale : 0 with the forward's mask. (n) dtype; dy may alias dx.
Status dropout_bwd_cuda(cudaStream_t stream, const DropoutParams& prm, const void* dy, void* dx, int64_t n,
                        GpuDType dtype);

}  // namespace trctl
