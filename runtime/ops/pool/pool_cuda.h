// Pooling kernels on the GPU (NHWC, any GpuDType, fp32 math), with the semantics of the CPU references in pool.h.
// Deterministic and capturable in a CUDA graph: no atomics (both backwards are gathers: each input element sums,
// in fixed window order, over the windows that contain it), no allocation, no synchronization.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/pool/pool.h"

namespace trctl {

// g must be finished by pool2d_geom_finish (the launchers re-check it). Outputs must not alias inputs.
// x (N, H, W, C) -> y (N, P, Q, C), dtype t.
Status maxpool2d_fwd_cuda(cudaStream_t s, const Pool2dGeom& g, const void* x, void* y, GpuDType t);
// dy (N, P, Q, C), x (N, H, W, C) the forward input -> dx (N, H, W, C) overwritten. The window's argmax is
// recomputed from x with the CPU rule (first maximum; with NaNs the last NaN, as in PyTorch).
Status maxpool2d_bwd_cuda(cudaStream_t s, const Pool2dGeom& g, const void* dy, const void* x, void* dx, GpuDType t);
// count_include_pad=True: divides by kh*kw. x (N, H, W, C) -> y (N, P, Q, C).
// The same forward, also writing each window's argmax offset (maxpool2d_argmax_cpu's encoding) into idx (N, P, Q,
// C) u8; and the backward that gathers dy through those offsets instead of searching the windows again (the
// same sums in the same order as maxpool2d_bwd_cuda). kh * kw <= 256.
Status maxpool2d_fwd_idx_cuda(cudaStream_t s, const Pool2dGeom& g, const void* x, void* y, uint8_t* idx,
                              GpuDType t);
Status maxpool2d_bwd_idx_cuda(cudaStream_t s, const Pool2dGeom& g, const void* dy, const uint8_t* idx, void* dx,
                              GpuDType t);
Status avgpool2d_fwd_cuda(cudaStream_t s, const Pool2dGeom& g, const void* x, void* y, GpuDType t);
// dy (N, P, Q, C) -> dx (N, H, W, C) overwritten.
Status avgpool2d_bwd_cuda(cudaStream_t s, const Pool2dGeom& g, const void* dy, void* dx, GpuDType t);
// x (N, HW, C) -> y (N, C), the mean over HW (summed in HW order in fp32). n may be 0.
Status global_avgpool_fwd_cuda(cudaStream_t s, const void* x, void* y, int64_t n, int64_t hw, int64_t c, GpuDType t);
// dy (N, C) -> dx (N, HW, C) = dy / HW.
Status global_avgpool_bwd_cuda(cudaStream_t s, const void* dy, void* dx, int64_t n, int64_t hw, int64_t c,
                               GpuDType t);

}  // namespace trctl
