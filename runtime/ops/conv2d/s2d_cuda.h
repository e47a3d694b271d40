// Space-to-depth transforms on the GPU (the index math in s2d.h): input x -> z and filter w -> w2 in the io dtype,
// and the filter gradient dw2 (io dtype) -> dw (K, R, S, C) fp32. Copies (dw: a copy widened to fp32, exact), so
// bitwise equal to the CPU references of s2d.h. g finished and s2d_conv_eligible. No allocation, no
// synchronization: capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// z (N, Hz, Wz, Cz) from x (N, H, W, C), both of type t. One thread writes 8 consecutive channels of one z pixel
// (a 16-byte store for f16/bf16 when z is 16-byte aligned), so a warp writes a contiguous stretch of z and reads
// neighbouring input pixels; index math in 32 bits when x and z have fewer than 2^30 elements.
Status s2d_input_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* x, void* z);
// w2 (K, R2, S2, Cz) from w (K, R, S, C), both of type t (the AMP weight copy); one thread per w2 element.
Status s2d_filter_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* w, void* w2);
// dw (K, R, S, C) fp32 from dw2 (K, R2, S2, Cz) of type t (the stride-1 conv's wgrad); one thread per dw element.
Status s2d_filter_grad_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* dw2, float* dw);

}  // namespace trctl
