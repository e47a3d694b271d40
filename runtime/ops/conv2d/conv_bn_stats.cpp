// conv_bn_stats_choose (see conv_bn_stats.h).
#include "runtime/ops/conv2d/conv_bn_stats.h"

#include <cstdint>
#include <map>

#include "core/passes/passes.h"
#include "runtime/backend.h"
#include "runtime/ops/conv2d/conv_route.h"

namespace trctl {

namespace {

// A training batch norm + ReLU (no residual, no fused pool) of program pi whose output y is not a named value: a
// candidate for both apply folds. Fills f's program, bn, x and y and returns the index of its backward (the
// BatchNormGrad reading x and its save_mean; 0: none seen), or -1 for a node that is no candidate.
int64_t apply_fold_candidate(const Program& p, size_t pi, size_t bi, ConvBnApplyFold* f) {
  const Node& bn = p.nodes[bi];
  if (bn.op != OpKind::BatchNorm || !bn.attrs.relu || bn.attrs.residual || bn.attrs.pool) return -1;
  const ValueId y = bn.out[0];
  if (y == p.input || y == p.logits || y == p.loss || y == p.label) return -1;
  f->program = static_cast<int>(pi);
  f->bn = bi;
  f->x = bn.in[0];
  f->y = y;
  int64_t bn_grad = 0;
  for (size_t ni = 0; ni < p.nodes.size(); ++ni) {
    const Node& n = p.nodes[ni];
    if (n.op == OpKind::BatchNormGrad && n.in.size() > 3 && n.in[1] == f->x && n.in[3] == bn.out[1])
      bn_grad = static_cast<int64_t>(ni);
  }
  return bn_grad;
}

}  // namespace

ConvBnStatsChoice conv_bn_stats_choose(const Graph& graph, const Spec& spec) {
  ConvBnStatsChoice out;
  const ConvBnStats mode = effective_conv_bn_stats(spec.train);  // separate unless non-deterministic fp16 / bf16
  if (mode == ConvBnStats::Separate) return out;
  const ConvRouteOptions ro = conv_route_options(spec);
  for (size_t pi = 0; pi < graph.programs.size(); ++pi) {
    const Program& p = graph.programs[pi];
    std::map<ValueId, size_t> conv_of;  // conv output -> its Conv2d node
    for (size_t i = 0; i < p.nodes.size(); ++i)
      if (p.nodes[i].op == OpKind::Conv2d) conv_of[p.nodes[i].out[0]] = i;
    for (const Node& bn : p.nodes) {
      if (bn.op != OpKind::BatchNorm) continue;
      auto it = conv_of.find(bn.in[0]);
      if (it == conv_of.end()) continue;  // not a conv's output: not a candidate
      const Node& conv = p.nodes[it->second];
      const Conv2dGeom g = conv2d_geom_of(graph, conv, conv.in[0], conv.in[1]);  // finished: p, q
      const ConvRoute route = pointwise_conv(conv) ? ConvRoute::Cudnn : conv_route(ro, OpKind::Conv2d, g);
      const bool cudnn = !pointwise_conv(conv) && route == ConvRoute::Cudnn &&
                         conv_plan_geom(ro, OpKind::Conv2d, g).c == g.c && g.groups == 1 &&
                         g.k % 8 == 0;  // sum and sqsum (K) f32 each 16-byte aligned in the pair's buffer
      const bool fewc = !pointwise_conv(conv) && route == ConvRoute::Fewc;  // K in {16, 32, 64}
      const bool wg = !pointwise_conv(conv) && route == ConvRoute::Wgconv;  // K == 64
      const bool eligible = conv.in.size() == 2 && (cudnn || fewc || wg);
      if (!eligible || (mode == ConvBnStats::Auto && g.p * g.q < kConvBnStatsAutoMinPixels)) {
        ++out.separate;
        continue;
      }
      out.fuse.push_back({static_cast<int>(pi), it->second, conv.out[0], g, route});
    }
  }
  return out;
}

std::vector<ConvBnApplyFold> conv_bn_apply_choose(const Graph& graph, const Spec& spec,
                                                  const ConvBnStatsChoice& stats) {
  std::vector<ConvBnApplyFold> out;
  // f16 only: cuDNN's scale + bias + ReLU + wgrad pattern takes f16 activations (graph (c)).
  if (spec.train.conv_bn_apply != ConvBnApply::Prologue || spec.train.precision != Precision::Fp16) return out;
  const ConvRouteOptions ro = conv_route_options(spec);
  for (size_t pi = 0; pi < graph.programs.size(); ++pi) {
    const Program& p = graph.programs[pi];
    auto fused_pair = [&](size_t conv) {
      for (const ConvBnStatsPair& pr : stats.fuse)  // its graph (b) is cuDNN's: not a few-channel pair
        if (pr.program == static_cast<int>(pi) && pr.conv == conv && pr.route == ConvRoute::Cudnn) return true;
      return false;
    };
    for (size_t bi = 0; bi < p.nodes.size(); ++bi) {
      const Node& bn = p.nodes[bi];
      ConvBnApplyFold f;
      const int64_t bn_grad = apply_fold_candidate(p, pi, bi, &f);
      if (bn_grad < 0) continue;
      const ValueId y = f.y;
      bool ok = true, have_conv = false;
      for (size_t ni = 0; ni < p.nodes.size() && ok; ++ni) {
        const Node& n = p.nodes[ni];
        for (size_t k = 0; k < n.in.size() && ok; ++k) {
          if (n.in[k] != y) continue;
          if (n.op == OpKind::Conv2d && k == 0 && !have_conv && fused_pair(ni)) {
            f.conv = ni;
            have_conv = true;
          } else if (n.op == OpKind::Conv2dGradWeight && k == 1 &&
                     conv_route(ro, n.op, conv2d_geom_of(graph, n, n.in[1], n.out[0])) == ConvRoute::Cudnn) {
            f.wgrads.push_back(ni);
          } else if (n.op == OpKind::BatchNormGrad && n.in.size() > 5 && k == 5 && n.in[3] == bn.out[1]) {
            // its own backward's Y: not read (the mask is recomputed from x; CudaBackend passes relu_beta)
          } else {
            ok = false;
          }
        }
      }
      // x, which the consumer and its weight gradients read in y's place, is kept alive by the memory plan only up
      // to its last reader in the graph: the batch norm's backward must come after all of them (no backward, e.g.
      // a frozen prefix: x's memory may be reused before the weight gradient reads it).
      bool alive = bn_grad > static_cast<int64_t>(f.conv);
      for (size_t wg : f.wgrads) alive = alive && bn_grad > static_cast<int64_t>(wg);
      if (ok && have_conv && alive) out.push_back(std::move(f));
    }
  }
  return out;
}

std::vector<ConvBnApplyFold> wgconv_bn_apply_choose(const Graph& graph, const Spec& spec) {
  std::vector<ConvBnApplyFold> out;
  if (!wgconv_routes_fwd(spec.train.conv_wgconv)) return out;
  const ConvRouteOptions ro = conv_route_options(spec);
  auto wgconv_fwd = [&](const Node& conv) {
    return !pointwise_conv(conv) &&
           conv_route(ro, OpKind::Conv2d, conv2d_geom_of(graph, conv, conv.in[0], conv.in[1])) == ConvRoute::Wgconv;
  };
  for (size_t pi = 0; pi < graph.programs.size(); ++pi) {
    const Program& p = graph.programs[pi];
    for (size_t bi = 0; bi < p.nodes.size(); ++bi) {
      ConvBnApplyFold f;
      const int64_t bn_grad = apply_fold_candidate(p, pi, bi, &f);
      if (bn_grad < 0) continue;
      const ValueId y = f.y;
      // y's first reader after the batch norm: the consumer conv (as X), routed to wgconv. Every later reader reads y
      // as the conv's kernel wrote it.
      bool ok = false;
      for (size_t ni = bi + 1; ni < p.nodes.size(); ++ni) {
        const Node& n = p.nodes[ni];
        bool reads = false;
        for (ValueId v : n.in) reads = reads || v == y;
        if (!reads) continue;
        ok = n.op == OpKind::Conv2d && n.in.size() == 2 && n.in[0] == y && n.in[1] != y && wgconv_fwd(n);
        f.conv = ni;
        break;
      }
      for (size_t ni = 0; ni < bi && ok; ++ni)  // nothing reads y before the batch norm writes it (a loop-carried use)
        for (ValueId v : p.nodes[ni].in) ok = ok && v != y;
      if (!ok || bn_grad <= static_cast<int64_t>(f.conv)) continue;
      // y's other readers: when every one is a weight gradient of the conv routed to the ring kernel (as X) or the
      // batch norm's own backward (its Y, not read: the mask is recomputed from x), and that backward comes after
      // them (x alive), those weight gradients apply the batch norm to x themselves (wgconv_wgrad_plan's prologue)
      // and y is never written: `wgrads` lists them. Otherwise `wgrads` stays empty and the conv writes y.
      bool all_ring = true;
      for (size_t ni = f.conv + 1; ni < p.nodes.size() && all_ring; ++ni) {
        const Node& n = p.nodes[ni];
        for (size_t k = 0; k < n.in.size() && all_ring; ++k) {
          if (n.in[k] != y) continue;
          if (n.op == OpKind::Conv2dGradWeight && k == 1 && static_cast<int64_t>(ni) < bn_grad &&
              conv_route(ro, n.op, conv2d_geom_of(graph, n, n.in[1], n.out[0])) == ConvRoute::Wgconv)
            f.wgrads.push_back(ni);
          else if (!(n.op == OpKind::BatchNormGrad && n.in.size() > 5 && k == 5 &&
                     n.in[3] == p.nodes[f.bn].out[1]))
            all_ring = false;
        }
      }
      if (!all_ring) f.wgrads.clear();
      out.push_back(std::move(f));
    }
  }
  return out;
}

ConvBnBwdChoice conv_bn_bwd_choose(const Graph& graph, const MemoryPlan& plan, const Spec& spec,
                                   const std::vector<FewcBnGradFold>& fewc) {
  ConvBnBwdChoice out;
  // graph (d): non-deterministic fp16 only; the wgconv epilogue: deterministic, f16 or bf16 (wgconv_bn_backward_pairs)
  const ConvBnBackwardPairs pairs = conv_bn_backward_pairs(spec.train);
  if (pairs == ConvBnBackwardPairs::None) return out;
  const bool graph_d = pairs == ConvBnBackwardPairs::GraphD;
  const ConvRouteOptions ro = conv_route_options(spec);
  for (size_t pi = 0; pi < graph.programs.size(); ++pi) {
    const Program& p = graph.programs[pi];
    for (size_t bi = 0; bi < p.nodes.size(); ++bi) {
      const Node& bn = p.nodes[bi];
      if (bn.op != OpKind::BatchNormGrad || !bn.attrs.relu) continue;
      bool folded_into_fewc = false;
      for (const FewcBnGradFold& f : fewc) folded_into_fewc |= f.program == static_cast<int>(pi) && f.bn_grad == bi;
      ConvBnBwdPair pr;
      pr.program = static_cast<int>(pi);
      pr.bn_grad = bi;
      pr.fewc_dx = folded_into_fewc;
      bool ok = !bn.attrs.residual && !bn.attrs.pool && bn.in.size() >= 5 && bi > 0;
      if (ok) pr.beta = bn_grad_relu_beta(graph, bn);  // the mask is recomputed from x with the forward's beta
      ok = ok && pr.beta != kNoValue;
      const ValueId g = bn.in[0];
      if (ok) {
        pr.dgrad = bi - 1;
        const Node& d = p.nodes[pr.dgrad];
        ok = d.op == OpKind::Conv2dGradInput && !d.attrs.accumulate && !d.out.empty() && d.out[0] == g &&
             d.in.size() >= 2 && g != p.input && g != p.logits && g != p.loss && g != p.label;
        if (ok) {
          // The forward conv's geometry: its input is the dgrad's output (N, H, W, C), its filter d.in[1].
          pr.g = conv2d_geom_of(graph, d, d.out[0], d.in[1]);
          const ConvRoute route = conv_route(ro, OpKind::Conv2dGradInput, pr.g);
          pr.wgconv = !pointwise_conv(d) && route == ConvRoute::Wgconv;
          ok = !pointwise_conv(d) &&
               (pr.wgconv || (graph_d && route == ConvRoute::Cudnn &&
                              conv_plan_geom(ro, OpKind::Conv2dGradInput, pr.g).c == pr.g.c && pr.g.groups == 1 &&
                              pr.g.c % 8 == 0));
        }
        ok = ok && read_only_at(p, g, bi, 0);  // g read by the batch norm's backward alone
        for (int k = 1; k <= 2 && ok; ++k)  // dgamma, dbeta written at the data gradient
          ok = memplan_early_write_safe(graph, plan, static_cast<int>(pi), bn.out[static_cast<size_t>(k)],
                                        static_cast<int64_t>(pr.dgrad));
      }
      if (!ok) {
        ++out.separate;
        continue;
      }
      out.fuse.push_back(pr);
    }
  }
  return out;
}

}  // namespace trctl
