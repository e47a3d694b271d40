// im2col on the GPU: rows [row0, row0 + rows) of the cols matrix of im2col.h for x (N, H, W, C) NHWC, written to
// cols (rows, kc) in the same dtype: columns in (r, s, c) order, zero for padding taps and for the tail columns
// [C*R*S, kc). Bitwise equal to im2col_cpu (a copy: no arithmetic on the values).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// g finished, groups == 1; kc a multiple of 8 and >= C*R*S; 0 <= row0, row0 + rows <= N*P*Q. One thread writes 8
// consecutive columns of one row (16-byte stores when cols is 16-byte aligned), so a warp writes a contiguous
// stretch; index math in 32 bits when x and the whole cols matrix have fewer than 2^31 elements. No allocation,
// no synchronization: capturable.
Status im2col_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* x, int64_t row0, int64_t rows,
                   int64_t kc, void* cols);

}  // namespace trctl
