// Conv2d on the GPU through cuDNN 9's legacy convolution API: cudnn_conv_plan() builds the descriptors and picks
// the forward, data-gradient and filter-gradient algorithms ONCE per (geometry, dtype, math, determinism); the
// execute calls run them with no allocation and no host synchronization (capturable into a CUDA graph).
//
// Layouts as in runtime/ops/conv2d/conv2d.h (the CPU reference shares them):
//   x / dx (N, H, W, C)   w / dw (K, R, S, C/groups) ("KRSC" = cuDNN's NHWC filter format)   bias (K)
//   y / dy (N, P, Q, K)   all of element type `io` (f32, f16 or bf16); accumulation is always in fp32.
//
// Math: f32 without tf32 runs in full fp32 (CUDNN_FMA_MATH: no tensor cores, so no TF32 rounding of inputs);
// f32 with tf32 lets cuDNN use TF32 tensor cores (CUDNN_DEFAULT_MATH; a candidate asking for
// CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION is skipped, since that may down-convert fp32 to fp16 and lose range);
// f16/bf16 ask for tensor cores (CUDNN_TENSOR_OP_MATH) and accept what the chosen candidate reports.
//
// What the legacy API refuses or runs slowly (candidates whose status is not success are skipped; when none is
// left the plan fails with ErrCode::NotSupported naming the geometry and why each candidate was rejected):
//   - FFT and Winograd algorithms mostly support NCHW only; with NHWC they come back NOT_SUPPORTED, leaving the
//     implicit-GEMM family.
//   - f16/bf16 tensor-core kernels need C/groups and K/groups to be multiples of 8 (16-byte channel vectors);
//     otherwise (e.g. a first layer with C = 3) cuDNN falls back to slower CUDA-core kernels, or refuses.
//   - bf16 needs sm_80 or newer.
//   - deterministic = true excludes BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0/ALGO_3 (atomic adds), so the filter
//     gradient often runs slower than the fastest non-deterministic candidate.
//   - every dimension and every tensor's element count must fit in an int (legacy descriptors use int strides).
// Seen on the H200 (tests/gpu/conv2d_test.cpp, deterministic plans, cuDNN 9 of the image's PyTorch): every tested
// layer, the C = 3 stem and depthwise included, planned in every dtype as fwd IMPLICIT_PRECOMP_GEMM, dgrad ALGO_1,
// wgrad ALGO_1; depthwise f16/bf16 ran with default math (no tensor cores), the rest with tensor ops.
//
// Measured choice (runtime/cuda/conv_autotune.h): cudnn_conv_choose() applies the heuristic path's filters to
// candidates from elsewhere (cudnnFind*Ex, sorted by time); cudnn_conv_plan_fixed() plans with per-direction
// algorithms given in advance (the autotune cache) and the heuristics for the rest.
#pragma once
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "core/util/error.h"
#include "runtime/cuda/cudnn_graph.h"
#include "runtime/cuda/gpu_dtype.h"
#include "runtime/ops/conv2d/conv2d.h"

namespace trctl {

// A failed cuDNN call as a Status whose `where` is file:line and whose message names the call and the status:
// NOT_SUPPORTED* -> ErrCode::NotSupported, BAD_PARAM* -> ErrCode::Invalid, anything else -> ErrCode::Internal.
Status cudnn_check(cudnnStatus_t st, const char* what, const char* file, int line);

struct ConvDesc {
  Conv2dGeom g;                 // p, q are (re)computed by the plan
  GpuDType io = GpuDType::F32;  // x, w, y, bias and all gradients
  bool tf32 = false;            // f32 only: allow TF32 tensor cores
  bool deterministic = true;    // only algorithms cuDNN reports as CUDNN_DETERMINISTIC
  bool need_dgrad = true;       // false: no data-gradient algorithm is chosen (cudnn_conv_dgrad then refuses)
};

// Descriptors, chosen algorithms, their math types and workspace sizes for the three directions. Each direction
// has its own convolution descriptor because the math type is part of what an algorithm runs with. Move-only.
struct CudnnConvPlan {
  ConvDesc desc;                                  // with g.p, g.q filled
  cudnnTensorDescriptor_t x = nullptr;            // (N, C, H, W) dims, NHWC layout: x and dx
  cudnnTensorDescriptor_t y = nullptr;            // (N, K, P, Q) dims, NHWC layout: y and dy
  cudnnTensorDescriptor_t bias = nullptr;         // (1, K, 1, 1)
  cudnnFilterDescriptor_t w = nullptr;            // (K, C/groups, R, S) dims, NHWC (KRSC) layout: w and dw
  cudnnConvolutionDescriptor_t conv_fwd = nullptr, conv_dgrad = nullptr, conv_wgrad = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t dgrad_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t wgrad_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  cudnnMathType_t fwd_math = CUDNN_DEFAULT_MATH, dgrad_math = CUDNN_DEFAULT_MATH, wgrad_math = CUDNN_DEFAULT_MATH;
  size_t fwd_ws = 0, dgrad_ws = 0, wgrad_ws = 0;  // workspace bytes each direction needs
  // Per direction (ConvDir order): a graph-API plan that runs the direction instead of the legacy algorithm (graph
  // (p) of cudnn_fused_conv.h: an engine config an autotune measured faster; null: the legacy algorithm runs, and
  // the direction's algo/math members above are meaningful only then). Its workspace is the direction's *_ws.
  std::array<std::shared_ptr<const CudnnExecPlan>, 3> graph;

