// CudaBackend's convolutions on trctl's wgmma ring kernel (train.conv_wgconv; runtime/ops/conv2d/wgconv.h): which
// nodes (conv_route's rule), their plans (RingPx256N64; a data gradient's on wgconv_dgrad_geom of its forward
// geometry, a forward's on its own) and their launches.
// - Data gradients (dgrad, both, bwd, all): the filters W (K, 3, 3, C) of the AMP weight copy flipped and
//   transposed into W' (C, 3, 3, K) in conv_ws_ (the step's launches run one after another, so the shared workspace
//   is free), then dX (N, H, W, C) = the forward kernel on dY (N, H, W, K) and W'; under train.conv_bn_backward
//   fused, with the next batch norm's backward reductions in its epilogue (WgConvBnBwd; partials after W').
// - Forwards (fwd, both): Y = conv(X, W); for a conv_bn_stats pair (route Wgconv) Y's per-channel sum and sum of
//   squares from the epilogue into the pair's buffer (partials in conv_ws_); for a batch norm folded into it
//   (wg_fold_: X is that batch norm's output y) the kernel reads the batch norm's input x, applies the normalisation
//   + ReLU with the batch norm's saved mean and invstd as each row lands and writes the result to y (bitwise the
//   apply pass's output) while the batch norm itself computes its statistics alone.
// - Weight gradients (wgrad, bwd, all): dW (K, 3, 3, C) f32 straight into the parameter's gradient from dY and X by the
//   ring weight-gradient kernel (wgconv_wgrad_cuda), its per-CTA partials in conv_ws_. When X is a folded batch
//   norm's y whose only other readers are such weight gradients (WgFold::unwritten, train.conv_wgconv: all), they
//   read the batch norm's input x and apply it as their prologue, and the forward writes no y.
// Deterministic: one fixed summation order per element; the statistics are fixed for the plan's grid.
#include <algorithm>

#include "runtime/cuda/cuda_backend_impl.h"

