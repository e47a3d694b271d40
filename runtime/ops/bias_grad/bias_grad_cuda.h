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

// The same sums for many rows (a convolution's bias: rows = N*P*Q, up to millions): one block per (32 columns,
// row block) writes partial sums into `workspace`, then the kernel above sums the partials, both in fixed order
// (deterministic). dy (rows, cols) dense; db (cols) f32 overwritten. Falls back to bias_grad_cuda when rows are few
// (workspace bytes 0).
size_t bias_grad_workspace_bytes(int64_t rows, int64_t cols);
Status bias_grad_large_cuda(cudaStream_t stream, const void* dy, GpuDType dy_type, int64_t rows, int64_t cols,
                            float* db, void* workspace, size_t workspace_bytes);

}  // namespace trctl
