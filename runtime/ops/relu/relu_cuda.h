// ReLU forward and backward on the GPU, any GpuDType. (The forward is usually fused into the GEMM epilogue; these
// are for the unfused path and for the backward when the GEMM's DRelu epilogue is not used.)
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

// y[i] = max(x[i], 0); NaN propagates (as torch.relu). x may alias y. (n) dtype.
Status relu_fwd_cuda(cudaStream_t stream, const void* x, void* y, int64_t n, GpuDType dtype);
// dx[i] = y[i] > 0 ? dy[i] : 0, from the forward OUTPUT y. dy may alias dx. (n) dtype.
Status relu_bwd_cuda(cudaStream_t stream, const void* y, const void* dy, void* dx, int64_t n, GpuDType dtype);

}  // namespace trctl
