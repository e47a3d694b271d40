// cuDNN legacy-API convolution: plan building (descriptors, algorithm choice) and execution (see cudnn_conv.h).
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/cudnn_fused_conv.h"
#include "runtime/ops/bias_add/bias_add_cuda.h"

#include <algorithm>
#include <climits>
#include <utility>
#include <vector>

namespace trctl {

namespace {

std::string where_of(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

Error conv_error(ErrCode code, const std::string& message, const char* file, int line) {
  return Error{code, where_of(file, line), message};
}

cudnnDataType_t cudnn_dtype(GpuDType t) {
  switch (t) {
    case GpuDType::F16: return CUDNN_DATA_HALF;
    case GpuDType::BF16: return CUDNN_DATA_BFLOAT16;
    case GpuDType::F32: break;
  }
  return CUDNN_DATA_FLOAT;
}

const char* fwd_algo_name(cudnnConvolutionFwdAlgo_t a) {
  static const char* const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                      "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < 8 ? names[a] : "?";
}
const char* dgrad_algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  static const char* const names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < 6 ? names[a] : "?";
}
const char* wgrad_algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  static const char* const names[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                      "FFT_TILING"};
  return a >= 0 && a < 7 ? names[a] : "?";
}
const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor op with conversion";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}

// The math type a plan asks the heuristic with (see the header on math).
cudnnMathType_t requested_math(const ConvDesc& d) {
  if (d.io != GpuDType::F32) return CUDNN_TENSOR_OP_MATH;
  return d.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

// The math type a candidate runs with, or false when it breaks the precision asked for. Strict fp32 runs every
// candidate with FMA math: on sm_80+ CUDNN_DEFAULT_MATH would permit TF32.
bool exec_math(const ConvDesc& d, cudnnMathType_t cand, cudnnMathType_t* out) {
  if (d.io == GpuDType::F32 && !d.tf32) {
    if (cand == CUDNN_TENSOR_OP_MATH || cand == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
    *out = CUDNN_FMA_MATH;
    return true;
  }
  if (d.io == GpuDType::F32 && cand == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  *out = cand;
  return true;
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// Which algorithm a direction runs (see cudnn_conv_choose).
struct Pick {
  int algo = -1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t ws = 0;
};

cudnnConvolutionDescriptor_t dir_conv(const CudnnConvPlan& p, ConvDir dir) {
  return dir == ConvDir::Fwd ? p.conv_fwd : dir == ConvDir::Dgrad ? p.conv_dgrad : p.conv_wgrad;
}

// cuDNN's workspace for `algo` in one direction, with the descriptor's current math type: a refusal here means the
// algorithm cannot run this configuration.
cudnnStatus_t ws_query(cudnnHandle_t h, const CudnnConvPlan& p, ConvDir dir, int algo, size_t* bytes) {
  switch (dir) {
    case ConvDir::Fwd:
      return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv_fwd, p.y,
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case ConvDir::Dgrad:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv_dgrad, p.x,
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case ConvDir::Wgrad: break;
  }
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv_wgrad, p.w,
                                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
}

void set_dir(CudnnConvPlan& p, ConvDir dir, const Pick& k) {
  switch (dir) {
    case ConvDir::Fwd:
      p.fwd_algo = static_cast<cudnnConvolutionFwdAlgo_t>(k.algo), p.fwd_math = k.math, p.fwd_ws = k.ws;
      return;
    case ConvDir::Dgrad:
      p.dgrad_algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(k.algo), p.dgrad_math = k.math, p.dgrad_ws = k.ws;
      return;
    case ConvDir::Wgrad: break;
  }
  p.wgrad_algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(k.algo), p.wgrad_math = k.math, p.wgrad_ws = k.ws;
}

const char* dir_long_name(ConvDir dir) {
  return dir == ConvDir::Fwd ? "forward" : dir == ConvDir::Dgrad ? "data-gradient" : "filter-gradient";
}

Error no_algo_error(ConvDir dir, const ConvDesc& d, int candidates, const char* source, const std::string& rejected) {
  return conv_error(ErrCode::NotSupported,
                    std::string("cudnn_conv_plan: no usable ") + dir_long_name(dir) + " algorithm for " +
                        gpu_dtype_name(d.io) + (d.tf32 ? " (tf32)" : "") + (d.deterministic ? " deterministic" : "") +
                        " conv2d " + conv2d_geom_str(d.g) + " (" + std::to_string(candidates) + " " + source +
                        " candidates)" + rejected,
                    __FILE__, __LINE__);
}

// Walks the candidates (best first) and takes the first that passes every filter (see cudnn_conv_choose).
template <class Perf>
Result<int> choose_from(cudnnHandle_t h, CudnnConvPlan& p, ConvDir dir, const Perf* cands, int n, size_t max_ws,
                        const char* source) {
  const ConvDesc& d = p.desc;
  const cudnnConvolutionDescriptor_t conv = dir_conv(p, dir);
  std::string rejected;
  for (int i = 0; i < n; ++i) {
    const Perf& c = cands[i];
    const int algo = static_cast<int>(c.algo);
    const std::string tag = std::string(cudnn_conv_algo_name(dir, algo)) + " (" + cudnn_math_name(c.mathType) + "): ";
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    size_t bytes = 0;
    if (c.status != CUDNN_STATUS_SUCCESS) {
      rejected += "\n  " + tag + cudnnGetErrorString(c.status);
    } else if (!exec_math(d, c.mathType, &math)) {
      rejected += "\n  " + tag + "math type not allowed for " + gpu_dtype_name(d.io) + (d.tf32 ? " tf32" : "");
    } else if (d.deterministic && c.determinism != CUDNN_DETERMINISTIC) {
      rejected += "\n  " + tag + "not deterministic";
    } else if (c.memory > max_ws) {
      rejected += "\n  " + tag + "workspace " + std::to_string(c.memory) + " B > " + std::to_string(max_ws) + " B";
    } else if (cudnnSetConvolutionMathType(conv, math) != CUDNN_STATUS_SUCCESS) {
      rejected += "\n  " + tag + "math type refused by the descriptor";
    } else if (const cudnnStatus_t st = ws_query(h, p, dir, algo, &bytes); st != CUDNN_STATUS_SUCCESS) {
      rejected += "\n  " + tag + "workspace query: " + cudnnGetErrorString(st);
    } else if (bytes > max_ws) {
      rejected += "\n  " + tag + "workspace " + std::to_string(bytes) + " B > " + std::to_string(max_ws) + " B";
    } else {
      set_dir(p, dir, Pick{algo, math, bytes});
      return i;
    }
  }
  return no_algo_error(dir, d, n, source, rejected);
}

// A direction's algorithm given in advance (cudnn_conv_plan_fixed): the same rules as the filters, checked alone.
Status choose_fixed(cudnnHandle_t h, CudnnConvPlan& p, ConvDir dir, const ConvAlgoFixed& f, size_t max_ws) {
  const ConvDesc& d = p.desc;
  const std::string what = std::string("cudnn_conv_plan: ") + conv_dir_name(dir) + " algorithm " +
                           std::to_string(f.algo) + " " + cudnn_conv_algo_name(dir, f.algo) + " (" +
                           cudnn_math_name(f.math) + ")" + (f.origin.empty() ? "" : " from " + f.origin) + " for " +
                           gpu_dtype_name(d.io) + (d.tf32 ? " (tf32)" : "") +
                           (d.deterministic ? " deterministic" : "") + " conv2d " + conv2d_geom_str(d.g) + ": ";
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t bytes = 0;
  if (f.algo >= cudnn_conv_algo_count(dir))
    return conv_error(ErrCode::Invalid, what + "unknown algorithm id", __FILE__, __LINE__);
  if (!exec_math(d, f.math, &math) || math != f.math)
    return conv_error(ErrCode::Invalid, what + "math type not allowed", __FILE__, __LINE__);
  if (d.deterministic && !cudnn_conv_algo_deterministic(dir, f.algo))
    return conv_error(ErrCode::Invalid, what + "not deterministic", __FILE__, __LINE__);
  if (const cudnnStatus_t st = cudnnSetConvolutionMathType(dir_conv(p, dir), math); st != CUDNN_STATUS_SUCCESS)
    return cudnn_check(st, (what + "cudnnSetConvolutionMathType").c_str(), __FILE__, __LINE__);
  if (const cudnnStatus_t st = ws_query(h, p, dir, f.algo, &bytes); st != CUDNN_STATUS_SUCCESS)
    return cudnn_check(st, (what + "refused by the workspace query").c_str(), __FILE__, __LINE__);
  if (bytes > max_ws)
    return conv_error(ErrCode::NotSupported,
                      what + "workspace " + std::to_string(bytes) + " B > " + std::to_string(max_ws) + " B", __FILE__,
                      __LINE__);
  set_dir(p, dir, Pick{f.algo, math, bytes});
  return ok_status();
}

// A direction's graph-API config given in advance (cudnn_conv_plan_fixed): graph (p), pinned.
Status choose_graph(cudnnHandle_t h, CudnnConvPlan& p, ConvDir dir, const ConvAlgoFixed& f, size_t max_ws) {
  ConvGraphDesc gd = conv_graph_desc(p.desc, dir, max_ws);
  gd.plan.pin = &f.engine;
  Result<CudnnExecPlan> plan = conv_graph_plan(h, gd);
  if (!plan.ok()) {
    Error e = plan.errors().front();
    e.message = std::string("cudnn_conv_plan: ") + conv_dir_name(dir) + " graph-API engine config " +
                cudnn_engine_id_str(f.engine) + (f.origin.empty() ? "" : " from " + f.origin) + ": " + e.message;
    return e;
  }
  const size_t bytes = static_cast<size_t>(plan->workspace);
  (dir == ConvDir::Fwd ? p.fwd_ws : dir == ConvDir::Dgrad ? p.dgrad_ws : p.wgrad_ws) = bytes;
  p.graph[static_cast<int>(dir)] = std::make_shared<const CudnnExecPlan>(std::move(plan.value()));
  return ok_status();
}

Status make_descriptors(CudnnConvPlan& p) {
  const Conv2dGeom& g = p.desc.g;
  const cudnnDataType_t t = cudnn_dtype(p.desc.io);
  TRCTL_CUDNN_TRY(cudnnCreateTensorDescriptor(&p.x));
  TRCTL_CUDNN_TRY(cudnnCreateTensorDescriptor(&p.y));
  TRCTL_CUDNN_TRY(cudnnCreateTensorDescriptor(&p.bias));
  TRCTL_CUDNN_TRY(cudnnCreateFilterDescriptor(&p.w));
  TRCTL_CUDNN_TRY(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NHWC, t, int(g.n), int(g.c), int(g.h), int(g.w)));
  TRCTL_CUDNN_TRY(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NHWC, t, int(g.n), int(g.k), int(g.p), int(g.q)));
  TRCTL_CUDNN_TRY(cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NHWC, t, 1, int(g.k), 1, 1));
  TRCTL_CUDNN_TRY(
      cudnnSetFilter4dDescriptor(p.w, t, CUDNN_TENSOR_NHWC, int(g.k), int(g.c / g.groups), int(g.r), int(g.s)));
  for (cudnnConvolutionDescriptor_t* conv : {&p.conv_fwd, &p.conv_dgrad, &p.conv_wgrad}) {
    TRCTL_CUDNN_TRY(cudnnCreateConvolutionDescriptor(conv));
    // Compute type float for every io type: fp32 accumulation ("pseudo half / bf16" configurations).
    TRCTL_CUDNN_TRY(cudnnSetConvolution2dDescriptor(*conv, int(g.pad_h), int(g.pad_w), int(g.stride_h),
                                                    int(g.stride_w), int(g.dil_h), int(g.dil_w),
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    TRCTL_CUDNN_TRY(cudnnSetConvolutionGroupCount(*conv, int(g.groups)));
    TRCTL_CUDNN_TRY(cudnnSetConvolutionMathType(*conv, requested_math(p.desc)));
  }
  // cuDNN must agree with conv2d_geom_finish on the output size, else the y descriptor is wrong.
  int dims[4] = {0, 0, 0, 0};
  TRCTL_CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(p.conv_fwd, p.x, p.w, &dims[0], &dims[1], &dims[2], &dims[3]));
  if (dims[0] != g.n || dims[1] != g.k || dims[2] != g.p || dims[3] != g.q)
    return conv_error(ErrCode::Internal, "cuDNN output dims disagree with conv2d_geom_finish for " + conv2d_geom_str(g),
                      __FILE__, __LINE__);
  return ok_status();
}

Status choose_fwd(cudnnHandle_t h, CudnnConvPlan& p, size_t max_ws) {
  int max_count = 0, n = 0;
  TRCTL_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> c(static_cast<size_t>(max_count));
  TRCTL_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv_fwd, p.y, max_count, &n, c.data()));
  Result<int> k = choose_from(h, p, ConvDir::Fwd, c.data(), n, max_ws, "heuristic");
  return k.ok() ? ok_status() : Status(k.errors());
}

Status choose_dgrad(cudnnHandle_t h, CudnnConvPlan& p, size_t max_ws) {
  int max_count = 0, n = 0;
  TRCTL_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> c(static_cast<size_t>(max_count));
  TRCTL_CUDNN_TRY(
      cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv_dgrad, p.x, max_count, &n, c.data()));
  Result<int> k = choose_from(h, p, ConvDir::Dgrad, c.data(), n, max_ws, "heuristic");
  return k.ok() ? ok_status() : Status(k.errors());
}

