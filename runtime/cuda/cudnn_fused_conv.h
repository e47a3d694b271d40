// Convolutions fused with their batch norm's passes through cuDNN's graph API: graphs (a) and (b) here, (c) (the
// prologue weight gradient) and (d) (the data gradient with the ReLU backward and the batch norm's backward
// reductions) further down. The forward with batch-norm statistics in its epilogue (runtime-fusion engines, sm80+:
// the "conv_genstats" / "ConvBNfprop" pattern), two graphs:
//   (a) y = conv(x, w); sum[k] = sum over (n,p,q) of y, sqsum[k] = sum of y^2            (prologue = false)
//   (b) x' = relu(x * scale + bias) per input channel (virtual, never written);
//       y = conv(x', w); sum, sqsum as in (a)                                              (prologue = true)
// (b) is what a Conv+BN+ReLU chain needs: the previous BN's apply + ReLU folds into this conv's operand load, and
// this BN's statistics come out of the same kernel, so neither the BN output nor a statistics pass touches memory.
// The BN finalize (mean, invstd from sum/sqsum, running statistics) is NOT part of these graphs.
//
// Layouts (trctl's, as runtime/cuda/cudnn_conv.h): x (N, H, W, C), w (K, R, S, C), y (N, P, Q, K), all of type
// `io` (f16 or bf16); sum, sqsum (K) f32; scale, bias (C) of type `affine` (f32 or f16). Accumulation is fp32
// (compute type float for the conv, the pointwise ops and the statistics).
//
// A plan is built once (at lowering time; runtime-compiled engines compile here, which can take a second or more)
// and executed by variant pack: no allocation, no host synchronization, so it can be captured into a CUDA graph
// (run it once before capturing). Training uses graph (a) under train.conv_bn_stats (CudaBackend::plan_conv_bn_stats;
// docs/cnn.md), graphs (b) and (c) under train.conv_bn_apply, graph (d) (below: the backward's data gradient with
// the ReLU backward and the batch norm's reductions) under train.conv_bn_backward.
//
// What is refused (ErrCode::NotSupported, so that a caller falls back to cudnn_conv + batchnorm kernels): groups
// != 1, io f32, an affine type other than f32/f16, and any graph for which cuDNN offers no engine (the error then
// carries cuDNN's whole answer: engine count, each heuristic's configs and why each failed).
//
// Planned device-less (cuDNN 9.19, an sm_90 / 132-SM device description, no GPU; not yet run on one): both graphs
// get engine 2 from heuristic A (no runtime compilation, no numerical notes) for the small test shape and every
// VGG16-BN 3x3 layer at N=32, workspace <= 3.2 MB; graph (b) with f32 scale/bias gets no engine at all (cuDNN:
// NOT_SUPPORTED_DATA_TYPE for a float per-channel operand of a binary pointwise op), hence the f16 default. The
// runtime-compiled engines (1, 3) could not be judged there (they need libcuda).
#pragma once
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

#include "core/util/error.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/cudnn_graph.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

struct FusedConvDesc {
  Conv2dGeom g;                        // groups must be 1; p, q are (re)computed by the plan
  GpuDType io = GpuDType::F16;         // x, w, y: F16 or BF16
  bool prologue = false;               // graph (b): x' = relu(x * scale + bias) feeds the conv
  GpuDType affine = GpuDType::F16;     // scale, bias element type (graph (b)): F16, or F32 (no engine for it in
                                       // cuDNN 9.19 on sm_90: see the file comment)
  CudnnPlanOptions plan;               // engine choice (determinism, workspace limit)
};

// Tensor uids of the graphs (the variant pack binds pointers to these).
enum FusedConvUid : int64_t {
  kFusedUidX = 1, kFusedUidW = 2, kFusedUidY = 3, kFusedUidSum = 4, kFusedUidSqsum = 5, kFusedUidScale = 6,
  kFusedUidBias = 7, kFusedUidXScaled = 101, kFusedUidXBiased = 102, kFusedUidXRelu = 103  // virtual
};

