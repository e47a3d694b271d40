// CudaBackend's weight gradients beside the next nodes (train.conv_wgrad_overlap; pass_overlap_wgrad gave each
// convolution weight gradient of a train program an overlap window, Attrs::overlap, and the memory plan keeps its
// inputs live through it): which of them run on the step's second stream, their scratch, and their launches.
// - Which: a Conv2dGradWeight with a window, on the plain cuDNN route (not trctl's kernels, not a pointwise GEMM,
//   not a folded batch norm's graph (c), channels unpadded — those share the step's scratch: conv_ws_, pad_x_),
//   and not under data parallelism (a bucket's all-reduce follows its last gradient writer on the step stream).
// - Scratch: the side stream's own cuDNN workspace and (AMP) its io-dtype dW before the cast into the fp32
//   gradient, each sized to the largest forked node's, so that the step stream's launches keep conv_ws_ and
//   lowp_dw_ to themselves.
// - Launches: an event recorded on the step stream after the node before it, waited for by the side stream; the
//   node's launches on the side stream; an event recorded there, which the step stream waits for before the first
//   node past the window (node i + overlap + 1, or the step's end). Captured into the step's CUDA graph, these are
//   its fork and join edges; the kernels and their operands are the in-order ones, so the values are bitwise the
//   same. bench --layers times each node alone on the step stream (lower_node), its replay the captured step.
#include <algorithm>

#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/channel_copy/channel_copy_cuda.h"

namespace trctl::cuda_detail {

Status CudaBackend::plan_wgrad_overlap() {
  int64_t side_dw = 0;
  for (size_t pi = 0; pi < c_.graph.programs.size(); ++pi) {
    const Program& p = c_.graph.programs[pi];
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      const Node& n = p.nodes[i];
      if (n.op != OpKind::Conv2dGradWeight || n.attrs.overlap <= 0 || dist_.enabled) continue;
      if (gemm_.count({static_cast<int>(pi), i}) || conv_route_of(n) != ConvRoute::Cudnn || bn_fold_.count(n.in[1]))
        continue;
      const CudnnConvPlan* plan = conv_plan(n);
      const auto [xv, wv] = conv_operands(n);
      const Conv2dGeom real = conv2d_geom_of(c_.graph, n, xv, wv);
      if (!plan || plan->desc.g.c != real.c) continue;
      if (lowp() && !lowp_wgrad_supported(n).ok()) continue;  // lower_conv_node refuses it
      wgrad_side_.insert({static_cast<int>(pi), i});
      side_ws_bytes_ = std::max(side_ws_bytes_, plan->wgrad_ws);
      side_dw = std::max(side_dw, real.k * real.r * real.s * real.c);
      ++conv_sources_.wgrad_overlapped;
    }
  }
  if (side_ws_bytes_ > 0) TRCTL_CUDA_TRY(cudaMalloc(&side_ws_, side_ws_bytes_));
  if (lowp() && side_dw > 0) {
    side_dw_bytes_ = static_cast<size_t>(side_dw) * gpu_dtype_size(act_type());
    TRCTL_CUDA_TRY(cudaMalloc(&side_dw_, side_dw_bytes_));
  }
  return ok_status();
}

Launch CudaBackend::cudnn_wgrad_launches(const Node& n, const CudnnConvPlan& plan, const void* x, int64_t cp,
                                         const WgradScratch& on, std::vector<Launch>& out) {
  const auto [xv, wv] = conv_operands(n);
  const Conv2dGeom real = conv2d_geom_of(c_.graph, n, xv, wv);
  const int64_t c = real.c, wrows = real.k * real.r * real.s;
  const cudnnHandle_t h = ctx_.cudnn;  // every cuDNN call binds it to its own stream first
  const GpuDType act = act_type();
  const CudnnConvPlan* pp = &plan;
  const void* dy = at(n.in[0]);
  void* dw_f32 = at(n.out[0]);
  void* dw = lowp() ? on.dw_io : dw_f32;
  const cudaStream_t s = on.stream;
  void* ws = on.ws;
  const size_t wsb = on.ws_bytes;
  Launch conv = [=] { return cudnn_conv_wgrad(h, s, *pp, dy, x, dw, ws, wsb); };
  out.push_back(conv);
  if (lowp()) out.push_back([=] { return channel_copy_cuda(s, dw, act, cp, dw_f32, GpuDType::F32, c, wrows); });
  return conv;
}

Status CudaBackend::lower_forked_wgrad(int program, size_t i, std::vector<Launch>& out, cudaEvent_t* join) {
  const Node& n = c_.graph.programs[program].nodes[i];
  const CudnnConvPlan* plan = conv_plan(n);
  if (!plan) return Error{ErrCode::Internal, "cuda backend", "no cuDNN plan for " + n.name};
  if (lowp())
    if (Status st = lowp_wgrad_supported(n); !st.ok()) return st;
  Result<cudaEvent_t> fe = step_event();
  if (!fe.ok()) return fe.errors();
  Result<cudaEvent_t> de = step_event();
  if (!de.ok()) return de.errors();
  const cudaStream_t s = ctx_.stream, side = ctx_.side_stream;
  const cudaEvent_t fork = fe.value(), done = de.value();
  out.push_back([=]() -> Status {
    TRCTL_CUDA_TRY(cudaEventRecord(fork, s));
    TRCTL_CUDA_TRY(cudaStreamWaitEvent(side, fork, 0));
    return ok_status();
  });
  const void* x = at(n.in[1]);
  const int64_t cp = plan->desc.g.c;
  cudnn_wgrad_launches(n, *plan, x, cp, WgradScratch{side, side_ws_, side_ws_bytes_, side_dw_}, out);
  out.push_back([=]() -> Status {
    TRCTL_CUDA_TRY(cudaEventRecord(done, side));
    return ok_status();
  });
  // cuDNN's module loading before the capture: the same call on the step stream and its scratch (warm_ runs
  // eagerly, ordered with the step stream's earlier work).
  std::vector<Launch> unused;
  warm_.push_back(
      cudnn_wgrad_launches(n, *plan, x, cp, WgradScratch{s, conv_ws_, conv_ws_bytes_, lowp_dw_}, unused));
  *join = done;
  return ok_status();
}

Launch CudaBackend::join_launch(cudaEvent_t done) const {
  const cudaStream_t s = ctx_.stream;
  return [=]() -> Status {
    TRCTL_CUDA_TRY(cudaStreamWaitEvent(s, done, 0));
    return ok_status();
  };
}

}  // namespace trctl::cuda_detail