Status choose_wgrad(cudnnHandle_t h, CudnnConvPlan& p, size_t max_ws) {
  int max_count = 0, n = 0;
  TRCTL_CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> c(static_cast<size_t>(max_count));
  TRCTL_CUDNN_TRY(
      cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv_wgrad, p.w, max_count, &n, c.data()));
  Result<int> k = choose_from(h, p, ConvDir::Wgrad, c.data(), n, max_ws, "heuristic");
  return k.ok() ? ok_status() : Status(k.errors());
}

// The shared start of every plan: a finished, int-sized geometry and the descriptors.
Status plan_start(cudnnHandle_t h, const ConvDesc& d, CudnnConvPlan& p) {
  if (!h) return conv_error(ErrCode::Invalid, "cudnn_conv_plan: null cuDNN handle", __FILE__, __LINE__);
  p.desc = d;
  std::string why;
  if (!conv2d_geom_finish(p.desc.g, &why)) return conv_error(ErrCode::Invalid, why, __FILE__, __LINE__);
  const Conv2dGeom& g = p.desc.g;
  for (int64_t v : {g.n * g.h * g.w * g.c, g.n * g.p * g.q * g.k, g.k * g.r * g.s * (g.c / g.groups), g.pad_h,
                    g.pad_w, g.stride_h, g.stride_w, g.dil_h, g.dil_w}) {
    if (!fits_int(v))
      return conv_error(ErrCode::NotSupported,
                        "cudnn_conv_plan: conv2d " + conv2d_geom_str(g) + " has a size or tensor beyond int range",
                        __FILE__, __LINE__);
  }
  return make_descriptors(p);
}

