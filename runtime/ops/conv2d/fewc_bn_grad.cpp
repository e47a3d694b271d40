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
      if (!read_only_at(p, dx, bi + 1, 0)) continue;  // dx read by the weight gradient alone, as its dY
      FewcBnGradFold f;
      f.program = static_cast<int>(pi);
      f.bn_grad = bi;
      f.wgrad = bi + 1;
      f.g = bn.in[0];
      f.x = bn.in[1];
      f.dx = dx;
      if (bn.attrs.relu) {  // the forward fused the ReLU without a residual: the mask is recomputed from x
        f.relu_beta = bn_grad_relu_beta(graph, bn);
        if (f.relu_beta == kNoValue) continue;
      }
      out.push_back(f);
    }
  }
  return out;
}

}  // namespace trctl