struct FusedConvPlan {
  FusedConvDesc desc;  // with g.p, g.q filled
  CudnnExecPlan exec;
};

// "conv_genstats f16 N=4 12x12 C=16 -> K=32 3x3 ..." or "bn_relu_conv_genstats f16 (scale/bias f32) ...".
std::string fused_conv_name(const FusedConvDesc& d);

// Builds the graph and its execution plan (h may be null for device-less planning, d.plan.device_prop). Invalid for
// a bad geometry; NotSupported for what the fused path does
// not cover (see the file comment) and when cuDNN has no engine; Internal for other cuDNN failures.
Result<FusedConvPlan> fused_conv_plan(cudnnHandle_t h, const FusedConvDesc& d);

// Device pointers of one execution. scale and bias only for a prologue plan (nullptr otherwise).
struct FusedConvArgs {
  const void* x = nullptr;      // (N, H, W, C) io
  const void* w = nullptr;      // (K, R, S, C) io
  void* y = nullptr;            // (N, P, Q, K) io, overwritten
  float* sum = nullptr;         // (K) f32, overwritten
  float* sqsum = nullptr;       // (K) f32, overwritten
  const void* scale = nullptr;  // (C) affine
  const void* bias = nullptr;   // (C) affine
};

size_t fused_conv_workspace_bytes(const FusedConvPlan& p);
// The variant pack for one set of pointers (build once, execute many times; what a captured step would hold).
Result<CudnnBackendDesc> fused_conv_pack(const FusedConvPlan& p, const FusedConvArgs& a, void* ws, size_t ws_bytes);
// Builds the pack and executes it on s (see the file comment on capture).
Status fused_conv_run(cudnnHandle_t h, cudaStream_t s, const FusedConvPlan& p, const FusedConvArgs& a, void* ws,
                      size_t ws_bytes);
// Milliseconds of one execution of `pack` on s, between two CUDA events (synchronizes on the second: benchmarks
// only, never inside a captured step).
Result<float> fused_conv_time_ms(cudnnHandle_t h, cudaStream_t s, const FusedConvPlan& p,
                                 const CudnnBackendDesc& pack);

// One line: the graph's name and cudnn_plan_describe of its plan.
std::string fused_conv_describe(const FusedConvPlan& p);

// Graph (c), the weight gradient that goes with graph (b)'s prologue (cuDNN's "ConvBNwgrad" pattern; on sm_90 only
// this full pattern is served): dw = wgrad(dy, relu(x * scale + bias)), the ReLU input never written (virtual).
// x (N, H, W, C), dy (N, P, Q, K), dw (K, R, S, C) of type io (F16); scale, bias (C) of type affine (F16). The
// intermediates are fp32 (virtual); when cuDNN serves no such graph the plan retries with f16 ones (both are in
// use in NVIDIA's samples; which one an engine takes is what the plan log says). Refused like graph (b): groups !=
// 1, io other than F16 / affine other than F16 (NotSupported), or no engine.
struct FusedWgradDesc {
  Conv2dGeom g;                     // groups must be 1; p, q are (re)computed by the plan
  GpuDType io = GpuDType::F16;
  GpuDType affine = GpuDType::F16;
  CudnnPlanOptions plan;
};
enum FusedWgradUid : int64_t {
  kWgradUidDy = 11, kWgradUidX = 12, kWgradUidScale = 13, kWgradUidBias = 14, kWgradUidDw = 15,
  kWgradUidXScaled = 111, kWgradUidXBiased = 112, kWgradUidXRelu = 113  // virtual
};
struct FusedWgradPlan {
  FusedWgradDesc desc;            // with g.p, g.q filled
  bool f16_intermediates = false; // the retry's graph
  CudnnExecPlan exec;
};
struct FusedWgradArgs {
  const void* dy = nullptr;     // (N, P, Q, K) io
  const void* x = nullptr;      // (N, H, W, C) io: the batch norm's input
  const void* scale = nullptr;  // (C) affine
  const void* bias = nullptr;   // (C) affine
  void* dw = nullptr;           // (K, R, S, C) io, overwritten
};
// "bn_relu_wgrad f16 N=256 56x56 C=256 -> K=256 3x3 ..." (+ " (f16 intermediates)").
std::string fused_wgrad_name(const FusedWgradDesc& d, bool f16_intermediates = false);
Result<FusedWgradPlan> fused_wgrad_plan(cudnnHandle_t h, const FusedWgradDesc& d);
size_t fused_wgrad_workspace_bytes(const FusedWgradPlan& p);
// Builds the variant pack and executes it on s (capturable; run it once before capturing).
Status fused_wgrad_run(cudnnHandle_t h, cudaStream_t s, const FusedWgradPlan& p, const FusedWgradArgs& a, void* ws,
                       size_t ws_bytes);