void plan_release(CudnnConvPlan& p) {
  // Destroy failures here cannot be acted on (only invalid handles fail); ignore them as destructors must.
  if (p.x) cudnnDestroyTensorDescriptor(p.x);
  if (p.y) cudnnDestroyTensorDescriptor(p.y);
  if (p.bias) cudnnDestroyTensorDescriptor(p.bias);
  if (p.w) cudnnDestroyFilterDescriptor(p.w);
  for (cudnnConvolutionDescriptor_t c : {p.conv_fwd, p.conv_dgrad, p.conv_wgrad})
    if (c) cudnnDestroyConvolutionDescriptor(c);
  p.x = p.y = p.bias = nullptr;
  p.w = nullptr;
  p.conv_fwd = p.conv_dgrad = p.conv_wgrad = nullptr;
}

// Arguments shared by the execute calls: a finished plan, the inputs/outputs present, enough workspace.
Status exec_args_ok(const CudnnConvPlan& p, const void* a, const void* b, const void* out, void* ws, size_t ws_bytes,
                    size_t need, const char* file, int line) {
  if (!p.x || !p.conv_fwd) return conv_error(ErrCode::Invalid, "cudnn conv: plan is empty (moved from?)", file, line);
  if (!a || !b || !out) return conv_error(ErrCode::Invalid, "cudnn conv: null input or output pointer", file, line);
  if (ws_bytes < need || (need > 0 && !ws))
    return conv_error(ErrCode::Invalid,
                      "cudnn conv: workspace of " + std::to_string(ws_bytes) + " B given, " + std::to_string(need) +
                          " B needed (cudnn_conv_workspace_bytes)",
                      file, line);
  return ok_status();
}

}  // namespace

