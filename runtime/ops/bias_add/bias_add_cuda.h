// Bias add on the GPU: y (rows, cols) += b (cols), broadcast over the rows (a convolution's bias over N*P*Q).
// One memory-bound pass, vectorised; it replaces cudnnAddTensor, which ran NHWC fp16 bias adds several times
// slower than a copy (VGG16-BN's 224x224 layers: ~3-4 ms each on an H200).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

// y (rows, cols) and b (cols) of type t; y[r][c] = y[r][c] + b[c] computed in fp32, rounded once.
Status bias_add_cuda(cudaStream_t stream, void* y, const void* b, int64_t rows, int64_t cols, GpuDType t);

}  // namespace trctl