// Graph (d), the data gradient of a convolution whose input was a training batch norm + ReLU's output, with the
// ReLU backward and the batch norm's backward reductions in its epilogue (cuDNN's "DgradDreluBNBwdWeight"
// pattern): dxc = dgrad(dy, w) (virtual fp32); bn = (x - mean) * invstd * gamma + beta recomputed from the batch
// norm's input x (virtual fp32); g = relu_bwd(dxc, bn) (written, io); BN_BWD_WEIGHTS of g over x: dgamma = sum g
// xhat, dbeta = sum g and the coefficients of dx = eq_dy g + eq_x x + eq_bias. dy (N, P, Q, K), w (K, R, S, C),
// x and g (N, H, W, C) of type io (F16); mean, invstd, gamma, beta and the five outputs (C) f32, 16-byte aligned.
// The mean is subtracted by SUB; when cuDNN serves no such graph the plan retries with ADD and alpha2 = -1 (which
// planned but computed a wrong mask in 2 of 5 of the probe's geometries on the H200, RESULTS.md run 56).
// Refused like (b) and (c): groups != 1, io other than F16 (NotSupported), or no engine.
struct FusedDgradDesc {
  Conv2dGeom g;  // the forward convolution (x (N, H, W, C) -> y (N, P, Q, K)); p, q are (re)computed by the plan
  GpuDType io = GpuDType::F16;
  CudnnPlanOptions plan;
};
enum FusedDgradUid : int64_t {
  kDgradUidDy = 21, kDgradUidW = 22, kDgradUidX = 23, kDgradUidMean = 24, kDgradUidInvstd = 25, kDgradUidGamma = 26,
  kDgradUidBeta = 27, kDgradUidG = 28, kDgradUidDgamma = 29, kDgradUidDbeta = 30, kDgradUidEqDy = 31,
  kDgradUidEqX = 32, kDgradUidEqBias = 33,
  kDgradUidDxConv = 121, kDgradUidT1 = 122, kDgradUidT2 = 123, kDgradUidT3 = 124, kDgradUidT4 = 125  // virtual
};
struct FusedDgradPlan {
  FusedDgradDesc desc;  // with g.p, g.q filled
  bool sub = true;      // the mean subtracted by SUB (false: the ADD retry)
  CudnnExecPlan exec;
};
struct FusedDgradArgs {
  const void* dy = nullptr;      // (N, P, Q, K) io
  const void* w = nullptr;       // (K, R, S, C) io
  const void* x = nullptr;       // (N, H, W, C) io: the batch norm's input
  const float* mean = nullptr;   // (C) the forward's save_mean
  const float* invstd = nullptr; // (C) the forward's save_invstd
  const float* gamma = nullptr;  // (C)
  const float* beta = nullptr;   // (C)
  void* g = nullptr;             // (N, H, W, C) io, overwritten: the masked gradient
  float* dgamma = nullptr;       // (C) f32, overwritten
  float* dbeta = nullptr;        // (C) f32, overwritten
  float* eq_dy = nullptr;        // (C) f32 scratch, overwritten (dx's coefficients, unused by trctl's dx pass)
  float* eq_x = nullptr;
  float* eq_bias = nullptr;
};
// "dgrad_drelu_dbn f16 (mean by SUB) N=256 56x56 C=256 -> K=256 3x3 ..." (or "(mean by ADD)").
std::string fused_dgrad_name(const FusedDgradDesc& d, bool sub = true);
Result<FusedDgradPlan> fused_dgrad_plan(cudnnHandle_t h, const FusedDgradDesc& d);
size_t fused_dgrad_workspace_bytes(const FusedDgradPlan& p);
// Builds the variant pack and executes it on s (capturable; run it once before capturing).
Status fused_dgrad_run(cudnnHandle_t h, cudaStream_t s, const FusedDgradPlan& p, const FusedDgradArgs& a, void* ws,
                       size_t ws_bytes);