Status cudnn_check(cudnnStatus_t st, const char* what, const char* file, int line) {
  if (st == CUDNN_STATUS_SUCCESS) return ok_status();
  // cuDNN 9 statuses are grouped by thousands: 2xxx bad parameter, 3xxx not supported (sub-codes say why).
  const int family = static_cast<int>(st) / 1000;
  const ErrCode code = family == 3 ? ErrCode::NotSupported : family == 2 ? ErrCode::Invalid : ErrCode::Internal;
  return conv_error(code, std::string(what) + ": " + cudnnGetErrorString(st), file, line);
}

CudnnConvPlan& CudnnConvPlan::operator=(CudnnConvPlan&& o) noexcept {
  if (this != &o) {
    plan_release(*this);
    desc = o.desc;
    x = std::exchange(o.x, nullptr);
    y = std::exchange(o.y, nullptr);
    bias = std::exchange(o.bias, nullptr);
    w = std::exchange(o.w, nullptr);
    conv_fwd = std::exchange(o.conv_fwd, nullptr);
    conv_dgrad = std::exchange(o.conv_dgrad, nullptr);
    conv_wgrad = std::exchange(o.conv_wgrad, nullptr);
    fwd_algo = o.fwd_algo;
    dgrad_algo = o.dgrad_algo;
    wgrad_algo = o.wgrad_algo;
    fwd_math = o.fwd_math;
    dgrad_math = o.dgrad_math;
    wgrad_math = o.wgrad_math;
    fwd_ws = o.fwd_ws;
    dgrad_ws = o.dgrad_ws;
    wgrad_ws = o.wgrad_ws;
    graph = std::move(o.graph);
  }
  return *this;
}

