// CudaBackend's CNN lowering: cuDNN convolution plans (one per distinct geometry) and the shared workspaces,
// chosen once at construction; then each CNN node of a program as launches: conv fwd / dgrad / wgrad (cuDNN),
// batch norm (train, eval, backward; deterministic two-pass reductions), pools, global average pool, and the
// residual / gradient-sum add. Activations are in the AMP dtype; parameters, their gradients, the batch-norm
// statistics and running statistics in fp32.
#include <algorithm>
#include <array>
#include <filesystem>
#include <set>

#include "runtime/cuda/conv_autotune.h"
#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/ops/add/add_cuda.h"
#include "runtime/ops/batchnorm/batchnorm_cuda.h"
#include "runtime/ops/cast/cast_cuda.h"
#include "runtime/ops/channel_copy/channel_copy_cuda.h"
#include "runtime/ops/conv2d/conv_bn_stats.h"
#include "runtime/ops/conv2d/conv_route.h"
#include "runtime/ops/conv2d/im2col.h"
#include "runtime/ops/conv2d/s2d.h"
#include "runtime/ops/pool/pool_cuda.h"

namespace trctl::cuda_detail {

std::string conv_key(const Conv2dGeom& g) {
  const int64_t f[] = {g.n, g.h, g.w, g.c, g.k, g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
                       g.dil_h, g.dil_w, g.groups};
  std::string k;
  for (int64_t v : f) k += std::to_string(v) + ",";
  return k;
}

// How a (non-pointwise) conv node runs and the geometry of its cuDNN plan: runtime/ops/conv2d/conv_route.h, the
// rule `trctl bench --autotune` measures by. cuDNN runs a convolution over 3 input channels (an RGB stem) with FMA
// kernels, an order of magnitude slower than over 8 with tensor cores: under AMP the forward and data gradient pad
// such inputs and filters with zero channels to a multiple of 8. The weight gradient keeps the real channels:
// measured on the H200 (run 14), cuDNN's wgrad of the 7x7 C=3 stem took 0.55 ms, the padded one plus its copies
// 1.19 ms; the forward went from 3.06 to 1.49 ms padded.
ConvRoute CudaBackend::conv_route_of(const Node& n) const {
  if (pointwise_conv(n)) return ConvRoute::Cudnn;  // cuBLASLt GEMMs (plan_gemms): never routed here
  const auto [x, w] = conv_operands(n);
  return conv_route(conv_route_options(c_.spec), n.op, conv2d_geom_of(c_.graph, n, x, w));
}

Conv2dGeom CudaBackend::planned_geom(const Node& n) const {
  const auto [x, w] = conv_operands(n);
  return conv_plan_geom(conv_route_options(c_.spec), n.op, conv2d_geom_of(c_.graph, n, x, w));
}

// Conv plans for every conv node of every program (train and train_last differ in N), the largest workspace any
// of them needs, batch norm's workspace, (AMP) the scratch for a weight gradient before its cast to fp32, and the
// space-to-depth convs' blocked input z and filter w2 (one of each, sized to the largest; s2d_node).
// Each direction runs the algorithm measured by `trctl bench CFG --autotune` when the autotune cache
// (autotune_cache_path(), read once, before the first conv) has it, else the heuristics' choice; conv_sources_
// counts the plans of each origin (run.json's conv_algorithms).
Status CudaBackend::plan_cnn() {
  ConvDesc d;
  d.io = act_type();
  d.tf32 = amp_ == Precision::Tf32;
  d.deterministic = c_.spec.train.deterministic;
  conv_sources_ = ConvAlgoSources{};
  conv_sources_.deterministic = d.deterministic;
  int64_t max_dw = 0;
  std::string cache_path;
  Result<AutotuneCache> cache = AutotuneCache{};
  bool cache_loaded = false;
  std::set<std::string> dgrad_keys;  // geometries whose input gradient some program computes
  fewc_bn_grad_.clear();
  for (const FewcBnGradFold& f : fewc_bn_grad_choose(c_.graph, c_.spec)) {
    // The weight gradient reads g, x and the batch norm's statistics and parameter gradients one node after their
    // last use in the plan: only safe while it defines no activation that could take their storage.
    bool defines_activation = false;
    for (ValueId o : c_.graph.programs[f.program].nodes[f.wgrad].out)
      defines_activation |= c_.plan.values[o].region == Region::Activations;
    if (!defines_activation) fewc_bn_grad_.emplace(f.dx, f);
  }
  conv_sources_.bn_grad_folded = static_cast<int>(fewc_bn_grad_.size());
  for (const Program& p : c_.graph.programs)
    for (const Node& n : p.nodes)
      if (n.op == OpKind::Conv2dGradInput && !wgconv_node(n)) dgrad_keys.insert(conv_key(planned_geom(n)));
  // train.conv_wgconv fwd: batch norms whose apply + ReLU their wgconv consumer runs (its prologue writes y).
  // With only ring weight gradients reading y besides (f.wgrads), they apply it to x themselves and y is never
  // written: those weight gradients are planned with the prologue alone ("bn " + conv_key, plan_wgconv).
  const std::vector<ConvBnApplyFold> wg_folds = wgconv_bn_apply_choose(c_.graph, c_.spec);
  std::set<std::pair<size_t, size_t>> bn_wgrads;  // (program, node) of those weight gradients
  for (const ConvBnApplyFold& f : wg_folds)
    for (size_t wi : f.wgrads) bn_wgrads.emplace(f.program, wi);
  for (size_t pi = 0; pi < c_.graph.programs.size(); ++pi)
    for (size_t ni = 0; ni < c_.graph.programs[pi].nodes.size(); ++ni) {
      const Node& n = c_.graph.programs[pi].nodes[ni];
      if (is_conv_op(n.op) && !pointwise_conv(n)) {  // pointwise ones are cuBLASLt GEMMs (plan_gemms)
        if (fewc_node(n)) {  // trctl's kernel: no cuDNN plan (nor a count in conv_sources_)
          if (Status st = plan_fewc(n); !st.ok()) return st;
          continue;
        }
        if (wgconv_node(n)) {  // trctl's wgmma kernel: no cuDNN plan (counted: conv_sources_.wgconv_dgrad / _fwd)
          if (Status st = plan_wgconv(n, bn_wgrads.count({pi, ni}) > 0); !st.ok()) return st;
          continue;
        }
        if (im2col_node(n)) {  // im2col + GEMM: no cuDNN plan (nor a count in conv_sources_), like the 1x1 GEMMs
          if (Status st = plan_im2col(n); !st.ok()) return st;
          continue;
        }
        const auto [x, w] = conv_operands(n);
        const Conv2dGeom real = conv2d_geom_of(c_.graph, n, x, w);
        d.g = planned_geom(n);
        if (s2d_node(n)) {  // z (N, Hz, Wz, Cz) and w2 (K, R2, S2, Cz); dw2 goes to lowp_dw_ (max_dw below)
          s2d_z_bytes_ = std::max(s2d_z_bytes_, s2d_conv_input_bytes(real, d.io));
          s2d_w_bytes_ = std::max(s2d_w_bytes_, s2d_conv_filter_bytes(real, d.io));
        } else if (d.g.c != real.c) {  // scratch for the padded input, filter, filter gradient and input gradient
          pad_x_elems_ = std::max(pad_x_elems_, real.n * real.h * real.w * d.g.c);
          pad_w_elems_ = std::max(pad_w_elems_, real.k * real.r * real.s * d.g.c);
        }
        const std::string key = conv_key(d.g);
        d.need_dgrad = dgrad_keys.count(key) > 0;
        if (!conv_.count(key)) {
          if (!cache_loaded) {
            cache_path = autotune_cache_path();
            cache = autotune_cache_load(cache_path);
            if (!cache.ok()) return cache.errors();
            cache_loaded = true;
            std::error_code ec;
            conv_sources_.cache = cache_path;
            conv_sources_.cache_exists = !cache_path.empty() && std::filesystem::exists(cache_path, ec);
          }
          std::array<bool, 3> cached{};
          Result<CudnnConvPlan> plan =
              cudnn_conv_plan_cached(ctx_.cudnn, d, cache.value(), size_t{256} << 20, &cached);
          if (!plan.ok()) {
            std::vector<Error> errs = plan.errors();
            if (!cache.value().entries.empty())
              for (Error& e : errs) e.message += " (autotune cache " + cache_path + ")";
            return errs;
          }
          conv_algo_sources_add(conv_sources_, {true, d.need_dgrad, true}, cached);
          for (ConvDir dir : kConvDirs)
            if (plan.value().graph[static_cast<int>(dir)]) ++conv_sources_.graph_engines;
          conv_ws_bytes_ = std::max(conv_ws_bytes_, cudnn_conv_workspace_bytes(plan.value()));
          conv_.emplace(key, std::move(plan.value()));
        }
        if (n.op == OpKind::Conv2dGradWeight) max_dw = std::max(max_dw, d.g.k * d.g.r * d.g.s * d.g.c);
      } else if (n.op == OpKind::BatchNorm || n.op == OpKind::BatchNormGrad) {
        const bool grad = n.op == OpKind::BatchNormGrad;  // X: in[0], or in[1] of the backward (its dY may be pooled)
        const int64_t c = c_.graph.values[n.in[grad ? 2 : 1]].shape.numel();
        const int64_t rows = c_.graph.values[n.in[grad ? 1 : 0]].shape.numel() / c;
        bn_ws_bytes_ = std::max(bn_ws_bytes_, batchnorm_workspace_bytes(rows, c));
      }
    }
  if (Status st = plan_conv_bn_stats(); !st.ok()) return st;  // may grow conv_ws_bytes_
  if (Status st = plan_conv_bn_bwd(); !st.ok()) return st;    // likewise
  if (Status st = plan_dgrad_fwd(cache.value(), d); !st.ok()) return st;  // likewise (after the pairs)
  if (Status st = plan_pool_xa(); !st.ok()) return st;
  if (Status st = plan_wgrad_overlap(); !st.ok()) return st;  // after every route and fold is known
  for (const ConvBnApplyFold& f : wg_folds) {  // (their weight gradients' plans: plan_wgconv above)
    const Node& bn = c_.graph.programs[f.program].nodes[f.bn];
    wg_fold_[f.y] = WgFold{f.x, bn.in[1], bn.in[2], bn.out[1], bn.out[2], !f.wgrads.empty()};
    ++conv_sources_.wgconv_bn_folded;
    if (!f.wgrads.empty()) ++conv_sources_.wgconv_bn_unwritten;
  }
  if (conv_ws_bytes_ > 0) TRCTL_CUDA_TRY(cudaMalloc(&conv_ws_, conv_ws_bytes_));
  if (bn_ws_bytes_ > 0) TRCTL_CUDA_TRY(cudaMalloc(&bn_ws_, bn_ws_bytes_));
  if (lowp() && max_dw > 0) TRCTL_CUDA_TRY(cudaMalloc(&lowp_dw_, static_cast<size_t>(max_dw) * 2));
  if (pad_x_elems_ > 0) {  // 2 bytes: padding happens under AMP only
    TRCTL_CUDA_TRY(cudaMalloc(&pad_x_, static_cast<size_t>(pad_x_elems_) * 2));
    TRCTL_CUDA_TRY(cudaMalloc(&pad_dx_, static_cast<size_t>(pad_x_elems_) * 2));
    TRCTL_CUDA_TRY(cudaMalloc(&pad_w_, static_cast<size_t>(pad_w_elems_) * 2));
  }
  if (s2d_z_bytes_ > 0) {
    TRCTL_CUDA_TRY(cudaMalloc(&s2d_z_, s2d_z_bytes_));
    TRCTL_CUDA_TRY(cudaMalloc(&s2d_w_, s2d_w_bytes_));
  }
  return ok_status();
}

// train.conv_bn_stats: the pairs conv_bn_stats_choose (runtime/ops/conv2d/conv_bn_stats.h) fuses get cuDNN's conv +
// genstats graph (runtime/cuda/cudnn_fused_conv.h: y as the convolution writes it, plus the per-channel sum and sum
// of squares of y into a (2, K) f32 buffer of the pair), and their batch norm finalizes from the sums instead of its
// statistics pass. train.conv_bn_apply: prologue then folds the batch norms conv_bn_apply_choose picks (among the
// pairs cuDNN planned) into their consumer: the batch norm writes its (2, C) f16 scale and shift, the consumer conv
// runs the prologue graph (b) and its weight gradients graph (c). A pair or fold cuDNN offers no engine for stays
// separate (counted, the first reason kept: conv_sources_.bn_stats_*, bn_apply_*).
// A planning error that makes the pair or fold run separately (NotSupported: no engine or an unsupported case;
// Invalid: cuDNN rejected the graph as built, e.g. BAD_PARAM for this geometry) rather than fail the backend.
namespace {
bool plan_refusal(const std::vector<Error>& errs) {
  const ErrCode c = errs.front().code;
  return c == ErrCode::NotSupported || c == ErrCode::Invalid;
}

size_t plan_workspace(const FusedConvPlan& p) { return fused_conv_workspace_bytes(p); }
size_t plan_workspace(const FusedWgradPlan& p) { return fused_wgrad_workspace_bytes(p); }
size_t plan_workspace(const FusedDgradPlan& p) { return fused_dgrad_workspace_bytes(p); }

// Where a refused plan is counted: the number, and the first refusal's "node: reason".
struct Refusals {
  int& count;
  std::string& reason;
  void add(const std::string& node, const std::string& why) const {
    ++count;
    if (reason.empty()) reason = node + ": " + why;
  }
};

// plans[key] planned once by make() (a Result of the plan), ws grown to its workspace; *have = whether it exists.
// A refusal (plan_refusal) leaves *have false and is counted for `node`; any other error is returned.
template <class Plan, class Make>
Status plan_once(std::map<std::string, Plan>& plans, const std::string& key, Make&& make, size_t& ws,
                 const Refusals& r, const std::string& node, bool* have) {
  *have = plans.count(key) > 0;
  if (*have) return ok_status();
  Result<Plan> plan = make();
  if (!plan.ok()) {
    if (!plan_refusal(plan.errors())) return plan.errors();
    r.add(node, plan.errors().front().message);
    return ok_status();
  }
  ws = std::max(ws, plan_workspace(plan.value()));
  plans.emplace(key, std::move(plan.value()));
  *have = true;
  return ok_status();
}
}  // namespace

Status CudaBackend::plan_conv_bn_stats() {
  conv_sources_.bn_stats_mode = to_string(effective_conv_bn_stats(c_.spec.train));  // "separate": not logged
  conv_sources_.bn_apply_mode = to_string(c_.spec.train.conv_bn_apply);
  const ConvBnStatsChoice choice = conv_bn_stats_choose(c_.graph, c_.spec);
  conv_sources_.bn_stats_separate = choice.separate;
  const Refusals stats_refused{conv_sources_.bn_stats_fallback, conv_sources_.bn_stats_fallback_reason};
  const Refusals apply_refused{conv_sources_.bn_apply_fallback, conv_sources_.bn_apply_fallback_reason};
  // cuDNN's plans for this mode: any engine (effective_conv_bn_stats needs train.deterministic: false).
  auto fused_desc = [&](const Conv2dGeom& g, bool prologue) {
    FusedConvDesc d;
    d.g = g;
    d.io = act_type();
    d.prologue = prologue;
    d.affine = GpuDType::F16;  // cuDNN 9.19 on sm_90 has no engine for f32 scale/bias (RESULTS.md run 25)
    d.plan.deterministic = false;
    return d;
  };
  ConvBnStatsChoice planned;  // the pairs cuDNN (or the few-channel kernel) serves
  for (const ConvBnStatsPair& pr : choice.fuse) {
    if (pr.route == ConvRoute::Fewc) {  // the forward's plan (plan_fewc) says whether its statistics kernel fits
      auto it = fewc_.find(conv_key(pr.g));
      if (it == fewc_.end())
        return Error{ErrCode::Internal, "cuda backend",
                     "no few-channel plan for " + c_.graph.programs[pr.program].nodes[pr.conv].name};
      if (!it->second.stats) {
        stats_refused.add(c_.graph.programs[pr.program].nodes[pr.conv].name,
                          "the few-channel kernel's statistics need more shared memory than the cap");
        continue;
      }
      conv_ws_bytes_ = std::max(conv_ws_bytes_, fewc_stats_workspace_bytes(it->second));
      planned.fuse.push_back(pr);
      ++conv_sources_.bn_stats_fused;
      continue;
    }
    if (pr.route == ConvRoute::Wgconv) {  // train.conv_wgconv fwd: the ring px kernel's statistics epilogue
      auto it = wgconv_.find("fwd " + conv_key(pr.g));
      if (it == wgconv_.end())
        return Error{ErrCode::Internal, "cuda backend",
                     "no wgconv plan for " + c_.graph.programs[pr.program].nodes[pr.conv].name};
      conv_ws_bytes_ = std::max(conv_ws_bytes_, wgconv_stats_workspace_bytes(it->second));
      planned.fuse.push_back(pr);
      ++conv_sources_.bn_stats_fused;
      continue;
    }
    bool have = false;
    Status st = plan_once(
        fused_conv_, conv_key(pr.g), [&] { return fused_conv_plan(ctx_.cudnn, fused_desc(pr.g, false)); },
        conv_ws_bytes_, stats_refused, c_.graph.programs[pr.program].nodes[pr.conv].name, &have);
    if (!st.ok()) return st;
    if (!have) continue;
    planned.fuse.push_back(pr);
    ++conv_sources_.bn_stats_fused;
  }
  std::vector<ConvBnApplyFold> folds;
  for (const ConvBnApplyFold& f : conv_bn_apply_choose(c_.graph, c_.spec, planned)) {
    const Program& p = c_.graph.programs[f.program];
    const Node& conv = p.nodes[f.conv];
    const Conv2dGeom g = conv2d_geom_of(c_.graph, conv, conv.in[0], conv.in[1]);
    const std::string key = conv_key(g);
    bool have = false;
    Status st = plan_once(
        fused_conv_, "prologue " + key, [&] { return fused_conv_plan(ctx_.cudnn, fused_desc(g, true)); },
        conv_ws_bytes_, apply_refused, conv.name, &have);
    if (st.ok() && have && !f.wgrads.empty()) {
      FusedWgradDesc d;
      d.g = g;
      d.io = act_type();
      d.plan.deterministic = false;
      st = plan_once(
          fused_wgrad_, key, [&] { return fused_wgrad_plan(ctx_.cudnn, d); }, conv_ws_bytes_, apply_refused,
          p.nodes[f.wgrads.front()].name, &have);
    }
    if (!st.ok()) return st;
    if (!have) continue;
    folds.push_back(f);
    ++conv_sources_.bn_apply_folded;
  }
  // One buffer: every pair's sums, (2, K) f32 each, then every fold's scale and shift, (2, C) f16 each, each at a
  // 256-byte boundary.
  std::vector<size_t> offset;
  size_t bytes = 0;
  for (const ConvBnStatsPair& pr : planned.fuse) {
    offset.push_back(bytes);
    bytes += static_cast<size_t>(align_up(pr.g.k * 8));
  }
  for (const ConvBnApplyFold& f : folds) {
    offset.push_back(bytes);
    bytes += static_cast<size_t>(align_up(c_.graph.values[f.y].shape.dims.back() * 4));
  }
  if (bytes == 0) return ok_status();
  TRCTL_CUDA_TRY(cudaMalloc(&conv_bn_sums_mem_, bytes));
  char* base = reinterpret_cast<char*>(conv_bn_sums_mem_);
  for (size_t i = 0; i < planned.fuse.size(); ++i)
    conv_bn_sums_[planned.fuse[i].y] = reinterpret_cast<float*>(base + offset[i]);
  for (size_t i = 0; i < folds.size(); ++i)
    bn_fold_[folds[i].y] =
        BnFold{folds[i].x, base + offset[planned.fuse.size() + i], c_.graph.values[folds[i].y].shape.dims.back()};
  return ok_status();
}

// train.conv_bn_backward fused or auto (effective_conv_bn_backward fused): graph (d) for every pair
// conv_bn_bwd_choose picks (a few-channel fold's batch norm too: its weight gradient's prologue then reads the masked
// g), or, for a data gradient on wgconv, the ring px kernel's batch-norm backward epilogue; a pair cuDNN has no
// engine for runs separately (counted, the first reason kept). Under deterministic: true or bf16 only the wgconv
// pairs (wgconv_bn_backward_pairs): the mode reads "wgconv".
Status CudaBackend::plan_conv_bn_bwd() {
  conv_sources_.bn_bwd_mode = conv_bn_backward_pairs_name(conv_bn_backward_pairs(c_.spec.train));
  std::vector<FewcBnGradFold> fewc;
  for (const auto& [dx, f] : fewc_bn_grad_) fewc.push_back(f);
  const ConvBnBwdChoice choice = conv_bn_bwd_choose(c_.graph, c_.plan, c_.spec, fewc);
  conv_sources_.bn_bwd_separate = choice.separate;
  const Refusals refused{conv_sources_.bn_bwd_fallback, conv_sources_.bn_bwd_fallback_reason};
  int64_t max_c = 0;
  for (const ConvBnBwdPair& pr : choice.fuse) {
    const Node& d = c_.graph.programs[pr.program].nodes[pr.dgrad];
    if (pr.wgconv) {  // the ring px kernel's own batch-norm backward epilogue: its partials after the flipped filters
      auto it = wgconv_.find(conv_key(pr.g));
      if (it == wgconv_.end())
        return Error{ErrCode::Internal, "cuda backend", "no wgconv data-gradient plan for " + d.name};
      conv_ws_bytes_ =
          std::max(conv_ws_bytes_, dgrad_fwd_filter_bytes(pr.g) + wgconv_stats_workspace_bytes(it->second));
      conv_bn_bwd_.emplace(d.out[0], pr);
      ++conv_sources_.bn_bwd_fused;
      continue;
    }
    FusedDgradDesc desc;
    desc.g = pr.g;
    desc.io = act_type();
    desc.plan.deterministic = false;
    bool have = false;
    Status st = plan_once(
        fused_dgrad_, conv_key(pr.g), [&] { return fused_dgrad_plan(ctx_.cudnn, desc); }, conv_ws_bytes_, refused,
        d.name, &have);
    if (!st.ok()) return st;
    if (!have) continue;
    conv_bn_bwd_.emplace(d.out[0], pr);
    max_c = std::max(max_c, pr.g.c);
    ++conv_sources_.bn_bwd_fused;
  }
  if (max_c > 0) TRCTL_CUDA_TRY(cudaMalloc(&bn_bwd_eq_, static_cast<size_t>(3 * max_c) * sizeof(float)));
  return ok_status();
}

BnSums CudaBackend::conv_bn_sums(ValueId conv_out) const {
  auto it = conv_bn_sums_.find(conv_out);
  if (it == conv_bn_sums_.end()) return {};
  const int64_t k = c_.graph.values[conv_out].shape.dims.back();  // (N, P, Q, K)
  return BnSums{it->second, it->second + k};
}

const CudnnConvPlan* CudaBackend::conv_plan(const Node& n) const {
  auto it = conv_.find(conv_key(planned_geom(n)));
  return it == conv_.end() ? nullptr : &it->second;
}

// An AMP conv weight gradient is written (cast from the io dtype, or straight in fp32) into the parameter's own
// gradient slot: a weight used by more than one conv (its gradient a sum of contributions) is not supported yet.
Status CudaBackend::lowp_wgrad_supported(const Node& n) const {
  if (c_.plan.values[n.out[0]].region == Region::Grads) return ok_status();
  return Error{ErrCode::NotSupported, "cuda backend",
               "a convolution weight used more than once (" + n.name + ") is not supported under AMP yet"};
}

Status CudaBackend::lower_conv_node(const Node& n, std::vector<Launch>& out) {
  if (fewc_node(n)) return lower_fewc_conv_node(n, out);
  if (wgconv_node(n)) return lower_wgconv_conv_node(n, out);
  if (s2d_node(n)) return lower_s2d_conv_node(n, out);
  if (im2col_node(n)) return lower_im2col_conv_node(n, out);
  const CudnnConvPlan* plan = conv_plan(n);
  if (!plan) return Error{ErrCode::Internal, "cuda backend", "no cuDNN plan for " + n.name};
  const cudaStream_t s = ctx_.stream;
  const cudnnHandle_t h = ctx_.cudnn;
  void* ws = conv_ws_;
  const size_t wsb = conv_ws_bytes_;
  const GpuDType act = act_type();
  const auto [xv, wv] = conv_operands(n);
  const Conv2dGeom real = conv2d_geom_of(c_.graph, n, xv, wv);
  const int64_t c = real.c, cp = plan->desc.g.c;  // real and planned (padded) input channels
  const int64_t xrows = real.n * real.h * real.w, wrows = real.k * real.r * real.s;
  const bool padded = cp != c;
  // (N,H,W,C) image / (K,R,S,C) filter -> the padded scratch copy, under AMP in the activation dtype.
  auto pad_x = [&](const void* x) -> const void* {
    if (!padded) return x;
    void* xp = pad_x_;
    out.push_back([=] { return channel_copy_cuda(s, x, act, c, xp, act, cp, xrows); });
    return xp;
  };
  auto pad_w = [&](const void* w) -> const void* {
    if (!padded) return w;
    void* wp = pad_w_;
    out.push_back([=] { return channel_copy_cuda(s, w, act, c, wp, act, cp, wrows); });
    return wp;
  };
  Launch conv;
  if (n.op == OpKind::Conv2d && conv_bn_sums_.count(n.out[0])) {  // train.conv_bn_stats: conv + genstats
    // train.conv_bn_apply: prologue: the previous batch norm's apply + ReLU runs on its input while loading it.
    auto fold = bn_fold_.find(n.in[0]);
    const bool pro = fold != bn_fold_.end();
    auto it = fused_conv_.find((pro ? "prologue " : "") + conv_key(real));
    if (it == fused_conv_.end()) return Error{ErrCode::Internal, "cuda backend", "no fused conv plan for " + n.name};
    const FusedConvPlan* fp = &it->second;
    const BnSums sums = conv_bn_sums(n.out[0]);
    FusedConvArgs a;
    a.x = pro ? at(fold->second.x) : at(n.in[0]);
    if (pro) {
      a.scale = fold->second.scale();
      a.bias = fold->second.shift();
    }
    a.w = weight_ptr(n.in[1]);
    a.y = at(n.out[0]);
    a.sum = const_cast<float*>(sums.sum);
    a.sqsum = const_cast<float*>(sums.sqsum);
    conv = [=] { return fused_conv_run(h, s, *fp, a, ws, wsb); };
    out.push_back(conv);
  } else if (n.op == OpKind::Conv2d) {
    const void* x = pad_x(at(n.in[0]));
    const void* w = pad_w(weight_ptr(n.in[1]));
    // The bias from the same copy as W; none (no bias pass over Y) when pass_fold_conv_bias moved it into the
    // batch norm that reads Y.
    const void* b = n.in.size() == 3 ? weight_ptr(n.in[2]) : nullptr;
    void* y = at(n.out[0]);
    conv = [=] { return cudnn_conv_fwd(h, s, *plan, x, w, b, y, ws, wsb); };
    out.push_back(conv);
  } else if (auto pair = conv_bn_bwd_.find(n.out[0]); n.op == OpKind::Conv2dGradInput && pair != conv_bn_bwd_.end()) {
    // train.conv_bn_backward: fused: graph (d) writes the batch norm's masked g in dX's place and its dgamma, dbeta.
    auto it = fused_dgrad_.find(conv_key(real));
    if (it == fused_dgrad_.end() || padded)
      return Error{ErrCode::Internal, "cuda backend", "no fused dgrad_drelu_dbn plan for " + n.name};
    const FusedDgradPlan* fp = &it->second;
    const Node& bn = c_.graph.programs[pair->second.program].nodes[pair->second.bn_grad];
    auto f32 = [&](ValueId v) { return reinterpret_cast<float*>(at(v)); };
    FusedDgradArgs a;
    a.dy = at(n.in[0]);
    a.w = weight_ptr(n.in[1]);
    a.x = at(bn.in[1]);
    a.gamma = f32(bn.in[2]);
    a.mean = f32(bn.in[3]);
    a.invstd = f32(bn.in[4]);
    a.beta = f32(pair->second.beta);
    a.g = at(n.out[0]);
    a.dgamma = f32(bn.out[1]);
    a.dbeta = f32(bn.out[2]);
    a.eq_dy = bn_bwd_eq_;
    a.eq_x = bn_bwd_eq_ + real.c;
    a.eq_bias = bn_bwd_eq_ + 2 * real.c;
    conv = [=] { return fused_dgrad_run(h, s, *fp, a, ws, wsb); };
    out.push_back(conv);
  } else if (n.op == OpKind::Conv2dGradInput) {
    if (n.attrs.accumulate)  // pass_fuse_grad_accumulate fuses only pointwise ones, which are GEMMs
      return Error{ErrCode::Internal, "cuda backend", "a cuDNN dgrad with a fused gradient sum: " + n.name};
    if (auto f = dgrad_fwd_.find(conv_key(real)); f != dgrad_fwd_.end() && !padded)  // train.conv_dgrad_fwd
      return lower_dgrad_fwd_node(n, f->second, out);
    const void* dy = at(n.in[0]);
    const void* w = pad_w(weight_ptr(n.in[1]));
    void* dx = at(n.out[0]);
    void* dxp = padded ? pad_dx_ : dx;
    conv = [=] { return cudnn_conv_dgrad(h, s, *plan, dy, w, dxp, ws, wsb); };
    out.push_back(conv);
    if (padded) out.push_back([=] { return channel_copy_cuda(s, dxp, act, cp, dx, act, c, xrows); });
  } else if (auto fold = bn_fold_.find(n.in[1]); fold != bn_fold_.end()) {
    // train.conv_bn_apply: prologue: dW on relu(x * scale + shift) of the batch norm's input x (graph (c)), in the
    // io dtype, then cast into the fp32 gradient as below (never padded: a fold's conv has C % 8 == 0).
    if (Status st = lowp_wgrad_supported(n); !st.ok()) return st;
    auto it = fused_wgrad_.find(conv_key(real));
    if (it == fused_wgrad_.end() || padded || !lowp())
      return Error{ErrCode::Internal, "cuda backend", "no fused bn_relu_wgrad plan for " + n.name};
    const FusedWgradPlan* fp = &it->second;
    FusedWgradArgs a;
    a.dy = at(n.in[0]);
    a.x = at(fold->second.x);
    a.scale = fold->second.scale();
    a.bias = fold->second.shift();
    a.dw = lowp_dw_;
    void* dw_f32 = at(n.out[0]);
    void* dw = lowp_dw_;
    conv = [=] { return fused_wgrad_run(h, s, *fp, a, ws, wsb); };
    out.push_back(conv);
    out.push_back([=] { return channel_copy_cuda(s, dw, act, c, dw_f32, GpuDType::F32, c, wrows); });
  } else {
    // dW in the io dtype (cuDNN's filter type); under AMP cast (and sliced, when padded) into the fp32 gradient.
    if (lowp())
      if (Status st = lowp_wgrad_supported(n); !st.ok()) return st;
    conv = cudnn_wgrad_launches(n, *plan, pad_x(at(n.in[1])), cp, WgradScratch{s, ws, wsb, lowp_dw_}, out);
  }
  warm_.push_back(conv);
  return ok_status();
}

// The forward (and with train.conv_im2col: on the weight gradient) of a few-input-channel conv under AMP (an RGB
// stem: im2col_conv_eligible) runs as im2col + cuBLASLt GEMM (runtime/cuda/im2col_conv.h): cuDNN ran it 4-12x
// slower than its roofline even with C padded to 8; the im2col wgrad measured slower than cuDNN's (docs/cnn.md).
// The data gradient, when a program needs it, stays the padded cuDNN dgrad.
bool CudaBackend::im2col_node(const Node& n) const { return conv_route_of(n) == ConvRoute::Im2col; }

std::string CudaBackend::im2col_key(const Node& n) const {
  const auto [x, w] = conv_operands(n);
  const std::string g = conv_key(conv2d_geom_of(c_.graph, n, x, w));
  return n.op == OpKind::Conv2dGradWeight ? "wgrad " + g : n.in.size() == 3 ? "fwd+bias " + g : "fwd " + g;
}

// One plan per direction, geometry (and bias); its cols chunks and the padded filter share the cuDNN workspace
// (the step's launches run one after another), which grows to the largest im2col workspace: at most
// kIm2colMaxColsBytes (64 MiB) of cols plus K*Kc fp32, counted in memory_report's workspaces.
Status CudaBackend::plan_im2col(const Node& n) {
  const std::string key = im2col_key(n);
  if (im2col_.count(key)) return ok_status();
  const auto [x, w] = conv_operands(n);
  Im2colConvDesc d;
  d.g = conv2d_geom_of(c_.graph, n, x, w);
  d.io = act_type();
  d.dir = n.op == OpKind::Conv2dGradWeight ? Im2colDir::Wgrad : Im2colDir::Fwd;
  d.bias = n.op == OpKind::Conv2d && n.in.size() == 3;
  Result<Im2colConvPlan> plan = im2col_conv_plan(ctx_, d);
  if (!plan.ok()) return plan.errors();
  conv_ws_bytes_ = std::max(conv_ws_bytes_, im2col_conv_workspace_bytes(plan.value()));
  im2col_.emplace(key, std::move(plan.value()));
  return ok_status();
}

Status CudaBackend::lower_im2col_conv_node(const Node& n, std::vector<Launch>& out) {
  auto it = im2col_.find(im2col_key(n));
  if (it == im2col_.end()) return Error{ErrCode::Internal, "cuda backend", "no im2col plan for " + n.name};
  Im2colConvPlan* plan = &it->second;
  void* ws = conv_ws_;
  const size_t wsb = conv_ws_bytes_;
  if (n.op == OpKind::Conv2d) {  // X, W [, b] -> Y; W and b from the AMP weight copy
    const void* x = at(n.in[0]);
    const void* w = weight_ptr(n.in[1]);
    const void* b = n.in.size() == 3 ? weight_ptr(n.in[2]) : nullptr;
    void* y = at(n.out[0]);
    out.push_back([this, plan, x, w, b, y, ws, wsb] { return im2col_conv_fwd(ctx_, *plan, x, w, b, y, ws, wsb); });
    return ok_status();
  }
  // dY, X -> dW: straight into the fp32 gradient (the cuDNN path's destination after its cast).
  if (Status st = lowp_wgrad_supported(n); !st.ok()) return st;
  const void* dy = at(n.in[0]);
  const void* x = at(n.in[1]);
  float* dw = reinterpret_cast<float*>(at(n.out[0]));
  out.push_back([this, plan, dy, x, dw, ws, wsb] { return im2col_conv_wgrad(ctx_, *plan, dy, x, dw, ws, wsb); });
  return ok_status();
}

// The forward (and with train.conv_s2d: on the weight gradient) of a stride-2 few-channel conv under AMP (the
// ResNet stem: s2d_conv_eligible) runs as space-to-depth + a stride-1 cuDNN conv over Cz = 16 channels
// (runtime/cuda/s2d_conv.h), planned in plan_cnn like every cuDNN conv (its own key: the stride-1 geometry, so it
// is autotuned and counted in conv_algorithms). Takes precedence over im2col. The data gradient, when a program
// needs it, stays the padded cuDNN dgrad of the original geometry.
bool CudaBackend::s2d_node(const Node& n) const { return conv_route_of(n) == ConvRoute::S2d; }

Status CudaBackend::lower_s2d_conv_node(const Node& n, std::vector<Launch>& out) {
  const CudnnConvPlan* plan = conv_plan(n);
  if (!plan || !s2d_z_ || !s2d_w_ || (n.op == OpKind::Conv2dGradWeight && !lowp_dw_))
    return Error{ErrCode::Internal, "cuda backend", "no space-to-depth plan or scratch for " + n.name};
  const cudaStream_t s = ctx_.stream;
  const cudnnHandle_t h = ctx_.cudnn;
  void* ws = conv_ws_;
  const size_t wsb = conv_ws_bytes_;
  const auto [xv, wv] = conv_operands(n);
  const Conv2dGeom g = conv2d_geom_of(c_.graph, n, xv, wv);
  void* z = s2d_z_;
  Launch conv;
  if (n.op == OpKind::Conv2d) {  // X, W [, b] -> Y; W and b from the AMP weight copy, w2 into its scratch
    const void* x = at(n.in[0]);
    const void* w = weight_ptr(n.in[1]);
    const void* b = n.in.size() == 3 ? weight_ptr(n.in[2]) : nullptr;
    void* y = at(n.out[0]);
    void* w2 = s2d_w_;
    conv = [=] { return s2d_conv_fwd(h, s, g, *plan, x, w, b, y, z, w2, ws, wsb); };
  } else {  // dY, X -> dW: z recomputed, dw2 (io dtype) in lowp_dw_, regathered into the fp32 gradient
    if (Status st = lowp_wgrad_supported(n); !st.ok()) return st;
    const void* dy = at(n.in[0]);
    const void* x = at(n.in[1]);
    float* dw = reinterpret_cast<float*>(at(n.out[0]));
    void* dw2 = lowp_dw_;
    conv = [=] { return s2d_conv_wgrad(h, s, g, *plan, dy, x, dw, z, dw2, ws, wsb); };
  }
  out.push_back(conv);
  warm_.push_back(conv);
  return ok_status();
}

// The forward of a few-channel conv under AMP (fewc_conv_eligible; train.conv_fewc: on, the default, or forward)
// and with conv_fewc: on or unfolded its weight gradient where fewc_wgrad_eligible (K = 64): trctl's tensor-core
// implicit GEMM (runtime/ops/conv2d/fewc_cuda.h). cuDNN ran ResNet-50's 7x7/2 stem in 0.75 ms through
// space-to-depth, its weight gradient in 0.58 ms, and VGG's 3x3/1 C=3 conv in 1.57 ms through im2col (runs 30, 38,
// 44); fewc 0.44, 0.38 and 0.75 ms (run 45); VGG's weight gradient (stride 1, cuDNN 1.17 ms in run 45) runs fewc
// since 2026-12-05.
// The data gradient keeps its route.
bool CudaBackend::fewc_node(const Node& n) const { return conv_route_of(n) == ConvRoute::Fewc; }

Status CudaBackend::plan_fewc(const Node& n) {
  const auto [x, w] = conv_operands(n);
  const Conv2dGeom g = conv2d_geom_of(c_.graph, n, x, w);
  const std::string key = conv_key(g);
  if (n.op == OpKind::Conv2dGradWeight) {  // its CTAs' partials live in conv_ws_
    const bool bn = fewc_bn_grad_.count(n.in[0]) > 0;  // dY is a folded batch norm's dx: the prologue's kernel
    const std::string wkey = (bn ? "bn " : "") + key;
    if (fewc_wgrad_.count(wkey)) return ok_status();
    Result<FewcWgradPlan> plan = fewc_wgrad_plan(g, act_type(), bn);
    if (!plan.ok()) return plan.errors();
    conv_ws_bytes_ = std::max(conv_ws_bytes_, fewc_wgrad_workspace_bytes(plan.value()));
    fewc_wgrad_.emplace(wkey, plan.value());
    return ok_status();
  }
  if (fewc_.count(key)) return ok_status();
  Result<FewcConvPlan> plan = fewc_conv_plan(g, act_type());
  if (!plan.ok()) return plan.errors();
  fewc_.emplace(key, plan.value());
  return ok_status();
}

Status CudaBackend::lower_fewc_conv_node(const Node& n, std::vector<Launch>& out) {
  const auto [xv, wv] = conv_operands(n);
  const std::string key = conv_key(conv2d_geom_of(c_.graph, n, xv, wv));
  const cudaStream_t s = ctx_.stream;
  if (n.op == OpKind::Conv2dGradWeight) {  // dY, X -> dW straight into the fp32 gradient
    auto fold = fewc_bn_grad_.find(n.in[0]);  // dY: a batch norm's dx this kernel computes from its g and x
    const bool bn = fold != fewc_bn_grad_.end();
    auto wit = fewc_wgrad_.find((bn ? "bn " : "") + key);
    if (wit == fewc_wgrad_.end())
      return Error{ErrCode::Internal, "cuda backend", "no few-channel weight-gradient plan for " + n.name};
    if (Status st = lowp_wgrad_supported(n); !st.ok()) return st;
    const FewcWgradPlan* plan = &wit->second;
    const void* dy = at(n.in[0]);
    const void* x = at(n.in[1]);
    float* dw = reinterpret_cast<float*>(at(n.out[0]));
    void* ws = conv_ws_;
    const size_t wsb = conv_ws_bytes_;
    if (bn) {  // the batch norm's backward node (dY, X, gamma, save_mean, save_invstd -> dX, dgamma, dbeta)
      const FewcBnGradFold& f = fold->second;
      const Node& bnn = c_.graph.programs[f.program].nodes[f.bn_grad];
      auto f32 = [&](ValueId v) { return reinterpret_cast<const float*>(at(v)); };
      FewcBnGradIn in;
      in.g = at(f.g);
      in.x = at(f.x);
      in.gamma = f32(bnn.in[2]);
      in.mean = f32(bnn.in[3]);
      in.invstd = f32(bnn.in[4]);
      in.dgamma = f32(bnn.out[1]);
      in.dbeta = f32(bnn.out[2]);
      // train.conv_bn_backward fused (conv_bn_bwd_choose's fewc_dx): g is the data gradient's masked g and dgamma,
      // dbeta its reductions; the prologue applies no mask again (batchnorm_bwd_apply_cuda's arithmetic).
      const bool masked = conv_bn_bwd_.count(f.g) > 0;
      in.relu_beta = f.relu_beta != kNoValue && !masked ? f32(f.relu_beta) : nullptr;
      out.push_back([=] { return fewc_conv_wgrad_cuda(s, *plan, dy, x, dw, ws, wsb, &in); });
      return ok_status();
    }
    out.push_back([=] { return fewc_conv_wgrad_cuda(s, *plan, dy, x, dw, ws, wsb); });
    return ok_status();
  }
  auto it = fewc_.find(key);
  if (it == fewc_.end()) return Error{ErrCode::Internal, "cuda backend", "no few-channel conv plan for " + n.name};
  const FewcConvPlan* plan = &it->second;
  const void* x = at(n.in[0]);  // X, W [, b] -> Y; W and b from the AMP weight copy
  const void* w = weight_ptr(n.in[1]);
  const void* b = n.in.size() == 3 ? weight_ptr(n.in[2]) : nullptr;
  void* y = at(n.out[0]);
  const BnSums sums = conv_bn_sums(n.out[0]);  // train.conv_bn_stats: the batch norm's sums from the epilogue
  if (sums.sum) {
    FewcStatsOut so;
    so.sum = const_cast<float*>(sums.sum);
    so.sqsum = const_cast<float*>(sums.sqsum);
    so.ws = conv_ws_;
    so.ws_bytes = conv_ws_bytes_;
    out.push_back([=] { return fewc_conv_fwd_cuda(s, *plan, x, w, b, y, &so); });
    return ok_status();
  }
  out.push_back([=] { return fewc_conv_fwd_cuda(s, *plan, x, w, b, y); });
  return ok_status();
}

// A batch-norm backward writes dgamma and dbeta straight into the parameters' gradient slots (or, for a frozen
// parameter, into an unused fp32 activation): a gamma or beta shared by several batch norms is not supported yet.
Status CudaBackend::bn_param_grads_supported(const Node& n) const {
  for (ValueId v : {n.out[1], n.out[2]})
    if (c_.plan.values[v].region != Region::Grads && !c_.graph.values[v].full_precision)
      return Error{ErrCode::NotSupported, "cuda backend",
                   "a batch-norm parameter used more than once (" + n.name + ") is not supported on CUDA yet"};
  return ok_status();
}

Status CudaBackend::lower_batch_norm_node(const Node& n, std::vector<Launch>& out) {
  if (n.attrs.pool) return lower_batch_norm_pool_node(n, out);  // pass_fuse_bn_pool
  const cudaStream_t s = ctx_.stream;
  const GpuDType act = act_type();
  auto f32 = [&](ValueId v) { return reinterpret_cast<float*>(at(v)); };
  const bool grad = n.op == OpKind::BatchNormGrad;
  const int64_t c = c_.graph.values[n.in[grad ? 2 : 1]].shape.numel();
  const Shape& xs = c_.graph.values[n.in[grad ? 1 : 0]].shape;  // (N,H,W,C) or (N,C)
  const int64_t rows = xs.numel() / c;
  const float eps = n.attrs.eps, momentum = n.attrs.momentum;
  const bool relu = n.attrs.relu;
  void* ws = bn_ws_;
  const size_t wsb = bn_ws_bytes_;
  const void* x = at(n.in[grad ? 1 : 0]);
  const void* res = !grad && n.attrs.residual ? at(n.in[5]) : nullptr;  // fused residual add (pass_fuse_bn_add)
  // A folded conv bias (pass_fold_conv_bias), the last input: the fp32 master copy.
  const float* prebias = !grad && n.attrs.prebias ? f32(n.in.back()) : nullptr;
  if (n.op == OpKind::BatchNorm) {  // X, gamma, beta, running mean, running var [, R] [, b] -> Y, save mean/invstd
    const float *gamma = f32(n.in[1]), *beta = f32(n.in[2]);
    float *rm = f32(n.in[3]), *rv = f32(n.in[4]), *sm = f32(n.out[1]), *si = f32(n.out[2]);
    void* y = at(n.out[0]);
    const BnSums sums = conv_bn_sums(n.in[0]);  // train.conv_bn_stats: from the conv's genstats
    if (wg_fold_.count(n.out[0])) {  // train.conv_wgconv fwd: the consumer applies and writes y; statistics only
      out.push_back([=] {
        return batchnorm_fwd_train_consts_cuda(s, x, act, gamma, beta, sm, si, rm, rv, rows, c, eps, momentum, ws, wsb,
                                               prebias, sums, nullptr, GpuDType::F32);
      });
      return ok_status();
    }
    if (auto fold = bn_fold_.find(n.out[0]); fold != bn_fold_.end()) {  // train.conv_bn_apply: prologue
      void* consts = fold->second.consts;  // the consumer conv applies relu(x * scale + shift); y is not written
      out.push_back([=] {
        return batchnorm_fwd_train_consts_cuda(s, x, act, gamma, beta, sm, si, rm, rv, rows, c, eps, momentum, ws, wsb,
                                               prebias, sums, consts, GpuDType::F16);
      });
      return ok_status();
    }
    out.push_back([=] {
      return batchnorm_fwd_train_cuda(s, x, act, gamma, beta, y, sm, si, rm, rv, rows, c, eps, momentum, relu, ws, wsb,
                                      res, prebias, sums);
    });
  } else if (n.op == OpKind::BatchNormEval) {
    const float *gamma = f32(n.in[1]), *beta = f32(n.in[2]), *rm = f32(n.in[3]), *rv = f32(n.in[4]);
    void* y = at(n.out[0]);
    out.push_back(
        [=] { return batchnorm_fwd_eval_cuda(s, x, act, gamma, beta, rm, rv, y, rows, c, eps, relu, res, prebias); });
  } else {  // dY, X, gamma, save_mean, save_invstd [, Y] -> dX, dgamma, dbeta [, G]
    if (Status st = bn_param_grads_supported(n); !st.ok()) return st;
    const void* dy = at(n.in[0]);
    const float *gamma = f32(n.in[2]), *sm = f32(n.in[3]), *si = f32(n.in[4]);
    const void* y = relu ? at(n.in[5]) : nullptr;
    // dx nullptr: a few-channel weight gradient computes it (fewc_bn_grad_choose): dgamma and dbeta only here.
    void* dx = fewc_bn_grad_.count(n.out[0]) ? nullptr : at(n.out[0]);
    float *dg = f32(n.out[1]), *db = f32(n.out[2]);
    if (conv_bn_bwd_.count(n.in[0])) {  // train.conv_bn_backward: the data gradient wrote the masked g, dgamma, dbeta
      if (!dx) return ok_status();  // and the few-channel weight gradient computes dx from it: nothing left here
      const float* gm = f32(n.in[2]);
      const float *mean = f32(n.in[3]), *inv = f32(n.in[4]);
      void* dxo = at(n.out[0]);
      out.push_back([=] { return batchnorm_bwd_apply_cuda(s, dy, x, act, gm, mean, inv, dg, db, dxo, rows, c); });
      return ok_status();
    }
    // A fused ReLU without a residual: the mask is recomputed from x with the forward's beta instead of reading Y
    // (bitwise the same mask; two passes fewer). The forward is the node that produced save_mean.
    const ValueId beta = relu ? bn_grad_relu_beta(c_.graph, n) : kNoValue;
    const float* relu_beta = beta != kNoValue ? f32(beta) : nullptr;
    // A fused residual ReLU's backward (pass_fuse_bn_relu_grad): the masked dY, the residual's gradient, written too.
    void* g = n.attrs.residual ? at(n.out[3]) : nullptr;
    if (g && relu_beta)
      return Error{ErrCode::Internal, "cuda backend",
                   "a residual batch-norm backward with a recomputed mask: " + n.name};
    out.push_back([=] {
      return batchnorm_bwd_cuda(s, dy, x, y, act, gamma, sm, si, dx, dg, db, rows, c, ws, wsb, relu_beta, g);
    });
  }
  return ok_status();
}

// The x elements at the argmax of every fused batch norm + ReLU + max pool whose backward exists and whose windows
// tile X (VGG's 2x2/2 pools): one buffer of the pooled shape each, in one allocation (VGG16-BN at batch 256: 0.78
// GB). The backward's first pass then sums over the pooled pixels (batchnorm_bwd_pool_cuda's x_at_max).
Status CudaBackend::plan_pool_xa() {
  std::vector<std::pair<ValueId, size_t>> want;  // X, its buffer's offset in the allocation
  size_t bytes = 0;
  for (const Program& p : c_.graph.programs)
    for (const Node& n : p.nodes) {
      if (n.op != OpKind::BatchNormGrad || !n.attrs.pool || n.in.size() < 2) continue;
      const ValueId x = n.in[1];
      const Pool2dGeom pg = pool2d_geom_of(c_.graph, n, x);
      if (!pool2d_windows_tile(pg) || pool_xa_.count(x)) continue;
      pool_xa_[x] = nullptr;
      want.emplace_back(x, bytes);
      bytes += static_cast<size_t>(
          align_up(pg.n * pg.p * pg.q * pg.c * static_cast<int64_t>(gpu_dtype_size(act_type()))));
    }
  if (bytes == 0) return ok_status();
  TRCTL_CUDA_TRY(cudaMalloc(&pool_xa_mem_, bytes));
  pool_xa_bytes_ = bytes;
  for (const auto& [x, offset] : want) pool_xa_[x] = static_cast<char*>(pool_xa_mem_) + offset;
  return ok_status();
}

// A batch norm + ReLU with its max pool fused (attrs.pool, pass_fuse_bn_pool: kernel, stride, pad): the forward
// writes the pooled Y (and the argmax), the backward reads the pooled dY and the argmax; the full-resolution Y and dY
// are never stored. Over tiling windows with a backward (pool_xa_), the forward also writes the x elements at the
// argmax and the backward's statistics read them instead of X.
Status CudaBackend::lower_batch_norm_pool_node(const Node& n, std::vector<Launch>& out) {
  const cudaStream_t s = ctx_.stream;
  const GpuDType act = act_type();
  auto f32 = [&](ValueId v) { return reinterpret_cast<float*>(at(v)); };
  auto u8 = [&](ValueId v) { return reinterpret_cast<uint8_t*>(at(v)); };
  const bool grad = n.op == OpKind::BatchNormGrad;
  const Shape& xs = c_.graph.values[n.in[grad ? 1 : 0]].shape;  // (N,H,W,C)
  if (xs.dims.size() != 4 || !n.attrs.relu)
    return Error{ErrCode::Internal, "cuda backend", "a fused max pool over a batch norm without ReLU or NHWC input: " +
                                                        n.name};
  const Pool2dGeom pg = pool2d_geom_of(c_.graph, n, n.in[grad ? 1 : 0]);  // attrs.kernel/stride/pad over X
  const float eps = n.attrs.eps, momentum = n.attrs.momentum;
  void* ws = bn_ws_;
  const size_t wsb = bn_ws_bytes_;
  const void* x = at(n.in[grad ? 1 : 0]);
  const float* prebias = !grad && n.attrs.prebias ? f32(n.in.back()) : nullptr;
  if (n.op == OpKind::BatchNorm) {  // X, gamma, beta, rm, rv [, b] -> pooled Y, save mean/invstd, argmax
    const float *gamma = f32(n.in[1]), *beta = f32(n.in[2]);
    float *rm = f32(n.in[3]), *rv = f32(n.in[4]), *sm = f32(n.out[1]), *si = f32(n.out[2]);
    void* y = at(n.out[0]);
    uint8_t* idx = u8(n.out[3]);
    const BnSums sums = conv_bn_sums(n.in[0]);  // train.conv_bn_stats: from the conv's genstats
    const auto xa_it = pool_xa_.find(n.in[0]);
    void* xa = xa_it == pool_xa_.end() ? nullptr : xa_it->second;
    out.push_back([=] {
      return batchnorm_fwd_train_pool_cuda(s, x, act, gamma, beta, y, idx, sm, si, rm, rv, pg, eps, momentum, true, ws,
                                           wsb, prebias, sums, xa);
    });
  } else if (n.op == OpKind::BatchNormEval) {  // X, gamma, beta, rm, rv [, b] -> pooled Y
    const float *gamma = f32(n.in[1]), *beta = f32(n.in[2]), *rm = f32(n.in[3]), *rv = f32(n.in[4]);
    void* y = at(n.out[0]);
    out.push_back([=] {
      return batchnorm_fwd_eval_pool_cuda(s, x, act, gamma, beta, rm, rv, y, pg, eps, true, prebias);
    });
  } else {  // pooled dY, X, gamma, save_mean, save_invstd, beta, argmax -> dX, dgamma, dbeta
    if (Status st = bn_param_grads_supported(n); !st.ok()) return st;
    const void* dy = at(n.in[0]);
    const float *gamma = f32(n.in[2]), *sm = f32(n.in[3]), *si = f32(n.in[4]), *beta = f32(n.in[5]);
    const uint8_t* idx = u8(n.in[6]);
    void* dx = at(n.out[0]);
    float *dg = f32(n.out[1]), *db = f32(n.out[2]);
    const auto xa_it = pool_xa_.find(n.in[1]);
    const void* xa = xa_it == pool_xa_.end() ? nullptr : xa_it->second;
    out.push_back([=] {
      return batchnorm_bwd_pool_cuda(s, dy, idx, x, act, gamma, beta, sm, si, dx, dg, db, pg, ws, wsb,
                                     BnPoolGather::kAuto, xa);
    });
  }
  return ok_status();
}

Status CudaBackend::lower_cnn_node(int program, size_t i, std::vector<Launch>& out) {
  const Node& n = c_.graph.programs[program].nodes[i];
  const cudaStream_t s = ctx_.stream;
  const GpuDType act = act_type();
  const Graph& g = c_.graph;
  switch (n.op) {
    case OpKind::Conv2d:
    case OpKind::Conv2dGradInput:
    case OpKind::Conv2dGradWeight:
      return lower_conv_node(n, out);
    case OpKind::BatchNorm:
    case OpKind::BatchNormEval:
    case OpKind::BatchNormGrad:
      return lower_batch_norm_node(n, out);
    case OpKind::MaxPool:
    case OpKind::AvgPool: {
      const Pool2dGeom pg = pool2d_geom_of(g, n, n.in[0]);
      const void* x = at(n.in[0]);
      void* y = at(n.out[0]);
      if (n.op == OpKind::MaxPool && n.out.size() == 2) {  // train: record the argmax for the backward
        uint8_t* idx = reinterpret_cast<uint8_t*>(at(n.out[1]));
        out.push_back([=] { return maxpool2d_fwd_idx_cuda(s, pg, x, y, idx, act); });
        return ok_status();
      }
      const bool mx = n.op == OpKind::MaxPool;
      out.push_back([=] { return mx ? maxpool2d_fwd_cuda(s, pg, x, y, act) : avgpool2d_fwd_cuda(s, pg, x, y, act); });
      return ok_status();
    }
    case OpKind::MaxPoolGrad: {  // dY, X [, argmax] -> dX
      const Pool2dGeom pg = pool2d_geom_of(g, n, n.in[1]);
      const void *dy = at(n.in[0]), *x = at(n.in[1]);
      void* dx = at(n.out[0]);
      if (n.in.size() == 3) {
        const uint8_t* idx = reinterpret_cast<const uint8_t*>(at(n.in[2]));
        out.push_back([=] { return maxpool2d_bwd_idx_cuda(s, pg, dy, idx, dx, act); });
        return ok_status();
      }
      out.push_back([=] { return maxpool2d_bwd_cuda(s, pg, dy, x, dx, act); });
      return ok_status();
    }
    case OpKind::AvgPoolGrad: {  // dY -> dX
      const Pool2dGeom pg = pool2d_geom_of(g, n, n.out[0]);
      const void* dy = at(n.in[0]);
      void* dx = at(n.out[0]);
      out.push_back([=] { return avgpool2d_bwd_cuda(s, pg, dy, dx, act); });
      return ok_status();
    }
    case OpKind::GlobalAvgPool:
    case OpKind::GlobalAvgPoolGrad: {
      const bool fwd = n.op == OpKind::GlobalAvgPool;
      const Shape& img = g.values[fwd ? n.in[0] : n.out[0]].shape;  // (N, H, W, C)
      const int64_t nb = img.dims[0], hw = img.dims[1] * img.dims[2], c = img.dims[3];
      const void* x = at(n.in[0]);
      void* y = at(n.out[0]);
      out.push_back([=] {
        return fwd ? global_avgpool_fwd_cuda(s, x, y, nb, hw, c, act) : global_avgpool_bwd_cuda(s, x, y, nb, hw, c, act);
      });
      return ok_status();
    }
    case OpKind::Add: {  // residual sums and sums of gradient contributions
      if (c_.plan.values[n.out[0]].region != Region::Activations)
        return Error{ErrCode::NotSupported, "cuda backend",
                     "a parameter used more than once (" + n.name + ") is not supported on CUDA yet"};
      const void *a = at(n.in[0]), *b = at(n.in[1]);
      void* y = at(n.out[0]);
      const int64_t cnt = g.values[n.out[0]].shape.numel();
      const bool relu = n.attrs.relu;
      out.push_back([=] { return add_cuda(s, a, b, y, cnt, act, relu); });
      return ok_status();
    }
    default:
      return Error{ErrCode::Internal, "cuda backend", std::string("not a CNN node: ") + to_string(n.op)};
  }
}

}  // namespace trctl::cuda_detail
