// Activation forward and backward on the GPU (ActKind: relu6, leaky_relu, elu, silu, hardswish, sigmoid, tanh), any
// GpuDType storage, computed in f32 with the formulas of activation.h. Standalone elementwise kernels: no cuBLASLt
// epilogue exists for these (only ReLU and GELU), see activation.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/graph/act_loss.h"
#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"

namespace trctl {

// y[i] = act(x[i]); param = negative_slope (leaky_relu) or alpha (elu). x may alias y. (n) dtype.
Status activation_fwd_cuda(cudaStream_t stream, ActKind kind, float param, const void* x, void* y, int64_t n,
                           GpuDType dtype);
// dx[i] from dy[i] and saved[i]: the forward's output for sigmoid and tanh, its input for the others
// (act_grad_uses_output). dy may alias dx. (n) dtype.
Status activation_bwd_cuda(cudaStream_t stream, ActKind kind, float param, const void* saved, const void* dy,
                           void* dx, int64_t n, GpuDType dtype);

}  // namespace trctl