CudnnConvPlan::~CudnnConvPlan() { plan_release(*this); }

Result<CudnnConvPlan> cudnn_conv_plan(cudnnHandle_t h, const ConvDesc& d, size_t max_workspace) {
  return cudnn_conv_plan_fixed(h, d, {}, max_workspace);
}

Result<CudnnConvPlan> cudnn_conv_plan_fixed(cudnnHandle_t h, const ConvDesc& d,
                                            const std::array<ConvAlgoFixed, 3>& fixed, size_t max_workspace) {
  CudnnConvPlan p;  // on any failure `p` releases whatever was created
  if (Status st = plan_start(h, d, p); !st) return st.errors();
  Status (*const heuristic[3])(cudnnHandle_t, CudnnConvPlan&, size_t) = {choose_fwd, choose_dgrad, choose_wgrad};
  for (ConvDir dir : kConvDirs) {
    if (dir == ConvDir::Dgrad && !d.need_dgrad) continue;  // e.g. the first layer: its input needs no gradient
    const ConvAlgoFixed& f = fixed[static_cast<int>(dir)];
    Status st = f.engine.engine >= 0 ? choose_graph(h, p, dir, f, max_workspace)
                : f.algo >= 0        ? choose_fixed(h, p, dir, f, max_workspace)
                                     : heuristic[static_cast<int>(dir)](h, p, max_workspace);
    if (!st) return st.errors();
  }
  return Result<CudnnConvPlan>(std::move(p));
}