namespace trctl::cuda_detail {

bool CudaBackend::wgconv_node(const Node& n) const { return conv_route_of(n) == ConvRoute::Wgconv; }

// A Conv2dGradInput node (dY, W -> dX): the forward geometry is dX's and W's (conv_operands); a Conv2d node (X, W ->
// Y); a Conv2dGradWeight node (dY, X -> dW). Counted per node of every program.
Status CudaBackend::plan_wgconv(const Node& n, bool bn_prologue) {
  const auto [x, w] = conv_operands(n);
  const Conv2dGeom g = conv2d_geom_of(c_.graph, n, x, w);
  if (n.op == OpKind::Conv2dGradWeight) {
    if (Status st = lowp_wgrad_supported(n); !st.ok()) return st;  // dW written into the parameter's own slot
    const std::string key = (bn_prologue ? "bn " : "") + conv_key(g);
    if (!wgconv_wgrad_.count(key)) {
      Result<WgConvWgradPlan> plan = wgconv_wgrad_plan(g, act_type(), 0, bn_prologue);
      if (!plan.ok()) return plan.errors();  // NotSupported off compute capability 9.0: says so
      conv_ws_bytes_ = std::max(conv_ws_bytes_, wgconv_wgrad_workspace_bytes(plan.value()));
      wgconv_wgrad_.emplace(key, plan.value());
    }
    ++conv_sources_.wgconv_wgrad;
    return ok_status();
  }
  const bool fwd = n.op == OpKind::Conv2d;
  if (fwd && n.in.size() != 2)  // conv_route sees the geometry only; a bias is folded into a batch norm, or here
    return Error{ErrCode::NotSupported, "cuda backend",
                 "train.conv_wgconv: the wgmma forward takes no bias, and " + n.name +
                     " has one not folded into a batch norm; set train.conv_wgconv to off or dgrad"};
  const std::string key = (fwd ? "fwd " : "") + conv_key(g);
  if (!wgconv_.count(key)) {
    Result<WgConvPlan> plan = wgconv_plan(fwd ? g : wgconv_dgrad_geom(g), act_type(), WgConvTile::RingPx256N64);
    if (!plan.ok()) return plan.errors();  // NotSupported off compute capability 9.0: says so
    wgconv_.emplace(key, plan.value());
  }
  if (fwd) {
    ++conv_sources_.wgconv_fwd;
    return ok_status();
  }
  ++conv_sources_.wgconv_dgrad;
  conv_ws_bytes_ = std::max(conv_ws_bytes_, dgrad_fwd_filter_bytes(g));
  return ok_status();
}

// A folded batch norm's apply as a ring kernel's prologue: its parameters and saved statistics, its ReLU (no act_out).
WgConvPrologue CudaBackend::wg_prologue(const WgFold& f) {
  auto f32 = [&](ValueId v) { return reinterpret_cast<const float*>(at(v)); };
  WgConvPrologue p;
  p.gamma = f32(f.gamma);
  p.beta = f32(f.beta);
  p.mean = f32(f.mean);
  p.invstd = f32(f.invstd);
  p.relu = true;
  return p;
}

Status CudaBackend::lower_wgconv_conv_node(const Node& n, std::vector<Launch>& out) {
  if (n.op != OpKind::Conv2dGradInput && n.op != OpKind::Conv2d && n.op != OpKind::Conv2dGradWeight)
    return Error{ErrCode::Internal, "cuda backend", "wgconv runs convolutions and their gradients, not " + n.name};
  if (n.attrs.accumulate)  // pass_fuse_grad_accumulate fuses only pointwise ones, which are GEMMs
    return Error{ErrCode::Internal, "cuda backend", "a wgconv conv with a fused gradient sum: " + n.name};
  const auto [xv, wv] = conv_operands(n);
  const Conv2dGeom g = conv2d_geom_of(c_.graph, n, xv, wv);
  if (n.op == OpKind::Conv2dGradWeight) {  // dY (n.in[0]), X (n.in[1]) -> dW (f32, the parameter's gradient)
    // X a folded batch norm's y that is never written: the batch norm's input x with its apply as the prologue.
    const auto fold = wg_fold_.find(n.in[1]);
    const bool pro = fold != wg_fold_.end() && fold->second.unwritten;
    auto wit = wgconv_wgrad_.find((pro ? "bn " : "") + conv_key(g));
    if (wit == wgconv_wgrad_.end()) return Error{ErrCode::Internal, "cuda backend", "no wgconv plan for " + n.name};
    const WgConvWgradPlan* plan = &wit->second;
    const cudaStream_t s = ctx_.stream;
    const void* dy = at(n.in[0]);
    const void* x = at(pro ? fold->second.x : n.in[1]);
    float* dw = reinterpret_cast<float*>(at(n.out[0]));
    void* ws = conv_ws_;
    const size_t wsb = conv_ws_bytes_;
    const WgConvPrologue prologue = pro ? wg_prologue(fold->second) : WgConvPrologue{};
    out.push_back([=] { return wgconv_wgrad_cuda(s, *plan, dy, x, dw, ws, wsb, pro ? &prologue : nullptr); });
    return ok_status();
  }
  const bool fwd = n.op == OpKind::Conv2d;
  auto it = wgconv_.find((fwd ? "fwd " : "") + conv_key(g));
  if (it == wgconv_.end()) return Error{ErrCode::Internal, "cuda backend", "no wgconv plan for " + n.name};
  const WgConvPlan* plan = &it->second;
  const cudaStream_t s = ctx_.stream;
  const GpuDType io = act_type();
  const void* w = weight_ptr(n.in[1]);
  void* y = at(n.out[0]);
  if (!fwd) {
    const void* dy = at(n.in[0]);
    void* wf = conv_ws_;
    const int64_t k = g.k, c = g.c;
    out.push_back([=] { return wgconv_flip_filters_cuda(s, io, w, k, c, wf); });
    if (auto pair = conv_bn_bwd_.find(n.out[0]); pair != conv_bn_bwd_.end()) {
      // train.conv_bn_backward fused: the next batch norm's backward reductions from the epilogue, which stores
      // its masked g (as graph (d) does for a cuDNN data gradient); the partials after the flipped filters.
      const Node& bn = c_.graph.programs[pair->second.program].nodes[pair->second.bn_grad];
      auto f32 = [&](ValueId v) { return reinterpret_cast<float*>(at(v)); };
      WgConvBnBwd bb;
      bb.x = at(bn.in[1]);
      bb.gamma = f32(bn.in[2]);
      bb.beta = f32(pair->second.beta);
      bb.mean = f32(bn.in[3]);
      bb.invstd = f32(bn.in[4]);
      bb.dgamma = f32(bn.out[1]);
      bb.dbeta = f32(bn.out[2]);
      const size_t off = dgrad_fwd_filter_bytes(g);
      bb.ws = static_cast<char*>(conv_ws_) + off;
      bb.ws_bytes = conv_ws_bytes_ - off;
      out.push_back([=] { return wgconv_fwd_cuda(s, *plan, dy, wf, y, nullptr, nullptr, &bb); });
      return ok_status();
    }
    out.push_back([=] { return wgconv_fwd_cuda(s, *plan, dy, wf, y); });  // no lazy setup: nothing to warm
    return ok_status();
  }
  const void* x = at(n.in[0]);
  bool has_prologue = false, has_stats = false;
  WgConvPrologue prologue;
  if (auto fold = wg_fold_.find(n.in[0]); fold != wg_fold_.end()) {  // X is a folded batch norm's y
    x = at(fold->second.x);
    prologue = wg_prologue(fold->second);
    prologue.act_out = fold->second.unwritten ? nullptr : at(n.in[0]);  // y written for readers that read it
    has_prologue = true;
  }
  WgConvStats stats;
  if (const BnSums sums = conv_bn_sums(n.out[0]); sums.sum) {  // a conv_bn_stats pair routed here
    stats.sum = const_cast<float*>(sums.sum);
    stats.sqsum = const_cast<float*>(sums.sqsum);
    stats.ws = conv_ws_;
    stats.ws_bytes = conv_ws_bytes_;
    has_stats = true;
  }
  out.push_back([=] {  // prologue and stats captured by value
    return wgconv_fwd_cuda(s, *plan, x, w, y, has_prologue ? &prologue : nullptr, has_stats ? &stats : nullptr);
  });
  return ok_status();
}

}  // namespace trctl::cuda_detail
