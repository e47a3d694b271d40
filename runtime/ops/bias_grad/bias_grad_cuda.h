// Bias gradient of a Linear layer on the GPU: db[j] (+)= sum_i dy[i][j], column sums of a row-major (rows, cols)
// matrix, in a fixed summation order (bitwise reproducible; no atomics). The deterministic alternative to the
// cuBLASLt BGRAD epilogues.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

// dy (rows, cols) dy_type, row stride ld (0 = cols); db (cols) f32. accumulate: db += sums, else db = sums.
Status bias_grad_cuda(cudaStream_t stream, const void* dy, GpuDType dy_type, int64_t rows, int64_t cols, int64_t ld,
                      float* db, bool accumulate);

}  // namespace trctl