Result<int> cudnn_conv_choose(cudnnHandle_t h, CudnnConvPlan& p, const cudnnConvolutionFwdAlgoPerf_t* cands, int n,
                              size_t max_workspace, const char* source) {
  return choose_from(h, p, ConvDir::Fwd, cands, n, max_workspace, source);
}
Result<int> cudnn_conv_choose(cudnnHandle_t h, CudnnConvPlan& p, const cudnnConvolutionBwdDataAlgoPerf_t* cands,
                              int n, size_t max_workspace, const char* source) {
  return choose_from(h, p, ConvDir::Dgrad, cands, n, max_workspace, source);
}
Result<int> cudnn_conv_choose(cudnnHandle_t h, CudnnConvPlan& p, const cudnnConvolutionBwdFilterAlgoPerf_t* cands,
                              int n, size_t max_workspace, const char* source) {
  return choose_from(h, p, ConvDir::Wgrad, cands, n, max_workspace, source);
}

const char* conv_dir_name(ConvDir dir) {
  return dir == ConvDir::Fwd ? "fwd" : dir == ConvDir::Dgrad ? "dgrad" : "wgrad";
}

int cudnn_conv_algo_count(ConvDir dir) {
  switch (dir) {
    case ConvDir::Fwd: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case ConvDir::Dgrad: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case ConvDir::Wgrad: break;
  }
  return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}

const char* cudnn_conv_algo_name(ConvDir dir, int algo) {
  switch (dir) {
    case ConvDir::Fwd: return fwd_algo_name(static_cast<cudnnConvolutionFwdAlgo_t>(algo));
    case ConvDir::Dgrad: return dgrad_algo_name(static_cast<cudnnConvolutionBwdDataAlgo_t>(algo));
    case ConvDir::Wgrad: break;
  }
  return wgrad_algo_name(static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo));
}

const char* cudnn_math_name(cudnnMathType_t m) { return math_name(m); }

bool cudnn_conv_algo_deterministic(ConvDir dir, int algo) {
  if (dir == ConvDir::Dgrad) return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  if (dir == ConvDir::Wgrad)
    return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  return true;
}

cudnnMathType_t cudnn_conv_requested_math(const ConvDesc& d) { return requested_math(d); }

ConvDirPlan cudnn_conv_plan_dir(const CudnnConvPlan& p, ConvDir dir) {
  const CudnnExecPlan* g = p.graph[static_cast<int>(dir)].get();
  switch (dir) {
    case ConvDir::Fwd: return {static_cast<int>(p.fwd_algo), p.fwd_math, p.fwd_ws, g};
    case ConvDir::Dgrad: return {static_cast<int>(p.dgrad_algo), p.dgrad_math, p.dgrad_ws, g};
    case ConvDir::Wgrad: break;
  }
  return {static_cast<int>(p.wgrad_algo), p.wgrad_math, p.wgrad_ws, g};
}

size_t cudnn_conv_workspace_bytes(const CudnnConvPlan& p) {
  return std::max(p.fwd_ws, std::max(p.dgrad_ws, p.wgrad_ws));
}

std::string cudnn_conv_describe(const CudnnConvPlan& p) {
  auto one = [&](ConvDir dir) {
    const ConvDirPlan d = cudnn_conv_plan_dir(p, dir);
    const std::string ws = "ws " + std::to_string(d.ws) + " B)";
    if (d.graph)
      return std::string(conv_dir_name(dir)) + " graph engine " + cudnn_engine_id_str(d.graph->id) + " (" + ws;
    return std::string(conv_dir_name(dir)) + " " + cudnn_conv_algo_name(dir, d.algo) + " (" + math_name(d.math) +
           ", " + ws;
  };
  return std::string("conv2d ") + gpu_dtype_name(p.desc.io) + (p.desc.tf32 ? " tf32" : "") +
         (p.desc.deterministic ? " deterministic " : " ") + conv2d_geom_str(p.desc.g) + ": " + one(ConvDir::Fwd) +
         ", " + one(ConvDir::Dgrad) + ", " + one(ConvDir::Wgrad);
}

