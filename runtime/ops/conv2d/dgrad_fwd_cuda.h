// The data gradient's filter transform on the GPU (dgrad_fwd.h): wf (C, R, S, K) from w (K, R, S, C) of type t (the
// AMP weight copy, or the fp32 weights), a copy: bitwise dgrad_fwd_filter_cpu. g finished and dgrad_fwd_eligible.
// No allocation, no synchronization: capturable.
#pragma once
#include <cuda_runtime_api.h>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

Status dgrad_fwd_filter_cuda(cudaStream_t stream, const Conv2dGeom& g, GpuDType t, const void* w, void* wf);

}  // namespace trctl
