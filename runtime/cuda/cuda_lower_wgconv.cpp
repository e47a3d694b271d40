// CudaBackend's data gradients on trctl's wgmma ring kernel (train.conv_wgconv: dgrad; runtime/ops/conv2d/wgconv.h):
// which nodes (conv_route's rule), their plans (one per forward geometry, on wgconv_dgrad_geom) and their launches:
// the filters W (K, 3, 3, C) of the AMP weight copy flipped and transposed into W' (C, 3, 3, K) in conv_ws_ (the
// step's launches run one after another, so the shared workspace is free), then dX (N, H, W, C) = the forward kernel
// on dY (N, H, W, K) and W'. Deterministic: one fixed summation order per element.
#include <algorithm>

#include "runtime/cuda/cuda_backend_impl.h"

namespace trctl::cuda_detail {

bool CudaBackend::wgconv_node(const Node& n) const { return conv_route_of(n) == ConvRoute::Wgconv; }

// A Conv2dGradInput node (dY, W -> dX): the forward geometry is dX's and W's (conv_operands). Counted per node of
// every program.
Status CudaBackend::plan_wgconv(const Node& n) {
  const auto [x, w] = conv_operands(n);
  const Conv2dGeom g = conv2d_geom_of(c_.graph, n, x, w);
  const std::string key = conv_key(g);
  if (!wgconv_.count(key)) {
    Result<WgConvPlan> plan = wgconv_plan(wgconv_dgrad_geom(g), act_type(), WgConvTile::RingPx256N64);
    if (!plan.ok()) return plan.errors();  // NotSupported off compute capability 9.0: says so
    wgconv_.emplace(key, plan.value());
  }
  ++conv_sources_.wgconv_dgrad;
  conv_ws_bytes_ = std::max(conv_ws_bytes_, static_cast<size_t>(g.k * 9 * g.c) * gpu_dtype_size(act_type()));
  return ok_status();
}

Status CudaBackend::lower_wgconv_conv_node(const Node& n, std::vector<Launch>& out) {
  if (n.op != OpKind::Conv2dGradInput)
    return Error{ErrCode::Internal, "cuda backend", "wgconv runs data gradients only, not " + n.name};
  if (n.attrs.accumulate)  // pass_fuse_grad_accumulate fuses only pointwise ones, which are GEMMs
    return Error{ErrCode::Internal, "cuda backend", "a wgconv dgrad with a fused gradient sum: " + n.name};
  const auto [xv, wv] = conv_operands(n);
  const Conv2dGeom g = conv2d_geom_of(c_.graph, n, xv, wv);
  auto it = wgconv_.find(conv_key(g));
  if (it == wgconv_.end()) return Error{ErrCode::Internal, "cuda backend", "no wgconv plan for " + n.name};
  const WgConvPlan* plan = &it->second;
  const cudaStream_t s = ctx_.stream;
  const GpuDType io = act_type();
  const void* dy = at(n.in[0]);
  const void* w = weight_ptr(n.in[1]);
  void* dx = at(n.out[0]);
  void* wf = conv_ws_;
  const int64_t k = g.k, c = g.c;
  out.push_back([=] { return wgconv_flip_filters_cuda(s, io, w, k, c, wf); });
  out.push_back([=] { return wgconv_fwd_cuda(s, *plan, dy, wf, dx); });  // no lazy setup: nothing to warm
  return ok_status();
}

}  // namespace trctl::cuda_detail
