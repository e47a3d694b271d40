// Channel copy on the GPU: a (rows, c_src) matrix into a (rows, c_dst) one, cast between dtypes, extra channels
// zero. Pads a 3-channel image or filter to 8 channels for cuDNN's tensor-core convolutions (and slices the padded
// weight gradient back), which run a C=3 convolution an order of magnitude slower than a C=8 one.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

// dst[r][j] = j < c_src ? src[r][j] : 0 for j < c_dst (c_dst < c_src drops channels). src (rows, c_src) src_type,
// dst (rows, c_dst) dst_type; must not overlap. Deterministic and capturable.
Status channel_copy_cuda(cudaStream_t stream, const void* src, GpuDType src_type, int64_t c_src, void* dst,
                         GpuDType dst_type, int64_t c_dst, int64_t rows);

}  // namespace trctl