  CudnnConvPlan() = default;
  CudnnConvPlan(const CudnnConvPlan&) = delete;
  CudnnConvPlan& operator=(const CudnnConvPlan&) = delete;
  CudnnConvPlan(CudnnConvPlan&& o) noexcept { *this = static_cast<CudnnConvPlan&&>(o); }
  CudnnConvPlan& operator=(CudnnConvPlan&& o) noexcept;
  ~CudnnConvPlan();
};

// Builds the plan. Per direction: the heuristic's candidates (cudnnGet*Algorithm_v7, best first) are taken in
// order, and the first whose status is success, whose math type fits ConvDesc, that is deterministic when asked,
// whose workspace fits max_workspace, and for which cuDNN confirms the workspace size, is chosen.
// Errors: Invalid for a bad geometry, NotSupported when a direction has no usable algorithm (the message names the
// geometry and every rejected candidate), Internal for other cuDNN failures.
Result<CudnnConvPlan> cudnn_conv_plan(cudnnHandle_t h, const ConvDesc& d, size_t max_workspace = size_t{256} << 20);

// The three directions of a convolution; index of CudnnConvPlan's per-direction members.
enum class ConvDir { Fwd = 0, Dgrad = 1, Wgrad = 2 };
constexpr ConvDir kConvDirs[3] = {ConvDir::Fwd, ConvDir::Dgrad, ConvDir::Wgrad};
const char* conv_dir_name(ConvDir dir);                   // "fwd", "dgrad", "wgrad"
int cudnn_conv_algo_count(ConvDir dir);                   // valid algorithm ids are [0, count)
const char* cudnn_conv_algo_name(ConvDir dir, int algo);  // e.g. "IMPLICIT_PRECOMP_GEMM", "ALGO_1"; "?" if unknown
const char* cudnn_math_name(cudnnMathType_t m);           // "default math", "tensor op", ..., "fma"
// False for the algorithms cuDNN documents as non-deterministic (atomic adds): dgrad ALGO_0, wgrad ALGO_0 / ALGO_3.
bool cudnn_conv_algo_deterministic(ConvDir dir, int algo);
// The math type set on a direction's descriptor before asking cuDNN for candidates (see the header on math).
cudnnMathType_t cudnn_conv_requested_math(const ConvDesc& d);

// What a plan runs in one direction: a legacy algorithm (graph null) or a graph-API engine config.
struct ConvDirPlan {
  int algo = -1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t ws = 0;
  const CudnnExecPlan* graph = nullptr;  // the plan's graph-API config for this direction (its id, engine, knobs)
};
ConvDirPlan cudnn_conv_plan_dir(const CudnnConvPlan& p, ConvDir dir);

// Chooses p's algorithm for one direction among caller-given candidates (e.g. cudnnFind*Ex's results, fastest
// first) with exactly the heuristic path's filters: the first whose status is success, whose math type fits
// p.desc, deterministic when asked, whose workspace fits max_workspace and is confirmed by cuDNN's workspace query.
// Sets the direction's algorithm, math type (also on its descriptor) and workspace; returns the chosen index.
// NotSupported when none is usable; the message names `source` (e.g. "measured") and every rejected candidate.
Result<int> cudnn_conv_choose(cudnnHandle_t h, CudnnConvPlan& p, const cudnnConvolutionFwdAlgoPerf_t* cands, int n,
                              size_t max_workspace, const char* source);
Result<int> cudnn_conv_choose(cudnnHandle_t h, CudnnConvPlan& p, const cudnnConvolutionBwdDataAlgoPerf_t* cands,
                              int n, size_t max_workspace, const char* source);
Result<int> cudnn_conv_choose(cudnnHandle_t h, CudnnConvPlan& p, const cudnnConvolutionBwdFilterAlgoPerf_t* cands,
                              int n, size_t max_workspace, const char* source);

// An algorithm fixed in advance for one direction (algo < 0: not fixed, use the heuristics). `math` is the math
// type it runs with (what the plan records, e.g. CUDNN_FMA_MATH for strict f32); `origin` names where it came from
// in error messages (e.g. the autotune cache key). engine.engine >= 0 instead fixes a graph-API engine config (graph
// (p) of cudnn_fused_conv.h, pinned; algo and math are then ignored).
struct ConvAlgoFixed {
  int algo = -1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::string origin;
  CudnnEngineId engine;
};
// cudnn_conv_plan, except that each direction with fixed[dir].algo >= 0 runs that algorithm and math type. A fixed
// choice must be a known algorithm, deterministic when d.deterministic, of a math type d allows (exactly the one
// the filters would run it with), accepted by cuDNN's workspace query, and within max_workspace; otherwise the plan
// fails (Invalid, or NotSupported when cuDNN refuses) with a message naming the direction, algorithm and origin.
// A direction with fixed[dir].engine.engine >= 0 gets that graph-API config (conv_graph_plan pinned: f16/bf16,
// groups 1; deterministic when d.deterministic; within max_workspace), or the plan fails naming it and the origin.
Result<CudnnConvPlan> cudnn_conv_plan_fixed(cudnnHandle_t h, const ConvDesc& d,
                                            const std::array<ConvAlgoFixed, 3>& fixed,
                                            size_t max_workspace = size_t{256} << 20);

size_t cudnn_conv_workspace_bytes(const CudnnConvPlan& p);  // max over the three directions
// e.g. "conv2d f16 N=8 56x56 C=64 -> K=64 3x3 ...: fwd IMPLICIT_PRECOMP_GEMM (tensor op, ws 0 B), dgrad ..."
std::string cudnn_conv_describe(const CudnnConvPlan& p);

// The execute calls bind h to stream s, and need ws_bytes >= the direction's workspace (ws may be nullptr when that
// is 0). They neither allocate nor synchronize, so they can be captured into a CUDA graph; run each plan once
// before capturing (cuDNN loads its kernels on first use). alpha = 1, beta = 0: outputs are overwritten.
// y (N,P,Q,K) = conv(x (N,H,W,C), w (K,R,S,C/G)) [+ bias (K), broadcast over N, P, Q, when bias != nullptr].
Status cudnn_conv_fwd(cudnnHandle_t h, cudaStream_t s, const CudnnConvPlan& p, const void* x, const void* w,
                      const void* bias, void* y, void* ws, size_t ws_bytes);
// dx (N,H,W,C) from dy (N,P,Q,K) and w (K,R,S,C/G).
Status cudnn_conv_dgrad(cudnnHandle_t h, cudaStream_t s, const CudnnConvPlan& p, const void* dy, const void* w,
                        void* dx, void* ws, size_t ws_bytes);
// dw (K,R,S,C/G), of the io type, from dy (N,P,Q,K) and x (N,H,W,C).
Status cudnn_conv_wgrad(cudnnHandle_t h, cudaStream_t s, const CudnnConvPlan& p, const void* dy, const void* x,
                        void* dw, void* ws, size_t ws_bytes);

}  // namespace trctl

// A checked cuDNN call inside a function returning Status/Result (as TRCTL_CUDA_TRY for CUDA calls): returns the
// error with the caller's file:line. For cudnn_conv.cpp and conv_autotune.cpp.
#define TRCTL_CUDNN_TRY(call)                                                                      \
  do {                                                                                             \
    const cudnnStatus_t trctl_cudnn_st_ = (call);                                                  \
    if (trctl_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                                   \
      return ::trctl::cudnn_check(trctl_cudnn_st_, #call, __FILE__, __LINE__).errors();             \
  } while (0)
