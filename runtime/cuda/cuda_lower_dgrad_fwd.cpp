// CudaBackend's data gradients run as cuDNN forward convolutions (train.conv_dgrad_fwd; runtime/ops/conv2d/
// dgrad_fwd.h): which plain cuDNN data gradients take the forward, their plans and their launches.
// - Which: a Conv2dGradInput on the cuDNN route (not on trctl's kernels, not a pointwise GEMM), not the data gradient
//   of a fused batch-norm backward pair (graph (d), conv_bn_bwd_), not summed into its output, channels unpadded, and
//   dgrad_fwd_eligible (stride 1, one group); under auto only where the autotune cache holds both the data
//   gradient's best time and the forward's on dgrad_fwd_geom and the forward is kDgradFwdMargin faster; under on
//   every such one.
// - Plans: the forward direction of dgrad_fwd_geom in conv_ (for C == K with a square filter and pad (R-1)/2 that is
//   the layer's own forward plan), from the cache where it has the key, else the heuristics.
// - Launches: W (K, R, S, C) of the AMP weight copy (or the fp32 weights) flipped and transposed into W' (C, R, S,
//   K) at the start of conv_ws_ (the step's launches run one after another, so the shared workspace is free), then
//   dX = cuDNN's forward of dY over W', with the rest of conv_ws_ as its workspace.
#include <algorithm>
#include <set>

#include "runtime/cuda/conv_autotune.h"
#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/ops/conv2d/dgrad_fwd.h"
#include "runtime/ops/conv2d/dgrad_fwd_cuda.h"

namespace trctl::cuda_detail {

namespace {
constexpr double kDgradFwdMargin = 0.03;  // auto: the forward's measured time x (1 + margin) below the dgrad's
}  // namespace

// W' at the start of conv_ws_, rounded up to 256 bytes (cuDNN's workspace after it stays aligned).
size_t CudaBackend::dgrad_fwd_filter_bytes(const Conv2dGeom& g) const {
  const size_t bytes = static_cast<size_t>(g.k * g.r * g.s * g.c) * gpu_dtype_size(act_type());
  return (bytes + 255) / 256 * 256;
}

Status CudaBackend::plan_dgrad_fwd(const AutotuneCache& cache, ConvDesc d) {
  dgrad_fwd_.clear();
  const ConvDgradFwd mode = c_.spec.train.conv_dgrad_fwd;
  if (mode == ConvDgradFwd::Off) return ok_status();
  const bool measured = mode == ConvDgradFwd::Auto;
  if (measured && cache.entries.empty()) return ok_status();  // nothing measured: every data gradient stays
  Result<AutotuneDevice> dev = measured ? autotune_device_current() : Result<AutotuneDevice>(AutotuneDevice{});
  if (!dev.ok()) return dev.errors();
  std::set<std::string> declined;  // geometries auto keeps on the data gradient
  for (const Program& p : c_.graph.programs)
    for (const Node& n : p.nodes) {
      if (n.op != OpKind::Conv2dGradInput || pointwise_conv(n) || conv_route_of(n) != ConvRoute::Cudnn) continue;
      if (n.attrs.accumulate || conv_bn_bwd_.count(n.out[0])) continue;
      const auto [xv, wv] = conv_operands(n);
      const Conv2dGeom real = conv2d_geom_of(c_.graph, n, xv, wv);
      d.g = planned_geom(n);
      if (d.g.c != real.c || !dgrad_fwd_eligible(d.g)) continue;
      const std::string key = conv_key(d.g);
      if (declined.count(key)) continue;
      ConvDesc f = d;
      f.g = dgrad_fwd_geom(d.g);
      f.need_dgrad = false;
      if (measured && !dgrad_fwd_.count(key)) {
        const auto dg = cache.entries.find(autotune_key(dev.value(), ConvDir::Dgrad, d));
        const auto fw = cache.entries.find(autotune_key(dev.value(), ConvDir::Fwd, f));
        if (dg == cache.entries.end() || fw == cache.entries.end() ||
            !(static_cast<double>(fw->second.ms) * (1.0 + kDgradFwdMargin) < static_cast<double>(dg->second.ms))) {
          declined.insert(key);
          continue;
        }
      }
      const std::string fkey = conv_key(f.g);
      if (!conv_.count(fkey)) {
        std::array<bool, 3> cached{};
        Result<CudnnConvPlan> plan = cudnn_conv_plan_cached(ctx_.cudnn, f, cache, size_t{256} << 20, &cached);
        if (!plan.ok()) return plan.errors();
        conv_algo_sources_add(conv_sources_, {true, false, false}, cached);  // only its forward runs
        if (plan.value().graph[static_cast<int>(ConvDir::Fwd)]) ++conv_sources_.graph_engines;
        conv_.emplace(fkey, std::move(plan.value()));
      }
      conv_ws_bytes_ = std::max(conv_ws_bytes_, dgrad_fwd_filter_bytes(d.g) + conv_.at(fkey).fwd_ws);
      dgrad_fwd_[key] = fkey;
      ++conv_sources_.dgrad_fwd;
    }
  return ok_status();
}

Status CudaBackend::lower_dgrad_fwd_node(const Node& n, const std::string& fkey, std::vector<Launch>& out) {
  auto it = conv_.find(fkey);
  if (it == conv_.end())
    return Error{ErrCode::Internal, "cuda backend", "no forward plan for the data gradient " + n.name};
  const CudnnConvPlan* plan = &it->second;
  const auto [xv, wv] = conv_operands(n);
  const Conv2dGeom g = conv2d_geom_of(c_.graph, n, xv, wv);
  const size_t wf_bytes = dgrad_fwd_filter_bytes(g);
  if (conv_ws_bytes_ < wf_bytes + plan->fwd_ws)
    return Error{ErrCode::Internal, "cuda backend", "conv workspace too small for the data gradient " + n.name};
  const cudaStream_t s = ctx_.stream;
  const cudnnHandle_t h = ctx_.cudnn;
  const GpuDType act = act_type();
  const void* w = weight_ptr(n.in[1]);
  const void* dy = at(n.in[0]);
  void* dx = at(n.out[0]);
  void* wf = conv_ws_;
  void* ws = static_cast<char*>(conv_ws_) + wf_bytes;
  const size_t wsb = conv_ws_bytes_ - wf_bytes;
  out.push_back([=] { return dgrad_fwd_filter_cuda(s, g, act, w, wf); });
  Launch conv = [=] { return cudnn_conv_fwd(h, s, *plan, dy, wf, nullptr, dx, ws, wsb); };
  out.push_back(conv);
  warm_.push_back(conv);
  return ok_status();
}

}  // namespace trctl::cuda_detail
