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
  int grid = 1;     // CTAs: min(tasks, SMs * resident CTAs per SM of the planned kernel)
  bool bn = false;  // the batch-norm prologue's kernel (FewcBnGradIn), t.bn_smem_bytes of shared memory
};
// bn_prologue: plan the kernel that computes dy as a batch norm's backward dx (FewcBnGradIn); NotSupported when its
// shared memory exceeds kFewcMaxBnSmemBytes.
Result<FewcWgradPlan> fewc_wgrad_plan(const Conv2dGeom& g, GpuDType io, bool bn_prologue = false);
size_t fewc_wgrad_workspace_bytes(const FewcWgradPlan& plan);  // grid x K x 16 ksteps fp32

// The weight gradient's dy as a training batch norm's backward dx, computed while it is staged (the batch norm's
// third pass folded into the weight gradient; batchnorm_bwd_cuda then runs with dx nullptr): per element
// dx = bn_bwd_dx(relu_grad_in(g, x), x) (runtime/ops/batchnorm/bn_elem.cuh), bitwise what batchnorm_bwd_cuda would
// store, from g (N, P, Q, K) the batch norm's incoming gradient and x (N, P, Q, K) its input (type io, 16-byte
// aligned), its (K) f32 gamma, save_mean, save_invstd, and dgamma, dbeta from the first two passes; relu_beta: the
// forward's beta when it fused a ReLU without a residual (the mask recomputed from x), else nullptr (no ReLU).
struct FewcBnGradIn {
  const void* g = nullptr;
  const void* x = nullptr;
  const float* gamma = nullptr;
  const float* mean = nullptr;
  const float* invstd = nullptr;
  const float* dgamma = nullptr;
  const float* dbeta = nullptr;
  const float* relu_beta = nullptr;
};
// dw is overwritten. bn: with a plan.bn plan (dy unused), else nullptr. Internal error when ws_bytes is short, dy is
// not 16-byte aligned or bn and the plan disagree.
Status fewc_conv_wgrad_cuda(cudaStream_t stream, const FewcWgradPlan& plan, const void* dy, const void* x, float* dw,
                            void* ws, size_t ws_bytes, const FewcBnGradIn* bn = nullptr);

}  // namespace trctl
