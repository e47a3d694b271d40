// The few-input-channel tensor-core convolution forward (and, stride 2, weight gradient) on the GPU (the rule, the GEMM and the tiling in fewc.h):
// y (N, P, Q, K) = conv(x (N, H, W, C), w (K, R, S, C)) [+ bias (K)], all of type io (F16 or BF16), fp32
// accumulation with mma.sync m16n8k16. A plan is made once outside stream capture (it sets the kernel's shared
// memory limit and sizes a persistent grid from the occupancy); the launch allocates nothing and does not
// synchronize: capturable. Deterministic (fewc.h).
#pragma once
#include <cuda_runtime_api.h>

#include "core/util/error.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/conv2d/conv2d.h"
#include "runtime/ops/conv2d/fewc.h"

namespace trctl {

struct FewcConvPlan {
  Conv2dGeom g;  // finished, fewc_conv_eligible
  GpuDType io = GpuDType::F16;
  FewcTiling t;
  int grid = 1;  // CTAs: min(tasks, SMs * resident CTAs per SM)
};

// NotSupported for a geometry fewc_conv_eligible refuses or an io type other than F16/BF16; the CUDA error of the
// attribute or occupancy queries otherwise.
Result<FewcConvPlan> fewc_conv_plan(const Conv2dGeom& g, GpuDType io);

// bias may be nullptr.
Status fewc_conv_fwd_cuda(cudaStream_t stream, const FewcConvPlan& plan, const void* x, const void* w,
                          const void* bias, void* y);

// The weight gradient (fewc.h): dw (K, R, S, C) fp32 = d(sum y*dy)/dw from dy (N, P, Q, K) and x (N, H, W, C),
// both of type io, fp32 accumulation; the CTAs' partials in ws (fewc_wgrad_workspace_bytes), summed in CTA order.
struct FewcWgradPlan {
  Conv2dGeom g;  // finished, fewc_wgrad_eligible
  GpuDType io = GpuDType::F16;
  FewcWgradTiling t;
  int grid = 1;
};
Result<FewcWgradPlan> fewc_wgrad_plan(const Conv2dGeom& g, GpuDType io);
size_t fewc_wgrad_workspace_bytes(const FewcWgradPlan& plan);  // grid x K x 16 ksteps fp32
// dw is overwritten. Internal error when ws_bytes is short or dy is not 16-byte aligned.
Status fewc_conv_wgrad_cuda(cudaStream_t stream, const FewcWgradPlan& plan, const void* dy, const void* x, float* dw,
                            void* ws, size_t ws_bytes);

}  // namespace trctl
