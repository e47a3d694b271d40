// conv_bn_stats_choose (see conv_bn_stats.h).
#include "runtime/ops/conv2d/conv_bn_stats.h"

#include <map>

#include "core/passes/passes.h"
#include "runtime/backend.h"
#include "runtime/ops/conv2d/conv_route.h"

namespace trctl {

ConvBnStatsChoice conv_bn_stats_choose(const Graph& graph, const Spec& spec) {
  ConvBnStatsChoice out;
  const ConvBnStats mode = spec.train.conv_bn_stats;
  if (mode == ConvBnStats::Separate) return out;
  const ConvRouteOptions ro = conv_route_options(spec);
  const bool lowp = spec.train.precision == Precision::Fp16 || spec.train.precision == Precision::Bf16;
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
      const bool eligible = lowp && !pointwise_conv(conv) &&
                            conv_route(ro, OpKind::Conv2d, g) == ConvRoute::Cudnn &&
                            conv_plan_geom(ro, OpKind::Conv2d, g).c == g.c && conv.in.size() == 2 && g.groups == 1;
      if (!eligible || (mode == ConvBnStats::Auto && g.p * g.q < kConvBnStatsAutoMinPixels)) {
        ++out.separate;
        continue;
      }
      out.fuse.push_back({static_cast<int>(pi), it->second, conv.out[0], g});
    }
  }
  return out;
}

}  // namespace trctl