// Graph (p): one plain convolution direction through the graph API, no fusion — what `trctl bench --autotune`
// measures next to the legacy API's algorithms (the graph API offers every engine with its knob choices: tile
// sizes, split-K, swizzles, where a legacy algorithm id runs one heuristic pick), and what a cached plan
// (cudnn_conv_plan_cached) runs when such a config won. fwd: y = conv(x, w); dgrad: dx = dgrad(dy, w); wgrad:
// dw = wgrad(dy, x); alpha 1, beta 0, fp32 compute. x / dx (N, H, W, C), w / dw (K, R, S, C), y / dy (N, P, Q, K),
// all of type io. Refused (NotSupported): groups != 1, io F32 (the legacy path's strict-f32 / TF32 math rules are
// not expressed here), and a graph for which cuDNN offers no engine (or refuses the pinned config).
struct ConvGraphDesc {
  Conv2dGeom g;                   // p, q are (re)computed
  GpuDType io = GpuDType::F16;    // F16 or BF16
  ConvDir dir = ConvDir::Fwd;
  CudnnPlanOptions plan;          // determinism, workspace limit, pin (the config to build)
};
enum ConvGraphUid : int64_t { kConvGraphUidX = 41, kConvGraphUidW = 42, kConvGraphUidY = 43 };
// Direction dir of the legacy plan's convolution d: its geometry, io and determinism, max_ws as the workspace limit.
ConvGraphDesc conv_graph_desc(const ConvDesc& d, ConvDir dir, size_t max_ws);
// "conv_fwd f16 N=256 56x56 C=256 -> K=256 3x3 ..." (conv_dgrad, conv_wgrad).
std::string conv_graph_name(const ConvGraphDesc& d);
Result<CudnnExecPlan> conv_graph_plan(cudnnHandle_t h, const ConvGraphDesc& d);
// The distinct usable engine configs of d's graph (cudnn_plan_candidates, at most max_per_heuristic from each
// heuristic, 0 = all; FALLBACK's too with_fallback), for an autotune to pin one by one.
Result<std::vector<CudnnEngineId>> conv_graph_candidates(cudnnHandle_t h, const ConvGraphDesc& d,
                                                         std::string* log = nullptr, int max_per_heuristic = 0,
                                                         bool with_fallback = true);
// The variant pack of plan p (direction dir): a = x (fwd) or dy (dgrad, wgrad); b = w (fwd, dgrad) or x (wgrad);
// out = y, dx or dw (overwritten by the execution).
Result<CudnnBackendDesc> conv_graph_pack(const CudnnExecPlan& p, ConvDir dir, const void* a, const void* b, void* out,
                                         void* ws, size_t ws_bytes);
// Builds that pack and runs p on s (capturable; run it once before capturing).
Status conv_graph_run(cudnnHandle_t h, cudaStream_t s, const CudnnExecPlan& p, ConvDir dir, const void* a,
                      const void* b, void* out, void* ws, size_t ws_bytes);

}  // namespace trctl
