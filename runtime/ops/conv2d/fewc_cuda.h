// The few-input-channel tensor-core convolution forward (optionally with y's per-channel batch statistics) and
// weight gradient on the GPU (the rule, the GEMM and the tiling in fewc.h):
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
  int grid = 1;        // CTAs: min(tasks, SMs * resident CTAs per SM of both kernels)
  bool stats = false;  // the statistics kernel fits (t.smem_bytes + fewc_stats_smem_bytes within the cap)
};

// NotSupported for a geometry fewc_conv_eligible refuses or an io type other than F16/BF16; the CUDA error of the
// attribute or occupancy queries otherwise.
Result<FewcConvPlan> fewc_conv_plan(const Conv2dGeom& g, GpuDType io);

// y's per-channel batch statistics from the forward's epilogue (train.conv_bn_stats for a fewc conv -> batch norm
// pair): sum[k] and sqsum[k] (f32) over the N * P * Q outputs of channel k as rounded to io and stored (the bias
// included). Each warp adds its tiles' sums (fp32, a fixed shuffle tree per 16-pixel tile) in its tile order, each
// CTA its warps' in warp order into a partial (grid, 2, K) in ws, and a second kernel sums the partials in float64
// in a fixed tree: deterministic for the planned grid.
struct FewcStatsOut {
  float* sum = nullptr;    // (K)
  float* sqsum = nullptr;  // (K)
  void* ws = nullptr;      // fewc_stats_workspace_bytes
  size_t ws_bytes = 0;
};
size_t fewc_stats_smem_bytes(const FewcTiling& t, int64_t k);  // the warps' (2, K) f32 sums
size_t fewc_stats_workspace_bytes(const FewcConvPlan& plan);     // grid x 2 x K f32

// bias may be nullptr; stats nullptr: no statistics. Statistics need plan.stats (else Internal), as does a short
// workspace.
Status fewc_conv_fwd_cuda(cudaStream_t stream, const FewcConvPlan& plan, const void* x, const void* w,
                          const void* bias, void* y, const FewcStatsOut* stats = nullptr);

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
