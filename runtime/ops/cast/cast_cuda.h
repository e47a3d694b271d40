// Element type conversion of a contiguous range on the GPU (round to nearest even), e.g. the fp32 master weights
// region into its fp16/bf16 compute copy for AMP: one launch for the whole region.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

// dst[i] = (dst_type) src[i] for i < n; any pair of GpuDType (same type = copy). NaN stays NaN, overflow gives inf.
Status cast_cuda(cudaStream_t stream, const void* src, GpuDType src_type, void* dst, GpuDType dst_type, int64_t n);

}  // namespace trctl
