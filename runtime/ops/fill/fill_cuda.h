// Fill and counter kernels on the GPU: constant fills of f32/i32 ranges (metric accumulators, step flags) and the
// device-side training step counter that dropout reads, so no per-step value comes from the host.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/util/error.h"

namespace trctl {

Status fill_f32_cuda(cudaStream_t stream, float* p, int64_t n, float value);
Status fill_i32_cuda(cudaStream_t stream, int32_t* p, int64_t n, int32_t value);
// Byte zeroing (cudaMemsetAsync: a memset node when captured).
Status zero_cuda(cudaStream_t stream, void* p, size_t bytes);
// One thread: *counter += delta (wraps modulo 2^32).
Status counter_add_u32_cuda(cudaStream_t stream, uint32_t* counter, uint32_t delta);

}  // namespace trctl
