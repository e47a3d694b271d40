// Elementwise add on the GPU (residual connections, summing gradient contributions), optionally fused with ReLU.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

// y[i] = a[i] + b[i] in fp32, rounded once to t; with relu, y[i] = max(sum, 0) with NaN kept (as torch.relu).
// y may alias a or b (in-place accumulation). (n) dtype t each.
Status add_cuda(cudaStream_t s, const void* a, const void* b, void* y, int64_t n, GpuDType t, bool relu);

}  // namespace trctl
