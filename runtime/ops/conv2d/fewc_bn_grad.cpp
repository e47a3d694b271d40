// fewc_bn_grad_choose (see fewc_bn_grad.h).
#include "runtime/ops/conv2d/fewc_bn_grad.h"

#include "runtime/backend.h"
#include "runtime/ops/conv2d/conv_route.h"

namespace trctl {

std::vector<FewcBnGradFold> fewc_bn_grad_choose(const Graph& graph, const Spec& spec) {
  std::vector<FewcBnGradFold> out;
  const bool lowp = spec.train.precision == Precision::Fp16 || spec.train.precision == Precision::Bf16;
  if (!lowp || spec.train.conv_fewc != ConvFewc::On) return out;
  const ConvRouteOptions ro = conv_route_options(spec);
  for (size_t pi = 0; pi < graph.programs.size(); ++pi) {
    const Program& p = graph.programs[pi];
    for (size_t bi = 0; bi + 1 < p.nodes.size(); ++bi) {
      const Node& bn = p.nodes[bi];
      if (bn.op != OpKind::BatchNormGrad || bn.attrs.pool || bn.attrs.residual || bn.in.size() < 5) continue;
      const ValueId dx = bn.out[0];
      if (dx == p.input || dx == p.logits || dx == p.loss || dx == p.label) continue;
      const Node& wg = p.nodes[bi + 1];
      if (wg.op != OpKind::Conv2dGradWeight || wg.in.empty() || wg.in[0] != dx) continue;
      if (conv_route(ro, wg.op, conv2d_geom_of(graph, wg, wg.in[1], wg.out[0])) != ConvRoute::Fewc) continue;
      bool only_reader = true;  // dx read by the weight gradient alone, and as its dY only
      for (size_t ni = 0; ni < p.nodes.size() && only_reader; ++ni)
        for (size_t k = 0; k < p.nodes[ni].in.size(); ++k)
          if (p.nodes[ni].in[k] == dx && !(ni == bi + 1 && k == 0)) only_reader = false;
      if (!only_reader) continue;
      FewcBnGradFold f;
      f.program = static_cast<int>(pi);
      f.bn_grad = bi;
      f.wgrad = bi + 1;
      f.g = bn.in[0];
      f.x = bn.in[1];
      f.dx = dx;
      if (bn.attrs.relu) {  // the forward that wrote save_mean (in[3]) fused the ReLU without a residual
        for (const Program& fp : graph.programs)
          for (const Node& fwd : fp.nodes)
            if (fwd.op == OpKind::BatchNorm && fwd.out.size() > 1 && fwd.out[1] == bn.in[3] && fwd.attrs.relu &&
                !fwd.attrs.residual)
              f.relu_beta = fwd.in[2];
        if (f.relu_beta == kNoValue) continue;
      }
      out.push_back(f);
    }
  }
  return out;
}

}  // namespace trctl