// Scaling factors are float for every io type: the compute type is float (cuDNN's rule for half/bf16/float data).
Status cudnn_conv_fwd(cudnnHandle_t h, cudaStream_t s, const CudnnConvPlan& p, const void* x, const void* w,
                      const void* bias, void* y, void* ws, size_t ws_bytes) {
  Status args = exec_args_ok(p, x, w, y, ws, ws_bytes, p.fwd_ws, __FILE__, __LINE__);
  if (!args) return args;
  const float one = 1.0f, zero = 0.0f;
  if (const CudnnExecPlan* g = p.graph[static_cast<int>(ConvDir::Fwd)].get()) {
    if (Status st = conv_graph_run(h, s, *g, ConvDir::Fwd, x, w, y, ws, ws_bytes); !st) return st;
  } else {
    TRCTL_CUDNN_TRY(cudnnSetStream(h, s));
    TRCTL_CUDNN_TRY(cudnnConvolutionForward(h, &one, p.x, x, p.w, w, p.conv_fwd, p.fwd_algo, ws, ws_bytes, &zero,
                                            p.y, y));
  }
  // y += bias, broadcast over N, P, Q: one more read/write of y, by trctl's kernel (cudnnAddTensor was several
  // times slower on NHWC fp16), rather than cudnnConvolutionBiasActivationForward, which supports an identity
  // activation only with IMPLICIT_PRECOMP_GEMM.
  if (bias) return bias_add_cuda(s, y, bias, p.desc.g.n * p.desc.g.p * p.desc.g.q, p.desc.g.k, p.desc.io);
  return ok_status();
}

Status cudnn_conv_dgrad(cudnnHandle_t h, cudaStream_t s, const CudnnConvPlan& p, const void* dy, const void* w,
                        void* dx, void* ws, size_t ws_bytes) {
  Status args = exec_args_ok(p, dy, w, dx, ws, ws_bytes, p.dgrad_ws, __FILE__, __LINE__);
  if (!args) return args;
  if (!p.desc.need_dgrad)
    return Error{ErrCode::Internal, "cudnn_conv_dgrad", "the plan was made without a data-gradient algorithm"};
  if (const CudnnExecPlan* g = p.graph[static_cast<int>(ConvDir::Dgrad)].get())
    return conv_graph_run(h, s, *g, ConvDir::Dgrad, dy, w, dx, ws, ws_bytes);
  const float one = 1.0f, zero = 0.0f;
  TRCTL_CUDNN_TRY(cudnnSetStream(h, s));
  TRCTL_CUDNN_TRY(cudnnConvolutionBackwardData(h, &one, p.w, w, p.y, dy, p.conv_dgrad, p.dgrad_algo, ws, ws_bytes,
                                               &zero, p.x, dx));
  return ok_status();
}

Status cudnn_conv_wgrad(cudnnHandle_t h, cudaStream_t s, const CudnnConvPlan& p, const void* dy, const void* x,
                        void* dw, void* ws, size_t ws_bytes) {
  Status args = exec_args_ok(p, dy, x, dw, ws, ws_bytes, p.wgrad_ws, __FILE__, __LINE__);
  if (!args) return args;
  if (const CudnnExecPlan* g = p.graph[static_cast<int>(ConvDir::Wgrad)].get())
    return conv_graph_run(h, s, *g, ConvDir::Wgrad, dy, x, dw, ws, ws_bytes);
  const float one = 1.0f, zero = 0.0f;
  TRCTL_CUDNN_TRY(cudnnSetStream(h, s));
  TRCTL_CUDNN_TRY(cudnnConvolutionBackwardFilter(h, &one, p.x, x, p.y, dy, p.conv_wgrad, p.wgrad_algo, ws, ws_bytes,
                                                 &zero, p.w, dw));
  return ok_status();
}

}  // namespace trctl
