// conv_route / conv_plan_geom: see conv_route.h.
#include "runtime/ops/conv2d/conv_route.h"

#include "runtime/ops/conv2d/fewc.h"
#include "runtime/ops/conv2d/im2col.h"
#include "runtime/ops/conv2d/s2d.h"
#include "runtime/ops/conv2d/wgconv_rule.h"

namespace trctl {

ConvRouteOptions conv_route_options(const Spec& spec) {
  ConvRouteOptions o;
  o.lowp = spec.train.precision == Precision::Fp16 || spec.train.precision == Precision::Bf16;
  o.im2col = spec.train.conv_im2col;
  o.s2d = spec.train.conv_s2d;
  o.fewc = spec.train.conv_fewc;
  o.wgconv = spec.train.conv_wgconv;
  return o;
}

ConvRoute conv_route(const ConvRouteOptions& o, OpKind op, const Conv2dGeom& g) {
  if (o.lowp && op == OpKind::Conv2dGradInput && wgconv_routes_dgrad(o.wgconv) && wgconv_dgrad_ring_eligible(g))
    return ConvRoute::Wgconv;
  if (o.lowp && op == OpKind::Conv2d && wgconv_routes_fwd(o.wgconv) && wgconv_fwd_ring_eligible(g))
    return ConvRoute::Wgconv;
  if (o.lowp && op == OpKind::Conv2dGradWeight && wgconv_routes_wgrad(o.wgconv) && wgconv_wgrad_route_eligible(g))
    return ConvRoute::Wgconv;
  if (!o.lowp || (op != OpKind::Conv2d && op != OpKind::Conv2dGradWeight)) return ConvRoute::Cudnn;
  const bool fwd = op == OpKind::Conv2d;
  if (fwd ? o.fewc != ConvFewc::Off && fewc_conv_eligible(g) : fewc_routes_wgrad(o.fewc) && fewc_wgrad_eligible(g))
    return ConvRoute::Fewc;
  if ((fwd ? o.s2d != ConvS2d::Off : o.s2d == ConvS2d::On) && s2d_conv_eligible(g)) return ConvRoute::S2d;
  if ((fwd ? o.im2col != ConvIm2col::Off : o.im2col == ConvIm2col::On) && im2col_conv_eligible(g))
    return ConvRoute::Im2col;
  return ConvRoute::Cudnn;
}

Conv2dGeom conv_plan_geom(const ConvRouteOptions& o, OpKind op, const Conv2dGeom& g) {
  const ConvRoute r = conv_route(o, op, g);
  if (r == ConvRoute::S2d) return s2d_conv_geom(g);
  if (r == ConvRoute::Fewc || r == ConvRoute::Wgconv) return g;  // no cuDNN plan
  Conv2dGeom p = g;
  if (o.lowp && op != OpKind::Conv2dGradWeight && g.groups == 1 && g.c % 8 != 0) p.c = (g.c + 7) / 8 * 8;
  return p;
}

}  // namespace trctl
